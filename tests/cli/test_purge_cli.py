"""`context-window purge`: real erasure from the CLI, beside a live stdio server."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import run_cli
from mcp import Client, StdioServerParameters

from context_window import main
from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter

DAY = 86_400.0


def purge(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("purge", *args, "--data-dir", str(data), timeout=60)


def test_purge_erases_and_a_dry_run_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    s = SessionStore(data, TokenCounter(0.27)).open("s")[0]
    doomed = s.append("password hunter2 was pasted here")
    s.update(doomed.id, deleted=True)
    old = s.append("temporary build id 4711", ttl_days=1, now=time.time() - 2 * DAY)
    kept = s.append("keep this decision", pinned=True)
    log = data / "sessions" / "s" / "entries.jsonl"
    before = log.read_bytes()

    assert main(["purge", "s", "--dry-run", "--data-dir", str(data)]) == 0
    assert "would erase 2 deleted or expired entries and 1 patch" in capsys.readouterr().out
    assert log.read_bytes() == before

    assert main(["purge", "s", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("s: erased 2 deleted or expired entries and 1 patch record;")
    raw = log.read_bytes()
    assert b"hunter2" not in raw and b"4711" not in raw
    assert doomed.id.encode() not in raw and old.id.encode() not in raw
    fresh = SessionStore(data, TokenCounter(0.27)).open("s")[0]
    assert [e.id for e in fresh.entries(include_hidden=True)] == [kept.id]
    assert fresh.stats().skipped_lines == 0  # the rewritten log's identity line is no record
    capsys.readouterr()
    assert main(["doctor", "--data-dir", str(data)]) == 0, capsys.readouterr().out


def test_purge_errors_are_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = purge(data, "nosuch")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "does not exist" in done.stderr
    assert not data.exists()  # a purge never creates the data dir
    data.mkdir()
    done = purge(data, "nosuch")
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "no session 'nosuch'" in done.stderr and "context-window sessions" in done.stderr
    done = purge(data, "../x")
    assert done.returncode == 1 and "invalid session_id" in done.stderr


@pytest.mark.anyio
async def test_purge_beside_a_live_stdio_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    args = ["-m", "context_window", "--no-llm", "--no-audit", "--data-dir", str(data)]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=tmp_path)
    async with Client(params) as c:
        await c.call_tool("context_open", {"session_id": "live"})
        ids = []
        for text in ("api key sk-123 leaked", "the deploy target is eu-west-1"):
            r = await c.call_tool("context_append", {"session_id": "live", "text": text})
            assert r.structured_content is not None
            ids.append(r.structured_content["entry_id"])
        r = await c.call_tool(
            "context_update", {"session_id": "live", "entry_id": ids[0], "delete": True}
        )
        assert not r.is_error
        done = purge(data, "live")
        assert done.returncode == 0, done.stderr
        # The server re-reads the rewritten log; its next append lands in the new file.
        r = await c.call_tool("context_append", {"session_id": "live", "text": "after purge"})
        assert not r.is_error
        r = await c.call_tool("context_recall", {"session_id": "live", "budget_tokens": 1000})
        assert r.structured_content is not None
        texts = [e["text"] for e in r.structured_content["entries"]]
        assert texts == ["after purge", "the deploy target is eu-west-1"]  # newest first
        r = await c.call_tool("context_status", {"session_id": "live"})
        assert r.structured_content is not None
        assert (r.structured_content["total"], r.structured_content["deleted"]) == (2, 0)
    raw = (data / "sessions" / "live" / "entries.jsonl").read_bytes()
    assert b"sk-123" not in raw and b"after purge" in raw
