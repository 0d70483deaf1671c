"""context-window: an external context buffer for small local models, served over MCP."""

__version__ = "0.1.0"

__all__ = ["__version__"]
