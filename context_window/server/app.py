"""build_server(service) -> MCPServer: registers the tools; they live in *_tools.py.

tools/list goes out slimmed, since the model pays every schema token: no ``title``
keys, ``T | None`` published as ``T``, and no ``false`` defaults; arguments are still
validated against the full signature.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, InputRequiredResult, TextContent, Tool
from pydantic import ValidationError

from context_window.config import Settings
from context_window.server.adapters import (
    READ_ONLY,
    VerbatimStrings,
    argument_errors,
    guarded,
    ignored_arguments,
    output_schema,
    quoted_id,
    unset_blanks,
)
from context_window.server.document_tools import register_document_tools
from context_window.server.engine import SAVE_SECONDS, Engine
from context_window.server.session_tools import register_session_tools
from context_window.server.stdio import serve_stdio
from context_window.version import __version__

if TYPE_CHECKING:
    from context_window.service import Service

log = logging.getLogger("context_window")

SESSIONS_HOW = (
    "Sessions: context_open, then context_append notes/decisions, context_recall what you "
    "need, context_compact when over budget."
)
DOCS_HOW = "Documents: doc_ingest large text once, then doc_search / doc_window / doc_summarize."


def instructions(tools: str) -> str:
    """The server's instructions for the exposed tool set."""
    parts = ["External memory for a small context window."]
    parts += [SESSIONS_HOW] if tools in ("all", "sessions") else []
    parts += [DOCS_HOW] if tools in ("all", "docs") else []
    return " ".join([*parts, "Call context_guide for the full workflow."])


def slim_schema(node: Any) -> Any:
    """A JSON schema without titles, nullable defaults or ``"default": false``."""
    if isinstance(node, list):
        return [slim_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: slim_schema(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    options = out.get("anyOf")
    null = {"type": "null"}
    if isinstance(options, list) and len(options) == 2 and null in options:
        other = options[1 - options.index(null)]
        del out["anyOf"]
        if "default" in out and out["default"] is None:
            del out["default"]
        out = {**other, **out}
    if out.get("type") == "boolean" and out.get("default") is False:
        del out["default"]
    return out


class SlimServer(MCPServer):
    """An MCPServer with slimmed tool schemas and one-line argument errors."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Any = None
    ) -> CallToolResult | InputRequiredResult:
        """Run a tool; an unknown tool is a protocol error (-32602) naming the tools."""
        schema = self._tool_input_schema(name)
        if schema is None:
            known = ", ".join(sorted(t.name for t in self._tool_manager.list_tools()))
            raise MCPError(INVALID_PARAMS, f"unknown tool {name!r:.80}; the tools are: {known}")
        arguments = unset_blanks(arguments or {}, schema)
        ignored = ignored_arguments(name, arguments, schema)
        if unquoted := quoted_id(arguments):
            raise ToolError(unquoted + ignored)
        try:
            result = await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError):
                raise
            if isinstance(cause, ValidationError):
                raise ToolError(argument_errors(cause, schema) + ignored) from cause
            # Drop the SDK's "Error executing tool <name>: ": the model knows what it called.
            # An ignored argument is named here too: a model that wrote ``path`` for
            # ``file_path`` must learn why its call failed.
            message = str(exc).removeprefix(f"Error executing tool {name}: ")
            raise ToolError(message + ignored) from cause
        if ignored and isinstance(result, CallToolResult) and result.content:
            first = result.content[0]
            if isinstance(first, TextContent):
                first.text += ignored
        return result

    async def run_stdio_async(self) -> None:
        """stdio through ``context_window.server.stdio``: every request with an id is answered."""
        low = self._lowlevel_server
        await serve_stdio(low.run, low.create_initialization_options())

    async def list_tools(self) -> list[Tool]:
        """The tools, with slimmed input schemas and their output schemas."""
        tools = await super().list_tools()
        return [
            t.model_copy(
                update={
                    "input_schema": slim_schema(t.input_schema),
                    "output_schema": output_schema(t.name),
                }
            )
            for t in tools
        ]


TOOL_SETS = ("all", "sessions", "docs")


def wire_tokens(tool: Tool, ratio: float) -> int:
    """Estimated tokens of one tool as tools/list sends it (name, description, schemas)."""
    from context_window.tokens import estimate

    wire = tool.model_dump(by_alias=True, exclude_none=True, mode="json")
    return estimate(json.dumps(wire, separators=(",", ":")), ratio)


def serve(settings: Settings) -> None:
    """Build the MCP server and serve until stopped, the Service built beside the handshake."""
    engine = Engine(settings)
    app = build_server(engine)
    if settings.transport == "http":
        from context_window.server.http import serve_http

        serve_http(app, engine)  # uvicorn stops on SIGTERM and SIGINT itself
    else:
        stop_on_signals(engine)
        try:
            app.run("stdio")
        except Exception as exc:
            if not only_broken_pipes(exc):
                raise
            stop(engine, "a closed stdout (the client no longer reads)", time.monotonic())
        engine.save_on_stop(time.monotonic() + SAVE_SECONDS)  # the client closed stdin


def only_broken_pipes(exc: BaseException) -> bool:
    """Whether ``exc`` is a BrokenPipeError, or a group (of groups) of nothing else."""
    inner = getattr(exc, "exceptions", None)
    if inner is None:
        return isinstance(exc, BrokenPipeError)
    return bool(inner) and all(only_broken_pipes(e) for e in inner)


STOP_SECONDS = 1.5  # how long a stop waits for calls at work to finish


def stop(engine: Engine, why: str, began: float) -> NoReturn:
    """Let the calls at work finish (up to ``STOP_SECONDS``), save the snapshots the open
    sessions lack, then exit 0 at once: stdin's reader thread may still wait for a line.
    Writes are whole lines under locks, so exiting between calls loses nothing."""
    service = engine.built
    finished = service is None or service.wait_idle(STOP_SECONDS)
    if finished:
        engine.save_on_stop(began + SAVE_SECONDS)
    log.info("stopping on %s%s", why, "" if finished else " (a call was still at work)")
    logging.shutdown()
    os._exit(0)


def stop_on_signals(engine: Engine) -> None:
    """On SIGTERM or SIGINT, ``stop`` in a thread of its own: stdin's reader thread
    ignores signals, and PID 1 in a container has no default SIGTERM action, so without
    this ``docker stop`` waits out its timeout."""

    def on_signal(signum: int, _frame: object) -> None:
        why, began = signal.Signals(signum).name, time.monotonic()
        threading.Thread(target=stop, args=(engine, why, began), name="stop", daemon=True).start()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)


async def tool_costs(app: MCPServer, ratio: float) -> dict[str, int]:
    """Estimated tokens of each tool of ``app`` as tools/list sends it."""
    return {tool.name: wire_tokens(tool, ratio) for tool in await app.list_tools()}


async def tool_set_costs(settings: Settings) -> dict[str, dict[str, int]]:
    """Per ``--tools`` set, each tool's estimated tokens (no Service built: no data read)."""
    out = {}
    for tools in TOOL_SETS:
        app = build_server(Engine(settings.with_changes(tools=tools)))
        out[tools] = await tool_costs(app, settings.token_ratio)
    return out


GUIDE_SESSIONS = """Sessions (working memory for a long task):
1. context_open(session_id="my-task") once; reuse the id in every later call.
2. context_append(text, role=note|decision|...) after each step: findings, decisions, dead ends.
   pinned=true for facts that must never be lost (goals, constraints); ttl_days=N for notes
   that stop mattering (they leave recall after N days unless pinned).
3. context_recall(query="...") before acting: the most relevant entries first, within a budget.
4. When an answer says "over budget", call context_compact: older entries become one summary,
   and paths, numbers and names the summary dropped are appended to it. Originals stay
   recoverable: context_recall(include_superseded=true) shows them, and
   context_uncompact(compaction_id) makes them live again.
5. context_update pins/unpins, deletes or restores (delete=false) an entry, by the name its
   label shows (e42) or its full id.
"""
GUIDE_DOCS = """Documents (too large to read at once):
1. doc_ingest(file_path=... or text=...) once.
2. doc_outline to see the structure; doc_search(query) shows the best matching lines,
   numbered, with repeated lines collapsed ("+N like it: lines ...").
3. doc_window(doc_id, line=N) reads around a line a search showed; doc_window(doc_id) pages
   through in order (the cursor is kept; call again to continue; session_id=your
   context_open id keeps your own cursor).
4. doc_summarize for a range or the whole; doc_forget when done.
"""


def guide_text(service: Service) -> str:
    """The workflow for the exposed tools, with this instance's data dir, budget and roots."""
    s = service.settings
    roots = ", ".join(str(r) for r in s.ingest_roots) or "none (doc_ingest takes inline text only)"
    halves = [GUIDE_SESSIONS] if s.tools in ("all", "sessions") else []
    docs = s.tools in ("all", "docs")
    halves += [GUIDE_DOCS] if docs else []
    body = "\n".join(halves)
    where = f"chunks of ~{s.chunk_tokens} tokens; ingest roots: {roots}; " if docs else ""
    return f"""context-window: memory outside your context window. You must call these tools.

{body}
This instance: data dir {s.data_dir}; budget {s.budget} tokens per answer;
{where}tools: {s.tools}.
Token counts: {service.counter.describe()}. Summaries: {service.summarizer.describe()}.
Ranking: {service.ranking()}."""


def build_server(service: Service | Engine) -> MCPServer:
    """A server exposing every tool of ``service`` (tests build as many as they like)."""
    engine = service if isinstance(service, Engine) else Engine(service.settings, service)

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.warm_in_background)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    tools = engine.settings.tools
    app: MCPServer = SlimServer(
        name="context-window",
        version=__version__,
        instructions=instructions(tools),
        lifespan=lifespan,
    )
    if tools in ("all", "sessions"):
        register_session_tools(app, engine)
    if tools in ("all", "docs"):
        register_document_tools(app, engine)

    @app.tool(
        title="Guide",
        annotations=READ_ONLY,
        description="How to use these tools. Read once at the start.",
    )
    @guarded("context_guide", engine.settings.audit, engine.ready)
    async def context_guide() -> CallToolResult:
        from context_window.server import views

        return views.guided(guide_text(engine.service), engine.service)

    for tool in app._tool_manager.list_tools():  # string arguments are never read as JSON
        tool.fn_metadata = VerbatimStrings.model_construct(**dict(tool.fn_metadata))
    return app
