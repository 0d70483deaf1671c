"""Every doc_* tool through a real in-memory mcp.Client, including restarts and progress."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult

from context_window.config import load_settings
from context_window.server import build_server
from context_window.service import Service

DOCS = Path(__file__).parent / "data" / "docs"
DOC_TOOLS = {
    "doc_ingest",
    "doc_outline",
    "doc_search",
    "doc_window",
    "doc_summarize",
    "doc_list",
    "doc_forget",
}


@asynccontextmanager
async def serve(tmp_path: Path, **flags: Any) -> AsyncIterator[Client]:
    """A fresh Service and server on ``tmp_path/data``: calling it twice is a restart."""
    base: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "llm_enabled": False,
        "ingest_roots": [DOCS],
        "chunk_tokens": 200,
        "chunk_overlap": 20,
    }
    service = Service(load_settings({**base, **flags}, environ={}))
    try:
        async with Client(build_server(service)) as c:
            yield c
    finally:
        await service.aclose()


def text_of(res: CallToolResult) -> str:
    out = res.content[0].text  # type: ignore[union-attr]
    assert isinstance(out, str)
    return out


async def ok(c: Client, tool: str, **args: Any) -> tuple[str, dict[str, Any]]:
    res = await c.call_tool(tool, args)
    assert not res.is_error, text_of(res)
    return text_of(res), res.structured_content or {}


async def error(c: Client, tool: str, **args: Any) -> str:
    res = await c.call_tool(tool, args)
    assert res.is_error
    return text_of(res)


@pytest.mark.anyio
async def test_every_document_tool(tmp_path: Path) -> None:
    async with serve(tmp_path) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert names >= DOC_TOOLS
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert tools["doc_forget"].annotations.destructive_hint  # type: ignore[union-attr]
        assert tools["doc_search"].annotations.read_only_hint  # type: ignore[union-attr]

        text, data = await ok(c, "doc_ingest", file_path="build.log", doc_id="build")
        assert "next: doc_outline / doc_search" in text.replace(
            "(doc_id='build') / doc_search(query, doc_id='build')", " / doc_search"
        )
        assert data["chunks"] > 10 and data["tokens"] > 0 and data["chars"] > 0
        await ok(c, "doc_ingest", text="# Notes\n\nThe cache lives in /var/cache/app.", title="n")

        text, data = await ok(c, "doc_outline", doc_id="build")
        assert "(no heading)" in text and data["outline"][0]["index"] == 0
        text, data = await ok(c, "doc_outline", doc_id="build", summarize=True, max_chunks=3)
        assert text.count("\n[") == 3 and "tokens:" in text

        text, data = await ok(c, "doc_search", query="maxConnections", doc_id="build")
        assert text.splitlines()[3].startswith("--- build.log [")
        assert "maxConnections" in data["hits"][0]["text"]
        failing = data["hits"][0]["index"]
        text, data = await ok(c, "doc_search", query="cache")  # every document
        assert data["hits"][0]["doc_id"] != "build"
        text, _ = await ok(c, "doc_search", query="zyzzyva quux")
        assert "Try other" in text
        text, data = await ok(c, "doc_search", query="src module", limit=10, budget_tokens=300)
        assert data["omitted"] > 0 and "did not fit" in text

        text, data = await ok(
            c, "doc_window", doc_id="build", **{"from": failing - 1, "to": failing}
        )
        assert [ch["index"] for ch in data["chunks"]] == [failing - 1, failing]
        assert "maxConnections" in text

        text, data = await ok(c, "doc_summarize", doc_id="build", target_tokens=80)
        assert data["method"] == "extractive" and "LLM disabled" in text and not data["cached"]
        _, again = await ok(c, "doc_summarize", doc_id="build", target_tokens=80)
        assert again["cached"] and again["text"] == data["text"]
        _, fresh = await ok(c, "doc_summarize", doc_id="build", target_tokens=80, refresh=True)
        assert not fresh["cached"]
        _, part = await ok(c, "doc_summarize", doc_id="build", **{"from": 1, "to": 2})
        assert not part["whole"] and part["from"] == 1

        text, data = await ok(c, "doc_list")
        assert {d["id"] for d in data["documents"]} >= {"build"} and len(data["documents"]) == 2

        assert "no document 'nope'" in await error(c, "doc_window", doc_id="nope")
        await ok(c, "doc_forget", doc_id="build")
        assert not (tmp_path / "data" / "documents" / "build").exists()
        assert "doc_list" in await error(c, "doc_search", query="x1", doc_id="build")


@pytest.mark.anyio
async def test_cursor_survives_a_restart(tmp_path: Path) -> None:
    async with serve(tmp_path) as c:
        _, doc = await ok(c, "doc_ingest", file_path="build.log", doc_id="log")
        _, first = await ok(c, "doc_window", doc_id="log", budget_tokens=500)
    index_dir = tmp_path / "data" / "documents" / "log" / "index"
    assert (index_dir / "terms.bin").is_file() and (index_dir / "post_chunks.npy").is_file()
    async with serve(tmp_path) as c:  # a new Service on the same data dir
        _, second = await ok(c, "doc_window", doc_id="log", budget_tokens=500)
        assert second["chunks"][0]["index"] == first["cursor"]
        _, hits = await ok(c, "doc_search", query="maxConnections", doc_id="log")
        assert hits["hits"]
        last = doc["chunks"] - 1
        _, tail = await ok(c, "doc_window", doc_id="log", **{"from": last})
        assert tail["at_end"] and tail["cursor"] == doc["chunks"]
        text, end = await ok(c, "doc_window", doc_id="log")
        assert "end of document; reset=true to start over" in text and not end["chunks"]
        _, again = await ok(c, "doc_window", doc_id="log", reset=True, budget_tokens=200)
        assert again["chunks"][0]["index"] == 0
        assert "before from" in await error(c, "doc_window", doc_id="log", **{"from": 5, "to": 2})
        msg = await error(c, "doc_window", doc_id="log", **{"from": doc["chunks"]})
        assert f"has {doc['chunks']} chunks" in msg


@pytest.mark.anyio
async def test_ingest_reports_progress(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    line = "2024-01-01 12:00:00 INFO worker_{i} processed job {i} in {i} ms\n"
    (root / "big.log").write_text("".join(line.format(i=i) for i in range(60_000)))
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, total, message))

    async with serve(tmp_path, ingest_roots=[root]) as c:
        res = await c.call_tool("doc_ingest", {"file_path": "big.log"}, progress_callback=progress)
        assert not res.is_error, text_of(res)
        dup = await c.call_tool("doc_ingest", {"file_path": "big.log"})
        assert "Same content as doc" in text_of(dup)
    assert len(seen) >= 2 and seen[-1][0] == 100.0 and seen[-1][1] == 100.0
    values = [v for v, _, _ in seen]
    assert values == sorted(values)


@pytest.mark.anyio
async def test_search_with_a_budget_below_one_chunk_still_shows_the_best_hit(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path, chunk_tokens=800, chunk_overlap=0) as c:
        log = "\n".join(
            f"081109 2035{i:02d} INFO block blk_{i} served to 10.0.0.{i}" for i in range(400)
        )
        await ok(c, "doc_ingest", text=log + "\nFATAL disk quota exceeded on node7\n", doc_id="big")
        text, data = await ok(c, "doc_search", query="quota exceeded", budget_tokens=100)
        assert len(data["hits"]) == 1 and data["used_tokens"] <= 100
        assert "cut to fit budget_tokens" in text and text.startswith("1 of 1 hits")
        assert "FATAL disk quota exceeded on node7" in text  # the matching line, not the head
