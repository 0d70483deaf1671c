"""A clean stop saves the snapshots the open sessions lack, so the next start replays little.

Real server processes on a session of 8,000 entries (fewer than a snapshot is saved
after while serving): stopped by SIGTERM or by closing stdin (stdio), and by SIGTERM
(HTTP). Each exits within the stop's second and leaves a snapshot that holds every
entry, the one appended just before the stop included. A SIGKILL saves nothing, and
the journal alone still holds everything.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Any

import anyio
import pytest
from helpers import INIT, http_client, http_server, server_command

from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter

ENTRIES = 8_000


def _write_session(data: Path, sid: str = "big") -> None:
    folder = data / "sessions" / sid
    folder.mkdir(parents=True)
    start = time.time() - ENTRIES
    with (folder / "entries.jsonl").open("w", encoding="utf-8") as f:
        for seq in range(1, ENTRIES + 1):
            text = f"note {seq}: the parser timed out on shard {seq % 97} after a retry"
            record = {
                "kind": "entry",
                "id": f"e{seq:07d}",
                "seq": seq,
                "created_at": start + seq,
                "role": "note",
                "text": text,
                "tokens": 16,
                "tags": [],
                "pinned": False,
            }
            f.write(json.dumps(record) + "\n")
    meta = {"id": sid, "title": sid, "created_at": start, "updated_at": start}
    (folder / "meta.json").write_text(json.dumps(meta))


def _from_snapshot(data: Path) -> tuple[int, int]:
    """(entries a fresh start reads from the snapshot, entries it holds in all)."""
    session = SessionStore(data, TokenCounter(0.27)).get("big")
    return session.from_snapshot, session.size()


def _send(stdin: IO[bytes], message: dict[str, Any]) -> None:
    stdin.write(json.dumps(message).encode() + b"\n")
    stdin.flush()


def _answer(stdout: IO[bytes], request_id: int) -> dict[str, Any]:
    while True:
        line = stdout.readline()
        assert line, "the server closed stdout"
        message = json.loads(line)
        if message.get("id") == request_id:
            return dict(message)


def _call(n: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}


def _stdio_server(data: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        server_command("--no-llm", "--data-dir", str(data)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    _send(proc.stdin, INIT)
    _answer(proc.stdout, 1)
    _send(proc.stdin, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    recall = _call(2, "context_recall", {"session_id": "big", "query": "parser"})
    _send(proc.stdin, recall)
    assert not _answer(proc.stdout, 2)["result"].get("isError")
    append = _call(3, "context_append", {"session_id": "big", "text": "the last word"})
    _send(proc.stdin, append)
    assert not _answer(proc.stdout, 3)["result"].get("isError")
    return proc


@pytest.mark.parametrize("how", ["SIGTERM", "stdin closed", "SIGKILL"])
def test_a_stdio_stop_saves_the_snapshot(tmp_path: Path, how: str) -> None:
    data = tmp_path / "data"
    _write_session(data)
    proc = _stdio_server(data)
    assert proc.stdin is not None
    began = time.monotonic()
    if how == "stdin closed":
        proc.stdin.close()
    else:
        proc.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGKILL)
    proc.wait(timeout=10)
    took = time.monotonic() - began
    assert took < 2.0, f"stopped in {took:.2f} s"
    if how == "SIGKILL":
        assert _from_snapshot(data) == (0, ENTRIES + 1)  # nothing saved; the journal holds all
        return
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert _from_snapshot(data) == (ENTRIES + 1, ENTRIES + 1)


def test_an_http_stop_saves_the_snapshot(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _write_session(data)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTX_")}
    command = server_command("--no-llm", "--data-dir", str(data))
    with http_server(tmp_path, command=command, env=env) as server:

        async def main() -> None:
            async with http_client(server.mcp_url) as c:
                recall = await c.call_tool("context_recall", {"session_id": "big", "query": "x"})
                assert not recall.is_error
                await c.call_tool("context_append", {"session_id": "big", "text": "last"})

        anyio.run(main)
        assert _from_snapshot(data) == (0, ENTRIES + 1)  # serving: none saved yet
    assert server.proc.returncode == 0, server.log()  # stopped by SIGTERM (the fixture)
    assert _from_snapshot(data) == (ENTRIES + 1, ENTRIES + 1)
