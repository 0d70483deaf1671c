"""Documents: material too large to read at once, ingested once and read in parts."""

from context_window.documents.store import DocumentStore
from context_window.documents.tables import DocInfo, Ingested, Window

__all__ = ["DocInfo", "DocumentStore", "Ingested", "Window"]
