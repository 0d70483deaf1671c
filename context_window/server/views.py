"""What each tool returns: its text (from ``session_text`` and ``document_text``) and the
same facts as structured content, fitted to the budget too (some clients show the model
that instead of the text)."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from mcp.types import CallToolResult, TextContent

from context_window.documents.outline import Outline
from context_window.documents.summaries import DocSummary
from context_window.documents.tables import DocInfo, Ingested, Kept
from context_window.errors import REINGEST
from context_window.models import Count, Entry, SessionPage
from context_window.packing import fit_data, settle
from context_window.server import document_text as dt
from context_window.server import session_text as st
from context_window.server.adapters import ADVICE
from context_window.service import (
    Changed,
    Listed,
    Opened,
    Paged,
    Recalled,
    Searched,
    Service,
)
from context_window.sessions.compaction import Compaction
from context_window.tokens import TokenCounter


def result(
    text: str,
    data: dict[str, Any],
    budget: int | None = None,
    count: Count | None = None,
) -> CallToolResult:
    """A tool result: the text and the same facts as structured content, fitted alike."""
    if budget is not None and count is not None:
        data = fit_data(data, budget, count)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def entry_data(entry: Entry) -> dict[str, Any]:
    """An entry as structured content: every field, lists as lists, and its ref."""
    data = {f.name: getattr(entry, f.name) for f in fields(entry)}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()} | {"ref": entry.ref}


def pinned_data(entry: Entry) -> dict[str, Any]:
    """A pinned entry as context_open shows it: the start of its text, as the text does."""
    cut = len(entry.text) > st.PREVIEW_CHARS
    text = entry.text[: st.PREVIEW_CHARS - 1] + "…" if cut else entry.text
    out = {"id": entry.id, "ref": entry.ref, "created_at": entry.created_at, "role": entry.role}
    out["text"] = text
    return out | ({"tags": list(entry.tags)} if entry.tags else {}) | {"truncated": cut}


def recalled_data(entry: Entry, score: float) -> dict[str, Any]:
    """A recalled entry as structured content, flags and lists only when set."""
    data = entry_data(entry)
    shown = {k: data.pop(k) for k in ("id", "ref", "created_at", "role", "text")}
    del data["seq"], data["tokens"]
    return shown | {"score": score} | {k: v for k, v in data.items() if v}


def doc_data(doc: DocInfo) -> dict[str, Any]:
    """A document's metadata as structured content."""
    shown = ("id", "title", "source", "sha256", "chars", "chunks", "tokens", "cursor", "created_at")
    return {k: getattr(doc, k) for k in shown} | {"summary_cached": doc.summary is not None}


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


# The session tools.


def opened(o: Opened) -> CallToolResult:
    """context_open."""
    data = {
        "session_id": o.session.id,
        "title": o.session.title,
        "created": o.created,
        "live": o.stats.live,
        "total": o.stats.total,
        "tokens": o.stats.live_tokens,
        "budget": o.budget,
        "pinned": [pinned_data(e) for e in o.pinned],
    }
    if o.namesakes:
        data["namesakes"] = list(o.namesakes[: st.NAMESAKES_SHOWN])  # as the text names them
    return result(st.render_open(o), data)


def appended(c: Changed) -> CallToolResult:
    """context_append."""
    entry = c.entries[0]
    data = {
        "entry_id": entry.id,
        "ref": entry.ref,
        "tokens": entry.tokens,
        "session_tokens": c.stats.live_tokens,
        "budget": c.budget,
        "advice": st.advice(c.stats, c.budget),
    }
    return result(st.render_append(c), data)


def recalled(r: Recalled, count: Count) -> CallToolResult:
    """context_recall: the header states the answer's own size."""
    rec = r.recall
    body = st.recall_body(rec)  # rendered once: only the header's figure changes
    text, used = settle(lambda u: st.render_recall(rec, r.terse, u, body), r.budget, count)
    data = {
        "session_id": r.session_id,
        "entries": [recalled_data(e, rec.scores.get(e.id, 0.0)) for e in rec.entries],
        "candidates": rec.candidates,
        "searchable": rec.searchable,
        "used_tokens": used,
        "budget": rec.packed.budget,
        "omitted": rec.packed.omitted,
        "beyond_limit": rec.beyond_limit,
    }
    return result(text, data, r.budget, count)


def compacted(c: Compaction) -> CallToolResult:
    """context_compact."""
    data = {
        "session_id": c.session_id,
        "dry_run": c.dry_run,
        "folded": len(c.plan.entries) if len(c.plan.entries) >= 2 else 0,
        "folded_tokens": c.plan.tokens,
        "compaction_id": c.entry.id if c.entry else None,
        "summary_id": c.entry.id if c.entry else None,
        "summary_tokens": c.summary.tokens if c.summary else 0,
        "method": c.summary.method if c.summary else None,
        "reason": c.summary.reason if c.summary else "",
        "tokens_freed": c.tokens_freed,
        "kept_facts": list(c.kept_facts),
        "facts_not_kept": c.facts_not_kept,
        "left": c.plan.left,
    }
    return result(st.render_compaction(c), data)


def uncompacted(c: Changed, compaction_id: str) -> CallToolResult:
    """context_uncompact."""
    data = {
        "session_id": c.session.id,
        "compaction_id": compaction_id,
        "restored": [e.id for e in c.entries],
        "session_tokens": c.stats.live_tokens,
        "budget": c.budget,
    }
    return result(st.render_uncompact(c, compaction_id), data)


def status(c: Changed, counts: str, ratio: float, describe: str, summarizer: str) -> CallToolResult:
    """context_status: ``counts`` is where token counts come from, ``describe`` says so."""
    data = {
        **c.stats.__dict__,
        "session_id": c.session.id,
        "budget": c.budget,
        "token_counts": counts,
        "token_ratio": ratio,
        "summarizer": summarizer,
        "advice": st.advice(c.stats, c.budget) or "Within budget.",
    }
    return result(st.render_status(c, describe, summarizer), data)


def updated(entry: Entry) -> CallToolResult:
    """context_update."""
    return result(st.render_update(entry), entry_data(entry))


def sessions_listed(page: SessionPage, budget: int, counter: TokenCounter) -> CallToolResult:
    """context_list_sessions: one page, within the budget."""
    data = {
        "sessions": [
            {"id": i.id, "title": i.title, "created_at": i.created_at, "updated_at": i.updated_at}
            for i in page.sessions
        ],
        "total": page.total,
        "matched": page.matched,
        "offset": page.offset,
    }
    return result(st.render_sessions(page, budget, counter), data, budget, counter.count)


# The document tools.


def ingested(done: Ingested) -> CallToolResult:
    """doc_ingest."""
    data = {
        **doc_data(done.doc),
        "doc_id": done.doc.id,
        "duplicate_of": done.duplicate_of,
        "reused": done.reused,
        "replaced": done.replaced,
        "seconds": round(done.seconds, 3),
        **kept_data(done.kept),
        "next": ["doc_outline", "doc_search"],
    }
    return result(dt.render_ingest(done), data)


def outlined(o: Outline, count: Count) -> CallToolResult:
    """doc_outline."""
    data = {
        **doc_data(o.doc),
        "outline": [{"index": i, "heading": t, "tokens": n} for i, t, n in o.entries],
    }
    return result(o.text, data, o.budget, count)


def searched(s: Searched, count: Count) -> CallToolResult:
    """doc_search: hits best first under a header stating the answer's own size."""
    found = s.answer
    skipped = [
        f"Skipped {why:.200}{ADVICE[REINGEST]}." for _, why in (found.skipped if found else ())
    ]
    if found is None or not found.hits:
        data = {"hits": [], "query": s.query, "omitted": 0, "searchable": found is not None}
        text = "\n".join([s.instead, *skipped])
        return result(text, {**data, "skipped": skipped} if skipped else data, s.budget, count)
    body = [h.render(found.short) for h in found.hits]
    text, used = settle(
        lambda u: "\n\n".join(
            [
                dt.search_header(
                    len(found.hits), u, s.budget, found.omitted, s.terse, s.words_only
                ),
                *body,
            ]
        ),
        s.budget,
        count,
    )
    data = {
        "query": s.query,
        "searchable": True,
        "hits": [h.data() for h in found.hits],
        "omitted": found.omitted,
        "used_tokens": used,
        "budget": s.budget,
    }
    if skipped:  # a damaged document is named, beyond the budget of what was found
        text, data["skipped"] = "\n".join([*skipped, text]), skipped
    return result(text, data, s.budget, count)


def paged(p: Paged, count: Count) -> CallToolResult:
    """doc_window: chunks under a header stating the answer's own size."""
    w = p.window
    text, used = settle(lambda u: dt.render_window(w, p.budget, p.terse, used=u), p.budget, count)
    data = {
        "doc_id": w.doc.id,
        "session_id": w.session_id,
        "chunks": [asdict(c) for c in w.chunks],
        "cursor": w.cursor,
        "total_chunks": w.doc.chunks,
        "at_end": w.at_end,
        "truncated": w.truncated,
        "used_tokens": used if w.chunks else 0,
        "budget": p.budget,
    }
    return result(text, data, p.budget, count)


def summarized(s: DocSummary) -> CallToolResult:
    """doc_summarize."""
    data = {
        "doc_id": s.doc.id,
        "from": s.first,
        "to": s.last,
        "whole": s.whole,
        "text": s.summary.text,
        "method": s.summary.method,
        "reason": s.summary.reason,
        "tokens": s.summary.tokens,
        "note": s.note,
        "cached": s.cached,
    }
    return result(dt.render_summary(s), data)


def docs_listed(
    listed: list[Listed], damaged: dict[str, str], budget: int, counter: TokenCounter
) -> CallToolResult:
    """doc_list within the budget, naming the documents it cannot list."""
    data: dict[str, Any] = {
        "documents": [
            {**doc_data(x.doc), "source_state": x.state.state, "session_cursors": x.cursors}
            for x in listed
        ]
    }
    skipped = [
        f"Skipped document {doc_id!r}: damaged meta.json ({why}){ADVICE[REINGEST]}."
        for doc_id, why in damaged.items()
    ]
    if skipped:
        data["skipped"] = skipped
    text = dt.render_docs(listed, budget - counter.count("\n".join(skipped)), counter)
    return result("\n".join([text, *skipped]), data, budget, counter.count)


def forgotten(doc: DocInfo) -> CallToolResult:
    """doc_forget."""
    return result(dt.render_forget(doc), {"doc_id": doc.id, "forgotten": True})


def guided(text: str, service: Service) -> CallToolResult:
    """context_guide: the workflow, and this instance's settings."""
    s = service.settings
    data = {
        "data_dir": str(s.data_dir),
        "budget": s.budget,
        "ingest_roots": [str(r) for r in s.ingest_roots],
        "token_counts": service.counter.source,
        "token_ratio": service.counter.ratio,
        "summarizer": service.summarizer.describe(),
        "tools": s.tools,
    }
    return result(text, data)
