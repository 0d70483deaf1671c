"""Corrupt documents: a damaged meta, source, chunk table or index never makes a tool fail with an
internal error; the damaged document is named, the others keep working, and the same
id can be ingested again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult

from context_window.cli.doctor import audit
from context_window.server.app import build_server

from .support import service_for
from .test_corrupt import text_of

DOC_TOOLS_ON_ONE = ("doc_outline", "doc_search", "doc_window", "doc_summarize")


def seed_documents(data_dir: Path) -> None:
    """Two documents, 'good' and 'bad', each with several chunks."""
    service = service_for(data_dir, chunk_tokens=64, chunk_overlap=0)
    body = "\n\n".join(
        f"# Part {i}\n\nparagraph {i} about widgets and gears. " * 3 for i in range(8)
    )
    for doc_id in ("good", "bad"):
        service.documents.ingest(text=body, doc_id=doc_id, title=doc_id)


async def doc_calls(data_dir: Path) -> dict[str, CallToolResult]:
    """Call every document tool on 'bad' (and list/search all); return the results."""
    service = service_for(data_dir, chunk_tokens=64, chunk_overlap=0)
    out: dict[str, CallToolResult] = {}
    async with Client(build_server(service)) as client:
        out["doc_list"] = await client.call_tool("doc_list", {})
        out["search_all"] = await client.call_tool("doc_search", {"query": "widgets"})
        for tool in DOC_TOOLS_ON_ONE:
            args: dict[str, Any] = {"doc_id": "bad"}
            if tool == "doc_search":
                args["query"] = "widgets"
            out[tool] = await client.call_tool(tool, args)
        for tool in DOC_TOOLS_ON_ONE:  # the healthy document is unaffected
            args = {"doc_id": "good", **({"query": "gears"} if tool == "doc_search" else {})}
            r = await client.call_tool(tool, args)
            assert not r.is_error, (tool, text_of(r))
        ingest = {"text": "# Fresh\n\nagain", "doc_id": "bad"}
        out["reingest"] = await client.call_tool("doc_ingest", ingest)
        out["after"] = await client.call_tool("doc_window", {"doc_id": "bad", "reset": True})
    await service.aclose()
    return out


def _line_garbage(p: Path) -> None:
    lines = p.read_bytes().split(b"\n")
    p.write_bytes(b"\n".join([lines[0], b"{garbage", *lines[2:]]))


def _not_utf8(p: Path) -> None:
    p.write_bytes(b"\xff\xfe" * (p.stat().st_size // 2))  # as long, none of it text


def _truncate_half(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


DOC_DAMAGE: dict[str, tuple[str, Callable[[Path], Any]]] = {
    "meta missing": ("meta.json", lambda p: p.unlink()),
    "meta torn": ("meta.json", _truncate_half),
    "meta not an object": ("meta.json", lambda p: p.write_text("[]")),
    "meta wrong types": ("meta.json", lambda p: p.write_text('{"id": "bad", "chunks": "x"}')),
    "source truncated": ("source.txt", _truncate_half),
    "source emptied": ("source.txt", lambda p: p.write_bytes(b"")),
    "source not UTF-8": ("source.txt", _not_utf8),
    "spans missing": ("index/spans.npy", lambda p: p.unlink()),
    "spans truncated": ("index/spans.npy", _truncate_half),
    "spans flat": ("index/spans.npy", lambda p: __import__("numpy").save(p, [0, 1, 2])),
    "chunk table garbage": ("index/chunks.npy", _line_garbage),
    "index stats torn": ("index/stats.json", _truncate_half),
    "index array missing": ("index/post_tfs.npy", lambda p: p.unlink()),
    "index array truncated": ("index/heading_ids.npy", _truncate_half),
    "index array garbage": ("index/chunks.npy", lambda p: p.write_bytes(b"\x93NUMPY garbage")),
    "headings missing": ("index/headings.json", lambda p: p.unlink()),
    "index dir missing": ("index", lambda p: __import__("shutil").rmtree(p)),
    "source missing": ("source.txt", lambda p: p.unlink()),
}


@pytest.mark.parametrize("name", list(DOC_DAMAGE))
def test_corrupt_document(data_dir: Path, name: str) -> None:
    seed_documents(data_dir)
    rel, damage = DOC_DAMAGE[name]
    damage(data_dir / "documents" / "bad" / rel)
    out = anyio.run(doc_calls, data_dir)
    assert not out["doc_list"].is_error and "good" in text_of(out["doc_list"])
    assert not out["search_all"].is_error or "bad" in text_of(out["search_all"])
    for tool in DOC_TOOLS_ON_ONE:
        r = out[tool]
        message = text_of(r)
        assert "internal error" not in message, f"{tool} on a document with {name}: {message}"
        if r.is_error:
            assert "bad" in message, message  # the error names the damaged document
    assert not out["reingest"].is_error, text_of(out["reingest"])
    assert "again" in text_of(out["after"])
    assert audit_clean(data_dir)


def audit_clean(data_dir: Path) -> bool:
    problems = [p for p in audit(data_dir).problems if "leftover" not in p.message]
    assert not problems, problems
    return True
