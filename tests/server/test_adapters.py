"""The edge's adapters: error mapping with the model's advice, and the audit line."""

from __future__ import annotations

import json
import logging

import pytest
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult

from context_window.errors import OPEN_SESSION, NotFound
from context_window.server.adapters import guarded
from context_window.tokens import TokenCounter

COUNT = TokenCounter(0.25).count


@pytest.mark.anyio
async def test_a_core_error_becomes_a_tool_error_with_the_tools_advice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @guarded("context_recall", audit=True)
    async def tool() -> CallToolResult:
        raise NotFound("no session 'x' (known sessions: none)", remedy=OPEN_SESSION)

    with (
        caplog.at_level(logging.INFO, logger="context_window.audit"),
        pytest.raises(ToolError) as err,
    ):
        await tool()
    assert str(err.value) == (
        "no session 'x' (known sessions: none). Call context_open to create or resume one"
    )
    (line,) = [r.getMessage() for r in caplog.records if r.name == "context_window.audit"]
    assert json.loads(line)["outcome"] == "NotFound"


@pytest.mark.anyio
async def test_an_unexpected_error_is_reported_generically_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @guarded("doc_search", audit=False)
    async def tool() -> CallToolResult:
        raise KeyError("secret internals")

    with caplog.at_level(logging.INFO), pytest.raises(ToolError) as err:
        await tool()
    assert "internal error (KeyError)" in str(err.value)
    assert "secret" not in str(err.value)
    assert any("secret internals" in (r.exc_text or "") for r in caplog.records)
