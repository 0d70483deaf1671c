"""Terminal views (80 columns) and JSON of what ``catalog`` returns; ids never shortened."""

from __future__ import annotations

import shlex
import textwrap
from collections.abc import Iterable
from typing import Any

from context_window.cli.archive_format import entry_flags
from context_window.cli.catalog import Found, SessionRow
from context_window.documents.answers import search_header
from context_window.documents.freshness import CHANGED, MISSING, SourceState
from context_window.documents.tables import DocInfo, Window, window_label
from context_window.localtime import local_time
from context_window.models import Entry, Purged
from context_window.sessions.session import Session
from context_window.wording import plural

WIDTH = 80
INDENT = "    "
SNIPPET_LINES = 3


def _fit(text: str, width: int) -> str:
    """``text`` on one line, cut with '…' to ``width`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    """Aligned columns; the last column takes what is left of the width and is cut to fit."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers) - 1)]
    room = max(12, WIDTH - sum(w + 2 for w in widths))
    out = []
    for row in [headers, *rows]:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=False))
        ]
        out.append("  ".join([*cells, _fit(row[-1], room)]).rstrip())
    return out


def sessions_view(rows: list[SessionRow]) -> str:
    """Every session, newest first: id, live/total entries, live tokens, updated, title."""
    if not rows:
        return "no sessions"
    table = [
        [
            r.info.id,
            f"{r.stats.live:,}/{r.stats.total:,}",
            f"{r.stats.live_tokens:,}",
            local_time(r.info.updated_at),
            r.info.title,
        ]
        for r in rows
    ]
    lines = _table(["ID", "LIVE/ALL", "TOKENS", "UPDATED", "TITLE"], table, {1, 2})
    return "\n".join([*lines, "", "show one with: context-window show SESSION"])


def _wrapped(text: str, indent: str = INDENT) -> list[str]:
    """Each line of ``text`` indented, long lines wrapped at the width."""
    out: list[str] = []
    for line in text.splitlines() or [""]:
        if len(indent) + len(line) <= WIDTH:
            out.append((indent + line).rstrip())
            continue
        out.extend(
            textwrap.wrap(
                line,
                WIDTH,
                initial_indent=indent,
                subsequent_indent=indent,
                break_on_hyphens=False,
                replace_whitespace=False,
            )
            or [indent]
        )
    return out


def _entry_head(e: Entry) -> str:
    """``id  time  role  [flags]  #tags`` for one entry."""
    flags = entry_flags(e)
    parts = [e.id, local_time(e.created_at, seconds=True), e.role]
    if flags:
        parts.append("[" + ", ".join(flags) + "]")
    if e.tags:
        parts.append(" ".join(f"#{t}" for t in e.tags))
    return "  ".join(parts)


def _head_lines(head: str, indent: str = "") -> list[str]:
    """A heading line, wrapped (never inside a word, so ids stay whole)."""
    return textwrap.wrap(
        head,
        WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + INDENT,
        break_long_words=False,
        break_on_hyphens=False,
    )


def session_view(session: Session, entries: list[Entry], everything: bool) -> str:
    """A session's header and its entries in time order, each text indented and wrapped."""
    stats = session.stats()
    counts = (
        f"{stats.live:,} live of {plural(stats.total, 'entry')} ({stats.superseded:,} superseded, "
        f"{stats.expired:,} expired, {stats.deleted:,} deleted, {stats.pinned:,} pinned), "
        f"{stats.live_tokens:,} live tokens; "
        f"updated {local_time(session.updated_at())}"
    )
    lines = [_fit(f"{session.id}: {session.title}", WIDTH), *textwrap.wrap(counts, WIDTH)]
    if stats.skipped_lines:
        lines.append(
            f"{plural(stats.skipped_lines, 'unreadable line')} skipped; see context-window doctor"
        )
    if not everything and stats.live < stats.total:
        lines.append("showing live entries; --all adds superseded, expired and deleted ones")
    for e in entries:
        lines += ["", *_head_lines(_entry_head(e))]
        if e.replaces:
            lines.append(f"{INDENT}(summary of {plural(len(e.replaces), 'entry')})")
        lines += _wrapped(e.text)
    if not entries:
        lines += ["", "no entries"]
    return "\n".join(lines)


def documents_view(docs: list[tuple[DocInfo, SourceState]]) -> str:
    """Every document: id, chunks, tokens, characters, ingested time, title; source below,
    and how to refresh it when the file changed since ingest."""
    if not docs:
        return "no documents"
    out: list[str] = []
    for d, state in docs:
        out.append(
            f"{d.id}  {plural(d.chunks, 'chunk')}  {plural(d.tokens, 'token')}  "
            f"{plural(d.chars, 'char')}  "
            f"ingested {local_time(d.created_at)}"
        )
        out.append(INDENT + _fit(d.title, WIDTH - len(INDENT)))
        out.append(INDENT + _fit(f"source: {d.source}", WIDTH - len(INDENT)))
        if state.state == CHANGED:
            again = f"context-window ingest {shlex.quote(d.source)} --doc-id {d.id}"
            out.append(f"{INDENT}changed since ingest ({state.reason}): {again}")
        elif state.state == MISSING:
            out.append(f"{INDENT}source missing: the file is gone; this copy still works")
    return "\n".join(out)


def _snippet(text: str, focus: int = 0) -> list[str]:
    """``SNIPPET_LINES`` wrapped lines of ``text``, from line ``focus`` where it can be."""
    source = text.strip().split("\n")
    start = max(0, min(focus, len(source) - SNIPPET_LINES))
    lines = _wrapped("\n".join(source[start : start + SNIPPET_LINES + 1]))
    if len(lines) > SNIPPET_LINES:
        lines = [*lines[:SNIPPET_LINES], f"{INDENT}…"]
    return [f"{INDENT}…", *lines] if start else lines


# How a person reads on from a hit (doc_search tells the model doc_window instead).
READ_ON = "Read on from a line: context-window window DOC --line N"


def search_view(found: Found) -> str:
    """Matches by session, best first, then the documents' lines as doc_search shows them."""
    out: list[str] = []
    groups: dict[str, list[str]] = {}
    for h in found.entries:
        group = groups.setdefault(f"session {h.session_id}: {h.session_title}", [])
        head = f"{_entry_head(h.entry)}  (score {h.score:.2f})"
        group += [*_head_lines(head, "  "), *_snippet(h.entry.text, h.focus)]
    for title, lines in groups.items():
        if out:
            out.append("")
        out += [_fit(title, WIDTH), *lines]
    answer = found.lines
    if answer is not None and answer.hits:
        if out:
            out.append("")
        header = search_header(
            len(answer.hits), answer.used_tokens, answer.budget, answer.omitted, answer.short
        )
        out += [f"documents: {header}", READ_ON]
        out += [h.render(answer.short) for h in answer.hits]
    if not out:
        return "no matches"
    return "\n".join(out)


def window_view(w: Window) -> str:
    """A document's chunks in order, each under its label; then where to go on from."""
    n = w.doc.chunks
    if not w.chunks:
        return f"{w.doc.id}: past the end ({plural(n, 'chunk')})"
    first, last = w.chunks[0].index, w.chunks[-1].index
    out = [f"{w.doc.id}: {w.doc.title} · chunks {first}-{last} of {n}"]
    for c in w.chunks:
        out += ["", window_label(c), c.text]
    if w.truncated:
        out.append("(cut to the budget: --budget shows more)")
    if not w.at_end:
        out += ["", f"next: context-window window {w.doc.id} --from {w.cursor}"]
    return "\n".join(out)


def entry_json(e: Entry) -> dict[str, Any]:
    """An entry as a JSON object, with its flags."""
    return {
        "id": e.id,
        "seq": e.seq,
        "created_at": e.created_at,
        "role": e.role,
        "tags": list(e.tags),
        "flags": entry_flags(e),
        "replaces": list(e.replaces),
        "tokens": e.tokens,
        "text": e.text,
    }


def sessions_json(rows: Iterable[SessionRow]) -> list[dict[str, Any]]:
    """Sessions as JSON objects."""
    return [
        {
            "id": r.info.id,
            "title": r.info.title,
            "created_at": r.info.created_at,
            "updated_at": r.info.updated_at,
            "live": r.stats.live,
            "total": r.stats.total,
            "live_tokens": r.stats.live_tokens,
        }
        for r in rows
    ]


def session_json(session: Session, entries: list[Entry]) -> dict[str, Any]:
    """A session and its entries as one JSON object."""
    return {"id": session.id, "title": session.title, "entries": [entry_json(e) for e in entries]}


def documents_json(docs: Iterable[tuple[DocInfo, SourceState]]) -> list[dict[str, Any]]:
    """Documents as JSON objects, with their source's state (as doc_list gives it)."""
    fields = ("id", "title", "source", "sha256", "chars", "chunks", "tokens", "created_at")
    return [{**{k: getattr(d, k) for k in fields}, "source_state": s.state} for d, s in docs]


def search_json(found: Found) -> dict[str, Any]:
    """Search results as one JSON object: entries, then the documents' lines, best first."""
    return {
        "entries": [
            {"session_id": h.session_id, "score": h.score, **entry_json(h.entry)}
            for h in found.entries
        ],
        "lines": [h.data() for h in (found.lines.hits if found.lines is not None else ())],
    }


def purge_view(session_id: str, done: Purged, dry_run: bool) -> str:
    """What a purge erased (or would erase), and what it could not."""
    verb = "would erase" if dry_run else "erased"
    lines = [
        f"{session_id}: {verb} {plural(len(done.entries), 'deleted or expired entry')} "
        f"and {plural(done.patches, 'patch record')}; {plural(done.kept, 'record')} kept"
    ]
    if done.unreadable:
        lines.append(f"{verb} {plural(done.unreadable, 'unreadable line')} too")
    for eid, summary in done.folded:
        lines.append(
            f"note: {eid} was folded into summary {summary}, whose text may still "
            f"paraphrase it; delete {summary} too (context_update) and purge again to erase that"
        )
    if not dry_run and done.entries:
        lines.append("the log was rewritten atomically; other processes re-read it")
    return "\n".join(lines)
