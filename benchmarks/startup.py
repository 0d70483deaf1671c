"""Server start: process spawn to the first tools/list answer over stdio, raw JSON-RPC,
beside a one-tool MCPServer on the same SDK, started the same way in the same run."""

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


# The least an MCP server on this SDK can be: one tool, stdio.
ONE_TOOL = """
from mcp.server.mcpserver import MCPServer
app = MCPServer("one-tool")
@app.tool()
def echo(text: str) -> str:
    return text
app.run("stdio")
"""


def one_start(data_dir: Path, baseline: bool = False) -> tuple[float, float, int, float, float]:
    """Seconds to initialize's and to tools/list's answers, tools listed, server CPU seconds,
    seconds from closing stdin to the exit (``baseline``: of the one-tool MCPServer)."""
    cpu0 = _children_cpu()
    cmd = [sys.executable, "-m", "context_window", "--no-llm", "--data-dir", str(data_dir)]
    if baseline:
        cmd = [sys.executable, "-c", ONE_TOOL]
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
        closed = time.perf_counter()
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return t_init, t_list, len(tools), _children_cpu() - cpu0, time.perf_counter() - closed


def bench_startup(runs: int) -> dict[str, Any]:
    """Median of ``runs`` cold starts (after one untimed start that warms the OS file cache),
    each followed by a start of the one-tool baseline, so both see the same machine."""
    with tempfile.TemporaryDirectory(prefix="cw-bench-start-") as tmp:
        one_start(Path(tmp) / "warm")
        one_start(Path(tmp) / "warm", baseline=True)
        samples, baseline = [], []
        for i in range(runs):
            samples.append(one_start(Path(tmp) / f"run{i}"))
            baseline.append(one_start(Path(tmp) / f"run{i}", baseline=True))
    lists = [s[1] for s in samples]
    base = statistics.median(b[1] for b in baseline)
    return {
        "runs": runs,
        "tools": samples[-1][2],
        "median_s": round(statistics.median(lists), 3),
        "min_s": round(min(lists), 3),
        "max_s": round(max(lists), 3),
        "initialize_median_s": round(statistics.median(s[0] for s in samples), 3),
        "server_cpu_median_s": round(statistics.median(s[3] for s in samples), 3),
        "one_tool_median_s": round(base, 3),
        "over_one_tool": round(statistics.median(lists) / base, 2),
        "stdin_closed_to_exit_s": round(statistics.median(s[4] for s in samples), 3),
        "one_tool_stdin_closed_to_exit_s": round(statistics.median(b[4] for b in baseline), 3),
    }
