"""The server as a real stdio subprocess: an mcp.Client session, and raw JSON-RPC on pipes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import pytest
from helpers import INIT
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, TextContent


def server_args(data_dir: Path) -> list[str]:
    return ["-m", "context_window", "--no-llm", "--data-dir", str(data_dir)]


@pytest.mark.anyio
async def test_client_over_stdio_subprocess(tmp_path: Path) -> None:
    data = tmp_path / "data"
    params = StdioServerParameters(command=sys.executable, args=server_args(data), cwd=tmp_path)
    async with Client(params) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert {"context_open", "context_append", "context_recall"} <= names
        opened = await c.call_tool("context_open", {"session_id": "stdio", "title": "Over pipes"})
        assert not opened.is_error
        appended = await c.call_tool(
            "context_append", {"session_id": "stdio", "text": "Decided: use SQLite for cache"}
        )
        assert appended.structured_content is not None
        entry_id = appended.structured_content["entry_id"]
        recalled = await c.call_tool("context_recall", {"session_id": "stdio", "query": "sqlite"})
        assert recalled.structured_content is not None
        assert [e["id"] for e in recalled.structured_content["entries"]] == [entry_id]
        block = recalled.content[0]
        assert isinstance(block, TextContent) and "use SQLite for cache" in block.text
        missing = await c.call_tool("context_status", {"session_id": "ghost"})
        assert missing.is_error
        # An unknown tool is a protocol error (-32602), not a tool result.
        with pytest.raises(MCPError) as unknown:
            await c.call_tool("context_forget_everything", {})
        assert unknown.value.code == INVALID_PARAMS
        assert "unknown tool 'context_forget_everything'" in unknown.value.message
        assert "context_recall" in unknown.value.message
    journal = data / "sessions" / "stdio" / "entries.jsonl"
    assert (
        json.loads(journal.read_text().splitlines()[0])["text"] == "Decided: use SQLite for cache"
    )


class RawServer:
    """The server on plain pipes; every stdout line is collected by a reader thread."""

    def __init__(self, data_dir: Path, cwd: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTX_")}
        self.proc = subprocess.Popen(
            [sys.executable, *server_args(data_dir)],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[bytes] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def response(self, request_id: int, timeout: float = 30) -> dict[str, Any]:
        """Wait for the response with ``request_id``."""

        def find() -> dict[str, Any] | None:
            for raw in self.lines:
                msg = json.loads(raw)
                if msg.get("id") == request_id and ("result" in msg or "error" in msg):
                    return msg  # type: ignore[no-any-return]
            return None

        with self._cond:
            assert self._cond.wait_for(lambda: find() is not None, timeout), self.lines
            found = find()
        assert found is not None
        return found

    def close(self) -> tuple[int, str]:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=30)
        self._reader.join(timeout=5)
        assert self.proc.stderr is not None
        return code, self.proc.stderr.read().decode()


def test_raw_json_rpc_stdout_carries_only_protocol_messages(tmp_path: Path) -> None:
    server = RawServer(Path("rel-data"), cwd=tmp_path)
    try:
        server.send(INIT)
        init = server.response(1)
        assert init["result"]["serverInfo"]["name"] == "context-window"
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        tools = {t["name"] for t in server.response(2)["result"]["tools"]}
        assert "context_guide" in tools
        server.send(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": "context_open", "arguments": {"session_id": "raw"}},
            }
        )
        opened = server.response(3)["result"]
        assert opened["isError"] is False
        assert opened["structuredContent"]["session_id"] == "raw"
        server.send(
            {
                "jsonrpc": "2.0",
                "id": 4,
                "method": "tools/call",
                "params": {"name": "context_recall", "arguments": {"session_id": "nope"}},
            }
        )
        failed = server.response(4)["result"]
        assert failed["isError"] is True
        assert "context_open" in failed["content"][0]["text"]
    finally:
        code, stderr = server.close()
    assert code == 0
    assert len(server.lines) == 4  # one response per request, nothing else
    for raw in server.lines:
        assert raw.endswith(b"\n")
        msg = json.loads(raw)
        assert msg["jsonrpc"] == "2.0"
    data_dir = tmp_path / "rel-data"
    assert data_dir.is_dir()
    startup = [line for line in stderr.splitlines() if "serving on stdio" in line]
    assert len(startup) == 1
    assert f"data dir {data_dir};" in startup[0]
    assert '"tool": "context_open"' in stderr  # audit lines go to stderr, not stdout
