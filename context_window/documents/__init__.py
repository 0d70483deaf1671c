"""Documents: material too large to read at once, ingested once and read in parts.

``store`` is the way in; ``build`` ingests, ``tables`` holds a document's metadata and
chunk table (chunk texts are read from source.txt), ``index`` the persisted BM25
index, ``search`` line-level answers, ``reingest`` what a new version keeps,
``cursors`` per-session reading positions, ``freshness`` the source file's state,
``summaries`` cached summaries and ``sandbox`` reading files only under the ingest
roots, ``outline`` outlines fitted to a budget, ``progress`` an ingest's progress
reported from the event loop.
"""

from context_window.documents.store import DocumentStore
from context_window.documents.tables import DocInfo, Ingested, Window

__all__ = ["DocInfo", "DocumentStore", "Ingested", "Window"]
