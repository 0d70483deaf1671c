"""context-window: an external context buffer for small local models, served over MCP.

``main`` is the program: the command line (``cli``) with the MCP edge (``server``)
wired in as what it serves. The two edges never import each other; this is where
they meet, and only when called (importing the package stays cheap).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from context_window.version import __version__

if TYPE_CHECKING:
    from context_window.config import Settings

__all__ = ["__version__", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``context-window`` with ``argv``; returns the process exit status."""
    _stop_on_signals_while_starting()
    from context_window.cli.main import ServerEdge
    from context_window.cli.main import main as run

    def serve(settings: Settings) -> None:
        from context_window.server.app import serve as serve_mcp

        _stop_on_signals_while_starting(importing=False)
        serve_mcp(settings)

    async def tool_set_costs(settings: Settings) -> dict[str, dict[str, int]]:
        from context_window.server.app import tool_set_costs as costs

        return await costs(settings)

    return run(argv, ServerEdge(serve, tool_set_costs))


def _stop_on_signals_while_starting(importing: bool = True) -> None:
    """SIGTERM or SIGINT before the server installs its own handlers ends the start with
    status 0: as PID 1 of a container a signal with no handler is dropped, and imports
    and setup take a second or two. Nothing has been written yet.

    While ``importing``, the process ends at once: SystemExit raised in the middle of an
    import may be wrapped by a library (pydantic-core makes it a SchemaError: status 1
    and a traceback). Afterwards it raises SystemExit(0), so ``finally`` blocks run:
    uvicorn puts this handler back and raises the signal again as it stops, and the
    HTTP server saves its snapshots in such a block."""

    def stop(_signum: int, _frame: object) -> None:
        if importing:
            sys.stderr.flush()
            os._exit(0)
        raise SystemExit(0)

    if threading.current_thread() is threading.main_thread():  # else: not ours to set
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, stop)
