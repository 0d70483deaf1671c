"""Server start: process spawn to the first tools/list answer over stdio, raw JSON-RPC."""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "context-window-bench", "version": "0"},
    },
}
_INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}


def _send(pipe: IO[bytes], message: dict[str, Any]) -> None:
    pipe.write(json.dumps(message).encode() + b"\n")
    pipe.flush()


def _answer(pipe: IO[bytes], want_id: int) -> dict[str, Any]:
    while True:
        line = pipe.readline()
        if not line:
            raise RuntimeError("server closed stdout before answering")
        msg = json.loads(line)
        if msg.get("id") == want_id:
            if "error" in msg:
                raise RuntimeError(f"server answered with an error: {msg['error']}")
            return dict(msg)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_start(data_dir: Path) -> tuple[float, float, int, float]:
    """Seconds to initialize's and to tools/list's answers, tools listed, server CPU seconds."""
    cpu0 = _children_cpu()
    cmd = [sys.executable, "-m", "context_window", "--no-llm", "--data-dir", str(data_dir)]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        _send(proc.stdin, _INIT)
        _answer(proc.stdout, 1)
        t_init = time.perf_counter() - t0
        _send(proc.stdin, _INITIALIZED)
        _send(proc.stdin, _LIST)
        tools = _answer(proc.stdout, 2)["result"]["tools"]
        t_list = time.perf_counter() - t0
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return t_init, t_list, len(tools), _children_cpu() - cpu0


def bench_startup(runs: int) -> dict[str, Any]:
    """Median of ``runs`` cold starts (after one untimed start that warms the OS file cache)."""
    with tempfile.TemporaryDirectory(prefix="cw-bench-start-") as tmp:
        one_start(Path(tmp) / "warm")
        samples = [one_start(Path(tmp) / f"run{i}") for i in range(runs)]
    lists = [s[1] for s in samples]
    return {
        "runs": runs,
        "tools": samples[-1][2],
        "median_s": round(statistics.median(lists), 3),
        "min_s": round(min(lists), 3),
        "max_s": round(max(lists), 3),
        "initialize_median_s": round(statistics.median(s[0] for s in samples), 3),
        "server_cpu_median_s": round(statistics.median(s[3] for s in samples), 3),
    }
