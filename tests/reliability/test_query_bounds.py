"""Queries are bounded: a length cap and a distinct-term cap, refused in one line, and
repeated terms counted once. A 1.2 MB query used to be analysed and scored in full."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from context_window.retrieval.analyzer import MAX_QUERY_CHARS, MAX_QUERY_TERMS
from context_window.server.app import build_server

from .support import service_for

NOTES = [
    "the flaky test is test_upload, it times out on CI",
    "decided to retry uploads three times with backoff",
    "dead end: raising the timeout did not help the upload",
    "pinned: the staging bucket is cw-staging-eu",
]
HUGE = "error " * 200_000  # 1.2 MB


async def _call(c: Client, tool: str, **args: Any) -> tuple[bool, str]:
    res = await c.call_tool(tool, args)
    text = "".join(getattr(b, "text", "") for b in res.content)
    return res.is_error, text


@pytest.fixture
def service(tmp_path: Path) -> Any:
    svc = service_for(tmp_path / "data", ingest_roots=[tmp_path])
    session, _ = svc.sessions.open("s1")
    for note in NOTES:
        session.append(note)
    (tmp_path / "log.txt").write_text("\n".join(NOTES * 50) + "\n", encoding="utf-8")
    svc.documents.ingest(file_path=str(tmp_path / "log.txt"), doc_id="log")
    return svc


@pytest.mark.parametrize(
    ("tool", "args"),
    [("context_recall", {"session_id": "s1"}), ("doc_search", {"doc_id": "log"})],
)
def test_an_oversized_query_is_refused_in_one_line_before_any_analysis(
    service: Any, tool: str, args: dict[str, Any]
) -> None:
    async def main() -> None:
        async with Client(build_server(service)) as c:
            failed, text = await _call(c, tool, query=HUGE, **args)
            assert failed
            assert "\n" not in text.strip() and len(text) < 300
            assert "1,200,000 characters" in text and f"{MAX_QUERY_CHARS:,}" in text
            # the same server answers a normal query right after
            failed, text = await _call(c, tool, query="upload timeout", **args)
            assert not failed and "upload" in text

    anyio.run(main)


def test_too_many_distinct_terms_are_refused_and_the_cap_is_inclusive(service: Any) -> None:
    words = [str(1000 + i) for i in range(MAX_QUERY_TERMS + 1)]  # one term each, unstemmed

    async def main() -> None:
        async with Client(build_server(service)) as c:
            for tool, args in (("context_recall", {"session_id": "s1"}), ("doc_search", {})):
                failed, text = await _call(c, tool, query=" ".join(words), **args)
                assert failed and f"{MAX_QUERY_TERMS + 1} distinct search terms" in text
                failed, _ = await _call(c, tool, query=" ".join(words[:-1]), **args)
                assert not failed

    anyio.run(main)


def test_repeated_terms_count_once(service: Any) -> None:
    session = service.sessions.get("s1")
    once = session.recall("upload timeout", 1000)
    many = session.recall(" ".join(["upload"] * 200 + ["timeout"]), 1000)
    assert [e.id for e in many.entries] == [e.id for e in once.entries]
    assert many.scores == once.scores
    assert service.documents.search("upload upload upload timeout", "log") == (
        service.documents.search("upload timeout", "log")
    )


def test_the_caps_are_settings(tmp_path: Path) -> None:
    svc = service_for(tmp_path / "d", max_query_chars=20, max_query_terms=2)
    session, _ = svc.sessions.open("s")
    session.append("alpha beta gamma")
    assert session.recall("alpha beta", 100).entries
    with pytest.raises(Exception, match="21 characters; the limit is 20"):
        session.recall("alpha beta gamma delt", 100)
    with pytest.raises(Exception, match="3 distinct search terms; the limit is 2"):
        session.recall("alpha beta gamma", 100)
