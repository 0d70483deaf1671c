"""Shared fixtures: real settings on a temporary data dir, an in-memory MCP client, and a
real embedding model behind a local endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from benchmarks.minilm import Endpoint, serve
from context_window.config import Settings, load_settings

SettingsFactory = Callable[..., Settings]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    """A real MiniLM behind a local /v1/embeddings (tests using it skip without it)."""
    with serve() as found:
        yield found


def embed_settings(settings: SettingsFactory, endpoint: Endpoint, **more: object) -> Settings:
    """Settings with meaning on, from ``endpoint``."""
    return settings(embed_base_url=endpoint.base_url, embed_model="minilm", **more)


@pytest.fixture
def settings(tmp_path: Path) -> SettingsFactory:
    """Build Settings on ``tmp_path/data`` with the LLM off; keyword flags override."""

    def make(**flags: Any) -> Settings:
        base: dict[str, Any] = {"data_dir": tmp_path / "data", "llm_enabled": False}
        return load_settings({**base, **flags}, environ={})

    return make


@asynccontextmanager
async def client(settings: Settings) -> AsyncIterator[Client]:
    """A real mcp.Client connected in memory to a fresh server for ``settings``."""
    from context_window.server.app import build_server
    from context_window.service import Service

    service = Service(settings)
    try:
        async with Client(build_server(service)) as c:
            yield c
    finally:
        await service.aclose()
