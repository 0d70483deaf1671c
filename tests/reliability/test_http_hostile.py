"""HTTP: hostile requests (bad Host, bad Origin, missing or wrong token, oversized or
malformed bodies) are refused before any tool runs, change nothing on disk, and leave
the server serving. Each server is a real ``python -m context_window --http`` process,
reached on 127.0.0.1 only."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import INIT, MCP_HEADERS, free_port, http_server, run_cli

from .support import Server, add, snapshot

TOKEN = "s3cret-T0ken"
BIG = 33 * 1024 * 1024  # over the 32 MiB body limit


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("http-open"), None)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("http-token"), TOKEN)
    yield server
    server.stop()


def mcp_session(server: Server, auth: dict[str, str]) -> dict[str, str]:
    """Initialize a real MCP session; return the headers a follow-up request needs."""
    r = server.http.post(server.url + "/mcp", json=INIT, headers={**MCP_HEADERS, **auth})
    assert r.status_code == 200, r.text
    headers = {
        **MCP_HEADERS,
        **auth,
        "mcp-session-id": r.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-06-18",
    }
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert server.http.post(server.url + "/mcp", json=note, headers=headers).is_success
    return headers


def call(sid: str, n: int = 2) -> dict[str, Any]:
    """A tools/call that would create a session directory if it ran."""
    return {
        "jsonrpc": "2.0",
        "id": n,
        "method": "tools/call",
        "params": {"name": "context_open", "arguments": {"session_id": sid}},
    }


def hostile(server: Server, method: str, expect: set[int], **kw: Any) -> httpx.Response:
    """Send one hostile request; assert its status, no change on disk, and a live server."""
    before = snapshot(server.data)
    r = server.http.request(method, server.url + "/mcp", **kw)
    assert r.status_code in expect, (r.status_code, r.text[:200])
    assert snapshot(server.data) == before, "a refused request changed the data dir"
    assert server.alive()
    add("hostile HTTP requests refused", 1)
    return r


BAD_HOSTS = [
    "evil.com",
    "evil.com:80",
    "localhost.evil.com",
    "127.0.0.1.nip.io",
    "127.0.0.2",
    "0.0.0.0",
    "attacker.localhost.example",
]
BAD_ORIGINS = [
    "http://evil.com",
    "https://localhost.evil.com",
    "http://127.0.0.1.evil.com",
    "null",
    "file://",
    "http://192.168.0.1",
]


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_bad_host_is_refused(open_server: Server, host: str) -> None:
    headers = mcp_session(open_server, {})
    hostile(open_server, "POST", {421}, json=call("pwned"), headers={**headers, "Host": host})
    hostile(open_server, "POST", {421}, json=INIT, headers={**MCP_HEADERS, "Host": host})
    assert not (open_server.data / "sessions" / "pwned").exists()


@pytest.mark.parametrize("origin", BAD_ORIGINS)
def test_bad_origin_is_refused(open_server: Server, origin: str) -> None:
    headers = mcp_session(open_server, {})
    hostile(open_server, "POST", {403}, json=call("pwned"), headers={**headers, "Origin": origin})
    assert not (open_server.data / "sessions" / "pwned").exists()


def test_good_host_and_origin_work(open_server: Server) -> None:
    for host in ("127.0.0.1", f"127.0.0.1:{open_server.port}", f"localhost:{open_server.port}"):
        headers = mcp_session(open_server, {"Host": host})
        origin = {"Origin": f"http://localhost:{open_server.port}"}
        r = open_server.http.post(
            open_server.url + "/mcp", json=call("legit"), headers={**headers, **origin}
        )
        assert r.status_code == 200 and ("Created session" in r.text or "Resumed" in r.text)
    assert (open_server.data / "sessions" / "legit" / "meta.json").exists()


BAD_AUTH = [
    {},
    {"Authorization": ""},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer wrong"},
    {"Authorization": "Bearer  "[:-1] + "x y"},
    {"Authorization": f"Token {TOKEN}"},
    {"Authorization": f"Bearer {TOKEN}x"},
    {"Authorization": f"Bearer {TOKEN[:-1]}"},
    {"Authorization": f"Bearer {TOKEN} extra"},
    {"Authorization": f"Basic {TOKEN}"},
    {"Authorization": TOKEN},
    {"X-Api-Key": TOKEN},
]


@pytest.mark.parametrize("auth", BAD_AUTH, ids=[str(i) for i in range(len(BAD_AUTH))])
def test_missing_or_wrong_token_is_refused(token_server: Server, auth: dict[str, str]) -> None:
    good = mcp_session(token_server, {"Authorization": f"Bearer {TOKEN}"})
    headers = {k: v for k, v in good.items() if k != "Authorization"} | auth
    r = hostile(token_server, "POST", {401}, json=call("pwned"), headers=headers)
    assert r.headers["www-authenticate"].startswith("Bearer")
    hostile(token_server, "POST", {401}, json=INIT, headers={**MCP_HEADERS, **auth})
    hostile(token_server, "GET", {401}, headers={**MCP_HEADERS, **auth})
    hostile(token_server, "DELETE", {401}, headers=headers)
    assert not (token_server.data / "sessions" / "pwned").exists()


def test_token_does_not_disable_host_checks_on_loopback(token_server: Server) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    hostile(
        token_server, "POST", {421}, json=INIT, headers={**MCP_HEADERS, **auth, "Host": "evil.com"}
    )
    hostile(
        token_server,
        "POST",
        {403},
        json=INIT,
        headers={**MCP_HEADERS, **auth, "Origin": "http://evil.com"},
    )


def test_right_token_works_and_health_stays_open(token_server: Server) -> None:
    assert token_server.http.get(token_server.url + "/health").json()["status"] == "ok"
    headers = mcp_session(token_server, {"Authorization": f"Bearer {TOKEN}"})
    r = token_server.http.post(token_server.url + "/mcp", json=call("legit"), headers=headers)
    assert r.status_code == 200 and "session 'legit'" in r.text


def test_oversized_bodies_are_refused(open_server: Server) -> None:
    headers = mcp_session(open_server, {})
    refused = hostile(open_server, "POST", {413}, content=b" " * BIG, headers=headers)
    assert "33,554,432-byte limit" in refused.json()["detail"]
    assert "file_path" in refused.json()["detail"]

    def stream() -> Iterator[bytes]:  # no Content-Length: the limit must hold while reading
        for _ in range(BIG // (1 << 20) + 1):
            yield b" " * (1 << 20)

    refused = hostile(open_server, "POST", {413}, content=stream(), headers=headers)
    assert "file_path" in refused.json()["detail"]
    huge_call = call("pwned")
    huge_call["params"]["arguments"]["title"] = "x" * BIG
    hostile(open_server, "POST", {413}, content=json.dumps(huge_call).encode(), headers=headers)
    assert not (open_server.data / "sessions" / "pwned").exists()


def test_oversized_body_without_token_is_refused(token_server: Server) -> None:
    hostile(token_server, "POST", {401, 413}, content=b" " * BIG, headers=MCP_HEADERS)


@pytest.mark.parametrize(
    "body",
    [b"{bad json", b"", b"[]", b"null", b'{"jsonrpc":"2.0"}', b"\xff\xfe\x00", b"[" * 100_000],
    ids=["torn", "empty", "empty-batch", "null", "no-method", "binary", "deep-nesting"],
)
def test_malformed_bodies_are_refused(open_server: Server, body: bytes) -> None:
    headers = mcp_session(open_server, {})
    hostile(open_server, "POST", {400, 406, 413, 415, 422}, content=body, headers=headers)


def test_stalled_uploads_do_not_lock_an_address_out(open_server: Server) -> None:
    """Connections that send a POST's headers and one byte of its body, and then stall,
    do not count as sessions being opened: a new client from the same address connects."""
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{open_server.port}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        "Content-Length: 100000\r\n\r\n{"
    ).encode()
    stalled = []
    try:
        for _ in range(40):  # over the 32 a client address may be opening at once
            sock = socket.create_connection(("127.0.0.1", open_server.port))
            sock.sendall(head)
            stalled.append(sock)
        time.sleep(0.5)  # let the server read every one of them
        for _ in range(3):
            r = open_server.http.post(open_server.url + "/mcp", json=INIT, headers=MCP_HEADERS)
            assert r.status_code == 200, (r.status_code, r.text[:200])
    finally:
        for sock in stalled:
            sock.close()
    assert open_server.alive()


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_a_blank_token_is_refused_at_start(tmp_path: Path, how: str) -> None:
    # A token of spaces would lock every client out: the start refuses it in one line.
    args = ("--http", "--port", str(free_port()), "--http-token", "  ") if how == "flag" else ()
    env = {"CTX_TRANSPORT": "http", "CTX_HTTP_TOKEN": " "} if how == "variable" else {}
    started = run_cli(*args, data=tmp_path / "data", env=env, timeout=60)
    assert started.returncode == 2 and "Traceback" not in started.stderr, started.stderr
    (line,) = started.stderr.splitlines()
    assert "http-token is blank" in line, line


def test_the_loopback_address_bound_is_served(tmp_path: Path) -> None:
    # 127.0.0.2 is loopback but not one of the usual names: /mcp answered 421 to all.
    with http_server(tmp_path, host="127.0.0.2") as running:
        response = httpx.post(running.mcp_url, json=INIT, headers=MCP_HEADERS, timeout=30)
        assert response.status_code == 200, response.text
