"""stdio: every request that has an id gets an answer, even one the SDK cannot read.

The SDK's reader drops a line that is not valid JSON-RPC 2.0 (a BOM, an array of
params, a lone surrogate), leaving the client waiting. Each line is checked first:
accepted lines pass unchanged, others get a JSON-RPC error with their id (or null) and
a line on stderr; notifications are only logged. The SDK cancels the requests still
running at the end of input, losing their answers and some of their work, so the end
is passed on only once every request read has been answered or cancelled.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import AsyncIterator
from io import TextIOWrapper
from typing import Any, cast

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage

log = logging.getLogger("context_window.server.stdio")

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
_BOM = "\ufeff"


def screen(line: str) -> tuple[types.JSONRPCMessage | None, types.JSONRPCError | None]:
    """(the message, None) if the SDK will accept ``line``, else (None, the error to
    answer); (None, None) when there is nothing to answer."""
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:  # pydantic's ValidationError is a ValueError
        pass
    else:
        # An id the SDK cannot take (9.5, true) would be a notification it never answers.
        if not isinstance(message, types.JSONRPCNotification) or '"id"' not in line:
            return message, None
        try:
            raw = json.loads(line)
        except (ValueError, RecursionError):
            raw = None
        if not (isinstance(raw, dict) and "id" in raw):
            return message, None
    code, why, rid = _diagnose(line)
    if rid is _NOTIFICATION:
        log.warning("dropped a notification that is not valid JSON-RPC 2.0: %s", why)
        return None, None
    log.warning("answered an unreadable request with an error: %s", why)
    request_id = rid if _usable_id(rid) else None
    error = types.ErrorData(code=code, message=why)
    return None, types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)


_NOTIFICATION = object()  # the line is a message without an id


def _usable_id(rid: Any) -> bool:
    return isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))


def _diagnose(line: str) -> tuple[int, str, Any]:
    """(error code, reason, the id or _NOTIFICATION) for a line the SDK rejects."""
    text = line.strip()
    bom = text.startswith(_BOM)
    try:
        message = json.loads(text.lstrip(_BOM))
    except ValueError:
        return PARSE_ERROR, "Parse error: the line is not a JSON value", None
    except RecursionError:
        return PARSE_ERROR, "Parse error: the line nests values too deeply to read", None
    if isinstance(message, list):
        return (
            INVALID_REQUEST,
            "Invalid Request: batches are not supported; one message a line",
            None,
        )
    if not isinstance(message, dict):
        return INVALID_REQUEST, "Invalid Request: a message must be a JSON object", None
    rid = message.get("id", _NOTIFICATION)
    if bom:
        return (
            PARSE_ERROR,
            "Parse error: a byte order mark precedes the message; send plain UTF-8",
            rid,
        )
    if message.get("jsonrpc") != "2.0":
        return INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', rid
    if rid is not _NOTIFICATION and not _usable_id(rid):
        return INVALID_REQUEST, "Invalid Request: an id must be a string or an integer", rid
    if "method" in message and not isinstance(message["method"], str):
        return INVALID_REQUEST, 'Invalid Request: "method" must be a string', rid
    if "params" in message and not isinstance(message["params"], dict | None):
        return INVALID_PARAMS, 'Invalid params: "params" must be an object', rid
    try:
        json.dumps(message, ensure_ascii=False).encode("utf-8")
    except RecursionError:
        return INVALID_PARAMS, "Invalid params: a value nests too deeply to read", rid
    except UnicodeEncodeError:
        return INVALID_PARAMS, "Invalid params: a string holds a lone surrogate (not Unicode)", rid
    return (
        INVALID_REQUEST,
        "Invalid Request: not a JSON-RPC 2.0 request, response or notification",
        rid,
    )


class _Unowned(TextIOWrapper):
    """A text layer over stdin's buffer that never closes that buffer."""

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.detach()


class ScreenedLines:
    """The lines of stdin that the SDK will accept; errors for the others, to be sent."""

    def __init__(self) -> None:
        self.errors_in, self.errors = anyio.create_memory_object_stream[types.JSONRPCError](64)
        self.unanswered: set[types.RequestId] = set()
        self._all_answered = anyio.Event()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        stdin = _Unowned(sys.stdin.buffer, encoding="utf-8", errors="replace")
        async with self.errors_in:
            # Abandoned on cancel: a stop (stdout gone) must not wait for the client's next line.
            while line := await anyio.to_thread.run_sync(stdin.readline, abandon_on_cancel=True):
                if not line.strip():
                    continue
                message, error = screen(line)
                if isinstance(message, types.JSONRPCRequest):
                    self.unanswered.add(coerce_request_id(message.id))
                elif isinstance(message, types.JSONRPCNotification) and (
                    message.method == "notifications/cancelled"  # the SDK answers none
                ):
                    self.answered(cancelled_request_id_from_params(message.params))
                if message is not None:
                    yield line
                elif error is not None:
                    await self.errors_in.send(error)
        while self.unanswered:
            self._all_answered = anyio.Event()
            await self._all_answered.wait()

    def answered(self, request_id: types.RequestId | None) -> None:
        """Cross ``request_id`` off, matched as the SDK matches ids ("7" is 7); the end of
        input waits for none to be left."""
        if request_id is not None:
            self.unanswered.discard(coerce_request_id(request_id))
        if not self.unanswered:
            self._all_answered.set()


class _Answers:
    """The server's write stream, telling ``lines`` of each answer that goes out."""

    def __init__(self, inner: Any, lines: ScreenedLines) -> None:
        self.inner, self.lines = inner, lines

    async def send(self, item: SessionMessage) -> None:
        await self.inner.send(item)
        if isinstance(item.message, types.JSONRPCResponse | types.JSONRPCError):
            self.lines.answered(item.message.id)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _Answers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def serve_stdio(run: Any, options: Any) -> None:
    """Serve over stdin/stdout: ``run(read, write, options)`` is the SDK server's run."""
    lines = ScreenedLines()
    async with stdio_server(stdin=cast(Any, lines)) as (read_stream, write_stream):

        async def answer_errors() -> None:
            async with lines.errors:
                async for error in lines.errors:
                    await write_stream.send(SessionMessage(error))

        async with anyio.create_task_group() as tg:
            tg.start_soon(answer_errors)
            await run(read_stream, _Answers(write_stream, lines), options)
            tg.cancel_scope.cancel()
