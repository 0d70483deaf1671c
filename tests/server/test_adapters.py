"""The edge's adapters: error mapping with the model's advice, and the audit line."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import SettingsFactory, client
from mcp import Client
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


# ----------------------------------------------------------------------
# Every tool publishes an outputSchema, and real results match it, key for key.
#
# The mcp.Client also validates every successful result against the listed schema (it
# raises on a mismatch), so every test that calls a tool through it checks the schemas.


# Keys a result may carry beyond its schema's: a fitted answer's marker, what a replacing
# ingest kept, and the size of a search answer that has hits.
EXTRA = {
    "doc_ingest": {"unchanged", "changed", "unchanged_ranges", "previous_chunks"},
    "doc_search": {"used_tokens", "budget"},
}


class Checked:
    """Calls tools and checks each result against the schema tools/list gave for it."""

    def __init__(self, c: Client, schemas: dict[str, dict[str, Any]]) -> None:
        self.c, self.schemas, self.seen = c, schemas, set[str]()

    async def __call__(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        result = await self.c.call_tool(name, args)
        assert not result.is_error, (name, result.content)
        data = result.structured_content
        assert isinstance(data, dict)
        schema = self.schemas[name]
        jsonschema.validate(data, schema)
        extra = set(data) - set(schema["required"]) - {"cut"}
        assert extra <= EXTRA.get(name, set()), (name, extra)
        self.seen.add(name)
        return data


@pytest.mark.anyio
async def test_every_tool_answers_as_its_output_schema_says(
    settings: SettingsFactory, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "notes.md").write_text("# Notes\n\nalpha beta\n\n## More\n\ngamma delta\n")
    async with client(settings(ingest_roots=[root])) as c:
        listed = (await c.list_tools()).tools
        schemas = {t.name: t.output_schema for t in listed}
        assert all(s and s["type"] == "object" and s["required"] for s in schemas.values())
        call = Checked(c, {k: v for k, v in schemas.items() if v})
        await call("context_guide", {})
        await call("context_open", {"session_id": "s", "title": "Work"})
        first = await call("context_append", {"session_id": "s", "text": "alpha port 8080"})
        await call("context_append", {"session_id": "s", "text": "beta /etc/app.conf"})
        await call("context_append", {"session_id": "s", "text": "gamma", "pinned": True})
        await call("context_recall", {"session_id": "s", "query": "alpha"})
        await call("context_recall", {"session_id": "s", "query": "alpha", "budget_tokens": 64})
        folded = await call("context_compact", {"session_id": "s", "keep_recent": 0})
        await call(
            "context_uncompact", {"session_id": "s", "compaction_id": folded["compaction_id"]}
        )
        await call("context_compact", {"session_id": "s", "dry_run": True})
        await call("context_status", {"session_id": "s"})
        await call(
            "context_update", {"session_id": "s", "entry_id": first["entry_id"], "pinned": True}
        )
        await call("context_list_sessions", {})
        await call("doc_ingest", {"file_path": "notes.md", "doc_id": "n"})
        (root / "notes.md").write_text("# Notes\n\nalpha beta\n\n## More\n\ngamma delta epsilon\n")
        again = await call("doc_ingest", {"file_path": "notes.md", "doc_id": "n"})
        assert again["replaced"] and "unchanged" in again
        await call("doc_outline", {"doc_id": "n"})
        await call("doc_search", {"query": "gamma"})
        await call("doc_search", {"query": "zebra"})  # no hit
        await call("doc_search", {"query": "the"})  # no searchable word
        await call("doc_window", {"doc_id": "n", "budget_tokens": 64})
        await call("doc_summarize", {"doc_id": "n"})
        await call("doc_list", {})
        await call("doc_forget", {"doc_id": "n"})
    assert call.seen == set(schemas), set(schemas) - call.seen
