"""No amplification: a huge heading is not copied into every chunk, and every budgeted
answer fits its budget twice over: its text, and its structured content on its own
(some clients hand that to the model instead of the text)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from context_window.documents.chunking import MAX_TRAIL_CHARS
from context_window.server.app import build_server
from context_window.tokens import TokenCounter

from .support import service_for

count = TokenCounter(0.27).count
HEADING = "# " + "H" * 100_000
BODY = "\n\n".join(f"para {i} the upload failed " + "word " * 50 for i in range(400))


def _tokens(value: Any) -> int:
    return count(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def test_a_huge_heading_is_stored_once_not_per_chunk(tmp_path: Path) -> None:
    svc = service_for(tmp_path / "data")
    text = f"{HEADING}\n\n## {'S' * 50_000}\n\n{BODY}"
    done = svc.documents.ingest(text=text, doc_id="h")
    folder = tmp_path / "data" / "documents" / "h"
    assert done.doc.chunks > 50
    on_disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert on_disk < 1.5 * len(text.encode())  # was 37x (a trail per chunk)
    trails = json.loads((folder / "index" / "headings.json").read_text())["trails"]
    assert trails and all(len(t) <= MAX_TRAIL_CHARS for t in trails)
    chunks = svc.documents.read_chunks(done.doc, 0, done.doc.chunks - 1)
    assert all(len(c.heading) <= MAX_TRAIL_CHARS for c in chunks)


@pytest.mark.parametrize("budget", [64, 100, 300, 2000])
def test_every_budgeted_answer_and_its_structured_content_fit(tmp_path: Path, budget: int) -> None:
    svc = service_for(tmp_path / "data", budget=max(64, budget))
    svc.documents.ingest(text=f"{HEADING}\n\n{BODY}", doc_id="h")
    session, _ = svc.sessions.open("s")
    for i in range(30):
        session.append(f"note {i}: the upload failed " + "word " * (40 * i))

    calls: list[tuple[str, dict[str, Any], int]] = [
        ("doc_window", {"doc_id": "h", "budget_tokens": budget, "reset": True}, budget),
        ("doc_window", {"doc_id": "h", "budget_tokens": budget, "line": 5}, budget),
        ("doc_search", {"query": "upload word", "budget_tokens": budget}, budget),
        ("doc_search", {"query": "the", "doc_id": "h", "budget_tokens": budget}, budget),
        ("doc_search", {"query": "zzzz", "budget_tokens": budget}, budget),
        ("context_recall", {"session_id": "s", "query": "upload", "budget_tokens": budget}, budget),
        ("context_recall", {"session_id": "s", "budget_tokens": budget}, budget),
        ("doc_outline", {"doc_id": "h"}, max(64, budget)),
    ]

    async def main() -> None:
        async with Client(build_server(svc)) as c:
            for tool, args, limit in calls:
                res = await c.call_tool(tool, args)
                assert not res.is_error, (tool, res.content)
                text = "".join(getattr(b, "text", "") for b in res.content)
                assert count(text) <= limit, (tool, args, count(text))
                assert _tokens(res.structured_content) <= limit, (tool, args)

    anyio.run(main)


def test_context_open_structured_content_is_bounded_like_its_text(tmp_path: Path) -> None:
    """Twenty large pins: context_open's structured content holds what its text shows
    (the start of each pin), not every pin in full."""
    svc = service_for(tmp_path / "data")
    session, _ = svc.sessions.open("s")
    for i in range(20):
        session.append(f"pin {i}: " + "the deploy must keep the old schema " * 2000, pinned=True)

    async def main() -> None:
        async with Client(build_server(svc)) as c:
            res = await c.call_tool("context_open", {"session_id": "s"})
            text = "".join(getattr(b, "text", "") for b in res.content)
            assert not res.is_error, text
            structured = json.dumps(res.structured_content, ensure_ascii=False)
            assert len(structured) < 3 * len(text), (len(structured), len(text))
            pins = res.structured_content["pinned"]
            assert [p["text"].split(":")[0] for p in pins] == [f"pin {i}" for i in range(20)]
            assert all(p["truncated"] for p in pins)

    anyio.run(main)


def test_no_answer_echoes_a_huge_argument(tmp_path: Path) -> None:
    """An id or filter of 100,000 characters (a model's runaway output) is named in the
    answer by its start, never copied whole into the model's window."""
    svc = service_for(tmp_path / "data", ingest_roots=(tmp_path,))
    svc.sessions.open("s")[0].append("one note")
    huge = "x" * 100_000
    calls: list[tuple[str, dict[str, Any]]] = [
        ("context_uncompact", {"session_id": "s", "compaction_id": huge}),
        ("context_update", {"session_id": "s", "entry_id": huge, "pinned": True}),
        ("context_list_sessions", {"filter": huge}),
        ("doc_ingest", {"file_path": huge}),
        ("doc_ingest", {"file_path": f"file:///{huge}"}),
    ]

    async def main() -> None:
        async with Client(build_server(svc)) as c:
            for tool, args in calls:
                res = await c.call_tool(tool, args)
                text = "".join(getattr(b, "text", "") for b in res.content)
                assert "xxxx" in text and len(text) < 1_000, (tool, len(text))

    anyio.run(main)
