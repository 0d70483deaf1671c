"""documents/answers.py: the search answer's header reads as people say it."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
from mcp import Client

from context_window.config import load_settings
from context_window.documents.answers import search_header
from context_window.server.app import build_server
from context_window.service import Service


@pytest.mark.parametrize(
    ("omitted", "tail"),
    [
        (0, ""),
        (1, " · 1 more matching line not shown"),
        (2, " · 2 more matching lines not shown"),
        (1234, " · 1,234 more matching lines not shown"),
    ],
)
def test_the_header_counts_what_did_not_fit(omitted: int, tail: str) -> None:
    assert search_header(1, 250, 300, omitted) == "1 hit, best first · 250/300 tokens" + tail
    assert search_header(3, 9, 64, omitted, terse=True) == "3 hits · 9/64"


# ----------------------------------------------------------------------
# Retrieval quality on real logs: every loghub event template should find its first line.
#
# For each system's ``<X>_2k.log`` (ingested as a file from an ingest root) and each
# event template, the query is the template's text without ``<*>`` wildcards, sent
# as ``doc_search(query, limit=3, budget_tokens=1500)``; a hit is when the line
# given by the first ``LineId`` of that event is shown whole, with its line number,
# in the answer cut at 4 characters per token of budget. Hit rates are printed per
# system (pytest -s).

LOGHUB = Path(__file__).resolve().parents[3] / "shared" / "data" / "loghub"
if not LOGHUB.is_dir():
    LOGHUB = Path("/work/shared/data/loghub")
SYSTEMS = sorted(p.name for p in LOGHUB.iterdir() if (p / f"{p.name}_2k.log").is_file())
THRESHOLD = {800: 0.95, 200: 0.95}  # overall first-line hit rate required, by chunk size


def events(system: str) -> dict[str, tuple[str, list[int]]]:
    """EventId -> (query text, the LineIds of its occurrences, first first)."""
    folder = LOGHUB / system
    with (folder / f"{system}_2k.log_templates.csv").open(newline="", encoding="utf-8") as f:
        templates = {row["EventId"]: row["EventTemplate"] for row in csv.DictReader(f)}
    lines: dict[str, list[int]] = {}
    with (folder / f"{system}_2k.log_structured.csv").open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            lines.setdefault(row["EventId"], []).append(int(row["LineId"]))
    return {
        eid: (" ".join(t.replace("<*>", " ").split()), lines[eid])
        for eid, t in templates.items()
        if eid in lines
    }


async def hit_rate(c: Client, system: str) -> tuple[int, int, int]:
    """(first lines shown, events with any occurrence shown, events) for one system."""
    lines = (LOGHUB / system / f"{system}_2k.log").read_bytes().decode("utf-8").split("\n")
    res = await c.call_tool(
        "doc_ingest", {"file_path": f"{system}/{system}_2k.log", "doc_id": system}
    )
    assert not res.is_error, res.content
    first = anywhere = 0
    evs = events(system)
    for query, line_ids in evs.values():
        res = await c.call_tool(
            "doc_search",
            {"query": query, "doc_id": system, "limit": 3, "budget_tokens": 1500},
        )
        text = "\n".join(getattr(b, "text", "") for b in res.content)[: 4 * 1500]
        shown = [f"{i}: {lines[i - 1].rstrip()}" in text for i in line_ids]
        listed = [
            p["like_lines"] for h in (res.structured_content or {})["hits"] for p in h["passages"]
        ]
        first += shown[0]
        anywhere += any(shown) or any(i in ids for ids in listed for i in line_ids)
    return first, anywhere, len(evs)


@pytest.mark.skipif(not SYSTEMS, reason="loghub samples not found")
@pytest.mark.anyio
@pytest.mark.parametrize("chunk_tokens", [800, 200])
async def test_every_template_finds_its_first_line(tmp_path: Path, chunk_tokens: int) -> None:
    settings = load_settings(
        {
            "data_dir": tmp_path / "data",
            "llm_enabled": False,
            "ingest_roots": [LOGHUB],
            "chunk_tokens": chunk_tokens,
            "chunk_overlap": chunk_tokens // 10,
        },
        environ={},
    )
    found = anywhere = total = 0
    report = []
    async with Client(build_server(Service(settings))) as c:
        for system in SYSTEMS:
            h, a, n = await hit_rate(c, system)
            found, anywhere, total = found + h, anywhere + a, total + n
            report.append(f"{system} {h}/{n}={h / n:.2f} (any {a / n:.2f})")
    overall = found / total
    sys.stderr.write(
        f"\nloghub first-line hit rates at {chunk_tokens}-token chunks: "
        + "; ".join(report)
        + f"; overall {found}/{total}={overall:.3f}, any occurrence {anywhere / total:.3f}\n"
    )
    assert overall >= THRESHOLD[chunk_tokens], report
    assert anywhere / total >= 0.95, report
