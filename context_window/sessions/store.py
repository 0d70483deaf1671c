"""The session store: every session under ``<data>/sessions``, opened once and kept current.

A missing or unreadable meta.json is rebuilt, the damaged copy kept as
``meta.json.corrupt`` and the repair reported in the session's status.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from context_window.errors import OPEN_SESSION, USE_ID, InvalidInput, NotFound
from context_window.localtime import time_or_none
from context_window.models import SessionInfo, SessionPage
from context_window.retrieval.analyzer import Analyzer, QueryLimits
from context_window.sessions.records import updated_time
from context_window.sessions.session import SNAPSHOT_AFTER, Clock, Session
from context_window.storage import (
    atomic_file,
    check_id,
    file_stamp,
    is_valid_id,
    new_id,
    read_json,
    recover_replaced,
    replace_dir,
    spelled,
    storage_error,
    subdirs,
    sweep_work,
    work_dir,
    write_json_atomic,
)
from context_window.titles import check_title
from context_window.tokens import TokenCounter
from context_window.wording import known_ids

log = logging.getLogger("context_window")

# Sessions kept replayed in memory at once: a model's working set.
MAX_OPEN_SESSIONS = 64
# A snapshot's save time per entry (190 ms for 50k entries on a slow 2-core machine).
SAVE_SECONDS_PER_ENTRY = 5e-6


class SessionStore:
    """All sessions under ``<data>/sessions``; sessions are loaded once and kept current."""

    def __init__(
        self,
        data_dir: Path,
        counter: TokenCounter,
        clock: Clock = time.time,
        limits: QueryLimits | None = None,
        max_open: int = MAX_OPEN_SESSIONS,
        snapshot_after: int | None = SNAPSHOT_AFTER,
    ) -> None:
        self.root = data_dir / "sessions"
        self.counter = counter
        self.clock = clock
        self.limits = limits
        self.analyzer = Analyzer(limits)  # one for every session: its word memo is shared
        # Replayed sessions, least recently used first; an evicted one is replayed again.
        self._open: OrderedDict[str, Session] = OrderedDict()
        self._open_guard = threading.Lock()
        self.max_open = max_open
        self.snapshot_after = snapshot_after
        self._metas: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}  # for page()
        self.unreadable: dict[str, str] = {}  # session id -> why a listing skipped it

    def _cached(self, sid: str) -> Session | None:
        """The session ``sid`` if it is kept in memory, now the most recently used."""
        with self._open_guard:
            session = self._open.get(sid)
            if session is not None:
                self._open.move_to_end(sid)
            return session

    def _keep(self, session: Session) -> None:
        """Keep ``session`` in memory, evicting the least recently used beyond ``max_open``."""
        with self._open_guard:
            self._open[session.id] = session
            self._open.move_to_end(session.id)
            while len(self._open) > self.max_open:
                self._open.popitem(last=False)

    def save_snapshots(self, until: float) -> list[str]:
        """At a clean stop, save the snapshots that end before ``until``; the ids saved."""
        with self._open_guard:
            pending = sorted(self._open.values(), key=lambda s: -s.unsaved)
        saved = []
        for session in (s for s in pending if s.unsaved):
            if time.monotonic() + session.size() * SAVE_SECONDS_PER_ENTRY > until:
                continue  # a big one would overrun the stop: it replays next time
            try:
                session.save_snapshot()
            except Exception as exc:  # a cache, never fatal: the journal is the truth
                log.warning("no snapshot for session %r at the stop: %s", session.id, exc)
                continue
            saved.append(session.id)
        return saved

    def kept(self) -> list[str]:
        """Ids of the sessions kept in memory, least recently used first."""
        with self._open_guard:
            return list(self._open)

    def recover(self) -> list[str]:
        """Put back every session whose import a crash interrupted (at start-up only)."""
        restored = recover_replaced(self.root)
        sweep_work(self.root)  # imports a crash interrupted
        for sid in restored:
            log.warning("restored session %r: a replace of it (an import) was interrupted", sid)
        return restored

    def ids(self) -> list[str]:
        """Ids of the sessions on disk."""
        return sorted(subdirs(self.root))

    def open(self, session_id: str | None = None, title: str | None = None) -> tuple[Session, bool]:
        """Resume a session, or create it; returns (session, created)."""
        check_title(title)
        sid = spelled(self.root, self._checked(session_id)) if session_id else new_id("s")
        return self._resume(sid, title)

    def _resume(self, sid: str, title: str | None) -> tuple[Session, bool]:
        """``open`` of ``sid``, a valid id as stored (or a new one)."""
        directory = self.root / sid
        meta_path = directory / "meta.json"
        meta = read_json(meta_path)
        created = False
        repair = ""
        if meta is None:
            try:  # a read refused by permissions is no damage: refuse, repair nothing
                has_log = (directory / "entries.jsonl").exists()
                meta_path.open("rb").close()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise storage_error(exc, f"cannot read session {sid!r}") from exc
            created = not has_log
            if meta_path.exists():  # unreadable: keep the damaged bytes for a person to see
                meta_path.replace(meta_path.with_name("meta.json.corrupt"))
                repair = "meta.json was unreadable: rebuilt it, damaged copy in meta.json.corrupt"
            elif has_log:
                repair = "meta.json was missing: rebuilt it (title reset to the id)"
            now = self.clock()
            meta = {"id": sid, "title": title or sid, "created_at": now, "updated_at": now}
            made = [p for p in (self.root, directory) if not p.exists()]
            try:
                write_json_atomic(meta_path, meta)
            except OSError as exc:
                if created:  # leave no half-made session behind
                    for path in reversed(made):
                        shutil.rmtree(path, ignore_errors=True)
                    raise storage_error(exc, f"cannot create session {sid!r}") from exc
                repair += " (not saved: the data dir cannot be written)"
        elif title and title != meta.get("title"):
            meta = {**meta, "title": title, "updated_at": self.clock()}
            try:
                write_json_atomic(meta_path, meta)
            except OSError as exc:
                raise storage_error(exc, f"cannot retitle session {sid!r}") from exc
        meta["id"] = sid
        session = None if created else self._cached(sid)  # a new one, even under a stale id
        if session is None:
            session = Session(
                directory,
                meta,
                self.counter,
                self.clock,
                analyzer=self.analyzer,
                snapshot_after=self.snapshot_after,
            )
            self._keep(session)
        else:
            session.meta = meta
        if repair:
            session.repairs.append(repair)
        session.refresh()
        return session, created

    def get(self, session_id: str) -> Session:
        """An existing session; NotFound (with the known ids) otherwise."""
        self._checked(session_id)
        session = self._cached(session_id)
        if session is None:
            session_id = spelled(self.root, session_id)
            session = self._cached(session_id)
        if not (self.root / session_id).is_dir():  # deleted under us: not recreated by a write
            with self._open_guard:
                self._open.pop(session_id, None)
            known = known_ids(session_id, self.ids(), 10)
            missing = f"no session {session_id!r} (known sessions: {known})"
            raise self._titled(session_id) or NotFound(missing, remedy=OPEN_SESSION)
        return session if session is not None else self._resume(session_id, None)[0]

    def _checked(self, session_id: str) -> str:
        """``session_id`` if it is a valid id; else InvalidInput, or NotFound naming the
        sessions so titled (``_titled``)."""
        if not is_valid_id(session_id) and (titled := self._titled(session_id)) is not None:
            raise titled
        return check_id(session_id, "session_id")

    def titled(self, title: str) -> list[str]:
        """Ids of the sessions titled ``title`` in any case, newest first."""
        return [s.id for s in self.list() if s.title.casefold() == title.strip().casefold()]

    def _titled(self, wanted: str) -> NotFound | None:
        """NotFound naming the sessions titled ``wanted``: a model may take a title for an
        id. None if there are none."""
        ids = self.titled(wanted)
        if not ids:
            return None
        named = f"no session {wanted!r:.80}: that is the title of {known_ids(wanted, ids, 5)}"
        return NotFound(
            named, remedy=USE_ID if len(ids) == 1 else None, name="session_id", id=ids[0]
        )

    def exists(self, session_id: str) -> bool:
        """Whether a session directory ``session_id`` is on disk."""
        return (self.root / spelled(self.root, check_id(session_id, "session_id"))).is_dir()

    def read(self, session_id: str) -> Session:
        """A session replayed for reading only, nothing written; NotFound if there is none."""
        session_id = spelled(self.root, self._checked(session_id))
        directory = self.root / session_id
        if not directory.is_dir():
            missing = f"no session {session_id!r} in {self.root.parent}"
            raise self._titled(session_id) or NotFound(missing, remedy=OPEN_SESSION)
        meta = read_json(directory / "meta.json") or {"id": session_id, "title": session_id}
        meta["id"] = session_id
        # Read-only: a snapshot is read when it fits, never written.
        session = Session(
            directory, meta, self.counter, self.clock, analyzer=self.analyzer, snapshot_after=None
        )
        session.refresh()
        return session

    def install(self, meta: dict[str, Any], journal: bytes, *, replace: bool) -> bool:
        """Write an imported session beside the others and rename it into place."""
        sid = check_id(str(meta["id"]), "session id")
        final = self.root / sid
        if final.exists() and not replace:
            raise InvalidInput(f"session {sid!r} already exists")
        try:
            with work_dir(self.root, f"import-{sid}") as work:
                work.mkdir()
                with atomic_file(work / "entries.jsonl") as f:
                    f.write(journal)
                write_json_atomic(work / "meta.json", meta)
                old = replace_dir(work, final)
        except OSError as exc:
            raise storage_error(exc, f"cannot write session {sid!r}") from exc
        with self._open_guard:
            self._open.pop(sid, None)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return old is not None

    def list(self) -> list[SessionInfo]:
        """Every session, most recently updated first."""
        return list(self.page(None, 0, None).sessions)

    def page(self, text: str | None, offset: int, limit: int | None) -> SessionPage:
        """Sessions whose id or title holds ``text`` (any case), newest first."""
        infos = [i for i in map(self._info, self.ids()) if i is not None]
        needle = (text or "").strip().casefold()
        kept = [i for i in infos if needle in i.id.casefold() or needle in i.title.casefold()]
        kept.sort(key=lambda s: s.updated_at, reverse=True)
        end = None if limit is None else offset + limit
        return SessionPage(
            tuple(kept[offset:end]), len(infos), len(kept), offset, (text or "").strip()
        )

    def _info(self, sid: str) -> SessionInfo | None:
        """A session's listing from its meta.json (cached); None if it cannot be read."""
        meta_path = self.root / sid / "meta.json"
        stamp = file_stamp(meta_path)
        cached = self._metas.get(sid)
        if cached is not None and stamp is not None and cached[0] == stamp:
            meta = cached[1]
        else:
            meta = read_json(meta_path) or {"id": sid}
            if stamp is not None:
                self._metas[sid] = (stamp, meta)
        with self._open_guard:
            session = self._open.get(sid)
        journal = self.root / sid / "entries.jsonl"
        try:
            updated = session.updated_at() if session else updated_time(journal, meta)
        except OSError as exc:
            self.unreadable[sid] = str(storage_error(exc, "cannot read it"))
            return None
        self.unreadable.pop(sid, None)
        title = meta["title"] if isinstance(meta.get("title"), str) else sid
        return SessionInfo(sid, title, time_or_none(meta.get("created_at")) or 0.0, updated)
