"""Streamable HTTP: ``/mcp`` behind Host/Origin checks and an optional token, plus /health.

The SDK does the protocol, the DNS-rebinding checks and the body limit; this module
sets them from ``Settings``, adds the bearer token, the health route and the session
guard, and runs uvicorn logging to stderr.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import socket
import time
from collections import OrderedDict
from typing import Any

import anyio
import uvicorn
from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from context_window.config import Settings, bare_host, is_wildcard, url_host
from context_window.errors import ConfigError
from context_window.server.engine import SAVE_SECONDS, Engine
from context_window.version import __version__

log = logging.getLogger("context_window.server.http")

MCP_PATH = "/mcp"
HEALTH_PATH = "/health"
# Inline doc_ingest text may be up to 20,000,000 characters; JSON escaping adds a little.
MAX_BODY_BYTES = 32 * 1024 * 1024
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_REALM = 'Bearer realm="context-window"'


def is_loopback(host: str) -> bool:
    """Whether a bind host only accepts connections from this machine."""
    bare = bare_host(host).lower()
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def allowed_host_names(settings: Settings) -> list[str]:
    """Host names a client may use to reach this server (before the ``:port`` part)."""
    names = list(LOOPBACK_NAMES)
    extra: list[str] = []
    if is_wildcard(settings.host):
        hostname = socket.gethostname()
        extra = [hostname, socket.getfqdn(hostname)]
    else:  # the address bound, loopback ones such as 127.0.0.2 included
        extra = [settings.host]
    for name in extra:
        if name and url_host(name) not in names:
            names.append(url_host(name))
    return names


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """The SDK's Host/Origin allow-lists; off only for a public bind guarded by a token."""
    if settings.http_token and not is_loopback(settings.host):
        # A public bind's names are unknowable; its required token defeats DNS rebinding.
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = allowed_host_names(settings)
    origins = [
        f"{scheme}://{name}{port}"
        for name in names
        for scheme in ("http", "https")
        for port in ("", ":*")
    ]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}{port}" for name in names for port in ("", ":*")],
        allowed_origins=origins,
    )


def bind_warning(settings: Settings) -> str | None:
    """The warning to log for a bind reachable from other machines without a token, if any."""
    if is_loopback(settings.host) or settings.http_token:
        return None
    return (
        f"HTTP is bound to {settings.host}, reachable from other machines, and no --http-token "
        "is set: anyone who can reach this port can read and write every session and document. "
        "Set --http-token (CTX_HTTP_TOKEN) or bind 127.0.0.1."
    )


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


class BearerAuth:
    """ASGI middleware: every path except the open ones needs ``Authorization: Bearer``."""

    def __init__(self, app: ASGIApp, token: str, open_paths: frozenset[str]) -> None:
        self.app = app
        self.open_paths = open_paths
        self._expected = token.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass lifespan, open paths and authorized requests through; answer 401 otherwise."""
        if scope["type"] == "lifespan" or (
            scope["type"] == "http" and scope["path"] in self.open_paths
        ):
            await self.app(scope, receive, send)
            return
        supplied = bearer_token(Headers(scope=scope).get("authorization"))
        # Starlette decodes headers as latin-1; back to the raw bytes, compared in constant time.
        if supplied is not None and hmac.compare_digest(supplied.encode("latin-1"), self._expected):
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # a websocket: no route here takes one, refuse it anyway
            await send({"type": "websocket.close", "code": 1008})
            return
        reason = "missing" if supplied is None else "wrong"
        client = scope.get("client")
        peer = f"{client[0]}:{client[1]}" if client else "unknown peer"
        log.warning(
            "refused %s %s from %s: %s bearer token", scope["method"], scope["path"], peer, reason
        )
        challenge = _REALM if supplied is None else f'{_REALM}, error="invalid_token"'
        response = JSONResponse(
            {"error": "unauthorized", "detail": "send Authorization: Bearer <the server's token>"},
            status_code=401,
            headers={"WWW-Authenticate": challenge},
        )
        await response(scope, receive, send)


MAX_SESSIONS = 1000  # open MCP sessions in all; past it the least recently used is closed


class SessionGuard:
    """ASGI middleware on /mcp: no client can exhaust the MCP sessions.

    The SDK would keep 10,000 sessions for 30 idle minutes, then answer 503. Here a
    client may hold ``per_client`` sessions and all ``total``: one more closes the least
    recently used (the client's, else anyone's). Too many opening requests at once: 429.
    """

    def __init__(self, app: ASGIApp, mcp: MCPServer, per_client: int, total: int) -> None:
        self.app = app
        self.mcp = mcp
        self.per_client = per_client
        self.total = total
        self.lru: OrderedDict[str, str] = OrderedDict()  # session id -> client, oldest first
        self.opening: dict[str, int] = {}  # client -> opening requests in flight

    def _open_ids(self) -> dict[str, Any]:
        """The SDK's open sessions by id (its manager has no public view of them)."""
        manager = self.mcp.session_manager
        return dict(getattr(manager, "_server_instances", {}))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != MCP_PATH:
            await self.app(scope, receive, send)
            return
        if scope["method"] == "POST":  # counted once its body is here: a stalled upload is not
            body = await read_body(scope, receive, send)
            if body is None:
                return
            receive = replay(body, receive)
        sid = Headers(scope=scope).get("mcp-session-id")
        if sid is not None:
            if sid in self.lru:
                self.lru.move_to_end(sid)
            await self.app(scope, receive, send)
            return
        client = _client_of(scope)
        if self.opening.get(client, 0) >= self.per_client:
            await JSONResponse(
                {"error": "too many sessions being opened at once from this client"}, 429
            )(scope, receive, send)
            return
        self.opening[client] = self.opening.get(client, 0) + 1
        in_flight = True

        def opened() -> None:
            """This request no longer counts as opening (its session, if any, is in lru)."""
            nonlocal in_flight
            if in_flight:
                in_flight = False
                self.opening[client] -= 1
                if not self.opening[client]:
                    del self.opening[client]

        try:
            await self._make_room(client)

            async def record(message: Any) -> None:
                if message["type"] == "http.response.start":
                    for name, value in message.get("headers", []):
                        if name.lower() == b"mcp-session-id":
                            self.lru[value.decode("latin-1")] = client
                    # Counted once: a client may send again on these headers (seen under load).
                    opened()
                await send(message)

            await self.app(scope, receive, record)
        finally:
            opened()

    async def _make_room(self, client: str) -> None:
        """Close sessions until ``client`` may open one more (see the class docstring)."""
        open_ids = self._open_ids()
        for gone in [s for s in self.lru if s not in open_ids]:  # expired, deleted, ended
            del self.lru[gone]
        pending = self.opening.get(client, 1) - 1  # others of this client, not yet recorded
        while True:
            own = [s for s, c in self.lru.items() if c == client]
            if own and len(own) + pending >= self.per_client:
                victim = own[0]
            elif self.lru and len(self.lru) + sum(self.opening.values()) > self.total:
                victim = next(iter(self.lru))
            else:
                return
            del self.lru[victim]
            transport = open_ids.get(victim)
            if transport is not None:
                log.info("closing MCP session %s…: its client opened too many", victim[:8])
                await transport.terminate()


TOO_LARGE = (
    f"the request body is over the {MAX_BODY_BYTES:,}-byte limit; for a large text, save it "
    "in a file under an ingest root and pass doc_ingest file_path instead of text"
)


async def read_body(scope: Scope, receive: Receive, send: Send) -> bytes | None:
    """The whole request body, or None when refused (413) or the client went away."""
    declared = Headers(scope=scope).get("content-length", "")
    parts: list[bytes] = []
    size = int(declared) if declared.isdigit() else 0
    received = 0
    while size <= MAX_BODY_BYTES:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        size = received = received + len(parts[-1])
        if not message.get("more_body", False) and size <= MAX_BODY_BYTES:
            return b"".join(parts)
    await JSONResponse({"error": "request body too large", "detail": TOO_LARGE}, 413)(
        scope, receive, send
    )
    return None


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` once, then whatever the client sends next."""
    given = False

    async def again() -> Any:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again


def _client_of(scope: Scope) -> str:
    """The client's address: what "one client" means without accounts."""
    peer = scope.get("client")
    return str(peer[0]) if peer else "unknown"


def build_http_app(app: MCPServer, engine: Engine) -> ASGIApp:
    """The ASGI app: SDK Streamable HTTP at /mcp, GET /health, and the token check if configured."""
    settings = engine.settings

    async def health(_: Request) -> Response:
        return JSONResponse({"name": app.name, "version": __version__, "status": "ok"})

    app.custom_route(HEALTH_PATH, methods=["GET"], include_in_schema=False)(health)
    starlette_app = app.streamable_http_app(
        streamable_http_path=MCP_PATH,
        max_request_body_size=MAX_BODY_BYTES,
        transport_security=transport_security(settings),
        host=settings.host,
        session_idle_timeout=settings.http_session_idle,
        max_sessions=2 * MAX_SESSIONS,  # never reached: SessionGuard closes sessions first
    )
    guarded: ASGIApp = SessionGuard(
        starlette_app, app, settings.http_sessions_per_client, MAX_SESSIONS
    )
    if not settings.http_token:
        return guarded
    return BearerAuth(guarded, settings.http_token, frozenset({HEALTH_PATH}))


def uvicorn_config(asgi: ASGIApp, settings: Settings) -> uvicorn.Config:
    """Uvicorn settings: our bind, logs through the root (stderr) handler, no access log."""
    return uvicorn.Config(
        asgi,
        host=bare_host(settings.host),
        port=settings.port,
        log_config=None,  # uvicorn's default config sends the access log to stdout
        access_log=False,
        lifespan="on",
        server_header=False,
    )


def serve_http(app: MCPServer, engine: Engine) -> None:
    """Serve ``app`` over Streamable HTTP until interrupted; the lifespan runs inside."""
    settings = engine.settings
    try:  # a host nothing resolves: one line naming it, not uvicorn's bare errno
        socket.getaddrinfo(bare_host(settings.host) or None, settings.port)
    except (OSError, UnicodeError) as exc:
        raise ConfigError(
            f"cannot serve HTTP on host {settings.host!r}: {getattr(exc, 'strerror', exc)} "
            "(--host or CTX_HTTP_HOST chooses another)"
        ) from None
    host = bare_host(settings.host)
    try:  # bound as uvicorn binds: a port in use is one line, not uvicorn's exit status 3
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, settings.port))
    except OSError as exc:
        raise ConfigError(
            f"cannot serve HTTP on {url_host(host)}:{settings.port}: {exc.strerror or exc} "
            "(--port or CTX_HTTP_PORT chooses another)"
        ) from None
    warning = bind_warning(settings)
    if warning:
        log.warning("%s", warning)
    if settings.http_token:
        log.info(
            "HTTP requires Authorization: Bearer <token> on %s; %s stays open",
            MCP_PATH,
            HEALTH_PATH,
        )
        if not is_loopback(settings.host):
            log.info("Host/Origin allow-lists are off for this public bind; the token guards it")
    server = uvicorn.Server(uvicorn_config(build_http_app(app, engine), settings))

    async def run() -> None:
        try:
            await server.serve()  # on SIGTERM it ends by raising the signal again: finally
        finally:
            stopped = time.monotonic()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(engine.save_on_stop, stopped + SAVE_SECONDS)
                if engine.built is not None:
                    await engine.built.aclose()

    anyio.run(run)
