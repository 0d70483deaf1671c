"""Helpers shared by test modules in different folders: real HTTP servers and clients."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import httpx2
import mcp
import pytest
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

# The first message of every MCP session, as a raw client sends it.
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw-test", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def text_of(result: CallToolResult) -> str:
    """The text blocks of a tool result, one per line."""
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def fullwidth(ascii_text: str) -> str:
    """The text in fullwidth forms, as East Asian input methods type Latin letters."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in ascii_text)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class Running:
    """A server subprocess and where to reach it."""

    proc: subprocess.Popen[bytes]
    base: str
    stdout: Path
    stderr: Path

    @property
    def mcp_url(self) -> str:
        return f"{self.base}/mcp"

    def log(self) -> str:
        return self.stderr.read_text(encoding="utf-8", errors="replace")


def run_cli(
    *args: str,
    data: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    **kw: object,
) -> subprocess.CompletedProcess[str]:
    """``python -m context_window ARGS`` (with ``--data-dir DATA --no-llm`` when ``data``
    is given) in a real process: no CTX_* variables but ``env``, stdin at EOF."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("CTX_")}
    tail = ["--data-dir", str(data), "--no-llm"] if data is not None else []
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "context_window", *args, *tail],
        env={**base, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kw,
    )


def server_command(*args: str) -> list[str]:
    """``python -m context_window`` with arguments."""
    return [sys.executable, "-m", "context_window", *args]


@contextmanager
def http_server(
    tmp_path: Path,
    *args: str,
    host: str = "127.0.0.1",
    command: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[Running]:
    """Start an HTTP server subprocess, wait for /health, and stop it afterwards.

    ``env`` is the whole environment; by default ours without CTX_* variables.
    """
    local = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host.strip("[]"), host.strip("[]"))
    port = free_port(local)
    data = tmp_path / f"data-{port}"
    cmd = (
        list(command)
        if command is not None
        else server_command("--no-llm", "--data-dir", str(data))
    )
    cmd += ["--http", "--host", host, "--port", str(port), *args]
    out, err = tmp_path / f"stdout-{port}.txt", tmp_path / f"stderr-{port}.txt"
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTX_")}
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen(cmd, stdout=o, stderr=e, stdin=subprocess.DEVNULL, env=env)
    shown = f"[{local}]" if ":" in local else local
    running = Running(proc, f"http://{shown}:{port}", out, err)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}:\n{running.log()}")
            try:
                if httpx.get(f"{running.base}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server not ready within 30 s:\n{running.log()}")
            time.sleep(0.1)
        yield running
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@asynccontextmanager
async def http_client(url: str, token: str | None = None) -> AsyncIterator[mcp.Client]:
    """An MCP client over Streamable HTTP, sending a bearer token if given."""
    if token is None:
        async with mcp.Client(url) as client:
            yield client
        return
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        mcp.Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client
