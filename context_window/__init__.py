"""context-window: an external context buffer for small local models, served over MCP.

``main`` wires the MCP edge (``server``) into the command line (``cli``): the edges never
import each other, and importing the package stays cheap.
"""

from __future__ import annotations

import contextlib
import gc
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
    _more_open_files()
    from context_window.cli.main import ServerEdge
    from context_window.cli.main import main as run

    def serve(settings: Settings) -> None:
        from context_window.server.app import serve as serve_mcp

        gc.freeze()  # what the imports made lives as long as the process: never scan it again
        _stop_on_signals_while_starting(importing=False)
        serve_mcp(settings)

    async def tool_set_costs(settings: Settings) -> dict[str, dict[str, int]]:
        from context_window.server.app import tool_set_costs as costs

        return await costs(settings)

    return run(argv, ServerEdge(serve, tool_set_costs))


def _more_open_files() -> None:
    """Raise the soft limit of open files to the hard one, as Go's runtime does: a search
    of every document maps each large index, and before Python 3.13 each mapping holds a
    descriptor (macOS starts a program at 256, most Linux systems at 1,024)."""
    try:
        import resource
    except ImportError:  # Windows: no such limit
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 10_240 if hard == resource.RLIM_INFINITY else hard  # macOS: OPEN_MAX
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _stop_on_signals_while_starting(importing: bool = True) -> None:
    """SIGTERM or SIGINT before the server's own handlers ends the start with status 0
    (PID 1 in a container drops an unhandled signal; nothing is written yet).

    While ``importing`` the process ends at once (a library may wrap SystemExit raised
    mid-import); afterwards SystemExit(0) lets ``finally`` blocks run."""

    def stop(_signum: int, _frame: object) -> None:
        if importing:
            sys.stderr.flush()
            os._exit(0)
        raise SystemExit(0)

    if threading.current_thread() is threading.main_thread():  # else: not ours to set
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, stop)
