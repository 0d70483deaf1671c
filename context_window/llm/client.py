"""OpenAI-compatible chat client for local model servers, with failures mapped once.

One long-lived ``httpx.AsyncClient``; every failure becomes an :class:`UpstreamError`
with a short reason and starts a ``cooldown`` in which calls fail at once, so a
200-chunk document does not wait on 200 timeouts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

if TYPE_CHECKING:
    import httpx

from context_window.errors import UpstreamError

T = TypeVar("T")
_SNIPPET = 160  # characters of an error body worth quoting in a reason


@dataclass(frozen=True)
class ChatResult:
    """One chat completion: the answer and the prompt tokens the server reported."""

    text: str
    prompt_tokens: int | None
    model: str


class LLMClient:
    """Client for one OpenAI-compatible endpoint (``.../v1``) with a failure cooldown."""

    def __init__(
        self,
        base_url: str,
        model: str = "",
        api_key: str = "",
        timeout: float = 120.0,
        cooldown: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._model = model
        self._timeout = timeout
        self._cooldown = cooldown
        self._clock = clock
        self._failed_at: float | None = None
        self._last_error = ""
        self._headers = {"Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._transport = transport
        self._http: httpx.AsyncClient | None = None  # made on the first request (see _client)

    def _client(self) -> httpx.AsyncClient:
        """The HTTP client, made on first use (httpx is ~40 ms of a ~0.9 s start)."""
        if self._http is None:
            import httpx

            self._http = httpx.AsyncClient(
                timeout=httpx.Timeout(self._timeout),
                headers=self._headers,
                transport=self._transport,
            )
        return self._http

    @property
    def base_url(self) -> str:
        """The endpoint's base URL, without a trailing slash."""
        return self._base

    @property
    def timeout(self) -> float:
        """The longest one request may take, in seconds."""
        return self._timeout

    @property
    def model(self) -> str:
        """The configured model id; empty means whatever the server has loaded."""
        return self._model

    @property
    def last_error(self) -> str:
        """The reason of the most recent failure; empty after a success."""
        return self._last_error

    def cooldown_remaining(self) -> float:
        """Seconds until the endpoint is tried again after a failure (0 when available)."""
        if self._failed_at is None:
            return 0.0
        return max(0.0, self._failed_at + self._cooldown - self._clock())

    def available(self) -> bool:
        """Whether a call would reach the network now (not cooling down after a failure)."""
        return self.cooldown_remaining() <= 0.0

    def describe(self) -> str:
        """One line for status output: the endpoint and its state."""
        where = self._base + (f" (model {self._model})" if self._model else "")
        remaining = self.cooldown_remaining()
        if remaining > 0:
            return f"{where}: cooling down {math.ceil(remaining)}s after: {self._last_error}"
        if self._last_error:
            return f"{where}: last call failed: {self._last_error}"
        return where

    async def chat(
        self,
        messages: list[dict[str, str]],
        max_tokens: int,
        temperature: float = 0.2,
        *,
        allow_empty: bool = False,
    ) -> ChatResult:
        """Post ``messages`` to ``/chat/completions``; ``allow_empty`` accepts a blank answer."""
        body: dict[str, Any] = {
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": False,
        }
        if self._model:
            body["model"] = self._model
        return await self._call(
            "POST", "/chat/completions", body, lambda data: self._chat_result(data, allow_empty)
        )

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text from ``/embeddings``, in the order given."""
        body: dict[str, Any] = {"input": texts}
        if self._model:
            body["model"] = self._model
        return await self._call("POST", "/embeddings", body, lambda d: _vectors(d, len(texts)))

    async def list_models(self) -> list[str]:
        """Model ids the endpoint lists at ``GET /models``."""
        return await self._call("GET", "/models", None, _model_ids)

    async def aclose(self) -> None:
        """Close the underlying HTTP connections."""
        if self._http is not None:
            await self._http.aclose()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None, parse: Callable[[Any], T]
    ) -> T:
        """Send one request and parse it; any failure starts the cooldown and is raised."""
        remaining = self.cooldown_remaining()
        if remaining > 0 and self._failed_at is not None:
            ago = self._clock() - self._failed_at
            raise UpstreamError(
                f"skipped: endpoint failed {ago:.0f}s ago ({self._last_error}); "
                f"retrying in {math.ceil(remaining)}s"
            )
        try:
            result = parse(await self._send(method, self._base + path, body))
        except UpstreamError as exc:
            self._failed_at, self._last_error = self._clock(), str(exc)
            raise
        self._failed_at, self._last_error = None, ""
        return result

    async def _send(self, method: str, url: str, body: dict[str, Any] | None) -> Any:
        """The decoded JSON answer of one request; the only place httpx errors are mapped."""
        import httpx

        client = self._client()
        try:
            with anyio.fail_after(self._timeout):  # bounds the whole exchange, not each read
                response = await client.request(method, url, json=body)
        except (TimeoutError, httpx.TimeoutException):
            raise UpstreamError(f"timed out after {self._timeout:g}s at {url}") from None
        except httpx.ConnectError as exc:
            raise UpstreamError(f"unreachable at {self._base}: {_connect_reason(exc)}") from None
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            raise UpstreamError(
                f"request to {url} failed: {_short(str(exc)) or type(exc).__name__}"
            ) from None
        if not response.is_success:
            detail = _short(response.text)
            raise UpstreamError(
                f"HTTP {response.status_code} from {url}" + (f": {detail}" if detail else "")
            )
        try:
            return response.json()
        except ValueError:
            raise UpstreamError(f"answer was not JSON (from {url})") from None

    def _chat_result(self, data: Any, allow_empty: bool) -> ChatResult:
        """A ChatResult from a decoded chat completion, or UpstreamError naming what is missing."""
        try:
            message = data["choices"][0]["message"]
            content = message.get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise UpstreamError("answer had no choices[0].message") from None
        if content is not None and not isinstance(content, str):
            raise UpstreamError("answer content was not text")
        said = (content or "").strip()
        text = _after_thoughts(said)
        if not text and not allow_empty:
            thought = text != said or message.get("reasoning_content") or message.get("reasoning")
            raise UpstreamError(_THOUGHTS_ONLY if thought else "empty answer")
        usage = data.get("usage") if isinstance(data, dict) else None
        usage = usage if isinstance(usage, dict) else {}
        model = data.get("model") if isinstance(data, dict) else None
        return ChatResult(
            text=text,
            prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
            model=model if isinstance(model, str) and model else self._model,
        )


_THOUGHTS_ONLY = (
    "the model only reasoned (its thoughts ran to max_tokens, with no answer): load a "
    "model that answers without reasoning, or turn reasoning off in the model server"
)


def _after_thoughts(text: str) -> str:
    """A reasoning model's answer without its thoughts: what follows ``</think>`` (the chat
    template may have opened the block itself); nothing while the block is still open."""
    _, closed, answer = text.partition("</think>")
    if closed:
        return answer.strip()
    return "" if text.startswith("<think>") else text


def _model_ids(data: Any) -> list[str]:
    """The ``id`` of every entry of an OpenAI ``/models`` answer."""
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise UpstreamError("answer had no model list (data)")
    return [e["id"] for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)]


def _vectors(data: Any, count: int) -> list[list[float]]:
    """The ``embedding`` of each ``data`` item of an OpenAI embeddings answer, by ``index``."""
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list) or len(items) != count:
        raise UpstreamError(f"answer did not hold {count} embeddings (data)")
    try:
        ordered = sorted(items, key=lambda item: int(item.get("index", 0)))
        vectors = [[float(x) for x in item["embedding"]] for item in ordered]
    except (AttributeError, KeyError, TypeError, ValueError):
        raise UpstreamError("answer held an embedding that is not a list of numbers") from None
    if len({len(v) for v in vectors}) > 1 or not vectors[0]:
        raise UpstreamError("answer held embeddings of different or zero lengths")
    return vectors


def _int_or_none(value: Any) -> int | None:
    """An integer usage count, or None when the server did not report one."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _connect_reason(exc: httpx.ConnectError) -> str:
    """'connection refused' and friends instead of an errno dump."""
    text = str(exc)
    cause: BaseException | None = exc
    while cause is not None:  # httpcore wraps the socket error: "All connection attempts failed"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, OSError) and cause.strerror:
            text = cause.strerror
        cause = cause.__cause__ or cause.__context__
    low = text.lower()
    for known in ("connection refused", "name or service not known", "no route to host"):
        if known in low:
            return known
    if "nodename nor servname" in low or "name resolution" in low:
        return "name or service not known"
    return _short(text) or "connection failed"


def _short(text: str) -> str:
    """First line-collapsed characters of ``text``, enough to quote in a reason."""
    flat = " ".join(text.split())
    return flat if len(flat) <= _SNIPPET else flat[: _SNIPPET - 1] + "…"
