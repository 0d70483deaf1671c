"""build_server(service) -> MCPServer: registers every tool; tools live in *_tools.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult

from context_window.adapters import guarded, result
from context_window.document_tools import register_document_tools
from context_window.service import Service
from context_window.session_tools import READ_ONLY, register_session_tools

INSTRUCTIONS = (
    "External memory for a small context window. Sessions: context_open, then context_append "
    "notes/decisions, context_recall what you need, context_compact when over budget. "
    "Documents: doc_ingest large text once, then doc_search / doc_window / doc_summarize. "
    "Call context_guide for the full workflow."
)


def guide_text(service: Service) -> str:
    """The workflow, with this instance's data dir, budget and ingest roots."""
    s = service.settings
    roots = ", ".join(str(r) for r in s.ingest_roots) or "none (doc_ingest takes inline text only)"
    return f"""context-window: memory outside your context window. You must call these tools.

Sessions (working memory for a long task):
1. context_open(session_id="my-task") once; reuse the id in every later call.
2. context_append(text, role=note|decision|...) after each step: findings, decisions, dead ends.
   pinned=true for facts that must never be lost (goals, constraints).
3. context_recall(query="...") before acting, to get back what is relevant within a budget.
4. When an answer says "over budget", call context_compact: older entries become one summary;
   originals stay recoverable with context_recall(include_superseded=true).
5. context_update pins/unpins, deletes or restores (delete=false) an entry.

Documents (too large to read at once):
1. doc_ingest(file_path=... or text=...) once.
2. doc_outline to see the structure; doc_search(query) to find passages.
3. doc_window(doc_id) to page through in order (the cursor is kept; call again to continue;
   session_id=your context_open id keeps your own cursor).
4. doc_summarize for a range or the whole; doc_forget when done.

This instance: data dir {s.data_dir}; budget {s.budget} tokens per answer;
chunks of ~{s.chunk_tokens} tokens; ingest roots: {roots}.
Token counts: {service.counter.describe()}. Summaries: {service.summarizer.describe()}."""


def build_server(service: Service) -> MCPServer:
    """A server exposing every tool of ``service``; tests build as many as they like."""

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.calibrate_in_background)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    app: MCPServer = MCPServer(
        name="context-window",
        version=service.version,
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
    )
    register_session_tools(app, service)
    register_document_tools(app, service)

    @app.tool(annotations=READ_ONLY, description="How to use these tools. Read once at the start.")
    @guarded("context_guide", service.settings.audit)
    async def context_guide() -> CallToolResult:
        s = service.settings
        data = {
            "data_dir": str(s.data_dir),
            "budget": s.budget,
            "ingest_roots": [str(r) for r in s.ingest_roots],
            "token_counts": service.counter.source,
            "token_ratio": service.counter.ratio,
            "summarizer": service.summarizer.describe(),
        }
        return result(guide_text(service), data)

    return app
