"""Append-only JSONL journals: locked whole-line appends, any number of readers, torn
lines skipped."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context_window.errors import Busy, NotFound, StorageError
from context_window.storage import (
    LOCK_WAIT_SECONDS,
    atomic_file,
    lock_fd,
    storage_error,
    unlock_fd,
)

log = logging.getLogger("context_window.storage")


def parse_line(line: bytes | str) -> dict[str, Any] | None:
    """One JSON object, or None for anything else: invalid JSON, deep nesting, NaN."""
    try:
        rec = json.loads(line, parse_constant=reject_constant)
    except (ValueError, RecursionError):
        return None
    return rec if isinstance(rec, dict) else None


def _parse_all(lines: list[bytes]) -> list[dict[str, Any] | None]:
    """``parse_line`` of each line, decoded as one text and parsed in place."""
    try:
        text = b"\n".join(lines).decode("utf-8")
    except UnicodeDecodeError:
        return [parse_line(line) for line in lines]
    out: list[dict[str, Any] | None] = []
    pos = 0
    for line in lines:
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        try:
            value, stop = _RAW_DECODE(text, _SPACE.match(text, pos, end).end())  # type: ignore[union-attr]
        except (ValueError, RecursionError):
            stop = -1
        if stop < 0 or stop > end or text[stop:end].strip(_JSON_SPACE):
            out.append(parse_line(line))
        else:
            out.append(value if isinstance(value, dict) else None)
        pos = end + 1
    return out


def reject_constant(name: str) -> Any:
    """For ``json.loads(parse_constant=…)``: NaN and Infinity are not JSON."""
    raise ValueError(f"{name} is not JSON")


_RAW_DECODE = json.JSONDecoder(parse_constant=reject_constant).raw_decode
_SPACE = re.compile(r"[ \t\r]*")  # JSON's whitespace within a line
_JSON_SPACE = " \t\r"

REWRITE = "rewrite"  # the kind of the identity line a rewritten journal starts with


# Closes off a torn line: no JSON text ends in NUL, so it never parses.
_CLOSED = b"\x00"
_HEAD_BYTES = 256  # how much of a journal's start identifies it, beside its inode
_TAIL_BYTES = 64  # and the bytes just before a reader's offset, which must not change


@dataclass(frozen=True)
class JournalPosition:
    """How far a journal was read: offset, first bytes, bytes before it, lines skipped."""

    offset: int
    head: bytes
    tail: bytes
    skipped: int


class Journal:
    """An append-only JSONL file shared by processes: whole-line writes under an OS lock.

    ``read_new`` returns what anyone appended since the last call; a torn last line is
    closed off by the next append, so every reader skips it once. Only ``rewrite``
    replaces the file; readers know it by inode and first bytes (docs/storage.md)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self.skipped = 0
        self._thread_lock = threading.RLock()
        self._fd: int | None = None
        self._depth = 0
        self._ident: tuple[int, int] | None = None  # (device, inode) of the file last read
        self._head = b""  # its first bytes, as far as they were seen
        self._seen: tuple[int, int] | None = None  # (size, mtime_ns) after the last read/write
        self.generation = 0  # bumped when the file was replaced (a purge): replay from 0
        self.writable = True  # False when the file could be opened for reading only
        # The bytes just before the offset: if they change, the file was replaced in place.
        self._tail = b""

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the in-process and the cross-process lock (re-entrant within a thread)."""
        with self._thread_lock:
            if self._depth == 0:
                self._fd = self._open_locked()
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    unlock_fd(self._fd)
                    os.close(self._fd)
                    self._fd = None

    def _open(self) -> int:
        """The journal opened for appending, or read-only where it cannot be written."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            self.writable = True
            return fd
        except FileNotFoundError:  # never recreate a deleted directory without its meta
            raise NotFound(
                f"{self.path.parent.name!r} was deleted from disk while in use "
                f"({self.path.parent} is gone); nothing was written"
            ) from None
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM) or not self.path.is_file():
                raise storage_error(exc, f"cannot open {self.path}") from exc
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as exc:
            raise storage_error(exc, f"cannot open {self.path}") from exc
        self.writable = False
        return fd

    def _open_locked(self) -> int:
        """Open and lock the file now at ``path``, retrying if it was replaced meanwhile."""
        while True:
            fd = self._open()
            try:
                lock_fd(fd, f"session {self.path.parent.name!r}")
            except Busy:
                os.close(fd)
                raise
            held = os.fstat(fd)
            try:
                current = self.path.stat()
            except FileNotFoundError:
                current = None
            if current is None or (current.st_dev, current.st_ino) != (held.st_dev, held.st_ino):
                unlock_fd(fd)  # a rewrite renamed a new file in while we waited
                os.close(fd)
                continue
            ident = (held.st_dev, held.st_ino)
            head = os.pread(fd, _HEAD_BYTES, 0)
            known = self._ident is not None
            if known and (ident != self._ident or head[: len(self._head)] != self._head):
                self._offset = 0  # a different file: everything in it is new to us
                self._tail = b""
                self.skipped = 0
                self.generation += 1
            self._ident, self._head = ident, head
            return fd

    @property
    def offset(self) -> int:
        """How far the file has been read."""
        return self._offset

    def position(self) -> JournalPosition:
        """Where reading stands, for :meth:`resume` in another process; under :meth:`locked`."""
        assert self._fd is not None, "position needs the lock"
        return JournalPosition(self._offset, self._head, self._tail, self.skipped)

    def resume(self, at: JournalPosition) -> bool:
        """Read on from ``at`` if the file still matches it; False, changing nothing, if not."""
        assert self._fd is not None, "resume needs the lock"
        if self._offset or at.offset < len(at.tail) or os.fstat(self._fd).st_size < at.offset:
            return False
        if not at.head or os.pread(self._fd, len(at.head), 0) != at.head:
            return False
        if os.pread(self._fd, len(at.tail), at.offset - len(at.tail)) != at.tail:
            return False
        self._offset, self._tail, self.skipped = at.offset, at.tail, at.skipped
        return True

    def changed(self) -> bool:
        """Whether the file holds bytes not yet read, or was replaced (cheap stat, no lock)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return self._offset != 0
        except OSError as exc:  # a directory nobody may read: one clear error
            raise storage_error(exc, f"cannot read session {self.path.parent.name!r}") from exc
        if self._ident is not None and (st.st_dev, st.st_ino) != self._ident:
            return True
        if self._seen is not None:  # mtime too: a rewrite may reuse the inode and the size
            return (st.st_size, st.st_mtime_ns) != self._seen
        return st.st_size != self._offset

    def _note(self) -> None:
        """Remember the size and mtime of what has been read or written (under the lock)."""
        assert self._fd is not None
        st = os.fstat(self._fd)
        self._seen = (st.st_size, st.st_mtime_ns)

    def read_all(self) -> list[dict[str, Any]]:
        """Every readable record from the start of the file; call under :meth:`locked`."""
        self._offset, self.skipped, self._tail = 0, 0, b""
        return self.read_new()

    def rewrite(self, records: list[dict[str, Any]]) -> None:
        """Replace the file with ``records`` atomically, under :meth:`locked`: a fresh
        identity line, written beside and renamed over the old while its lock is held.
        Other processes notice and replay it; this one reads on after ``records``."""
        assert self._fd is not None, "rewrite needs the lock"
        for stale in self.path.parent.glob(f".{self.path.name}.*.tmp"):
            with contextlib.suppress(OSError):  # only a killed rewrite leaves one: we hold the lock
                stale.unlink()
        identity = {"kind": REWRITE, "id": secrets.token_hex(12), "at": time.time()}
        payload = b"".join(jsonl_line(r) for r in [identity, *records])
        try:
            with atomic_file(self.path) as f:  # named as the stale ones above
                f.write(payload)
        except OSError as exc:
            raise storage_error(exc, f"cannot rewrite {self.path}") from exc
        _fsync_dir(self.path.parent)
        new_fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        try:  # if another process locked it first, its append is replayed too
            lock_fd(new_fd, f"session {self.path.parent.name!r}", 6 * LOCK_WAIT_SECONDS)
        except Busy:
            os.close(new_fd)
            raise
        old_fd, self._fd = self._fd, new_fd
        unlock_fd(old_fd)
        os.close(old_fd)
        st = os.fstat(new_fd)
        self._ident, self._head = (st.st_dev, st.st_ino), os.pread(new_fd, _HEAD_BYTES, 0)
        self._seen = None
        self._offset = len(payload)  # the caller has the records; read_new brings later appends
        self._tail = payload[-_TAIL_BYTES:]
        self.skipped = 0
        self.generation += 1

    def read_new(self) -> list[dict[str, Any]]:
        """Records appended since the last read; call under :meth:`locked`."""
        assert self._fd is not None, "read_new needs the lock"
        size = os.fstat(self._fd).st_size
        if (
            size < self._offset
            or os.pread(self._fd, len(self._head), 0) != self._head
            or os.pread(self._fd, len(self._tail), self._offset - len(self._tail)) != self._tail
        ):
            # Truncated or restored in place (same inode): read afresh, as after a purge.
            log.warning("%s was truncated or replaced in place; reading it again", self.path)
            self._offset = 0
            self.skipped = 0
            self.generation += 1
            self._head = os.pread(self._fd, _HEAD_BYTES, 0)
            self._tail = b""
        if size == self._offset:
            self._note()
            return []
        data = os.pread(self._fd, size - self._offset, self._offset)
        end = data.rfind(b"\n") + 1
        # Under the lock a tail without newline is torn: skipped even if it parses.
        self._offset += len(data)
        self._tail = data[-_TAIL_BYTES:]
        if end < len(data):
            self.skipped += 1
        lines = [x for x in data[:end].split(b"\n")[:-1] if x.strip() and x != _CLOSED]
        del data
        parsed = _parse_all(lines)
        records: list[dict[str, Any]] = []
        for rec in parsed:
            if rec is None:
                self.skipped += 1
            elif rec.get("kind") != REWRITE:
                records.append(rec)
        self._note()
        return records

    def write(self, records: list[dict[str, Any]]) -> None:
        """Append records as whole lines in one write(); call locked, after read_new."""
        assert self._fd is not None, "write needs the lock"
        if not self.writable:
            raise StorageError(
                f"cannot write to {self.path}: read-only (a read-only file system, or no "
                "write permission); reading still works"
            )
        payload = b"".join(jsonl_line(r) for r in records)
        if self._offset and os.pread(self._fd, 1, self._offset - 1) != b"\n":
            payload = _CLOSED + b"\n" + payload  # close off a torn line left by a crash
        start = os.fstat(self._fd).st_size  # we hold the lock: nobody else writes
        try:
            written = os.write(self._fd, payload)
        except OSError as exc:
            self._undo(start)
            raise storage_error(exc, f"cannot append to {self.path}") from exc
        if written != len(payload):
            # A short write (a full disk): cut off the part, or the next append would
            # close it into a record the caller was told failed.
            self._undo(start)
            raise StorageError(
                f"cannot append to {self.path}: only {written} of {len(payload)} bytes "
                "were written (is the disk full?); nothing was saved, try again"
            )
        self._offset = start + written
        self._tail = payload[-_TAIL_BYTES:]
        self._note()

    def _undo(self, size: int) -> None:
        """Cut the file back to ``size`` bytes after a failed append (under the lock)."""
        assert self._fd is not None
        try:
            if os.fstat(self._fd).st_size > size:
                os.ftruncate(self._fd, size)
        except OSError as exc:  # the partial line stays; replay skips it as torn
            log.error("cannot cut a failed append off %s: %s", self.path, exc.strerror)


def jsonl_line(record: dict[str, Any]) -> bytes:
    """One record as a journal line: compact UTF-8 JSON and a newline."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    if sys.platform == "win32":  # pragma: no cover
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
