"""The MCP edge: the only package that imports mcp, pydantic, starlette and uvicorn."""

from context_window.server.app import build_server

__all__ = ["build_server"]
