"""Document summaries: what text to give the summarizer, and the caches of what it said.

A range within ``DIRECT_TOKENS`` is summarized from its text; a larger one from a sample
of that size, half evenly spaced chunks and half those ranking highest for error
words, and says so. Cached in meta.json; chunk summaries in ``summaries.jsonl``.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np

from context_window.documents.store import DocumentStore
from context_window.documents.tables import DocInfo
from context_window.errors import StorageError
from context_window.journal import Journal
from context_window.llm.summaries import Summarizer
from context_window.models import Chunk, Summary
from context_window.retrieval.analyzer import readable
from context_window.storage import unwritable

DIRECT_TOKENS = 12_000
LINE_TOKENS = 40
SALIENT = (
    "error errors exception failed failure fatal warning warn denied refused timeout "
    "panic traceback abort killed"
)


@dataclass(frozen=True)
class DocSummary:
    """A summary of chunks ``first..last`` of a document, and how it was made."""

    doc: DocInfo
    first: int
    last: int
    whole: bool
    summary: Summary
    note: str
    cached: bool


def joined(chunks: list[Chunk]) -> str:
    """Consecutive chunks' text with the overlap between neighbours left out."""
    parts: list[str] = []
    prev_end = -1
    for c in chunks:
        skip = max(0, prev_end - c.start) if parts else 0
        piece = c.text[skip:].lstrip() if skip else c.text
        if piece:
            parts.append(piece)
        prev_end = max(prev_end, c.end)
    return "\n".join(parts)


def source_text(store: DocumentStore, doc: DocInfo, first: int, last: int) -> tuple[str, str]:
    """The text to summarize for ``first..last`` and a note saying what it is."""
    tables = store.tables(doc)
    tokens = tables.tokens()[first : last + 1]
    total = int(tokens.sum())
    count = last - first + 1
    if total <= DIRECT_TOKENS:
        text = readable(joined(tables.read(first, last, styled=True)))  # joined by offsets
        return text, f"read chunks {first}-{last} whole"
    per_chunk = max(1, int(np.median(tokens)))
    want = max(2, min(count, DIRECT_TOKENS // per_chunk))
    even = {int(i) for i in np.linspace(first, last, max(2, want // 2)).round()}
    scores = tables.index.scores(store.analyzer.terms(SALIENT))[first : last + 1]
    ranked = [first + int(i) for i in np.argsort(-scores, kind="stable") if scores[i] > 0]
    salient = [i for i in ranked if i not in even][: max(0, want - len(even))]
    picked = sorted(even | set(salient))
    text = "\n\n".join(tables.read(i, i)[0].text for i in picked)
    note = (
        f"sampled {len(picked)} of {count} chunks ({total:,} tokens): {len(even)} evenly "
        f"spaced and {len(salient)} that mention errors or failures; the rest was not read"
    )
    return text, note


async def summarize_range(
    store: DocumentStore,
    summarizer: Summarizer,
    doc_id: str,
    first: int | None,
    last: int | None,
    target_tokens: int,
    refresh: bool,
) -> DocSummary:
    """Summarize a range (or the whole document, whose summary is cached in meta.json).
    The store's calls run in worker threads: they may wait for another process's lock."""
    doc = await anyio.to_thread.run_sync(store.get, doc_id)
    lo, hi = doc.span(first, last)
    whole = lo == 0 and hi == doc.chunks - 1
    cached = doc.summary if whole else None
    if cached and cached.get("sha256", doc.sha256) != doc.sha256:
        cached = None  # a summary of another version's text
    if cached and not refresh and cached.get("target_tokens") == target_tokens:
        summary = Summary(
            str(cached["text"]),
            cached.get("method", "extractive"),
            int(cached.get("tokens", 0)),
            str(cached.get("reason", "")),
        )
        return DocSummary(doc, lo, hi, True, summary, str(cached.get("note", "")), True)
    doc, (text, note) = await anyio.to_thread.run_sync(
        store.read_steadily, doc, lambda d: source_text(store, d, lo, min(hi, d.chunks - 1))
    )
    summary = await summarizer.summarize(text, target_tokens, kind="document")
    if whole:
        record = {
            "text": summary.text,
            "method": summary.method,
            "tokens": summary.tokens,
            "reason": summary.reason,
            "note": note,
            "target_tokens": target_tokens,
            "made_at": time.time(),
            "sha256": doc.sha256,  # the text it summarizes (see update_meta's expect)
        }
        cache = functools.partial(store.update_meta, doc.id, expect=doc.sha256, summary=record)
        try:
            doc = await anyio.to_thread.run_sync(cache)
        except OSError as exc:  # a read-only data dir: summarized, not cached
            if not unwritable(exc):
                raise
    return DocSummary(doc, lo, hi, whole, summary, note, False)


async def chunk_lines(
    store: DocumentStore, summarizer: Summarizer, doc: DocInfo, indices: list[int]
) -> dict[int, str]:
    """One-line summaries of the given chunks, from the cache or made now and cached
    (files are read and written in worker threads, as in ``summarize_range``)."""
    journal = Journal(store.root / doc.id / "summaries.jsonl")
    cache = await anyio.to_thread.run_sync(_cached_lines, journal)
    fresh = []
    for i in indices:
        if i in cache:
            continue
        chunk = (await anyio.to_thread.run_sync(store.read_chunks, doc, i, i))[0]
        made = await summarizer.summarize(chunk.text, LINE_TOKENS, kind="document section")
        line = " ".join(made.text.split())
        record = {"index": i, "text": line, "method": made.method}
        cache[i] = record
        fresh.append(record)
    if fresh:
        await anyio.to_thread.run_sync(_keep_lines, journal, fresh)
    return {i: str(cache[i]["text"]) for i in indices}


def _keep_lines(journal: Journal, fresh: list[dict[str, Any]]) -> None:
    """Add ``fresh`` to the cache, never into a forgotten document's folder."""
    if not journal.path.parent.is_dir():
        return
    try:
        with journal.locked():
            journal.read_new()
            journal.write(fresh)
    except (StorageError, OSError):  # a read-only data dir: made, not cached
        pass


def _cached_lines(journal: Journal) -> dict[int, dict[str, Any]]:
    """The cached one-line chunk summaries by chunk index."""
    if not journal.path.exists():
        return {}
    with journal.locked():
        records = journal.read_new()
    return {int(r["index"]): r for r in records if isinstance(r.get("index"), int)}
