"""The command-line edge: the only package that imports argparse; it serves through the MCP
edge it is handed (``context_window.main`` wires the two)."""

from context_window.cli.main import ServerEdge, main

__all__ = ["ServerEdge", "main"]
