"""No client can exhaust the MCP sessions of an HTTP server.

Before, any local process filled the SDK's 10,000-session cap in about 34 s and new
clients got 503 for the next 30 minutes. Now a client address holds at most
``--http-sessions-per-client`` sessions (a new one closes its least recently used),
idle sessions close after ``--http-session-idle``, and a legitimate client can always
connect. The server is a real process; the flood is raw HTTP that never says goodbye.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import httpx
import mcp
from helpers import INIT, MCP_HEADERS

from .support import Server

PER_CLIENT = 4
FLOOD = 60


def _open(http: httpx.Client, url: str) -> str:
    r = http.post(url, json=INIT, headers=MCP_HEADERS)
    assert r.status_code == 200, (r.status_code, r.text[:200])
    return r.headers["mcp-session-id"]


def _alive(http: httpx.Client, url: str, sid: str) -> bool:
    headers = {**MCP_HEADERS, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
    ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
    r = http.post(url, json=ping, headers=headers)
    assert r.status_code in (200, 404), (r.status_code, r.text[:200])
    return r.status_code == 200


def test_a_flood_of_sessions_never_locks_out_a_new_client(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", None, "--http-sessions-per-client", str(PER_CLIENT))
    url = server.url + "/mcp"
    try:
        with httpx.Client(timeout=10) as http:
            flood = [_open(http, url) for _ in range(FLOOD)]  # every one is admitted
            alive = [sid for sid in flood if _alive(http, url, sid)]
            assert alive == flood[-PER_CLIENT:]  # the oldest were closed, the newest kept

        async def legitimate() -> None:
            async with mcp.Client(url) as c:
                res = await c.call_tool("context_open", {"session_id": "mine"})
                assert not res.is_error

        anyio.run(legitimate)
        assert server.alive()
    finally:
        server.stop()


def test_idle_sessions_close(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", None, "--http-session-idle", "1")
    url = server.url + "/mcp"
    try:
        with httpx.Client(timeout=10) as http:
            busy, idle = _open(http, url), _open(http, url)
            for _ in range(6):  # a request at least every second keeps a session open
                time.sleep(0.5)
                assert _alive(http, url, busy)
            assert not _alive(http, url, idle)  # quiet for 3 s: closed
    finally:
        server.stop()
