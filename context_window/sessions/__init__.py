"""Sessions: the durable working memory of one task (a journal per session).

``store`` opens and lists sessions, ``session`` appends, recalls, compacts and purges,
``state`` replays a journal into arrays, ``records`` is the journal's record schema,
``compaction`` what a compaction folds and keeps.
"""

from context_window.sessions.compaction import Compaction
from context_window.sessions.session import Session
from context_window.sessions.store import SessionStore

__all__ = ["Compaction", "Session", "SessionStore"]
