"""The command-line edge: the only package that imports argparse.

``main`` parses arguments and starts the server or a command, ``commands`` runs the
maintenance commands, ``views`` renders their output, ``catalog`` lists and searches
what is stored, ``doctor`` checks it, ``archive`` exports and imports, in the format
``archive_format`` defines.
"""

from context_window.cli.main import main

__all__ = ["main"]
