"""Streamable HTTP transport: real subprocess servers on free 127.0.0.1 ports.

The server helpers here (``free_port``, ``http_server``) are shared with
test_docker.py and test_inspector.py.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp
import pytest
from helpers import INIT, MCP_HEADERS, Running, http_client, http_server, server_command, text_of

from context_window import __version__
from context_window.config import load_settings
from context_window.server.http import (
    MAX_BODY_BYTES,
    BearerAuth,
    allowed_host_names,
    bearer_token,
    bind_warning,
    is_loopback,
    is_wildcard,
    transport_security,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One loopback server without a token, shared by the read-mostly tests."""
    with http_server(tmp_path_factory.mktemp("http")) as running:
        yield running


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One loopback server that requires the token ``s3cret-token``."""
    with http_server(tmp_path_factory.mktemp("http-token"), "--http-token", "s3cret-token") as r:
        yield r


@pytest.mark.anyio
async def test_health(server: Running) -> None:
    response = httpx.get(f"{server.base}/health")
    assert response.status_code == 200
    assert response.json() == {"name": "context-window", "version": __version__, "status": "ok"}
    log = server.log()
    assert f"serving on {server.mcp_url}" in log and "Uvicorn running" in log
    async with http_client(server.mcp_url) as client:
        await client.list_tools()  # the Service is built a moment later
    # the server's lifespan ran under uvicorn: it calibrates once the Service is built
    with anyio.fail_after(20):
        while "calibration skipped" not in server.log():
            await anyio.sleep(0.05)
    assert server.stdout.read_bytes() == b""  # logs go to stderr only


def test_token_missing_or_wrong_is_401(token_server: Running) -> None:
    missing = httpx.post(token_server.mcp_url, json=INIT, headers=MCP_HEADERS)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = httpx.post(
        token_server.mcp_url,
        json=INIT,
        headers={**MCP_HEADERS, "Authorization": "Bearer s3cret-tokeN"},
    )
    assert wrong.status_code == 401
    assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
    other_scheme = httpx.post(
        token_server.mcp_url, json=INIT, headers={**MCP_HEADERS, "Authorization": "Basic eDp5"}
    )
    assert other_scheme.status_code == 401
    assert "s3cret" not in missing.text + wrong.text
    assert "s3cret" not in token_server.log()


def test_token_right_is_accepted(token_server: Running) -> None:
    ok = httpx.post(
        token_server.mcp_url,
        json=INIT,
        headers={**MCP_HEADERS, "Authorization": "Bearer s3cret-token"},
    )
    assert ok.status_code == 200
    assert "serverInfo" in ok.text


def test_health_is_open_and_says_nothing_secret(token_server: Running) -> None:
    response = httpx.get(f"{token_server.base}/health")
    assert response.status_code == 200
    assert set(response.json()) == {"name", "version", "status"}
    assert "s3cret" not in response.text


@pytest.mark.anyio
async def test_token_round_trip_with_mcp_client(token_server: Running) -> None:
    async with http_client(token_server.mcp_url, "s3cret-token") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "context_open" in names
        opened = await client.call_tool("context_open", {"session_id": "tok"})
        assert not opened.is_error


def test_bad_host_refused(server: Running) -> None:
    port = server.base.rsplit(":", 1)[1]
    response = httpx.post(
        server.mcp_url, json=INIT, headers={**MCP_HEADERS, "Host": f"evil.example:{port}"}
    )
    assert response.status_code in (421, 403)


def test_loopback_host_names_accepted(server: Running) -> None:
    port = server.base.rsplit(":", 1)[1]
    for name in ("localhost", "127.0.0.1", "[::1]"):
        response = httpx.post(
            server.mcp_url, json=INIT, headers={**MCP_HEADERS, "Host": f"{name}:{port}"}
        )
        assert response.status_code == 200, name


def test_bad_origin_refused(server: Running) -> None:
    response = httpx.post(
        server.mcp_url, json=INIT, headers={**MCP_HEADERS, "Origin": "http://evil.example"}
    )
    assert response.status_code == 403
    local = httpx.post(
        server.mcp_url, json=INIT, headers={**MCP_HEADERS, "Origin": "http://localhost:6274"}
    )
    assert local.status_code == 200


def test_oversized_body_refused(server: Running) -> None:
    pad = b"x" * MAX_BODY_BYTES
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "' + pad + b'"}}'
    response = httpx.post(server.mcp_url, content=body, headers=MCP_HEADERS, timeout=60)
    assert response.status_code == 413

    def chunked() -> Iterator[bytes]:  # no Content-Length: the limit counts what arrives
        mib = 1024 * 1024
        for _ in range(MAX_BODY_BYTES // mib + 2):
            yield b"x" * mib

    response = httpx.post(server.mcp_url, content=chunked(), headers=MCP_HEADERS, timeout=60)
    assert response.status_code == 413


def test_body_under_the_limit_reaches_the_protocol(server: Running) -> None:
    body = b"x" * (MAX_BODY_BYTES - 1024)
    response = httpx.post(server.mcp_url, content=body, headers=MCP_HEADERS, timeout=60)
    assert response.status_code == 400  # a JSON parse error, not 413
    assert "Parse error" in response.text


def test_declared_oversized_body_refused_before_reading(server: Running) -> None:
    headers = {**MCP_HEADERS, "Content-Length": str(MAX_BODY_BYTES + 1)}
    with socket.create_connection(("127.0.0.1", int(server.base.rsplit(":", 1)[1]))) as s:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        s.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n".encode())
        s.settimeout(10)
        assert s.recv(64).startswith(b"HTTP/1.1 413")


@pytest.mark.anyio
async def test_tool_call_round_trip(server: Running) -> None:
    async with http_client(server.mcp_url) as client:
        opened = await client.call_tool("context_open", {"session_id": "rt", "title": "Round"})
        assert not opened.is_error
        assert "rt" in text_of(opened)
        saved = await client.call_tool(
            "context_append", {"session_id": "rt", "text": "the answer is forty-two"}
        )
        assert not saved.is_error
        recalled = await client.call_tool("context_recall", {"session_id": "rt"})
        assert "forty-two" in text_of(recalled)
        missing = await client.call_tool("context_recall", {"session_id": "nope"})
        assert missing.is_error
        assert "context_open" in text_of(missing)


@pytest.mark.anyio
async def test_two_clients_see_each_others_writes(server: Running) -> None:
    async with http_client(server.mcp_url) as a, http_client(server.mcp_url) as b:
        await a.call_tool("context_open", {"session_id": "shared"})
        await b.call_tool("context_open", {"session_id": "shared"})
        await a.call_tool("context_append", {"session_id": "shared", "text": "alpha from A"})
        await b.call_tool("context_append", {"session_id": "shared", "text": "bravo from B"})
        seen_by_b = text_of(await b.call_tool("context_recall", {"session_id": "shared"}))
        seen_by_a = text_of(await a.call_tool("context_recall", {"session_id": "shared"}))
        for seen in (seen_by_a, seen_by_b):
            assert "alpha from A" in seen
            assert "bravo from B" in seen
        listed = text_of(await b.call_tool("context_list_sessions", {}))
        assert "shared" in listed


def test_a_port_in_use_is_one_line_naming_it(server: Running, tmp_path: Path) -> None:
    port = server.base.rsplit(":", 1)[1]
    args = ["--no-llm", "--data-dir", str(tmp_path), "--http", "--port", port]
    proc = subprocess.run(server_command(*args), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == (
        f"context-window: error: cannot serve HTTP on 127.0.0.1:{port}: Address already in "
        "use (--port or CTX_HTTP_PORT chooses another)"
    )


@pytest.mark.parametrize("host", ["no-such-host.invalid", "[::1", "local host"])
def test_a_host_nothing_resolves_is_one_line_naming_it(tmp_path: Path, host: str) -> None:
    args = ["--no-llm", "--data-dir", str(tmp_path), "--http", "--host", host, "--port", "0"]
    proc = subprocess.run(server_command(*args), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    last = proc.stderr.splitlines()[-1]
    assert last.startswith(f"context-window: error: cannot serve HTTP on host {host!r}: ")
    assert last.endswith("(--host or CTX_HTTP_HOST chooses another)")


def _settings(tmp_path: Path, **flags: Any) -> Any:
    return load_settings({"data_dir": tmp_path, **flags}, environ={})


@pytest.mark.parametrize(
    ("host", "token", "warns"),
    [
        ("127.0.0.1", "", False),
        ("localhost", "", False),
        ("::1", "", False),
        ("127.0.0.2", "", False),
        ("0.0.0.0", "", True),
        ("::", "", True),
        ("192.168.1.5", "", True),
        ("0.0.0.0", "t", False),
    ],
)
def test_bind_warning(tmp_path: Path, host: str, token: str, warns: bool) -> None:
    warning = bind_warning(_settings(tmp_path, host=host, http_token=token))
    assert (warning is not None) == warns
    if warning:
        assert "--http-token" in warning and host in warning


def test_non_loopback_bind_warns_in_stderr(tmp_path: Path) -> None:
    with http_server(tmp_path, host="0.0.0.0") as running:
        log = running.log()
    assert "WARNING" in log and "no --http-token" in log
    assert running.stdout.read_bytes() == b""


def test_loopback_and_wildcard_names() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("[::1]")
    assert is_loopback("localhost") and not is_loopback("0.0.0.0")
    assert not is_loopback("example.com") and not is_loopback("192.168.1.5")
    assert is_wildcard("0.0.0.0") and is_wildcard("::") and is_wildcard("")
    assert not is_wildcard("127.0.0.1")


def test_transport_security_lists(tmp_path: Path) -> None:
    v6 = transport_security(_settings(tmp_path, host="::1"))
    assert v6.enable_dns_rebinding_protection
    assert {"127.0.0.1:*", "localhost:*", "[::1]:*"} <= set(v6.allowed_hosts)
    assert "http://localhost:*" in v6.allowed_origins
    lan = _settings(tmp_path, host="192.168.1.5")
    assert "192.168.1.5" in allowed_host_names(lan)
    assert "192.168.1.5:*" in transport_security(lan).allowed_hosts
    public_with_token = transport_security(_settings(tmp_path, host="0.0.0.0", http_token="t"))
    assert not public_with_token.enable_dns_rebinding_protection
    assert transport_security(_settings(tmp_path, host="127.0.0.1", http_token="t")).allowed_hosts


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("Basic abc", None),
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
    ],
)
def test_bearer_token_parsing(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


@pytest.mark.anyio
async def test_bearer_auth_middleware_in_process() -> None:
    async def ok_app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    guarded = BearerAuth(ok_app, "tøken", frozenset({"/health"}))
    transport = httpx.ASGITransport(app=guarded)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/mcp")).status_code == 401
        utf8 = {"Authorization": "Bearer tøken".encode()}
        assert (await client.get("/mcp", headers=utf8)).status_code == 200
        shorter = {"Authorization": "Bearer tøk".encode()}
        assert (await client.get("/mcp", headers=shorter)).status_code == 401


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback")
def test_ipv6_loopback_bind(tmp_path: Path) -> None:
    with http_server(tmp_path, host="::1") as running:
        assert running.base.startswith("http://[::1]:")
        response = httpx.post(running.mcp_url, json=INIT, headers=MCP_HEADERS)
        assert response.status_code == 200
        port = running.base.rsplit(":", 1)[1]
        bad = httpx.post(
            running.mcp_url, json=INIT, headers={**MCP_HEADERS, "Host": f"evil.example:{port}"}
        )
        assert bad.status_code in (421, 403)


@pytest.mark.anyio
async def test_stdio_unaffected(tmp_path: Path) -> None:
    args = ["-m", "context_window", "--no-llm", "--data-dir", str(tmp_path / "data")]
    params = mcp.StdioServerParameters(command=sys.executable, args=args)
    async with mcp.Client(params) as client:
        assert "context_open" in {t.name for t in (await client.list_tools()).tools}
        opened = await client.call_tool("context_open", {"session_id": "pipes"})
        assert not opened.is_error and "pipes" in text_of(opened)
