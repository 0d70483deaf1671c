"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests, scriptable per test.

It serves ``GET /v1/models`` and ``POST /v1/chat/completions`` from a thread and
reports ``usage.prompt_tokens = overhead + round(chars_of_messages * true_ratio)``,
so calibration against it should recover ``true_ratio`` (times the safety margin).
Set ``mode`` to make it fail: ``"500"``, ``"nonjson"``, ``"empty"``, ``"no_usage"``,
``"no_choices"`` or ``"hang"`` (sleeps until released or stopped).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[list[dict[str, str]]], str]


@dataclass
class Recorded:
    """One request the fake received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeState:
    """What the fake answers; tests change these fields between calls."""

    models: list[str] = field(default_factory=lambda: ["fake-model-a"])
    true_ratio: float = 0.25
    overhead: int = 17
    mode: str = ""
    reply: Reply | None = None
    reasoning: str = ""  # sent as the message's reasoning_content, as servers split it off
    requests: list[Recorded] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def chats(self) -> list[Recorded]:
        """The chat completion requests received so far."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]


class FakeOpenAI:
    """Start with ``with FakeOpenAI() as fake:``; ``fake.base_url`` ends in ``/v1``."""

    def __init__(self) -> None:
        self.state = FakeState()
        state = self.state

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output quiet."""

            def do_GET(self) -> None:
                """Serve /v1/models."""
                self._record(None)
                if self._failed():
                    return
                if self.path.rstrip("/") != "/v1/models":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                data = [{"id": m, "object": "model", "owned_by": "fake"} for m in state.models]
                self._send(200, {"object": "list", "data": data})

            def do_POST(self) -> None:
                """Serve /v1/chat/completions."""
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                self._record(body)
                if self._failed():
                    return
                if self.path.rstrip("/") != "/v1/chat/completions" or not isinstance(body, dict):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                self._send(200, _completion(state, body))

            def _record(self, body: Any) -> None:
                """Remember the request for the test to inspect."""
                headers = {k.lower(): v for k, v in self.headers.items()}
                state.requests.append(Recorded(self.command, self.path, headers, body))

            def _failed(self) -> bool:
                """Answer per the failure mode, if one is set."""
                mode = state.mode
                if mode == "500":
                    self._send(500, {"error": {"message": "model crashed"}})
                elif mode == "nonjson":
                    self._send_raw(200, b"<html>not json</html>", "text/html")
                elif mode == "hang":
                    state.release.wait(30)
                    self._send(504, {"error": {"message": "released"}})
                else:
                    return False
                return True

            def _send(self, status: int, payload: Any) -> None:
                """Send a JSON answer."""
                self._send_raw(status, json.dumps(payload).encode(), "application/json")

            def _send_raw(self, status: int, data: bytes, ctype: str) -> None:
                """Send bytes with a content type."""
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (timeout test)
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Release hanging requests and shut down."""
        self.state.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def prompt_tokens(state: FakeState, messages: list[dict[str, str]]) -> int:
    """The prompt tokens the fake reports: fixed overhead plus characters times the ratio."""
    chars = sum(len(m.get("content", "")) for m in messages)
    return state.overhead + round(chars * state.true_ratio)


def _completion(state: FakeState, body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion answer in the OpenAI shape, per the state's mode."""
    messages = body.get("messages", [])
    if state.mode == "no_choices":
        return {"object": "chat.completion", "choices": []}
    if state.mode == "empty":
        text = ""
    elif state.reply is not None:
        text = state.reply(messages)
    elif body.get("max_tokens") == 1:
        text = "The"
    else:
        text = f"Summary of {len(messages)} messages: decisions kept, paths kept."
    answer: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": body.get("model") or state.models[0],
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": text}
                | ({"reasoning_content": state.reasoning} if state.reasoning else {}),
            }
        ],
    }
    if state.mode != "no_usage":
        answer["usage"] = {
            "prompt_tokens": prompt_tokens(state, messages),
            "completion_tokens": max(1, len(text.split())),
        }
    return answer
