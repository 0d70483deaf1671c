"""The document tools: thin adapters from MCP calls to the document store (views in docviews)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Annotated, ParamSpec

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult
from pydantic import Field

from context_window import packing
from context_window.documents.store import DocumentStore
from context_window.documents.summaries import chunk_lines, summarize_range
from context_window.documents.tables import DocInfo
from context_window.packing import settle
from context_window.server.adapters import DESTROYS, READ_ONLY, WRITES, guarded, result
from context_window.server.progress import ingest_in_thread
from context_window.server.views import (
    chunk_data,
    collapse,
    doc_data,
    hit_data,
    kept_data,
    render_doc_line,
    render_hit,
    render_ingest,
    render_summary,
    render_window,
    search_header,
    search_reserve,
    window_label,
    window_reserve,
)
from context_window.service import DOCUMENTS, Service
from context_window.wording import plural

P = ParamSpec("P")
OUTLINE_SUMMARIES = 20  # chunks summarized per doc_outline call unless max_chunks says otherwise

DocId = Annotated[str, Field(description="Document id from doc_ingest or doc_list")]
Budget = Annotated[int | None, Field(ge=64, le=1_000_000, description="Tokens (default: --budget)")]


def from_keyword(
    fn: Callable[P, Awaitable[CallToolResult]],
) -> Callable[P, Awaitable[CallToolResult]]:
    """Let a tool take the argument ``from`` (a Python keyword) as its ``from_`` parameter.

    The SDK validates arguments by their alias and passes them by alias too.
    """

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> CallToolResult:
        if "from" in kwargs:
            kwargs["from_"] = kwargs.pop("from")
        return await fn(*args, **kwargs)

    return wrapper


def fit_lines(header: str, lines: list[str], budget: int, service: Service) -> str:
    """``header`` and as many ``lines`` as fit ``budget`` (see ``packing.fit_lines``)."""

    def omitted(n: int) -> str:
        return (
            f"… {n:,} more lines omitted to fit {budget} tokens "
            "(use max_chunks, doc_window or doc_search)"
        )

    return packing.fit_lines(header, lines, budget, service.counter, omitted)


def unsearchable_answer(
    store: DocumentStore, doc_id: str | None, budget: int, service: Service
) -> str:
    """What doc_search shows for a query with no searchable words: an outline, or the documents."""
    note = "No searchable words in the query (only stop words or symbols)."
    if doc_id is not None:
        doc = store.get(doc_id)
        lines = [
            f"[{a}] {t or '(no heading)'}" if a == b else f"[{a}-{b}] {t or '(no heading)'}"
            for a, b, t, _ in collapse(store.outline(doc))
        ]
        return fit_lines(f"{note} Outline of {doc.id}:", lines, budget, service)
    docs = [f"{d.id}: {d.title} ({plural(d.chunks, 'chunk')})" for d in store.all()]
    return fit_lines(f"{note} Documents:", docs or ["none"], budget, service)


def _outline(store: DocumentStore, doc_id: str) -> tuple[DocInfo, list[tuple[int, str, int]]]:
    doc = store.get(doc_id)
    return doc, store.outline(doc)


def register_document_tools(app: MCPServer, service: Service) -> None:
    """Register the doc_* tools on ``app``."""
    store = service.documents
    budget_default = service.settings.budget
    audit = service.settings.audit

    @app.tool(
        annotations=WRITES,
        description="Ingest a large text or a file (under an ingest root) once, to search and "
        "page through it. Give exactly one of text or file_path.",
    )
    @guarded("doc_ingest", audit)
    async def doc_ingest(
        ctx: Context,
        text: str | None = None,
        file_path: Annotated[
            str | None, Field(description="Path under an ingest root; relative = first root")
        ] = None,
        title: str | None = None,
        doc_id: Annotated[str | None, Field(description="Id to create or replace")] = None,
    ) -> CallToolResult:
        done = await ingest_in_thread(
            store, ctx.report_progress, text=text, file_path=file_path, title=title, doc_id=doc_id
        )
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
        return result(render_ingest(done), data)

    @app.tool(
        annotations=READ_ONLY,
        description="A document's structure: heading trail and tokens per chunk. "
        "summarize=true adds a cached one-line summary per chunk.",
    )
    @guarded("doc_outline", audit)
    async def doc_outline(
        doc_id: DocId,
        summarize: bool = False,
        max_chunks: Annotated[int | None, Field(ge=1, le=100_000)] = None,
    ) -> CallToolResult:
        doc, entries = await service.run(DOCUMENTS, lambda: _outline(store, doc_id))
        if summarize:
            entries = entries[: max_chunks or OUTLINE_SUMMARIES]
            lines_of = await chunk_lines(store, service.summarizer, doc, [e[0] for e in entries])
            lines = [f"[{i}] {t or '-'} — {n} tokens: {lines_of[i]}" for i, t, n in entries]
        else:
            entries = entries[:max_chunks] if max_chunks else entries
            lines = [
                f"[{a}] {t or '(no heading)'} — {n} tokens"
                if a == b
                else f"[{a}-{b}] {t or '(no heading)'} — {n} tokens"
                for a, b, t, n in collapse(entries)
            ]
        shown = f"chunks 0-{len(entries) - 1} of {doc.chunks}"
        header = f"{doc.title} ({doc.id}): {shown}, ~{doc.tokens:,} tokens, cursor at {doc.cursor}"
        if not summarize and all(not t for _, t, _ in entries):
            header += "\nNo headings: use doc_search, doc_window, or summarize=true."
        text = fit_lines(header, lines, budget_default, service)
        data = {
            **doc_data(doc),
            "outline": [{"index": i, "heading": t, "tokens": n} for i, t, n in entries],
        }
        return result(text, data, budget_default, service.counter.count)

    @app.tool(
        annotations=READ_ONLY,
        description="Find the lines that best match a query, with line numbers, best first, "
        "within a budget. Omit doc_id to search every document.",
    )
    @guarded("doc_search", audit)
    async def doc_search(
        query: str,
        doc_id: Annotated[str | None, Field(description="Omit to search all documents")] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="Most chunks to show")] = 10,
        budget_tokens: Budget = None,
    ) -> CallToolResult:
        def work() -> CallToolResult:
            budget = budget_tokens or budget_default
            reserve, terse = search_reserve(budget, service.counter.count)
            found = store.answer(query, doc_id, limit, budget, reserve)
            if found is None:
                return result(
                    unsearchable_answer(store, doc_id, budget, service),
                    {"hits": [], "query": query, "omitted": 0, "searchable": False},
                    budget,
                    service.counter.count,
                )
            if not found.hits:
                where = f"document {doc_id}" if doc_id else "any document"
                msg = service.counter.truncate(
                    f"No line of {where} matches. Try other or fewer words.", budget
                )
                data = {"hits": [], "query": query, "omitted": 0, "searchable": True}
                return result(msg, data, budget, service.counter.count)
            body = [render_hit(h, found.short) for h in found.hits]
            text, used = settle(
                lambda u: "\n\n".join(
                    [search_header(len(found.hits), u, budget, found.omitted, terse), *body]
                ),
                budget,
                service.counter.count,
            )
            data = {
                "query": query,
                "searchable": True,
                "hits": [hit_data(h) for h in found.hits],
                "omitted": found.omitted,
                "used_tokens": used,
                "budget": budget,
            }
            return result(text, data, budget, service.counter.count)

        return await service.run(DOCUMENTS, work)

    @app.tool(
        annotations=WRITES,
        description="Read a document in order within a budget. Without from, continues at the "
        "cursor, which advances past what was returned.",
    )
    @guarded("doc_window", audit)
    @from_keyword
    async def doc_window(
        doc_id: DocId,
        from_: Annotated[int | None, Field(alias="from", ge=0, description="First chunk")] = None,
        to: Annotated[int | None, Field(ge=0, description="Last chunk (inclusive)")] = None,
        budget_tokens: Budget = None,
        reset: Annotated[bool, Field(description="Start again at chunk 0")] = False,
        session_id: Annotated[
            str | None, Field(description="context_open id: page with your own cursor")
        ] = None,
        line: Annotated[
            int | None, Field(ge=1, description="Open at this source line (from doc_search)")
        ] = None,
    ) -> CallToolResult:
        def work() -> CallToolResult:
            budget = budget_tokens or budget_default
            reserve, terse = window_reserve(
                store.get(doc_id), session_id, budget, service.counter.count
            )
            w = store.window(
                doc_id,
                from_,
                to,
                budget,
                reset,
                session_id,
                line=line,
                label=None if terse else window_label,
                reserve=reserve,
            )
            text, used = settle(
                lambda u: render_window(w, budget, terse, used=u), budget, service.counter.count
            )
            data = {
                "doc_id": w.doc.id,
                "session_id": w.session_id,
                "chunks": [chunk_data(c) for c in w.chunks],
                "cursor": w.cursor,
                "total_chunks": w.doc.chunks,
                "at_end": w.at_end,
                "truncated": w.truncated,
                "used_tokens": used if w.chunks else 0,
                "budget": budget,
            }
            return result(text, data, budget, service.counter.count)

        return await service.run(DOCUMENTS, work)

    @app.tool(
        annotations=WRITES,
        description="Summarize a range of chunks or the whole document (the whole-document "
        "summary is cached; refresh=true recomputes).",
    )
    @guarded("doc_summarize", audit)
    @from_keyword
    async def doc_summarize(
        doc_id: DocId,
        from_: Annotated[int | None, Field(alias="from", ge=0)] = None,
        to: Annotated[int | None, Field(ge=0)] = None,
        target_tokens: Annotated[int, Field(ge=16, le=20_000)] = 500,
        refresh: bool = False,
    ) -> CallToolResult:
        s = await summarize_range(
            store, service.summarizer, doc_id, from_, to, target_tokens, refresh
        )
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
        return result(render_summary(s), data)

    @app.tool(annotations=READ_ONLY, description="List ingested documents, newest first.")
    @guarded("doc_list", audit)
    async def doc_list() -> CallToolResult:
        def work() -> CallToolResult:
            docs = store.all()
            states = [store.source_state(d) for d in docs]
            sessions = [store.session_cursors(d) for d in docs]
            if not docs:
                text = "No documents yet. Call doc_ingest(text=... or file_path=...)."
            else:
                text = "\n".join(
                    [f"{len(docs)} documents (newest first):"]
                    + [
                        render_doc_line(d, st, len(c))
                        for d, st, c in zip(docs, states, sessions, strict=True)
                    ]
                )
            listed = [
                {**doc_data(d), "source_state": st.state, "session_cursors": c}
                for d, st, c in zip(docs, states, sessions, strict=True)
            ]
            return result(text, {"documents": listed})

        return await service.run(DOCUMENTS, work)

    @app.tool(
        annotations=DESTROYS,
        description="Delete a document and everything derived from it (chunks, index, summaries).",
    )
    @guarded("doc_forget", audit)
    async def doc_forget(doc_id: DocId) -> CallToolResult:
        def work() -> CallToolResult:
            doc = store.forget(doc_id)
            text = f"Forgot doc {doc.id} ({doc.title}): its files, index and summaries are deleted."
            return result(text, {"doc_id": doc.id, "forgotten": True})

        return await service.run(DOCUMENTS, work)
