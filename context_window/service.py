"""The façade both edges call: builds the stores, the LLM client and the summarizer
from Settings, and serves each tool with one method.

A method does the work off the event loop under the right lock (``run``) and returns
what the tool shows; where an answer must fit a budget, the edge passes a layout and
the fitting happens here or below.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import anyio

from context_window.config import Settings, default_of
from context_window.documents.answers import Answer
from context_window.documents.cursors import all_cursors
from context_window.documents.freshness import SourceState
from context_window.documents.meaning import DocumentVectors, PassageMeaning
from context_window.documents.outline import (
    Outline,
    OutlineLayout,
    SearchLayout,
    fit_outline,
    overview,
)
from context_window.documents.progress import Report, ingest_in_thread
from context_window.documents.ranking import HITS_THAT_FIT
from context_window.documents.store import DocumentStore
from context_window.documents.summaries import DocSummary, chunk_lines, summarize_range
from context_window.documents.tables import DocInfo, Ingested, Window, WindowLayout
from context_window.errors import RETRY, Busy, InvalidInput, check_range
from context_window.llm.calibration import Calibrator
from context_window.llm.client import LLMClient
from context_window.llm.summaries import Summarizer
from context_window.models import (
    LIST_LIMIT,
    MAX_LIST_LIMIT,
    Entry,
    Recall,
    RecallLayout,
    SessionPage,
    SessionStats,
)
from context_window.retrieval.analyzer import QueryLimits
from context_window.retrieval.meaning import WORDS_ONLY
from context_window.sessions.compaction import Compaction, keep_facts, summary_input
from context_window.sessions.meaning import Embedder
from context_window.sessions.session import Session
from context_window.sessions.store import SessionStore
from context_window.storage import spelled, work_in_progress
from context_window.tokens import TokenCounter
from context_window.wording import plural

log = logging.getLogger("context_window")

MAX_TARGET_TOKENS = 20_000
RECENT = 5  # latest unpinned entries context_open shows
OUTLINE_SUMMARIES = 20  # chunks summarized per outline unless max_chunks says otherwise
WAIT_SECONDS = 10.0  # how long a call waits for another call on the same session or store
FIRST_INGEST_WAIT = 30.0  # how long a read waits for a document's first ingest to finish
DOCUMENTS = "the document store"  # the lock key of document reads (see Service.run)
T = TypeVar("T")


def session_key(session_id: str | None) -> str:
    """The lock key of one session's calls (see :meth:`Service.run`)."""
    return f"session {session_id!r}" if session_id else "a new session"


@dataclass(frozen=True)
class Opened:
    """A session opened (or created), with what context_open shows of it."""

    session: Session
    created: bool
    stats: SessionStats
    pinned: list[Entry]
    recent: list[Entry]  # the latest live unpinned entries, oldest first
    budget: int
    namesakes: tuple[str, ...] = ()  # other sessions with a new one's title, newest first


@dataclass(frozen=True)
class Changed:
    """A session after a change (or a look): its stats, and the entries concerned."""

    session: Session
    stats: SessionStats
    entries: list[Entry]  # appended, restored, or none
    budget: int


@dataclass(frozen=True)
class Recalled:
    """A recall, packed for the edge's layout."""

    session_id: str
    recall: Recall
    terse: bool  # the budget is too small for the full header
    budget: int


@dataclass(frozen=True)
class Searched:
    """A document search: the answer, or (no hits) the fitted text to show instead."""

    query: str
    answer: Answer | None  # None: the query has no searchable words
    instead: str  # when there are no hits: an overview, or that nothing matched
    terse: bool
    budget: int
    words_only: bool = False  # meaning was asked for and not had (the endpoint failed)


@dataclass(frozen=True)
class Paged:
    """A window, packed for the edge's layout."""

    window: Window
    terse: bool
    budget: int


@dataclass(frozen=True)
class Listed:
    """A document as listed: its metadata, its source's state and its session cursors."""

    doc: DocInfo
    state: SourceState
    cursors: dict[str, int]


class Service:
    """Everything one server instance serves, wired from its Settings."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.counter = TokenCounter(settings.token_ratio)
        self.llm: LLMClient | None = None
        self.calibrator: Calibrator | None = None
        if settings.llm_enabled:
            self.llm = LLMClient(
                settings.llm_base_url,
                model=settings.llm_model,
                api_key=settings.llm_api_key,
                timeout=settings.llm_timeout,
            )
            asked = settings.llm_base_url != default_of("llm_base_url") or bool(settings.llm_model)
            self.calibrator = Calibrator(
                self.llm,
                self.counter,
                settings.data_dir / "calibration.json",
                settings.llm_model,
                failure_level=logging.WARNING if asked else logging.INFO,
            )
            self.calibrator.load_cached()
        self.summarizer = Summarizer(self.counter, self.llm)
        limits = QueryLimits(settings.max_query_chars, settings.max_query_terms)
        self.sessions = SessionStore(settings.data_dir, self.counter, clock, limits)
        self.sessions.recover()
        self.embedder = Embedder.configured(settings, self, self.sessions.get)
        self.documents = DocumentStore(
            settings.data_dir,
            self.counter,
            ingest_roots=settings.ingest_roots,
            chunk_tokens=settings.chunk_tokens,
            chunk_overlap=settings.chunk_overlap,
            max_file_bytes=settings.max_file_bytes,
            query_limits=limits,
        )
        self.documents.recover()
        self.passage_vectors = DocumentVectors.configured(
            self.embedder, self.documents, settings.budget // HITS_THAT_FIT, self.counter.count,
            lambda work: self.run(DOCUMENTS, work),
        )  # fmt: skip
        self._calibrated_once = False
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._busy = 0  # calls of ``run`` at work now
        self._later: set[asyncio.Task[None]] = set()  # work started by ``later``
        self._idle = threading.Condition(self._locks_guard)

    async def calibrate(self, force: bool = False) -> str:
        """Measure the loaded model's tokens per character (never raises)."""
        if self.calibrator is None:
            return "calibration skipped: LLM disabled (--no-llm)"
        try:
            return await self.calibrator.run(force=force)
        except Exception as exc:  # background work must never take the server down
            log.warning("calibration failed: %s", exc)
            return f"calibration failed: {exc}"

    async def calibrate_in_background(self) -> None:
        """Run one calibration per process, after the handshake has gone ahead."""
        if self._calibrated_once:
            return
        self._calibrated_once = True
        message = await self.calibrate()
        if self.calibrator is None:  # otherwise the calibrator has logged its outcome
            log.info("%s", message)

    async def aclose(self) -> None:
        """Release the HTTP clients and stop embedding."""
        for client in (self.llm, self.embedder):
            if client is not None:
                await client.aclose()
        if self.passage_vectors is not None:
            self.passage_vectors.close()

    def ranking(self) -> str:
        """How recall and search rank, for the guide."""
        return "by words (BM25)" if self.embedder is None else self.embedder.describe()

    async def run(self, key: str, work: Callable[[], T]) -> T:
        """``work()`` in a worker thread after the calls before it on ``key`` (else Busy)."""
        with self._locks_guard:
            lock = self._locks.setdefault(key.casefold(), threading.Lock())  # ids ignore case

        def call() -> T:
            if not lock.acquire(timeout=WAIT_SECONDS):
                raise Busy(
                    f"{key} is busy with another call (over {WAIT_SECONDS:g} s); "
                    "try again in a moment"
                )
            with self._locks_guard:
                self._busy += 1
            try:
                return work()
            finally:
                lock.release()
                with self._locks_guard:
                    self._busy -= 1
                    self._idle.notify_all()

        return await anyio.to_thread.run_sync(call)

    async def arrived(self, doc_id: str) -> str:
        """``doc_id`` as stored, after up to ``FIRST_INGEST_WAIT`` s for a first ingest of
        it (else Busy)."""
        doc_id = await anyio.to_thread.run_sync(self.documents.spelled, doc_id)
        root, began = self.documents.root, time.monotonic()
        while not (root / doc_id).is_dir() and await anyio.to_thread.run_sync(
            work_in_progress, root, doc_id
        ):
            if time.monotonic() - began > FIRST_INGEST_WAIT:
                raise Busy(
                    f"document {doc_id!r} is still being ingested (waited "
                    f"{FIRST_INGEST_WAIT:g} s); call again in a moment",
                    remedy=RETRY,
                )
            await anyio.sleep(0.05)
        return doc_id

    def save_on_stop(self, until: float) -> None:
        """At a clean stop, save the snapshots open sessions lack, within ``until``."""
        if not self.wait_idle(max(0.0, until - time.monotonic())):
            return  # a call still changes a session: its state is not to be saved now
        saved = self.sessions.save_snapshots(until)
        if saved:
            log.info("saved the snapshot of %s for the next start", plural(len(saved), "session"))

    def wait_idle(self, timeout: float) -> bool:
        """Block until no call of ``run`` is at work (True), or ``timeout`` seconds pass."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    async def compact(
        self,
        session_id: str,
        keep_recent: int = 10,
        target_tokens: int = 400,
        dry_run: bool = False,
    ) -> Compaction:
        """Fold older live, unpinned entries into one summary entry; originals are kept."""
        check_range("target_tokens", target_tokens, 16, MAX_TARGET_TOKENS)
        key = session_key(session_id)
        session = await self.run(key, lambda: self.sessions.get(session_id))
        plan = await self.run(key, lambda: session.plan_compaction(keep_recent))
        budget = self.settings.budget
        if dry_run or len(plan.entries) < 2:
            stats = await self.run(key, session.stats)
            return Compaction(session.id, plan, None, None, dry_run, stats=stats, budget=budget)
        summary = await self.summarizer.summarize(
            summary_input(plan), target_tokens, kind="session notes"
        )
        final, kept, not_kept = await anyio.to_thread.run_sync(
            keep_facts, summary, plan, target_tokens, self.counter
        )
        entry = await self.run(
            key, lambda: session.commit_summary(plan, final.text, final.method, kept)
        )
        stats = await self.run(key, session.stats)
        return Compaction(
            session.id, plan, final, entry, False, tuple(kept), not_kept, stats, budget
        )

    # The session tools.

    async def open_session(self, session_id: str | None, title: str | None) -> Opened:
        """Resume ``session_id`` or create it (a new id when None)."""

        def work() -> Opened:
            session, created = self.sessions.open(session_id, title)
            pinned, recent = session.pinned_and_latest(RECENT)
            same = self.sessions.titled(title) if created and title else []
            namesakes = tuple(i for i in same if i != session.id)
            stats, budget = session.stats(), self.settings.budget
            return Opened(session, created, stats, pinned, recent, budget, namesakes)

        opened = await self.run(session_key(session_id), work)
        self._embed(opened.session.id)
        return opened

    def _embed(self, session_id: str) -> None:
        """Have the entries of ``session_id`` that lack a vector embedded, in the background."""
        if self.embedder is not None:
            self.embedder.wake(session_id, session_key(session_id))

    async def append(
        self,
        session_id: str,
        text: str,
        role: str = "note",
        tags: list[str] | None = None,
        pinned: bool = False,
        ttl_days: float | None = None,
    ) -> Changed:
        """Append one entry to a session."""

        def work() -> Changed:
            session = self.sessions.get(session_id)
            entry = session.append(text, role, tags, pinned, ttl_days=ttl_days)
            return Changed(session, session.stats(save=False), [entry], self.settings.budget)

        changed = await self.run(session_key(session_id), work)
        if changed.session.snapshot_due:  # saved after the answer, not before it
            self.later(session_key(session_id), changed.session.save_due)
        self._embed(session_id)
        return changed

    def later(self, key: str, work: Callable[[], object]) -> None:
        """Run ``work`` on ``key``'s lane without waiting for it (failures are logged)."""

        async def quietly() -> None:
            try:
                await self.run(key, work)
            except Exception as exc:  # a snapshot is a cache: the next call tries again
                log.warning("deferred work on %s failed: %s", key, exc)

        task = asyncio.get_running_loop().create_task(quietly())
        self._later.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self._later.discard)

    async def recall(
        self,
        session_id: str,
        query: str | None,
        budget_tokens: int | None,
        layout: RecallLayout,
        limit: int | None = None,
        tags: list[str] | None = None,
        include_superseded: bool = False,
    ) -> Recalled:
        """The entries relevant to ``query`` (or the latest), packed with ``layout``'s room."""
        budget = budget_tokens or self.settings.budget
        embedder = self.embedder if query and query.strip() else None  # meaning asked for
        query_vector = None if embedder is None else await embedder.query(str(query))
        extra = 0 if embedder is None else self.counter.count(WORDS_ONLY)  # the header may say so

        def work() -> Recalled:
            session = self.sessions.get(session_id)
            meaning = None
            if embedder is not None:
                meaning = embedder.meaning(session, query_vector)

            def reserve(candidates: int, searchable: bool) -> int:  # what the header takes
                return extra + layout.reserve(candidates, budget, self.counter.count, searchable)[0]

            rec = session.recall(
                query,
                budget,
                limit=limit,
                tags=tags,
                include_superseded=include_superseded,
                label=layout.label,
                reserve=reserve,
                meaning=meaning,
            )
            terse = layout.reserve(rec.candidates, budget, self.counter.count, rec.searchable)[1]
            words_only = meaning is not None and not meaning.used
            return Recalled(session.id, replace(rec, words_only=words_only), terse, budget)

        recalled = await self.run(session_key(session_id), work)
        self._embed(recalled.session_id)
        return recalled

    async def uncompact(self, session_id: str, compaction_id: str) -> Changed:
        """Undo a compaction: its originals are live again."""

        def work() -> Changed:
            session = self.sessions.get(session_id)
            restored = session.uncompact(compaction_id)
            return Changed(session, session.stats(), restored, self.settings.budget)

        return await self.run(session_key(session_id), work)

    async def status(self, session_id: str) -> Changed:
        """A session's stats."""

        def work() -> Changed:
            session = self.sessions.get(session_id)
            return Changed(session, session.stats(), [], self.settings.budget)

        return await self.run(session_key(session_id), work)

    async def update(
        self, session_id: str, entry_id: str, pinned: bool | None, delete: bool | None
    ) -> Entry:
        """Pin, unpin, delete or restore one entry."""
        return await self.run(
            session_key(session_id),
            lambda: self.sessions.get(session_id).update(entry_id, pinned=pinned, deleted=delete),
        )

    async def list_sessions(
        self, text: str | None = None, offset: int = 0, limit: int | None = None
    ) -> SessionPage:
        """A page of the sessions whose id or title holds ``text``, newest first."""
        limit = LIST_LIMIT if limit is None else limit
        check_range("limit", limit, 1, MAX_LIST_LIMIT)
        if offset < 0:
            raise InvalidInput(f"offset must be 0 or more, not {offset}")
        told = dict(self.sessions.unreadable)
        page = await self.run("the session list", lambda: self.sessions.page(text, offset, limit))
        for sid, why in self.sessions.unreadable.items():
            if told.get(sid) != why:  # once per session and reason, not once per listing
                log.warning("skipped session %r, unreadable: %s", sid, why)
        return page

    # The document tools.

    async def ingest(
        self,
        report: Report | None,
        text: str | None = None,
        file_path: str | None = None,
        title: str | None = None,
        doc_id: str | None = None,
    ) -> Ingested:
        """Ingest a text or a file; with meaning on, its passages embed in the background."""
        done = await ingest_in_thread(
            self.documents, report, text=text, file_path=file_path, title=title, doc_id=doc_id
        )
        if self.passage_vectors is not None:
            self.passage_vectors.wake([done.doc.id], again=True)
        return done

    async def outline(
        self, doc_id: str, summarize: bool, max_chunks: int | None, layout: OutlineLayout
    ) -> Outline:
        """A document's outline within the budget, with ``summarize`` one line per chunk."""
        doc_id = await self.arrived(doc_id)
        store = self.documents

        def structure() -> tuple[DocInfo, list[tuple[int, str, int]]]:
            doc = store.get(doc_id)
            return doc, store.outline(doc)

        doc, entries = await self.run(DOCUMENTS, structure)
        summaries = None
        if summarize:
            entries = entries[: max_chunks or OUTLINE_SUMMARIES]
            summaries = await chunk_lines(store, self.summarizer, doc, [e[0] for e in entries])
        elif max_chunks:
            entries = entries[:max_chunks]
        return await anyio.to_thread.run_sync(
            fit_outline, doc, entries, summaries, self.settings.budget, self.counter, layout
        )

    async def search(
        self,
        query: str,
        doc_id: str | None,
        limit: int,
        budget_tokens: int | None,
        layout: SearchLayout,
    ) -> Searched:
        """The lines best matching ``query``, in one document or all, within a budget."""
        if doc_id is not None:
            doc_id = await self.arrived(doc_id)
        budget = budget_tokens or self.settings.budget
        store, counter, vectors = self.documents, self.counter, self.passage_vectors
        meaning = None
        if (embedder := self.embedder) is not None and vectors is not None and query.strip():
            vector = await embedder.query(query)
            meaning = PassageMeaning(vector, vectors.embed_from_thread, vectors.stored)

        def work() -> Searched:
            reserve, terse = layout.reserve(budget, counter.count)
            reserve += counter.count(WORDS_ONLY) if meaning is not None else 0
            found = store.answer(query, doc_id, limit, budget, reserve, meaning)
            if found is None:
                shown = overview(store, doc_id, budget, counter, layout)
                return Searched(query, None, shown, terse, budget)
            instead = "" if found.hits else counter.truncate(layout.no_match(doc_id), budget)
            words_only = meaning is not None and not meaning.used and bool(found.hits)
            return Searched(query, found, instead, terse, budget, words_only)

        searched = await self.run(DOCUMENTS, work)
        if vectors is not None and searched.answer is not None:
            vectors.wake([h.doc_id for h in searched.answer.hits])
        return searched

    async def window(
        self,
        doc_id: str,
        layout: WindowLayout,
        first: int | None = None,
        last: int | None = None,
        budget_tokens: int | None = None,
        reset: bool = False,
        session_id: str | None = None,
        line: int | None = None,
    ) -> Paged:
        """Chunks in order within a budget, from ``first``, ``line`` or the cursor."""
        doc_id = await self.arrived(doc_id)
        budget = budget_tokens or self.settings.budget
        store, sessions = self.documents, self.sessions.root

        def work() -> Paged:
            # The session's cursor, under the session's id as stored.
            sid = None if session_id is None else spelled(sessions, session_id)
            reserve, terse = layout.reserve(store.get(doc_id), sid, budget, self.counter.count)
            w = store.window(
                doc_id,
                first,
                last,
                budget,
                reset,
                sid,
                line=line,
                label=None if terse else layout.label,
                reserve=reserve,
            )
            return Paged(w, terse, budget)

        return await self.run(DOCUMENTS, work)

    async def summarize(
        self,
        doc_id: str,
        first: int | None,
        last: int | None,
        target_tokens: int = 500,
        refresh: bool = False,
    ) -> DocSummary:
        """Summarize chunks ``first``-``last`` or the whole document (cached)."""
        doc_id = await self.arrived(doc_id)
        return await summarize_range(
            self.documents, self.summarizer, doc_id, first, last, target_tokens, refresh
        )

    async def list_documents(self) -> list[Listed]:
        """Every document, newest first, with its source's state and session cursors."""
        store = self.documents

        def work() -> list[Listed]:
            return [
                Listed(d, store.source_state(d), all_cursors(store.root / d.id))
                for d in store.all()
            ]

        return await self.run(DOCUMENTS, work)

    async def damaged_documents(self) -> dict[str, str]:
        """The documents a listing leaves out, each with what is wrong with its meta.json."""
        return await self.run(DOCUMENTS, self.documents.unreadable)

    async def forget(self, doc_id: str) -> DocInfo:
        """Delete a document and everything derived from it."""
        return await self.run(DOCUMENTS, lambda: self.documents.forget(doc_id))
