"""How the document tools show results: compact text for the model, and structured content."""

from __future__ import annotations

import time
from typing import Any

from context_window.docfresh import CHANGED, MISSING, SourceState
from context_window.docreingest import describe
from context_window.docsummary import DocSummary
from context_window.doctables import DocInfo, Ingested, Kept, Window
from context_window.models import Chunk, Hit


def excerpt(text: str, query: str, before: int = 2) -> str:
    """``text`` from a little before its first line that holds a word of ``query``."""
    words = [w for w in query.lower().split() if len(w) > 1]
    lines = text.splitlines()
    for i, line in enumerate(lines):
        low = line.lower()
        if any(w in low for w in words):
            return "\n".join(lines[max(0, i - before) :])
    return text


def doc_data(doc: DocInfo) -> dict[str, Any]:
    """A document's metadata as structured content."""
    return {
        "id": doc.id,
        "title": doc.title,
        "source": doc.source,
        "sha256": doc.sha256,
        "chars": doc.chars,
        "chunks": doc.chunks,
        "tokens": doc.tokens,
        "cursor": doc.cursor,
        "created_at": doc.created_at,
        "summary_cached": doc.summary is not None,
    }


def chunk_data(chunk: Chunk) -> dict[str, Any]:
    """A chunk as structured content."""
    return {
        "index": chunk.index,
        "text": chunk.text,
        "tokens": chunk.tokens,
        "start": chunk.start,
        "end": chunk.end,
        "heading": chunk.heading,
    }


def render_ingest(done: Ingested) -> str:
    """doc_ingest's text: id, size, and what to call next."""
    d = done.doc
    if done.reused:
        return (
            f"Same content as doc {d.id} ({d.title}), already ingested: returned it, no copy "
            f"made. {d.chars:,} chars, ~{d.tokens:,} tokens, {d.chunks} chunks.\n"
            f"next: doc_outline(doc_id={d.id!r}) / doc_search(query, doc_id={d.id!r})"
        )
    verb = "Replaced" if done.replaced else "Ingested"
    lines = [
        f"{verb} doc {d.id} ({d.title}): {d.chars:,} chars, ~{d.tokens:,} tokens, "
        f"{d.chunks} chunks in {done.seconds:.1f}s."
    ]
    if done.kept is not None:
        lines.append(f"{describe(done.kept)}; cursor at {d.cursor}.")
    if done.duplicate_of:
        lines.append(f"Note: same content as doc {done.duplicate_of}.")
    lines.append(f"next: doc_outline(doc_id={d.id!r}) / doc_search(query, doc_id={d.id!r})")
    return "\n".join(lines)


def kept_data(kept: Kept | None) -> dict[str, Any]:
    """What a replacing ingest kept, as structured content (empty for a new document)."""
    if kept is None:
        return {}
    ranges = []
    if kept.prefix:
        ranges.append([0, kept.prefix - 1])
    if kept.tail:
        ranges.append([kept.tail_old + kept.shift, kept.new_chunks - 1])
    return {
        "unchanged": kept.unchanged,
        "changed": kept.new_chunks - kept.unchanged,
        "unchanged_ranges": ranges,
        "previous_chunks": kept.old_chunks,
    }


def render_doc_line(d: DocInfo, state: SourceState, sessions: int) -> str:
    """One doc_list line, with a second line saying how to refresh a stale source."""
    cursors = f" (+{sessions} session cursors)" if sessions else ""
    line = (
        f"  {d.id}: {d.title} — {d.chunks} chunks, ~{d.tokens:,} tokens, "
        f"cursor {d.cursor}{cursors}, ingested {_when(d.created_at)}"
    )
    if state.state == CHANGED:
        line += (
            f"\n    STALE: source changed since ingest ({state.reason}); re-ingest with "
            f"doc_ingest(file_path={d.source!r}, doc_id={d.id!r})"
        )
    elif state.state == MISSING:
        line += f"\n    SOURCE MISSING: {d.source} is gone; this copy still works"
    return line


def collapse(entries: list[tuple[int, str, int]]) -> list[tuple[int, int, str, int]]:
    """Runs of consecutive chunks with the same heading trail: (first, last, trail, tokens)."""
    runs: list[tuple[int, int, str, int]] = []
    for i, trail, tokens in entries:
        if runs and runs[-1][2] == trail and runs[-1][1] == i - 1:
            first, _, _, total = runs[-1]
            runs[-1] = (first, i, trail, total + tokens)
        else:
            runs.append((i, i, trail, tokens))
    return runs


def hit_header(hit: Hit, with_id: bool = False) -> str:
    """``--- title [i] heading · score ---`` (the doc id after the title when asked)."""
    heading = f" {hit.chunk.heading}" if hit.chunk.heading else ""
    title = f"{hit.title} ({hit.doc_id})" if with_id else hit.title
    return f"--- {title} [{hit.chunk.index}]{heading} · {hit.score:.2f} ---"


def render_window(w: Window, budget: int) -> str:
    """doc_window's text: a header, then each chunk under its index and heading."""
    d = w.doc
    call = f"doc_id={d.id!r}" + (f", session_id={w.session_id!r}" if w.session_id else "")
    if not w.chunks:
        return (
            f"end of document; reset=true to start over, or pass from=N "
            f"({d.id} has {d.chunks} chunks)"
        )
    first, last = w.chunks[0].index, w.chunks[-1].index
    head = (
        f"{d.title} [{first}-{last}] of {d.chunks} chunks · {w.used_tokens}/{budget} tokens · "
        + ("end of document" if w.at_end else f"next: doc_window({call}) from {w.cursor}")
    )
    if w.truncated:
        head += (
            f"\nchunk {first} is larger than the budget: truncated to {budget} tokens "
            "(raise budget_tokens to read it whole)"
        )
    body = [f"[{c.index}] {c.heading}".rstrip() + f"\n{c.text}" for c in w.chunks]
    return "\n\n".join([head, *body])


def render_summary(s: DocSummary) -> str:
    """doc_summarize's text: scope, method (and why), what was read, then the summary."""
    what = "whole document" if s.whole else f"chunks {s.first}-{s.last}"
    method = s.summary.method + (f" ({s.summary.reason})" if s.summary.reason else "")
    cached = " (cached; refresh=true recomputes)" if s.cached else ""
    return (
        f"Summary of {s.doc.id} ({s.doc.title}), {what}: {s.summary.tokens} tokens by "
        f"{method}{cached}. {s.note}.\n\n{s.summary.text}"
    )


def _when(stamp: float) -> str:
    """A local date and time, to the minute."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))
