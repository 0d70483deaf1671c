"""What every tool adapter shares: error mapping, the audit line, and result building.

Core errors become the SDK's ToolError here and nowhere else; anything
unexpected is logged with its traceback and reported generically.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

from context_window.errors import ContextWindowError

log = logging.getLogger("context_window")
audit_log = logging.getLogger("context_window.audit")

P = ParamSpec("P")


def result(text: str, data: dict[str, Any]) -> CallToolResult:
    """A tool result: compact text for the model plus the same facts as structured content."""
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def guarded(
    name: str, audit: bool
) -> Callable[[Callable[P, Awaitable[CallToolResult]]], Callable[P, Awaitable[CallToolResult]]]:
    """Wrap a tool: map core errors to ToolError, log unexpected ones, write the audit line."""

    def decorate(
        fn: Callable[P, Awaitable[CallToolResult]],
    ) -> Callable[P, Awaitable[CallToolResult]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> CallToolResult:
            started = time.perf_counter()
            outcome = "ok"
            try:
                return await fn(*args, **kwargs)
            except ContextWindowError as exc:
                outcome = type(exc).__name__
                raise ToolError(str(exc)) from exc
            except ToolError:
                outcome = "ToolError"
                raise
            except Exception as exc:
                outcome = "internal"
                log.exception("tool %s failed unexpectedly", name)
                raise ToolError(
                    f"{name} failed with an internal error ({type(exc).__name__}); "
                    "the server log on stderr has details"
                ) from exc
            finally:
                if audit:
                    ms = round((time.perf_counter() - started) * 1000, 1)
                    audit_log.info(json.dumps({"tool": name, "outcome": outcome, "ms": ms}))

        return wrapper

    return decorate
