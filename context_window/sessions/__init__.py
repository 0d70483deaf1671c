"""Sessions: the durable working memory of one task, a journal per session."""

from context_window.sessions.compaction import Compaction
from context_window.sessions.session import Session
from context_window.sessions.store import SessionStore

__all__ = ["Compaction", "Session", "SessionStore"]
