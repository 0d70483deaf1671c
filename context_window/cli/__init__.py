"""The command-line edge, the only importer of argparse; ``context_window.main`` wires it."""

from context_window.cli.main import ServerEdge, main

__all__ = ["ServerEdge", "main"]
