"""LLMClient against a real HTTP fake: requests, error mapping, and the cooldown."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai_fake import FakeOpenAI

from context_window.errors import UpstreamError
from context_window.llm.client import ChatResult, LLMClient

HELLO = [{"role": "user", "content": "Hello there."}]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def closed_port_url() -> str:
    """A loopback URL on which nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.mark.anyio
async def test_chat_posts_openai_request_and_reads_usage(fake: FakeOpenAI) -> None:
    async with LLMClient(fake.base_url) as client:
        result = await client.chat(HELLO, max_tokens=50, temperature=0.3)
    assert isinstance(result, ChatResult)
    assert result.text.startswith("Summary of 1 messages")
    assert result.prompt_tokens == 17 + round(len("Hello there.") * 0.25)
    assert result.model == "fake-model-a"
    (request,) = fake.state.requests
    assert request.method == "POST"
    assert request.path == "/v1/chat/completions"
    assert request.body["messages"] == HELLO
    assert request.body["max_tokens"] == 50
    assert request.body["temperature"] == 0.3


@pytest.mark.anyio
async def test_model_omitted_when_empty_and_sent_when_configured(fake: FakeOpenAI) -> None:
    async with LLMClient(fake.base_url) as client:
        await client.chat(HELLO, max_tokens=5)
    async with LLMClient(fake.base_url + "/", model="qwen2.5-7b") as client:
        result = await client.chat(HELLO, max_tokens=5)
    first, second = fake.state.requests
    assert "model" not in first.body
    assert second.body["model"] == "qwen2.5-7b"
    assert result.model == "qwen2.5-7b"


@pytest.mark.anyio
async def test_bearer_header_only_with_api_key(fake: FakeOpenAI) -> None:
    async with LLMClient(fake.base_url, api_key="sk-local-123") as client:
        await client.chat(HELLO, max_tokens=5)
        await client.list_models()
    async with LLMClient(fake.base_url) as client:
        await client.chat(HELLO, max_tokens=5)
    with_key_chat, with_key_models, without = fake.state.requests
    assert with_key_chat.headers["authorization"] == "Bearer sk-local-123"
    assert with_key_models.headers["authorization"] == "Bearer sk-local-123"
    assert "authorization" not in without.headers


@pytest.mark.anyio
async def test_list_models(fake: FakeOpenAI) -> None:
    fake.state.models = ["llama-3.2-3b", "nomic-embed"]
    async with LLMClient(fake.base_url) as client:
        assert await client.list_models() == ["llama-3.2-3b", "nomic-embed"]
    assert fake.state.requests[0].method == "GET"
    assert fake.state.requests[0].path == "/v1/models"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("500", "HTTP 500 from http://127.0.0.1:"),
        ("nonjson", "answer was not JSON"),
        ("empty", "empty answer"),
        ("no_choices", "answer had no choices[0].message"),
    ],
)
async def test_bad_answers_map_to_upstream_error(fake: FakeOpenAI, mode: str, reason: str) -> None:
    fake.state.mode = mode
    async with LLMClient(fake.base_url) as client:
        with pytest.raises(UpstreamError, match=reason.replace("[", r"\[").replace(".", r"\.")):
            await client.chat(HELLO, max_tokens=5)
        assert reason in client.last_error
        assert not client.available()


@pytest.mark.anyio
async def test_http_error_quotes_the_body(fake: FakeOpenAI) -> None:
    fake.state.mode = "500"
    async with LLMClient(fake.base_url) as client:
        with pytest.raises(UpstreamError) as info:
            await client.chat(HELLO, max_tokens=5)
    assert "model crashed" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.anyio
async def test_connection_refused_names_the_endpoint() -> None:
    url = closed_port_url()
    async with LLMClient(url) as client:
        with pytest.raises(UpstreamError) as info:
            await client.list_models()
    assert str(info.value) == f"unreachable at {url}: connection refused"


@pytest.mark.anyio
async def test_timeout(fake: FakeOpenAI) -> None:
    fake.state.mode = "hang"
    async with LLMClient(fake.base_url, timeout=0.3) as client:
        with pytest.raises(UpstreamError, match=r"^timed out after 0\.3s"):
            await client.chat(HELLO, max_tokens=5)


@pytest.mark.anyio
async def test_empty_allowed_when_asked(fake: FakeOpenAI) -> None:
    fake.state.mode = "empty"
    async with LLMClient(fake.base_url) as client:
        result = await client.chat(HELLO, max_tokens=1, allow_empty=True)
    assert result.text == ""
    assert result.prompt_tokens is not None


@pytest.mark.anyio
async def test_a_reasoning_models_thoughts_are_no_part_of_the_answer(fake: FakeOpenAI) -> None:
    answers = iter(
        [
            "<think>\nThe user wants a summary.\n</think>\n\nThe build failed on libfoo.",
            "The template opened the block.\n</think>\nThe build failed on libfoo.",
            "The build failed on libfoo.",  # no reasoning: kept as it is
            "<think>\nLet me think about the notes one by one. First",  # cut at max_tokens
            "<think>\nThe calibration prompt is short",
        ]
    )
    fake.state.reply = lambda _messages: next(answers)
    async with LLMClient(fake.base_url, cooldown=0.0) as client:  # each call goes out
        for _ in range(3):
            assert (await client.chat(HELLO, max_tokens=50)).text == "The build failed on libfoo."
        with pytest.raises(UpstreamError, match=r"only reasoned .* turn reasoning off"):
            await client.chat(HELLO, max_tokens=50)
        result = await client.chat(HELLO, max_tokens=1, allow_empty=True)  # as calibration asks
        assert result.text == "" and result.prompt_tokens is not None
        fake.state.reply, fake.state.reasoning = lambda _messages: "", "The user wants"
        with pytest.raises(UpstreamError, match=r"only reasoned"):  # the server split it off
            await client.chat(HELLO, max_tokens=50)


@pytest.mark.anyio
async def test_missing_usage_is_none_not_an_error(fake: FakeOpenAI) -> None:
    fake.state.mode = "no_usage"
    async with LLMClient(fake.base_url) as client:
        result = await client.chat(HELLO, max_tokens=5)
    assert result.prompt_tokens is None


@pytest.mark.anyio
async def test_cooldown_skips_the_network_then_retries(fake: FakeOpenAI) -> None:
    clock = Clock()
    fake.state.mode = "500"
    async with LLMClient(fake.base_url, clock=clock) as client:
        assert client.available()
        with pytest.raises(UpstreamError, match="HTTP 500"):
            await client.chat(HELLO, max_tokens=5)
        assert len(fake.state.requests) == 1
        assert client.cooldown_remaining() == 15.0

        clock.now += 3
        fake.state.mode = ""
        with pytest.raises(UpstreamError) as info:
            await client.chat(HELLO, max_tokens=5)
        message = str(info.value)
        assert message.startswith("skipped: endpoint failed 3s ago (HTTP 500 from ")
        assert message.endswith("; retrying in 12s")
        with pytest.raises(UpstreamError, match=r"^skipped"):
            await client.list_models()
        assert len(fake.state.requests) == 1  # nothing reached the server
        assert "cooling down 12s" in client.describe()

        clock.now += 12
        assert client.available()
        result = await client.chat(HELLO, max_tokens=5)
        assert result.text
        assert len(fake.state.requests) == 2
        assert client.last_error == ""
        assert client.describe() == fake.base_url


@pytest.mark.anyio
async def test_cooldown_length_is_configurable(fake: FakeOpenAI) -> None:
    clock = Clock()
    fake.state.mode = "nonjson"
    async with LLMClient(fake.base_url, cooldown=2.0, clock=clock) as client:
        with pytest.raises(UpstreamError):
            await client.chat(HELLO, max_tokens=5)
        clock.now += 2.5
        with pytest.raises(UpstreamError, match="not JSON"):
            await client.chat(HELLO, max_tokens=5)
    assert len(fake.state.requests) == 2


@pytest.mark.anyio
async def test_injected_transport_is_used() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"data": [{"id": "m1"}, {"nope": 1}]})

    async with LLMClient("http://llm.invalid/v1", transport=httpx.MockTransport(handler)) as client:
        assert await client.list_models() == ["m1"]
    assert str(seen[0].url) == "http://llm.invalid/v1/models"


@pytest.mark.anyio
async def test_model_list_without_data_is_an_error() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"models": []}))
    async with LLMClient("http://llm.invalid/v1", transport=transport) as client:
        with pytest.raises(UpstreamError, match="no model list"):
            await client.list_models()


def test_describe_names_endpoint_and_model() -> None:
    client = LLMClient("http://localhost:1234/v1/", model="phi-3")
    assert client.describe() == "http://localhost:1234/v1 (model phi-3)"
    assert client.base_url == "http://localhost:1234/v1"
    assert client.model == "phi-3"


def test_starting_a_server_does_not_import_httpx(tmp_path: Path) -> None:
    """httpx is ~40 ms of a ~0.9 s start: it is imported when a model is first called."""
    script = (
        "import sys, pathlib\n"
        "from context_window.config import load_settings\n"
        "from context_window.server.app import build_server\n"
        "from context_window.service import Service\n"
        "settings = load_settings({'data_dir': pathlib.Path(sys.argv[1])}, environ={})\n"
        "assert settings.llm_enabled\n"
        "build_server(Service(settings))\n"
        "print('httpx' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
