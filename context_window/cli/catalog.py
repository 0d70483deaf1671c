"""A read-only look at a data dir: sessions with their counts, entries in any state, documents.

Nothing here writes: no ``meta.json`` is mended, no missing journal created by locking,
no crash leftover recovered (``doctor`` still sees them).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from context_window.documents.answers import Answer, search_reserve
from context_window.documents.store import DocumentStore
from context_window.documents.tables import DocInfo
from context_window.errors import InvalidInput, StorageError, check_range
from context_window.journal import Journal
from context_window.models import Entry, SessionInfo, SessionStats
from context_window.retrieval.analyzer import Analyzer
from context_window.retrieval.bm25 import best_line
from context_window.sessions.records import searchable
from context_window.sessions.session import Session
from context_window.sessions.store import SessionStore
from context_window.storage import is_valid_id
from context_window.tokens import TokenCounter

SEARCH_BUDGET = 1 << 40  # search shows matches, not what fits a model's window


@dataclass(frozen=True)
class SessionRow:
    """One session as listed: its metadata and its counts after replay."""

    info: SessionInfo
    stats: SessionStats


@dataclass(frozen=True)
class EntryHit:
    """A session entry that matched a search, with its score."""

    session_id: str
    session_title: str
    entry: Entry
    score: float
    focus: int = 0  # the line of its text that best matches the search (``best_line``)


@dataclass(frozen=True)
class Found:
    """Search results: matching session entries and document chunks, best first."""

    entries: tuple[EntryHit, ...]
    lines: Answer | None  # the documents' best lines, as doc_search shows them


def read_journal(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Every record of a journal in file order, read under its lock, and the unreadable count."""
    if not path.is_file():
        return [], 0
    journal = Journal(path)
    with journal.locked():
        records = journal.read_new()
    return records, journal.skipped


class Catalog:
    """Sessions and documents of one data dir, for people to read."""

    def __init__(self, data_dir: Path, counter: TokenCounter, budget: int = 4000) -> None:
        self.data_dir = data_dir
        self.budget = budget  # what a document search shows: as much as doc_search would
        self.unreadable: dict[str, str] = {}  # session id -> why it was skipped
        self.damaged: dict[str, str] = {}  # document id -> why a search skipped it
        self.counter = counter
        self._sessions = SessionStore(data_dir, counter)
        self._documents: DocumentStore | None = None

    @property
    def documents_store(self) -> DocumentStore:
        """The document store, opened on first use."""
        if self._documents is None:
            self._documents = DocumentStore(self.data_dir, self.counter)  # never recovered
        return self._documents

    def session(self, session_id: str) -> Session:
        """An existing session, replayed read-only (NotFound with a remedy otherwise)."""
        return self._sessions.read(session_id)

    def sessions(self) -> list[SessionRow]:
        """Every session with its counts, most recently updated first."""
        rows = []
        for info in self._sessions.list():
            if is_valid_id(info.id):
                session = self._readable(info.id)
                if session is not None:
                    rows.append(SessionRow(info, session.stats()))
        self.unreadable.update(self._sessions.unreadable)
        return rows

    def _readable(self, session_id: str) -> Session | None:
        """A session to list or search; None (noted in ``unreadable``) if it cannot be read."""
        try:
            return self.session(session_id)
        except StorageError as exc:
            self.unreadable[session_id] = str(exc)
            return None

    def document(self, doc_id: str) -> DocInfo:
        """One document (NotFound with the known ids and a remedy otherwise)."""
        return self.documents_store.get(doc_id)

    def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        doc_id: str | None = None,
        limit: int = 10,
    ) -> Found:
        """BM25 over live session entries and document chunks; both unless one is named."""
        check_range("limit", limit, 1, 1000)
        analyzer = Analyzer()
        wanted = set(analyzer.query(query))
        if not wanted:
            raise InvalidInput(f"query {query!r:.60} has no searchable words (2+ letters/digits)")
        entries: list[EntryHit] = []

        def focus(text: str) -> int:
            return best_line(text.strip().split("\n"), wanted, analyzer.terms)

        if session_id is not None or doc_id is None:
            every = map(self._readable, filter(is_valid_id, self._sessions.ids()))
            for session in [self.session(session_id)] if session_id is not None else every:
                if session is None:
                    continue
                recall = session.recall(query, SEARCH_BUDGET)  # no limit: pinned come first
                hits = [
                    EntryHit(session.id, session.title, e, recall.scores[e.id])
                    for e in recall.entries
                    if wanted.intersection(analyzer.terms(searchable(e.text, e.tags, e.role)))
                ]  # recall keeps pinned entries whether or not they match; a search does not
                hits.sort(key=lambda h: (-h.score, -h.entry.seq))
                entries += [replace(h, focus=focus(h.entry.text)) for h in hits[:limit]]
        entries.sort(key=lambda h: (-h.score, h.session_id, h.entry.seq))
        lines = None
        if doc_id is not None:
            self.document(doc_id)  # the error for an unknown id names `context-window docs`
            lines = self._answer(query, doc_id, limit)
        elif session_id is None and self.documents_store.all():
            lines = self._answer(query, None, limit)
        return Found(tuple(entries[:limit]), lines)

    def _answer(self, query: str, doc_id: str | None, limit: int) -> Answer | None:
        """The best lines as doc_search builds them, in the same budget and room; a damaged
        document a search of all skips is noted in ``damaged``."""
        reserve, _ = search_reserve(self.budget, self.counter.count)
        found = self.documents_store.answer(query, doc_id, limit, self.budget, reserve)
        self.damaged.update(found.skipped if found else ())
        return found
