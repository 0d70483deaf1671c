"""Building the MCP server: the tools each set exposes, and the slimmed schemas they list."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import SettingsFactory, client
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS

from context_window import main
from context_window.config import load_settings
from context_window.errors import ConfigError
from context_window.server.app import build_server, only_broken_pipes, slim_schema, tool_costs
from context_window.service import Service
from context_window.tokens import estimate

from .test_session_tools import error, ok


def test_slim_schema_drops_titles_and_collapses_optional_values() -> None:
    schema = {
        "title": "Args",
        "type": "object",
        "properties": {
            "title": {
                "title": "Title",
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "default": None,
            },
            "limit": {"title": "Limit", "type": "integer", "default": 10},
        },
    }
    assert slim_schema(schema) == {
        "type": "object",
        "properties": {  # a property named "title" stays: only generated titles go
            "title": {"type": "string"},
            "limit": {"type": "integer", "default": 10},
        },
    }


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tools", "prefixes"),
    [
        ("all", {"context", "doc"}),
        ("sessions", {"context"}),
        ("docs", {"doc", "context"}),
    ],
)
async def test_each_tool_set_lists_its_tools_with_slim_schemas(
    settings: SettingsFactory, tools: str, prefixes: set[str]
) -> None:
    service = Service(settings(tools=tools))
    try:
        async with Client(build_server(service)) as c:
            listed = (await c.list_tools()).tools
    finally:
        await service.aclose()
    names = {t.name for t in listed}
    assert "context_guide" in names
    assert {n.split("_")[0] for n in names} == prefixes
    if tools == "docs":
        assert names - {"context_guide"} == {n for n in names if n.startswith("doc_")}
    for tool in listed:
        wire = json.dumps(tool.input_schema)
        assert '"title"' not in wire.replace('"title": {', "") and '"null"' not in wire, tool.name


@pytest.mark.anyio
async def test_an_unknown_tool_is_a_protocol_error_naming_the_tools(
    settings: SettingsFactory,
) -> None:
    service = Service(settings(tools="sessions"))
    try:
        async with Client(build_server(service)) as c:
            with pytest.raises(MCPError) as err:
                await c.call_tool("doc_search", {"query": "x"})  # not in this tool set
    finally:
        await service.aclose()
    assert err.value.code == INVALID_PARAMS
    assert "unknown tool 'doc_search'" in err.value.message
    assert "context_recall" in err.value.message and "doc_" not in err.value.message.split(":")[-1]


@pytest.mark.anyio
async def test_an_argument_the_tool_lacks_is_named_in_a_note(settings: SettingsFactory) -> None:
    async with Client(build_server(Service(settings()))) as c:
        await c.call_tool("context_open", {"session_id": "s"})
        pin = await c.call_tool("context_append", {"session_id": "s", "text": "x", "pin": True})
        kind = await c.call_tool("context_append", {"session_id": "s", "text": "y", "kind": "a"})
        none = await c.call_tool("context_append", {"session_id": "s", "text": "z", "kind": None})
        recall = await c.call_tool("context_recall", {"session_id": "s", "budget": 300})
        guide = await c.call_tool("context_guide", {"verbose": True})
    texts = [r.content[0].text for r in (pin, kind, none, recall, guide)]  # type: ignore[union-attr]
    assert not any(r.is_error for r in (pin, kind, none, recall, guide))  # as the schema allows
    assert texts[0].endswith(
        "(ignored 'pin': not a parameter of context_append; did you mean pinned?)"
    )
    assert texts[1].endswith("it takes session_id, text, role, tags, pinned, ttl_days)")
    assert "ignored" not in texts[2]  # a null says nothing
    assert texts[3].endswith("did you mean budget_tokens?)")
    assert texts[4].endswith("(ignored 'verbose': not a parameter of context_guide; it takes none)")
    assert "ignored" not in json.dumps(pin.structured_content)  # the data stay as they are


@pytest.mark.anyio
async def test_a_call_that_fails_still_names_the_argument_it_ignored(
    settings: SettingsFactory,
) -> None:
    """``path`` for ``file_path`` fails the call: the error must say why, not only what."""
    async with Client(build_server(Service(settings()))) as c:
        ingest = await c.call_tool("doc_ingest", {"path": "/tmp/a.log", "doc_id": "a"})
        append = await c.call_tool("context_append", {"session": "s", "text": "x"})
        recall = await c.call_tool("context_recall", {"session_id": "none", "q": "x"})
        search = await c.call_tool("doc_search", {"query": "x", "id": "a"})
    texts = [r.content[0].text for r in (ingest, append, recall, search)]  # type: ignore[union-attr]
    assert [r.is_error for r in (ingest, append, recall, search)] == [True, True, True, False]
    assert texts[0] == (
        "give exactly one source: text=... or file_path=...\n"
        "(ignored 'path': not a parameter of doc_ingest; did you mean file_path?)"
    )
    assert texts[1] == (  # a schema error too
        "session_id is required\n"
        "(ignored 'session': not a parameter of context_append; did you mean session_id?)"
    )
    assert texts[2].startswith("no session 'none'")
    assert texts[2].endswith(
        "(ignored 'q': not a parameter of context_recall; did you mean query?)"
    )
    assert texts[3].endswith("(ignored 'id': not a parameter of doc_search; did you mean doc_id?)")


@pytest.mark.anyio
async def test_an_optional_argument_given_blank_is_not_given(settings: SettingsFactory) -> None:
    async def call(c: Client, tool: str, **args: object) -> tuple[bool, str]:
        result = await c.call_tool(tool, args)
        return result.is_error, result.content[0].text  # type: ignore[union-attr]

    async with Client(build_server(Service(settings()))) as c:
        blank = {"doc_id": "", "title": " ", "file_path": ""}
        made = await call(c, "doc_ingest", text="alpha beta\n", **blank)
        await call(c, "doc_ingest", text="gamma delta\n", doc_id="g")
        every = await call(c, "doc_search", query="alpha gamma", doc_id="")
        opened = await call(c, "context_open", session_id="  ", title="")
        await call(c, "context_open", session_id="x")
        required = await call(c, "context_append", session_id="x", text="")
        neither = await call(c, "doc_ingest", text="", file_path="")
        both = await call(c, "doc_ingest", text="a", file_path="a.txt")
    assert made[0] is False and made[1].startswith("Ingested doc d")
    assert every[0] is False and "# g [0]" in every[1] and every[1].startswith("2 hits")
    assert opened[0] is False and opened[1].startswith("Created session 's")
    assert required == (True, "text must be a non-empty string")
    assert neither == (True, "give exactly one source: text=... or file_path=...")
    assert both == (True, "give exactly one source: text=... or file_path=..., not both")


@pytest.mark.anyio
async def test_an_optional_argument_given_null_is_not_given(settings: SettingsFactory) -> None:
    # OpenAI's strict function calling sends every parameter, null where the model left it.
    async with Client(build_server(Service(settings()))) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}

        async def call(tool: str, **given: object) -> str:
            schema = tools[tool].input_schema
            nulls = {k: None for k in schema["properties"] if k not in schema.get("required", [])}
            result = await c.call_tool(tool, {**nulls, **given})
            text = result.content[0].text  # type: ignore[union-attr]
            assert not result.is_error, (tool, text)
            return text

        await call("context_open", session_id="s")
        assert (await call("context_append", session_id="s", text="alpha beta")).startswith(
            "Saved e1"
        )
        assert "[e1]\nalpha beta" in await call("context_recall", session_id="s")
        await call("context_compact", session_id="s")
        await call("context_status", session_id="s")
        await call("context_list_sessions")
        await call("doc_ingest", text="# T\n\ngamma delta", doc_id="d")
        assert "gamma delta" in await call("doc_search", query="gamma")
        for tool in ("doc_outline", "doc_window", "doc_summarize"):
            await call(tool, doc_id="d")
        await call("doc_list")


@pytest.mark.anyio
async def test_an_id_padded_or_in_quotes_is_answered_with_the_call_to_make(
    settings: SettingsFactory,
) -> None:
    # A model copies an id from an answer's "doc_id='d1'", quotes included, or pads it.
    async with Client(build_server(Service(settings()))) as c:
        await c.call_tool("context_open", {"session_id": "task1"})
        for sid in ("'task1'", '"task1"', "`task1`", " task1\n"):
            result = await c.call_tool("context_recall", {"session_id": sid, "pin": True})
            text = result.content[0].text  # type: ignore[union-attr]
            assert result.is_error and text.startswith(f"invalid session_id {sid!r}: "), text
            assert "Call again with session_id='task1'\n(ignored 'pin'" in text  # and why
        for bad in ("'task1", "'task 1'", "''"):  # no id inside: the rule, not a call
            result = await c.call_tool("context_recall", {"session_id": bad})
            text = result.content[0].text  # type: ignore[union-attr]
            assert result.is_error and "Call again" not in text and repr(bad) in text
        result = await c.call_tool("doc_search", {"query": "x", "doc_id": "`spec`"})
        assert "Call again with doc_id='spec'" in result.content[0].text  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_a_string_argument_that_reads_as_json_stays_a_string(
    settings: SettingsFactory,
) -> None:
    # The SDK reads a string as JSON for any parameter not typed plain str (Claude Desktop
    # sends lists as text); a JSON document given as doc_ingest's text must stay text.
    data = '[{"id": 1,  "name": "café"}]'
    async with Client(build_server(Service(settings()))) as c:
        made = await c.call_tool("doc_ingest", {"text": data, "doc_id": "users", "title": "true"})
        assert not made.is_error, made.content
        assert made.structured_content and made.structured_content["title"] == "true"
        window = await c.call_tool("doc_window", {"doc_id": "users"})
        assert data in window.content[0].text  # type: ignore[union-attr]
        opened = await c.call_tool("context_open", {"session_id": "s", "title": '{"a": 1}'})
        assert not opened.is_error and "(" + '{"a": 1}' + ")" in opened.content[0].text  # type: ignore[union-attr]
        await c.call_tool("context_append", {"session_id": "s", "text": "null is fine"})
        recalled = await c.call_tool("context_recall", {"session_id": "s", "query": "null"})
        assert not recalled.is_error and "null is fine" in recalled.content[0].text  # type: ignore[union-attr]
        tags = await c.call_tool(
            "context_append", {"session_id": "s", "text": "x", "tags": '["a"]'}
        )
        assert not tags.is_error  # a list sent as text is still read as the list


@pytest.mark.anyio
async def test_every_tool_has_a_title_and_true_annotations(settings: SettingsFactory) -> None:
    async with Client(build_server(Service(settings()))) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert len(tools) == 16
    titles = {name: t.title for name, t in tools.items()}
    assert all(titles.values()) and len(set(titles.values())) == 16, titles
    for name, tool in tools.items():
        hints = tool.annotations
        assert hints is not None and hints.open_world_hint is False, name  # said, not implied
        writes = not hints.read_only_hint
        assert bool(hints.read_only_hint) is (name in READ_ONLY_TOOLS), name  # default false
        if writes:
            assert hints.destructive_hint is (name in DESTRUCTIVE_TOOLS), name
    assert tools["doc_ingest"].annotations.idempotent_hint is True  # type: ignore[union-attr]


READ_ONLY_TOOLS = {
    "context_recall",
    "context_status",
    "context_list_sessions",
    "context_guide",
    "doc_outline",
    "doc_search",
    "doc_list",
}
# Removing or replacing what is stored: context_update deletes, doc_forget deletes,
# doc_ingest with an existing doc_id replaces that document.
DESTRUCTIVE_TOOLS = {"context_update", "doc_forget", "doc_ingest"}


def raised_together(*errors: Exception) -> BaseException:
    """What a task group raises when its tasks raise ``errors`` (the stdio transport's)."""

    async def fail(error: Exception) -> None:
        raise error

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for error in errors:
                tg.start_soon(fail, error)

    with pytest.raises(BaseException) as raised:
        anyio.run(main)
    return raised.value


def test_only_a_closed_stdout_is_a_stop_not_a_crash() -> None:
    assert only_broken_pipes(raised_together(BrokenPipeError()))
    assert only_broken_pipes(BrokenPipeError())
    assert not only_broken_pipes(raised_together(BrokenPipeError(), ValueError("bug")))
    assert not only_broken_pipes(raised_together(ValueError("bug")))
    assert not only_broken_pipes(ConnectionResetError())


# ----------------------------------------------------------------------
# What tools/list costs the model, the slimmed schemas, and --tools sessions|docs|all.

SCHEMA_BUDGET = 2_500


def keys(node: Any) -> set[str]:
    """Every key anywhere in a JSON value."""
    if isinstance(node, dict):
        return set(node) | {k for v in node.values() for k in keys(v)}
    if isinstance(node, list):
        return {k for v in node for k in keys(v)}
    return set()


@pytest.mark.anyio
async def test_every_tool_together_costs_under_the_budget(settings: SettingsFactory) -> None:
    async with client(settings()) as c:
        listed = (await c.list_tools()).tools
    wire = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in listed]
    total = sum(estimate(json.dumps(w, separators=(",", ":")), 0.27) for w in wire)
    assert len(listed) >= 16
    assert total < SCHEMA_BUDGET, f"tools/list is ~{total} estimated tokens"
    # What the client received is what tool_costs measures.
    costs = await tool_costs(build_server(Service(settings())), 0.27)
    assert sum(costs.values()) == total and set(costs) == {t.name for t in listed}
    for w in wire:
        schema = w["inputSchema"]
        assert "title" not in schema and "anyOf" not in keys(schema), w["name"]
        assert not any("title" in p for p in schema.get("properties", {}).values()), w["name"]


def test_slim_schema_drops_titles_and_nullable_wrappers_only() -> None:
    full = {
        "title": "fArguments",
        "type": "object",
        "properties": {
            "title": {"title": "Title", "type": "string"},  # a parameter called "title" stays
            "n": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "default": None},
            "k": {"anyOf": [{"type": "integer"}, {"type": "string"}], "title": "K"},
        },
        "required": ["title"],
    }
    assert slim_schema(full) == {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "n": {"type": "integer", "minimum": 1},
            "k": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        },
        "required": ["title"],
    }


@pytest.mark.anyio
async def test_slim_schemas_still_validate_arguments(settings: SettingsFactory) -> None:
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="s")
        for bad in ({"tags": "one"}, {"ttl_days": "soon"}, {"pinned": "maybe"}):
            msg = await error(c, "context_append", session_id="s", text="x", **bad)
            assert next(iter(bad)) in msg
        # An explicit null for an optional argument is still accepted (it means "omitted").
        await ok(c, "context_append", session_id="s", text="x", tags=None, ttl_days=None)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tools", "present", "absent"),
    [
        ("sessions", "context_", "doc_"),
        ("docs", "doc_", "context_open"),
    ],
)
async def test_a_tool_set_exposes_one_half_and_the_guide(
    settings: SettingsFactory, tools: str, present: str, absent: str
) -> None:
    async with client(settings(tools=tools)) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert "context_guide" in names
        assert all(n.startswith(present) or n == "context_guide" for n in names)
        assert not any(n.startswith(absent) for n in names)
        guide, data = await ok(c, "context_guide")
        assert data["tools"] == tools
        assert ("doc_ingest" in guide) == (tools == "docs")
        assert ("context_append" in guide) == (tools == "sessions")
        hidden = "doc_list" if tools == "sessions" else "context_open"
        with pytest.raises(MCPError, match=f"unknown tool '{hidden}'"):
            await c.call_tool(hidden, {})
    async with client(settings()) as c:
        every = {t.name for t in (await c.list_tools()).tools}
    assert names < every


def test_tools_setting_from_flag_and_environment(tmp_path: Path) -> None:
    base = {"data_dir": tmp_path}
    assert load_settings(base, environ={}).tools == "all"
    assert load_settings(base, environ={"CTX_TOOLS": "docs"}).tools == "docs"
    assert load_settings({**base, "tools": "sessions"}, environ={"CTX_TOOLS": "docs"}).tools == (
        "sessions"
    )
    with pytest.raises(ConfigError, match="tools must be"):
        load_settings(base, environ={"CTX_TOOLS": "everything"})


def test_bad_tools_flag_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "context_window", "--data-dir", str(tmp_path), "--tools", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--tools" in proc.stderr


def test_doctor_reports_the_schema_cost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    assert main(["doctor", "--data-dir", str(data), "--tools", "docs"]) == 0
    out = capsys.readouterr().out.splitlines()[-1]
    assert re.match(r"tool schemas \(tools/list\): ~\d,\d{3} estimated tokens", out), out
    words = out.replace(",", "").replace("(", " ").split()
    exposed = int(words[3].lstrip("~"))
    every, docs = int(words[words.index("all") + 1]), int(words[words.index("docs") + 1])
    assert "--tools docs" in out and exposed == docs < every < SCHEMA_BUDGET


def test_measuring_the_schemas_leaves_the_data_dir_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """doctor is read-only: the servers it measures are not opened on the user's data."""
    data = tmp_path / "data"
    leftover = data / "documents" / ".old-doc1-0a1b2c3d"  # a store would restore this as doc1
    leftover.mkdir(parents=True)
    (leftover / "meta.json").write_text('{"id": "doc1"}', encoding="utf-8")
    before = sorted(p.relative_to(data) for p in data.rglob("*"))
    main(["doctor", "--data-dir", str(data)])
    assert "tool schemas (tools/list)" in capsys.readouterr().out
    assert sorted(p.relative_to(data) for p in data.rglob("*")) == before
