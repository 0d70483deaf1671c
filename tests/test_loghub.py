"""Retrieval quality on real logs: every loghub event template should find its first line.

For each system's ``<X>_2k.log`` (ingested as a file from an ingest root) and each
event template, the query is the template's text without ``<*>`` wildcards; a hit
is when the line given by the first ``LineId`` of that event lies inside one of the
chunks doc_search returns (limit 5). Hit rates are printed per system (pytest -s).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from context_window.config import load_settings
from context_window.server import build_server
from context_window.service import Service

LOGHUB = Path(__file__).resolve().parents[2] / "shared" / "data" / "loghub"
if not LOGHUB.is_dir():
    LOGHUB = Path("/work/shared/data/loghub")
SYSTEMS = sorted(p.name for p in LOGHUB.iterdir() if (p / f"{p.name}_2k.log").is_file())
THRESHOLD = {800: 0.8, 200: 0.78}  # overall first-line hit rate required, by chunk size

pytestmark = pytest.mark.skipif(not SYSTEMS, reason="loghub samples not found")


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


def line_starts(text: str) -> list[int]:
    """Character offset of the start of each line (index 0 = line 1)."""
    starts = [0]
    pos = text.find("\n")
    while pos >= 0:
        starts.append(pos + 1)
        pos = text.find("\n", pos + 1)
    return starts


async def hit_rate(c: Client, system: str) -> tuple[int, int, int]:
    """(first lines found, occurrences found, events) for one system."""
    text = (LOGHUB / system / f"{system}_2k.log").read_bytes().decode("utf-8")
    starts = line_starts(text)
    res = await c.call_tool(
        "doc_ingest", {"file_path": f"{system}/{system}_2k.log", "doc_id": system}
    )
    assert not res.is_error, res.content
    first = anywhere = 0
    evs = events(system)
    for query, line_ids in evs.values():
        res = await c.call_tool(
            "doc_search",
            {"query": query, "doc_id": system, "limit": 5, "budget_tokens": 20_000},
        )
        data: dict[str, Any] = res.structured_content or {}
        spans = [(h["start"], h["end"]) for h in data.get("hits", [])]
        # A chunk is trimmed of surrounding whitespace, so a line counts from its first text.
        offsets = [
            starts[i - 1]
            + len(text[starts[i - 1] :][:200])
            - len(text[starts[i - 1] :][:200].lstrip())
            for i in line_ids
        ]
        inside = [any(s <= off < e for s, e in spans) for off in offsets]
        first += inside[0]
        anywhere += any(inside)
    return first, anywhere, len(evs)


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
