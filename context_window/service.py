"""Composition root: builds the stores, the LLM client and the summarizer from Settings.

The session operations that involve more than one part (compaction needs the
summarizer) live here; everything else is a direct call on a store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import anyio

from context_window.calibration import Calibrator
from context_window.config import Settings
from context_window.documents.store import DocumentStore
from context_window.errors import Busy, InvalidInput
from context_window.facts import lost_facts
from context_window.llm import LLMClient
from context_window.models import CompactionPlan, Entry, Summary
from context_window.packing import leading
from context_window.sessions.session import Session
from context_window.sessions.store import SessionStore
from context_window.summarize import Summarizer
from context_window.textindex import QueryLimits
from context_window.tokens import TokenCounter
from context_window.version import __version__

log = logging.getLogger("context_window")

MAX_TARGET_TOKENS = 20_000
WAIT_SECONDS = 10.0  # how long a call waits for another call on the same session or store
DOCUMENTS = "the document store"  # the lock key of document reads (see Service.run)
T = TypeVar("T")


def session_key(session_id: str | None) -> str:
    """The lock key of one session's calls (see :meth:`Service.run`)."""
    return f"session {session_id!r}" if session_id else "a new session"


@dataclass(frozen=True)
class Compaction:
    """What a compaction did (or, on a dry run, would do)."""

    session_id: str
    plan: CompactionPlan
    summary: Summary | None
    entry: Entry | None
    dry_run: bool
    kept_facts: tuple[str, ...] = ()
    facts_not_kept: int = 0

    @property
    def tokens_freed(self) -> int:
        """Live tokens removed from the session, net of the summary."""
        if self.summary is None:
            return 0
        return max(0, self.plan.tokens - self.summary.tokens)


class Service:
    """Everything one server instance serves, wired from its Settings."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.version = __version__
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
            self.calibrator = Calibrator(
                self.llm, self.counter, settings.data_dir / "calibration.json", settings.llm_model
            )
            self.calibrator.load_cached()
        self.summarizer = Summarizer(self.counter, self.llm)
        limits = QueryLimits(settings.max_query_chars, settings.max_query_terms)
        self.sessions = SessionStore(settings.data_dir, self.counter, clock, limits)
        self.sessions.recover()
        self.documents = DocumentStore(
            settings.data_dir,
            self.counter,
            ingest_roots=settings.ingest_roots,
            chunk_tokens=settings.chunk_tokens,
            chunk_overlap=settings.chunk_overlap,
            max_file_bytes=settings.max_file_mb * 1024 * 1024,
            query_limits=limits,
        )
        self.documents.recover()
        self._calibrated_once = False
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._busy = 0  # calls of ``run`` at work now
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
        """Release the HTTP client."""
        if self.llm is not None:
            await self.llm.aclose()

    def session(self, session_id: str) -> Session:
        """An existing session (NotFound with the known ids otherwise)."""
        return self.sessions.get(session_id)

    async def run(self, key: str, work: Callable[[], T]) -> T:
        """``work()`` in a worker thread, after the calls before it on the same ``key``.

        Nothing that can wait on a lock or compute for long runs on the event loop,
        so one stuck session (a process stopped while it holds its journal lock) or a
        long search delays only the calls on the same key; those give up with Busy
        after ``WAIT_SECONDS``. Other sessions, other documents and /health go on.
        """
        with self._locks_guard:
            lock = self._locks.setdefault(key, threading.Lock())

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
        if not 16 <= target_tokens <= MAX_TARGET_TOKENS:
            raise InvalidInput(
                f"target_tokens must be between 16 and {MAX_TARGET_TOKENS}, not {target_tokens}"
            )
        key = session_key(session_id)
        session = await self.run(key, lambda: self.sessions.get(session_id))
        plan = await self.run(key, lambda: session.plan_compaction(keep_recent))
        if dry_run or len(plan.entries) < 2:
            return Compaction(session.id, plan, None, None, dry_run)
        text = "\n\n".join(_render_for_summary(e) for e in plan.entries)
        summary = await self.summarizer.summarize(text, target_tokens, kind="session notes")
        originals = "\n".join(e.text for e in plan.entries)
        lost = await anyio.to_thread.run_sync(lost_facts, originals, summary.text)
        kept = lost[: leading((self.counter.count(f) + 1 for f in lost), target_tokens)]
        final = summary
        if lost:
            more = len(lost) - len(kept)
            extra = f" (+{more} more in the originals)" if more else ""
            listed = "; ".join(kept) if kept else "none fitted"
            text = f"{summary.text}\nKept facts: {listed}{extra}"
            final = replace(summary, text=text, tokens=self.counter.count(text))
        entry = await self.run(
            key, lambda: session.commit_summary(plan, final.text, final.method, kept)
        )
        return Compaction(session.id, plan, final, entry, False, tuple(kept), len(lost) - len(kept))


def _render_for_summary(entry: Entry) -> str:
    """One entry as the summarizer sees it: role and tags first."""
    tags = f" [{', '.join(entry.tags)}]" if entry.tags else ""
    return f"{entry.role}{tags}: {entry.text}"
