"""context-window: an external context buffer for small local models, served over MCP.

``main`` is the program: the command line (``cli``) with the MCP edge (``server``)
wired in as what it serves. The two edges never import each other; this is where
they meet, and only when called (importing the package stays cheap).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from context_window.version import __version__

if TYPE_CHECKING:
    from context_window.config import Settings

__all__ = ["__version__", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``context-window`` with ``argv``; returns the process exit status."""
    from context_window.cli.main import ServerEdge
    from context_window.cli.main import main as run

    def serve(settings: Settings) -> None:
        from context_window.server.app import serve as serve_mcp

        serve_mcp(settings)

    async def tool_set_costs(settings: Settings) -> dict[str, dict[str, int]]:
        from context_window.server.app import tool_set_costs as costs

        return await costs(settings)

    return run(argv, ServerEdge(serve, tool_set_costs))
