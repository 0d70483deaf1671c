"""The MCP edge: the only package that imports mcp, pydantic, starlette and uvicorn.

``app`` builds the server, ``session_tools`` and ``document_tools`` are the tools (each
validates, makes Service calls and renders a view), ``views`` renders document
answers, ``adapters`` maps errors and writes the audit line, ``http`` and ``stdio``
are the transports.
"""

from context_window.server.app import build_server

__all__ = ["build_server"]
