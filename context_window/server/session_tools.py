"""The session tools: each validates, makes one Service call and renders its view."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult
from pydantic import Field

from context_window.server.adapters import DESTROYS, READ_ONLY, WRITES, guarded
from context_window.server.engine import Engine

TTL = "Expire after N days unless pinned"
SessionId = Annotated[str, Field(description="From context_open")]


def register_session_tools(app: MCPServer, engine: Engine) -> None:
    """Register the context_* tools on ``app``."""
    audit, ready = engine.settings.audit, engine.ready

    @app.tool(
        title="Open session",
        annotations=WRITES,
        description="Create or resume a working-memory session. Call first; keep the id.",
    )
    @guarded("context_open", audit, ready)
    async def context_open(
        session_id: Annotated[str | None, Field(description="Id to resume/create")] = None,
        title: str | None = None,
    ) -> CallToolResult:
        from context_window.server import views

        return views.opened(await engine.service.open_session(session_id, title))

    @app.tool(
        title="Append entry",
        annotations=WRITES,
        description="Save a note, decision or dead end. Pin what must never be lost.",
    )
    @guarded("context_append", audit, ready)
    async def context_append(
        session_id: SessionId,
        text: str,
        role: Annotated[str, Field(description="note|user|assistant|system|decision")] = "note",
        tags: list[str] | None = None,
        pinned: bool = False,
        ttl_days: Annotated[float | None, Field(gt=0, le=36_500, description=TTL)] = None,
    ) -> CallToolResult:
        from context_window.server import views

        return views.appended(
            await engine.service.append(session_id, text, role, tags, pinned, ttl_days=ttl_days)
        )

    @app.tool(
        title="Recall entries",
        annotations=READ_ONLY,
        description="The entries relevant to a query (or the latest), within a budget.",
    )
    @guarded("context_recall", audit, ready)
    async def context_recall(
        session_id: SessionId,
        query: str | None = None,
        budget_tokens: Annotated[int | None, Field(ge=64, le=1_000_000)] = None,
        limit: Annotated[int | None, Field(ge=1, le=1000)] = None,
        tags: list[str] | None = None,
        include_superseded: bool = False,
    ) -> CallToolResult:
        from context_window.server import views
        from context_window.server.session_text import RECALL

        recalled = await engine.service.recall(
            session_id, query, budget_tokens, RECALL, limit, tags, include_superseded
        )
        return views.recalled(recalled, engine.service.counter.count)

    @app.tool(
        title="Compact session",
        annotations=WRITES,
        description="Fold older unpinned entries into one summary when over budget.",
    )
    @guarded("context_compact", audit, ready)
    async def context_compact(
        session_id: SessionId,
        keep_recent: Annotated[int, Field(ge=0, le=10_000)] = 10,
        target_tokens: Annotated[int, Field(ge=16, le=20_000)] = 400,
        dry_run: bool = False,
    ) -> CallToolResult:
        from context_window.server import views

        return views.compacted(
            await engine.service.compact(session_id, keep_recent, target_tokens, dry_run)
        )

    @app.tool(
        title="Undo compaction",
        annotations=WRITES,
        description="Undo a compaction: its originals become live again.",
    )
    @guarded("context_uncompact", audit, ready)
    async def context_uncompact(
        session_id: SessionId,
        compaction_id: Annotated[str, Field(description="Summary id from context_compact")],
    ) -> CallToolResult:
        from context_window.server import views

        changed = await engine.service.uncompact(session_id, compaction_id)
        return views.uncompacted(changed, compaction_id)

    @app.tool(
        title="Session status",
        annotations=READ_ONLY,
        description="Session size, budget, token counting and advice.",
    )
    @guarded("context_status", audit, ready)
    async def context_status(session_id: SessionId) -> CallToolResult:
        from context_window.server import views

        return views.status(
            await engine.service.status(session_id),
            engine.service.counter.source,
            engine.service.counter.ratio,
            engine.service.counter.describe(),
            engine.service.summarizer.describe(),
        )

    @app.tool(
        title="Update entry",
        annotations=DESTROYS,
        description="Pin/unpin an entry, or delete it (delete=false restores it).",
    )
    @guarded("context_update", audit, ready)
    async def context_update(
        session_id: SessionId,
        entry_id: str,
        pinned: bool | None = None,
        delete: bool | None = None,
    ) -> CallToolResult:
        from context_window.server import views

        return views.updated(await engine.service.update(session_id, entry_id, pinned, delete))

    @app.tool(
        title="List sessions",
        annotations=READ_ONLY,
        description="List sessions, newest first.",
    )
    @guarded("context_list_sessions", audit, ready)
    async def context_list_sessions(
        filter: Annotated[str | None, Field(description="Id or title part")] = None,
        limit: Annotated[int | None, Field(ge=1, le=200)] = None,
        offset: Annotated[int | None, Field(ge=0)] = None,
    ) -> CallToolResult:
        from context_window.server import views

        page = await engine.service.list_sessions(filter, offset or 0, limit)
        return views.sessions_listed(page, engine.service.settings.budget, engine.service.counter)
