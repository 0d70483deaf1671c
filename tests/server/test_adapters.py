"""The edge's adapters: error mapping with the model's advice, the audit line, and
structured content fitted to the budget."""

from __future__ import annotations

import json
import logging

import pytest
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult

from context_window.errors import OPEN_SESSION, NotFound
from context_window.server.adapters import fit_data, guarded, result
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


@pytest.mark.parametrize("budget", [64, 100, 300, 1000])
def test_structured_content_is_fitted_to_the_budget(budget: int) -> None:
    data = {
        "session_id": "s",
        "entries": [{"id": f"e{i}", "text": "word " * 40 + str(i)} for i in range(60)],
        "omitted": 0,
    }
    out = result("text", data, budget, COUNT).structured_content
    assert out is not None
    size = COUNT(json.dumps(out, ensure_ascii=False, separators=(",", ":")))
    assert size <= budget
    assert out["cut"] is True
    kept = out["entries"]
    assert 1 <= len(kept) < 60 and kept[0]["id"] == "e0"  # best first: the front is kept


def test_data_within_the_budget_is_left_alone() -> None:
    data = {"hits": [{"id": "a", "text": "short"}], "query": "q"}
    assert fit_data(data, 1000, COUNT) is data
