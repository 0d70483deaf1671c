"""Clients of one HTTP server see no transient errors while another client re-ingests.

A real HTTP server process; one MCP client keeps re-ingesting a document while three
others search it, page through it, read its outline and summarize it. Every read must
answer from the old version or the new one: never "no document", "damaged" or an
internal error. (The server once closed a replaced version's memory map while a reader
thread still used it.)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import mcp

from .support import Server

SECONDS = 8.0
# Many distinct terms: a search then spends long enough inside a version's index for a
# re-ingest to replace it mid-read.
NAMES = [f"zor{a}{b}quin" for a in "bdfgklmnpr" for b in "aeiou"][:50]
WORDS = " ".join(NAMES * 6)
QUERY = "version line " + " ".join(NAMES)


def _text(res: Any) -> str:
    return "".join(getattr(b, "text", "") for b in res.content)


def test_reads_during_re_ingests_never_fail(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", None)
    url = server.url + "/mcp"
    failures: list[str] = []
    counts = {"ingests": 0, "reads": 0}
    try:

        async def writer(end: float) -> None:
            async with mcp.Client(url) as c:
                n = 0
                while time.monotonic() < end:
                    n += 1
                    body = "\n\n".join(
                        f"## Part {i}\n\nversion {n} line {i} " + WORDS for i in range(30)
                    )
                    res = await c.call_tool(
                        "doc_ingest", {"text": f"# Doc\n\n{body}", "doc_id": "d"}
                    )
                    assert not res.is_error, _text(res)
                    counts["ingests"] += 1

        async def reader(end: float) -> None:
            async with mcp.Client(url) as c:
                calls = [
                    ("doc_search", {"query": QUERY, "doc_id": "d"}),
                    ("doc_search", {"query": QUERY, "doc_id": "d"}),
                    ("doc_window", {"doc_id": "d", "reset": True, "budget_tokens": 500}),
                    ("doc_window", {"doc_id": "d", "budget_tokens": 500}),
                    ("doc_outline", {"doc_id": "d"}),
                    ("doc_summarize", {"doc_id": "d"}),
                ]
                while time.monotonic() < end:
                    for tool, args in calls:
                        res = await c.call_tool(tool, args)
                        counts["reads"] += 1
                        if res.is_error:
                            failures.append(f"{tool}: {_text(res)[:200]}")

        async def main() -> None:
            async with mcp.Client(url) as c:
                first = await c.call_tool(
                    "doc_ingest", {"text": "# Doc\n\nversion 0", "doc_id": "d"}
                )
                assert not first.is_error
            end = time.monotonic() + SECONDS
            async with anyio.create_task_group() as tg:
                tg.start_soon(writer, end)
                for _ in range(3):
                    tg.start_soon(reader, end)

        anyio.run(main)
    finally:
        server.stop()
    assert counts["ingests"] >= 3 and counts["reads"] >= 20, counts
    assert not failures, f"{failures[:5]}\n{server.log_tail()}"
