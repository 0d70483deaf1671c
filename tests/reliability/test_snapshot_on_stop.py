"""A clean stop saves the snapshots the open sessions lack, so the next start replays little.

Real server processes on a session of 8,000 entries: the first call replays them and
saves a snapshot; one more entry is appended (too few to save another while serving);
then the server is stopped by SIGTERM, by closing stdin or by no longer reading its
stdout (stdio), and by SIGTERM (HTTP). Each exits within the stop's second and leaves a
snapshot that holds every entry, the one appended just before the stop included. A
SIGKILL saves nothing, and the journal alone still holds everything.
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
    with (data.parent / "stderr.txt").open("wb") as log:  # a pipe nobody reads would fill
        proc = subprocess.Popen(
            server_command("--no-llm", "--data-dir", str(data)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
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


@pytest.mark.parametrize("how", ["SIGTERM", "stdin closed", "stdout closed", "SIGKILL"])
def test_a_stdio_stop_saves_the_snapshot(tmp_path: Path, how: str) -> None:
    data = tmp_path / "data"
    _write_session(data)
    proc = _stdio_server(data)
    assert proc.stdin is not None and proc.stdout is not None
    began = time.monotonic()
    if how == "stdin closed":
        proc.stdin.close()
    elif how == "stdout closed":  # the client stops reading: the next answer meets EPIPE
        proc.stdout.close()
        _send(proc.stdin, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
    else:
        proc.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGKILL)
    proc.wait(timeout=10)
    took = time.monotonic() - began
    assert took < 2.0, f"stopped in {took:.2f} s"
    if how == "SIGKILL":
        assert _from_snapshot(data) == (ENTRIES, ENTRIES + 1)  # the journal holds the last
        return
    said = (tmp_path / "stderr.txt").read_text()
    assert proc.returncode == 0, said
    assert "Traceback" not in said and "Exception ignored" not in said, said
    assert "saved the snapshot of 1 session for the next start" in said, said
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
        assert _from_snapshot(data) == (ENTRIES, ENTRIES + 1)  # serving: the last not saved
    assert server.proc.returncode == 0, server.log()  # stopped by SIGTERM (the fixture)
    assert _from_snapshot(data) == (ENTRIES + 1, ENTRIES + 1)


def test_a_sigkill_meets_a_bounded_tail(tmp_path: Path) -> None:
    # The snapshot is saved again once replaying the records past it would cost a start
    # more than a save costs now (here after 1,000 records, the least), after the answer
    # to the append that made it due: a SIGKILL then leaves fewer than that to replay.
    data = tmp_path / "data"
    _write_session(data)
    proc = _stdio_server(data)  # replays 8,000 and saves; then appends one
    assert proc.stdin is not None and proc.stdout is not None
    for n in range(1_200):
        _send(proc.stdin, _call(10 + n, "context_append", {"session_id": "big", "text": f"x{n}"}))
        assert not _answer(proc.stdout, 10 + n)["result"].get("isError")
    time.sleep(1.0)  # the deferred save of the session, at most a second here
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    from_snapshot, size = _from_snapshot(data)
    assert size == ENTRIES + 1 + 1_200
    assert ENTRIES + 1_000 <= from_snapshot < size  # saved while serving; the rest replays
