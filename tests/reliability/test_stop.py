"""SIGTERM and SIGINT stop the server promptly and cleanly, also as PID 1.

The server runs as PID 1 of its own PID namespace (``unshare --pid --fork``), as in a
container, where SIGTERM has no default action: it must still exit 0 within 2 s, with
what it acknowledged on disk and the data dir clean. Skipped where PID namespaces
cannot be made.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from helpers import INIT, free_port

from context_window.cli.doctor import audit

STOP_SECONDS = 2.0


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--kill-child", "true"], capture_output=True, check=False
    )
    return done.returncode == 0


pytestmark = pytest.mark.skipif(
    not _namespaces_work(), reason="cannot create a PID namespace here (unshare --pid)"
)


def _as_pid_one(data: Path, *args: str, **kw: Any) -> tuple[subprocess.Popen[bytes], int]:
    """The server as PID 1 of a new PID namespace, and its PID as seen from here."""
    cmd = ["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-m", "context_window"]
    proc = subprocess.Popen([*cmd, "--no-llm", "--data-dir", str(data), *args], **kw)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        children = subprocess.run(
            ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=False
        ).stdout.split()
        if children:
            return proc, int(children[0])
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the server did not start in its namespace")


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


def _stopped_within(proc: subprocess.Popen[bytes], inner: int, signum: int) -> float:
    start = time.monotonic()
    os.kill(inner, signum)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"no exit within 10 s of {signal.Signals(signum).name}") from None
    return time.monotonic() - start


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stdio_server_as_pid_one_stops_promptly_with_its_data(
    tmp_path: Path, signum: int
) -> None:
    data = tmp_path / "data"
    proc, inner = _as_pid_one(
        data, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        _send(proc.stdin, INIT)
        assert "result" in _answer(proc.stdout, 1)
        _send(proc.stdin, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        for k, (tool, args) in enumerate(
            [
                ("context_open", {"session_id": "stop"}),
                ("context_append", {"session_id": "stop", "text": "kept across the stop"}),
            ],
            start=2,
        ):
            _send(proc.stdin, {
                "jsonrpc": "2.0", "id": k, "method": "tools/call",
                "params": {"name": tool, "arguments": args},
            })  # fmt: skip
            assert not _answer(proc.stdout, k)["result"].get("isError"), tool
        took = _stopped_within(proc, inner, signum)  # stdin stays open: no EOF to help
        err = proc.stderr.read().decode()
    finally:
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()
    assert proc.returncode == 0, err[-2000:]
    assert took < STOP_SECONDS, took
    assert f"stopping on {signal.Signals(signum).name}" in err
    journal = data / "sessions" / "stop" / "entries.jsonl"
    assert [json.loads(x)["text"] for x in journal.read_text().splitlines()] == [
        "kept across the stop"
    ]
    report = audit(data)
    assert report.ok, [str(p) for p in report.problems]


def test_an_http_server_as_pid_one_stops_promptly(tmp_path: Path) -> None:
    port = free_port()
    log = (tmp_path / "server.log").open("wb")
    proc, inner = _as_pid_one(
        tmp_path / "data", "--http", "--port", str(port), stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.1)
        took = _stopped_within(proc, inner, signal.SIGTERM)
    finally:
        log.close()
    assert proc.returncode == 0, (tmp_path / "server.log").read_text()[-2000:]
    assert took < STOP_SECONDS, took


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("transport", [[], ["--http", "--port", "0"]])
def test_a_signal_while_starting_as_pid_one_stops_it_at_once(
    tmp_path: Path, signum: int, transport: list[str]
) -> None:
    # docker stop right after docker run: the signal arrives 0.3 s after the start,
    # while the server is still importing and setting up, before its own handlers.
    started = time.monotonic()
    proc, inner = _as_pid_one(
        tmp_path / "data",
        *transport,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None and proc.stdin is not None
    time.sleep(max(0.0, started + 0.3 - time.monotonic()))
    try:
        took = _stopped_within(proc, inner, signum)
        err = proc.stderr.read().decode()
    finally:
        proc.stdin.close()
        proc.stderr.close()
    assert proc.returncode == 0, err[-2000:]
    assert took < 1.0, took
