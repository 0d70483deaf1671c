"""Over stdio, every request that has an id is answered, even one the SDK cannot read.

A real ``python -m context_window`` process on pipes. The SDK's reader drops a line
that fails its validation, and the client then waits for ever; each line below was
dropped before. Each must now get exactly one JSON-RPC error carrying the request's
id (``null`` when the line is not JSON enough to hold one), and the server must go
on serving.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest
from helpers import INIT

# (raw line, the id it carries, the JSON-RPC error code expected)
BAD: list[tuple[bytes, Any, int]] = [
    (
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"context_open",'
        b'"arguments":{"session_id":"a\\ud800"}}}',
        2,
        -32602,
    ),
    (b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":["context_open"]}', 3, -32602),
    (b'\xef\xbb\xbf{"jsonrpc":"2.0","id":4,"method":"ping"}', 4, -32700),
    (b'{"jsonrpc":"1.0","id":5,"method":"ping"}', 5, -32600),
    (b'{"id":"six","method":"ping"}', "six", -32600),
    (b'{"jsonrpc":"2.0","id":7}', 7, -32600),
    (b'{"jsonrpc":"2.0","id":8,"method":5}', 8, -32600),
    (b'{"jsonrpc":"2.0","id":9.5,"method":"ping"}', None, -32600),
    (b"not json at all", None, -32700),
    (b'[{"jsonrpc":"2.0","id":10,"method":"ping"}]', None, -32600),
    (b"[" * 1000, None, -32700),  # too deep for the line's diagnosis (a RecursionError)
    (
        b'{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"context_open",'
        b'"arguments":{"session_id":"s","title":' + b"[" * 100_000 + b"]" * 100_000 + b"}}}",
        None,
        -32700,
    ),
]


class Pipe:
    """The server on plain pipes, its stdout lines collected by a thread."""

    def __init__(self, data: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTX_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "context_window", "--no-llm", "--data-dir", str(data)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.out: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            with self.cond:
                self.out.append(json.loads(line))  # stdout carries only JSON-RPC
                self.cond.notify_all()

    def send(self, raw: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def wait_for(self, count: int, timeout: float = 20) -> list[dict[str, Any]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.out) >= count, timeout), self.out
            return list(self.out)


def test_every_request_with_an_id_is_answered(tmp_path: Path) -> None:
    server = Pipe(tmp_path / "data")
    try:
        server.send(json.dumps(INIT).encode())
        server.wait_for(1)
        server.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        server.send(b'{"jsonrpc":"1.0","method":"notifications/initialized"}')  # not answered
        for raw, _, _ in BAD:
            server.send(raw)
        call = {
            "jsonrpc": "2.0",
            "id": 99,
            "method": "tools/call",
            "params": {"name": "context_open", "arguments": {"session_id": "after"}},
        }
        server.send(json.dumps(call).encode())
        out = server.wait_for(1 + len(BAD) + 1)
        time.sleep(0.5)  # anything more (a second answer, an answer to the notification)?
        assert len(server.out) == 1 + len(BAD) + 1, server.out
        answers = out[1:]
        ok = [m for m in answers if m.get("id") == 99]
        assert len(ok) == 1 and "result" in ok[0] and not ok[0]["result"].get("isError")
        errors = [m for m in answers if m.get("id") != 99]
        expected = sorted((str(rid), code) for _, rid, code in BAD)
        got = sorted((str(m["id"]), m["error"]["code"]) for m in errors)
        assert got == expected
        for m in errors:
            assert m["jsonrpc"] == "2.0" and m["error"]["message"]
    finally:
        assert server.proc.stdin is not None
        server.proc.stdin.close()
        server.proc.wait(timeout=20)


def call(rid: int | str, name: str, arguments: dict[str, Any]) -> str:
    params = {"name": name, "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})


def test_requests_still_running_at_the_end_of_input_are_answered(tmp_path: Path) -> None:
    # `cat requests | context-window`: input ends while the calls run. The SDK cancels
    # them there, and most answers were lost (39 of 102 in one run); the writes were not.
    server = Pipe(tmp_path / "data")
    server.send(json.dumps(INIT).encode())
    server.wait_for(1)
    server.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    server.send(call(2, "context_open", {"session_id": "batch"}).encode())
    server.wait_for(2)
    notes = range(10, 90)
    server.send(
        b"\n".join(
            call(i, "context_append", {"session_id": "batch", "text": f"note {i}"}).encode()
            for i in notes
        )
    )
    assert server.proc.stdin is not None
    server.proc.stdin.close()
    try:
        assert server.proc.wait(timeout=60) == 0
    finally:
        server.proc.kill()  # a server that still waits must not outlive the test
    time.sleep(0.2)  # the reader thread's last lines
    answers = {m["id"]: m for m in server.out[2:]}
    assert sorted(answers) == list(notes), server.out
    assert all(not m["result"]["isError"] for m in answers.values())
    journal = (tmp_path / "data" / "sessions" / "batch" / "entries.jsonl").read_text()
    assert len(journal.splitlines()) == len(notes)


# The request's id and the cancel's: the SDK matches "2" and 2 as one id.
@pytest.mark.parametrize(("rid", "cancelled"), [(2, 2), ("2", 2)])
def test_a_request_cancelled_before_the_end_of_input_does_not_hold_the_exit(
    tmp_path: Path, rid: int | str, cancelled: int
) -> None:
    server = Pipe(tmp_path / "data")
    server.send(json.dumps(INIT).encode())
    server.wait_for(1)
    server.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    text = "# Big\n\n" + "a line of words about ports and disks\n" * 200_000
    server.send(call(rid, "doc_ingest", {"text": text}).encode())
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": cancelled},
    }
    server.send(json.dumps(cancel).encode())
    assert server.proc.stdin is not None
    server.proc.stdin.close()
    try:
        assert server.proc.wait(timeout=60) == 0
    finally:
        server.proc.kill()  # a server that still waits must not outlive the test
