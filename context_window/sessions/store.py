"""The session store: every session under ``<data>/sessions``, opened once and kept current.

A session directory holds ``meta.json`` (id, title, created_at) and the journal
``entries.jsonl`` (see ``sessions``). Opening a session whose meta.json is missing
or unreadable rebuilds it, keeps the damaged copy as ``meta.json.corrupt`` and
reports the repair in the session's status.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from context_window.errors import OPEN_SESSION, InvalidInput, NotFound
from context_window.localtime import time_or_none
from context_window.models import SessionInfo
from context_window.sessions.session import Clock, Session, updated_time
from context_window.storage import (
    check_id,
    new_id,
    read_json,
    recover_replaced,
    replace_dir,
    storage_error,
    sweep_work,
    work_dir,
    write_json_atomic,
)
from context_window.textindex import QueryLimits
from context_window.titles import check_title
from context_window.tokens import TokenCounter

log = logging.getLogger("context_window")


class SessionStore:
    """All sessions under ``<data>/sessions``; sessions are loaded once and kept current."""

    def __init__(
        self,
        data_dir: Path,
        counter: TokenCounter,
        clock: Clock = time.time,
        limits: QueryLimits | None = None,
    ) -> None:
        self.root = data_dir / "sessions"
        self.counter = counter
        self.clock = clock
        self.limits = limits
        self._open: dict[str, Session] = {}

    def recover(self) -> list[str]:
        """Put back every session whose replace (an import) a crash interrupted.

        An explicit step at start-up (``Service`` takes it), never a side effect of
        reading: the CLI's read-only commands only report such a session (doctor).
        """
        restored = recover_replaced(self.root)
        sweep_work(self.root)  # imports a crash interrupted
        for sid in restored:
            log.warning("restored session %r: a replace of it (an import) was interrupted", sid)
        return restored

    def ids(self) -> list[str]:
        """Ids of the sessions on disk."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )

    def open(self, session_id: str | None = None, title: str | None = None) -> tuple[Session, bool]:
        """Resume a session, or create it; returns (session, created)."""
        check_title(title)
        sid = check_id(session_id, "session_id") if session_id else new_id("s")
        directory = self.root / sid
        meta_path = directory / "meta.json"
        meta = read_json(meta_path)
        created = False
        repair = ""
        if meta is None:
            has_log = (directory / "entries.jsonl").exists()
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
        session = self._open.get(sid)
        if session is None:
            session = self._open[sid] = Session(
                directory, meta, self.counter, self.clock, self.limits
            )
        else:
            session.meta = meta
        if repair:
            session.repairs.append(repair)
        session.refresh()
        return session, created

    def get(self, session_id: str) -> Session:
        """An existing session; NotFound (with the known ids) otherwise."""
        check_id(session_id, "session_id")
        session = self._open.get(session_id)
        if session is not None:
            return session
        if not (self.root / session_id).is_dir():
            known = self.ids()
            listed = ", ".join(known[:10]) + (" …" if len(known) > 10 else "") if known else "none"
            raise NotFound(
                f"no session {session_id!r} (known sessions: {listed})", remedy=OPEN_SESSION
            )
        return self.open(session_id)[0]

    def exists(self, session_id: str) -> bool:
        """Whether a session directory ``session_id`` is on disk."""
        return (self.root / check_id(session_id, "session_id")).is_dir()

    def read(self, session_id: str) -> Session:
        """A session replayed for reading only: nothing is written, not even a missing
        meta.json (which ``open`` would rebuild), and it is not kept open. NotFound (naming
        the data dir) if there is no such session."""
        check_id(session_id, "session_id")
        directory = self.root / session_id
        if not directory.is_dir():
            raise NotFound(f"no session {session_id!r} in {self.root.parent}", remedy=OPEN_SESSION)
        meta = read_json(directory / "meta.json") or {"id": session_id, "title": session_id}
        meta["id"] = session_id
        session = Session(directory, meta, self.counter, self.clock, self.limits)
        session.refresh()
        return session

    def install(self, meta: dict[str, Any], journal: bytes, *, replace: bool) -> bool:
        """Write a whole session (``meta`` and its journal bytes, as an import brings them)
        beside the others, then move it into place in one rename; True if it replaced one.

        A crash leaves either the old session or the new one (see ``recover``); the work
        directory's lock marks the write as live meanwhile.
        """
        sid = check_id(str(meta["id"]), "session id")
        final = self.root / sid
        if final.exists() and not replace:
            raise InvalidInput(f"session {sid!r} already exists")
        try:
            with work_dir(self.root, f"import-{sid}") as work:
                try:
                    work.mkdir()
                    with (work / "entries.jsonl").open("wb") as f:
                        f.write(journal)
                        f.flush()
                        os.fsync(f.fileno())
                    write_json_atomic(work / "meta.json", meta)
                    old = replace_dir(work, final)
                except BaseException:
                    shutil.rmtree(work, ignore_errors=True)
                    raise
        except OSError as exc:
            raise storage_error(exc, f"cannot write session {sid!r}") from exc
        self._open.pop(sid, None)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return old is not None

    def list(self) -> list[SessionInfo]:
        """Every session, most recently updated first."""
        out = []
        for sid in self.ids():
            meta = read_json(self.root / sid / "meta.json") or {"id": sid}
            session = self._open.get(sid)
            journal = self.root / sid / "entries.jsonl"
            updated = session.updated_at() if session else updated_time(journal, meta)
            out.append(
                SessionInfo(
                    id=sid,
                    title=meta["title"] if isinstance(meta.get("title"), str) else sid,
                    created_at=time_or_none(meta.get("created_at")) or 0.0,
                    updated_at=updated,
                )
            )
        out.sort(key=lambda s: s.updated_at, reverse=True)
        return out
