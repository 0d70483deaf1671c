"""The command-line edge: the only package that imports argparse.

``main`` parses arguments and runs a command, serving through the MCP edge it is
handed (``context_window.main`` wires the two); ``commands`` runs the maintenance
commands, ``views`` renders their output, ``catalog`` lists and searches what is
stored, ``doctor`` checks it, ``archive`` exports and imports, in the format
``archive_format`` defines.
"""

from context_window.cli.main import ServerEdge, main

__all__ = ["ServerEdge", "main"]
