"""The document tools: each validates, makes one Service call and renders its view."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Annotated, ParamSpec

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult
from pydantic import Field

from context_window.server.adapters import DESTROYS, READ_ONLY, REPLACES, WRITES, guarded
from context_window.server.engine import Engine

P = ParamSpec("P")

DocId = Annotated[str, Field(description="From doc_list")]
Budget = Annotated[int | None, Field(ge=64, le=1_000_000)]


def from_keyword(
    fn: Callable[P, Awaitable[CallToolResult]],
) -> Callable[P, Awaitable[CallToolResult]]:
    """Take the argument ``from`` (a keyword) as ``from_``: the SDK passes it by alias."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> CallToolResult:
        if "from" in kwargs:
            kwargs["from_"] = kwargs.pop("from")
        return await fn(*args, **kwargs)

    return wrapper


def register_document_tools(app: MCPServer, engine: Engine) -> None:
    """Register the doc_* tools on ``app``."""
    audit, ready = engine.settings.audit, engine.ready

    @app.tool(
        title="Ingest document",
        annotations=REPLACES,
        description="Ingest a large text, or a file under an ingest root, once to search and "
        "page. Give text or file_path.",
    )
    @guarded("doc_ingest", audit, ready)
    async def doc_ingest(
        ctx: Context,
        text: str | None = None,
        file_path: Annotated[
            str | None, Field(description="Path under an ingest root; relative = first root")
        ] = None,
        title: str | None = None,
        doc_id: Annotated[str | None, Field(description="Id to create or replace")] = None,
    ) -> CallToolResult:
        from context_window.server import views

        return views.ingested(
            await engine.service.ingest(ctx.report_progress, text, file_path, title, doc_id)
        )

    @app.tool(
        title="Outline document",
        annotations=READ_ONLY,
        description="Headings and tokens per chunk; summarize=true adds a cached "
        "one-line summary of each.",
    )
    @guarded("doc_outline", audit, ready)
    async def doc_outline(
        doc_id: DocId,
        summarize: bool = False,
        max_chunks: Annotated[int | None, Field(ge=1, le=100_000)] = None,
    ) -> CallToolResult:
        from context_window.server import views
        from context_window.server.document_text import OUTLINE

        return views.outlined(
            await engine.service.outline(doc_id, summarize, max_chunks, OUTLINE),
            engine.service.counter.count,
        )

    @app.tool(
        title="Search documents",
        annotations=READ_ONLY,
        description="The lines best matching a query, numbered, best first, within a budget. "
        "Omit doc_id to search all documents.",
    )
    @guarded("doc_search", audit, ready)
    async def doc_search(
        query: str,
        doc_id: str | None = None,
        limit: Annotated[int, Field(ge=1, le=100, description="Most chunks to show")] = 10,
        budget_tokens: Budget = None,
    ) -> CallToolResult:
        from context_window.server import views
        from context_window.server.document_text import SEARCH

        return views.searched(
            await engine.service.search(query, doc_id, limit, budget_tokens, SEARCH),
            engine.service.counter.count,
        )

    @app.tool(
        title="Read document",
        annotations=WRITES,
        description="Read a document in order within a budget. Without from, goes on from the "
        "cursor, which advances.",
    )
    @guarded("doc_window", audit, ready)
    @from_keyword
    async def doc_window(
        doc_id: DocId,
        from_: Annotated[int | None, Field(alias="from", ge=0, description="First chunk")] = None,
        to: Annotated[int | None, Field(ge=0, description="Last chunk (inclusive)")] = None,
        budget_tokens: Budget = None,
        reset: Annotated[bool, Field(description="Start again at chunk 0")] = False,
        session_id: Annotated[
            str | None, Field(description="Your context_open id: own cursor")
        ] = None,
        line: Annotated[
            int | None, Field(ge=1, description="A source line (from doc_search)")
        ] = None,
    ) -> CallToolResult:
        from context_window.server import views
        from context_window.server.document_text import WINDOW

        paged = await engine.service.window(
            doc_id, WINDOW, from_, to, budget_tokens, reset, session_id, line
        )
        return views.paged(paged, engine.service.counter.count)

    @app.tool(
        title="Summarize document",
        annotations=WRITES,
        description="Summarize chunks from-to or the whole document (cached; refresh=true "
        "recomputes).",
    )
    @guarded("doc_summarize", audit, ready)
    @from_keyword
    async def doc_summarize(
        doc_id: DocId,
        from_: Annotated[int | None, Field(alias="from", ge=0)] = None,
        to: Annotated[int | None, Field(ge=0)] = None,
        target_tokens: Annotated[int, Field(ge=16, le=20_000)] = 500,
        refresh: bool = False,
    ) -> CallToolResult:
        from context_window.server import views

        return views.summarized(
            await engine.service.summarize(doc_id, from_, to, target_tokens, refresh)
        )

    @app.tool(
        title="List documents",
        annotations=READ_ONLY,
        description="List ingested documents, newest first.",
    )
    @guarded("doc_list", audit, ready)
    async def doc_list() -> CallToolResult:
        from context_window.server import views

        service = engine.service
        listed, damaged = await service.list_documents(), await service.damaged_documents()
        return views.docs_listed(listed, damaged, service.settings.budget, service.counter)

    @app.tool(
        title="Forget document",
        annotations=DESTROYS,
        description="Delete a document with its chunks, index and summaries.",
    )
    @guarded("doc_forget", audit, ready)
    async def doc_forget(doc_id: DocId) -> CallToolResult:
        from context_window.server import views

        return views.forgotten(await engine.service.forget(doc_id))
