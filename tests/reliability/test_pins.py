"""Pins are never folded, and compact -> uncompact -> compact leaves doctor clean.

Through a real MCP client; doctor runs as its own process on the data dir.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from helpers import run_cli
from mcp import Client

from context_window.server.app import build_server

from .support import service_for


def _doctor(data: Path) -> tuple[int, str]:
    proc = run_cli("doctor", data=data)
    return proc.returncode, proc.stdout + proc.stderr


async def _call(c: Client, tool: str, **args: Any) -> tuple[bool, str, dict[str, Any]]:
    res = await c.call_tool(tool, args)
    text = "".join(getattr(b, "text", "") for b in res.content)
    return res.is_error, text, res.structured_content or {}


def test_redoing_a_compaction_never_folds_an_entry_pinned_since(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def main() -> None:
        async with Client(build_server(service_for(data))) as c:
            await _call(c, "context_open", session_id="s")
            ids = []
            for i in range(6):
                _, _, d = await _call(c, "context_append", session_id="s", text=f"note {i} x")
                ids.append(d["entry_id"])
            _, _, done = await _call(c, "context_compact", session_id="s", keep_recent=2)
            summary = done["compaction_id"]
            assert not (await _call(c, "context_uncompact", session_id="s", compaction_id=summary))[
                0
            ]
            await _call(c, "context_update", session_id="s", entry_id=ids[0], pinned=True)
            failed, text, _ = await _call(
                c, "context_update", session_id="s", entry_id=summary, delete=False
            )
            assert failed and "pinned" in text and ids[0] in text
            _, _, rec = await _call(c, "context_recall", session_id="s", budget_tokens=4000)
            live = {e["id"]: e for e in rec["entries"]}
            assert live[ids[0]].get("pinned") and summary not in live
            # a pin on an entry a live summary folds is refused, not hidden
            _, _, again = await _call(c, "context_compact", session_id="s", keep_recent=2)
            folded = ids[1]
            failed, text, _ = await _call(
                c, "context_update", session_id="s", entry_id=folded, pinned=True
            )
            assert failed and again["compaction_id"] in text

    anyio.run(main)
    code, out = _doctor(data)
    assert code == 0, out


def test_compact_uncompact_compact_leaves_doctor_clean(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def main() -> None:
        async with Client(build_server(service_for(data))) as c:
            await _call(c, "context_open", session_id="s")
            for i in range(8):
                await _call(c, "context_append", session_id="s", text=f"note {i} about x")
            _, _, first = await _call(c, "context_compact", session_id="s", keep_recent=2)
            await _call(
                c, "context_uncompact", session_id="s", compaction_id=first["compaction_id"]
            )
            _, _, second = await _call(c, "context_compact", session_id="s", keep_recent=2)
            assert second["folded"] == first["folded"]
            failed, text, _ = await _call(  # redoing the first would fold them twice
                c, "context_update", session_id="s", entry_id=first["compaction_id"], delete=False
            )
            assert failed and second["compaction_id"] in text

    anyio.run(main)
    code, out = _doctor(data)
    assert code == 0, out


def test_a_log_that_folds_a_pinned_entry_still_shows_it(tmp_path: Path) -> None:
    """A journal an older version wrote, where a redone compaction folded a pinned entry."""
    data = tmp_path / "data"
    session, _ = service_for(data).sessions.open("s")
    pinned = session.append("the goal: ship v2", pinned=True)
    other = session.append("a note")
    summary = {
        "kind": "entry",
        "id": "s-old",
        "seq": 3,
        "created_at": 1.0,
        "role": "summary",
        "text": "folded both",
        "tags": ["summary"],
        "replaces": [pinned.id, other.id],
    }
    with (data / "sessions" / "s" / "entries.jsonl").open("a") as f:
        f.write(json.dumps(summary) + "\n")
    live = {e.id: e for e in service_for(data).sessions.get("s").entries() if e.live}
    assert pinned.id in live and other.id not in live
