"""What tools/list costs the model, the slimmed schemas, and --tools sessions|docs|all."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import SettingsFactory, client
from mcp.shared.exceptions import MCPError

from context_window import main
from context_window.config import load_settings
from context_window.errors import ConfigError
from context_window.server.app import build_server, slim_schema, tool_costs
from context_window.service import Service
from context_window.tokens import estimate

from .test_session_tools import error, ok

pytestmark = pytest.mark.anyio
SCHEMA_BUDGET = 2_500


def keys(node: Any) -> set[str]:
    """Every key anywhere in a JSON value."""
    if isinstance(node, dict):
        return set(node) | {k for v in node.values() for k in keys(v)}
    if isinstance(node, list):
        return {k for v in node for k in keys(v)}
    return set()


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


async def test_slim_schemas_still_validate_arguments(settings: SettingsFactory) -> None:
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="s")
        for bad in ({"tags": "one"}, {"ttl_days": "soon"}, {"pinned": "maybe"}):
            msg = await error(c, "context_append", session_id="s", text="x", **bad)
            assert next(iter(bad)) in msg
        # An explicit null for an optional argument is still accepted (it means "omitted").
        await ok(c, "context_append", session_id="s", text="x", tags=None, ttl_days=None)


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
