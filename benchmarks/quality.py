"""Retrieval quality on loghub: does doc_search find the line where each event first occurs?

Each system's 2k-line log is ingested at the default chunk size. For every event
template the query is the template text without ``<*>``; a hit means the line
given by the LineId of the template's first structured row lies wholly inside one
of the top-5 chunks returned. Frequent events occur in many chunks that all match
equally well, so the first occurrence is often outranked by a later one; the
lenient ``any_line`` rate counts a hit when a returned chunk holds any line of the
event.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchmarks.corpus import log_text, systems, templates
from benchmarks.documents import open_store
from context_window.errors import InvalidInput

TOP = 5


def _line_spans(text: str) -> list[tuple[int, int]]:
    spans, pos = [], 0
    for line in text.split("\n"):
        spans.append((pos, pos + len(line)))
        pos += len(line) + 1
    return spans


def bench_quality(top: int = TOP) -> dict[str, Any]:
    """Hit rate at ``top`` per system and over all templates."""
    per_system: dict[str, Any] = {}
    hits_all = any_all = total_all = unsearchable_all = 0
    mismatched = 0
    with tempfile.TemporaryDirectory(prefix="cw-bench-quality-") as tmp:
        _, store = open_store(Path(tmp), [])
        for system in systems():
            text = log_text(system)
            spans = _line_spans(text)
            store.ingest(text=text, doc_id=system, title=system)
            hits = any_hits = unsearchable = 0
            tpls = templates(system)
            for t in tpls:
                start, end = spans[t.line_id - 1]
                try:
                    found = store.search(t.query, doc_id=system, limit=top)
                except InvalidInput:
                    unsearchable += 1
                    continue
                mismatched += sum(
                    1 for h in found if text[h.chunk.start : h.chunk.end] != h.chunk.text
                )
                if any(h.chunk.start <= start and end <= h.chunk.end for h in found):
                    hits += 1
                event = [spans[i - 1] for i in t.lines]
                if any(h.chunk.start <= a and b <= h.chunk.end for h in found for a, b in event):
                    any_hits += 1
            per_system[system] = {
                "templates": len(tpls),
                "hits": hits,
                "unsearchable": unsearchable,
                "hit_rate": round(hits / len(tpls), 3) if tpls else float("nan"),
                "any_line_hit_rate": round(any_hits / len(tpls), 3) if tpls else float("nan"),
            }
            hits_all += hits
            any_all += any_hits
            total_all += len(tpls)
            unsearchable_all += unsearchable
    rates = [s["hit_rate"] for s in per_system.values()]
    return {
        "top": top,
        "templates": total_all,
        "hits": hits_all,
        "unsearchable": unsearchable_all,
        "hit_rate": round(hits_all / total_all, 3) if total_all else float("nan"),
        "any_line_hit_rate": round(any_all / total_all, 3) if total_all else float("nan"),
        "macro_hit_rate": round(sum(rates) / len(rates), 3) if rates else float("nan"),
        "offset_mismatches": mismatched,
        "systems": per_system,
    }
