"""Hostile input: the text paths that were quadratic, timed at 100k and 200k characters.

Each crafted note is timed at half and at the full entry limit (200,000 characters)
in the same run, the fastest of three calls each. Linear work takes about twice as long
for twice the text; the ``doubling`` ratio is that quotient (a quadratic path shows
about 4). The whole compaction of one such note is timed once too, since that is where
fact extraction runs.
"""

from __future__ import annotations

import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from context_window.config import Settings
from context_window.llm.summaries import extractive, split_sentences
from context_window.service import Service
from context_window.sessions.facts import extract
from context_window.sessions.records import MAX_TEXT_CHARS
from context_window.tokens import TokenCounter

# name -> the repeated unit of a crafted note
TEXTS: dict[str, str] = {
    "dotted_token": "a.",  # one 200k-character word of one-letter labels
    "dashed_token": "a-",
    "address_token": "a@",
    "short_sentences": "Go. ",
}


def _note(unit: str, chars: int) -> str:
    return (unit * (chars // len(unit) + 1))[:chars]


def _seconds(fn: Callable[[str], object], text: str, runs: int = 3) -> float:
    """The fastest of ``runs`` calls, the collector on: noise only ever adds time."""
    return min(timeit.repeat(lambda: fn(text), setup="gc.enable()", repeat=runs, number=1))


def _compact_ms(text: str) -> float:
    with tempfile.TemporaryDirectory(prefix="cw-hostile-") as tmp:
        service = Service(Settings(data_dir=Path(tmp), llm_enabled=False, audit=False))
        session, _ = service.sessions.open("hostile")
        session.append(text)
        session.append("a second note, folded with it")
        done: list[Any] = []

        def compact(session_id: str) -> None:
            done.append(anyio.run(service.compact, session_id, 0, 400))

        seconds = _seconds(compact, "hostile", runs=1)  # it changes the session: once
        assert done[0].summary is not None, "nothing was compacted"
        return round(seconds * 1000, 1)


def bench_text_paths() -> dict[str, Any]:
    """Fact extraction, sentence splitting and compaction of crafted notes, 100k and 200k."""
    counter = TokenCounter(0.27)
    paths: dict[str, Callable[[str], object]] = {
        "facts": extract,
        "split": split_sentences,
        "extractive": lambda t: extractive(t, 400, counter),
    }
    out: dict[str, Any] = {}
    worst = 0.0
    for name, unit in TEXTS.items():
        half, full = _note(unit, MAX_TEXT_CHARS // 2), _note(unit, MAX_TEXT_CHARS)
        row: dict[str, Any] = {}
        for path, fn in paths.items():
            a, b = _seconds(fn, half), _seconds(fn, full)
            row[f"{path}_ms"] = round(b * 1000, 1)
            row[f"{path}_doubling"] = round(b / a, 2) if a > 0.002 else None
            if a > 0.002:  # below that, timer noise decides the quotient
                worst = max(worst, b / a)
        row["compact_ms"] = _compact_ms(full)
        out[name] = row
    out["chars"] = MAX_TEXT_CHARS
    out["worst_doubling"] = round(worst, 2)
    out["worst_ms"] = max(
        v
        for row in out.values()
        if isinstance(row, dict)
        for k, v in row.items()
        if k.endswith("_ms")
    )
    return out
