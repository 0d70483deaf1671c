"""Files on disk: id rules, atomic JSON writes, and locked append-only JSONL journals."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import re
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import filelock

from context_window.errors import Busy, InvalidInput, StorageError


def parse_line(line: bytes | str) -> dict[str, Any] | None:
    """One JSON object, or None for anything else: invalid JSON, deep nesting, NaN."""
    try:
        rec = json.loads(line, parse_constant=reject_constant)
    except (ValueError, RecursionError):
        return None
    return rec if isinstance(rec, dict) else None


def _parse_all(lines: list[bytes]) -> list[dict[str, Any] | None]:
    """``parse_line`` of each line, faster: the lines are decoded as one text and each is
    parsed in place; a line that does not parse whole that way goes through
    ``parse_line`` itself, so the result is the same (a replay of a long journal spends
    far less time in the parser)."""
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

log = logging.getLogger("context_window.storage")

REWRITE = "rewrite"  # the kind of the identity line a rewritten journal starts with
# Appended to a torn line to close it off: no JSON text ends in NUL, so the torn line can
# never parse, even if all it lacked was its newline. A reader that had already skipped
# the torn part sees this alone on its line and ignores it.
_CLOSED = b"\x00"
_HEAD_BYTES = 256  # how much of a journal's start identifies it, beside its inode
_TAIL_BYTES = 64  # and the bytes just before a reader's offset, which must not change
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # fullmatch: "$" would allow a final \n
_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def check_id(value: str, what: str = "id") -> str:
    """Return ``value`` if it is a safe id, else raise InvalidInput saying the rule."""
    if not isinstance(value, str) or not _ID.fullmatch(value) or value in {".", ".."}:
        shown = repr(value)[:80]
        raise InvalidInput(
            f"invalid {what} {shown}: use 1-64 characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    return value


def is_valid_id(value: str) -> bool:
    """Whether ``value`` passes :func:`check_id` (for listing directories, not for input)."""
    try:
        check_id(value)
    except InvalidInput:
        return False
    return True


def new_id(prefix: str) -> str:
    """A fresh sortable id: ``<prefix><time base36><random>``."""
    n = int(time.time() * 1000)
    digits = ""
    while n:
        n, r = divmod(n, 36)
        digits = _B36[r] + digits
    return f"{prefix}{digits}{secrets.token_hex(5)}"


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file to write that appears at ``path`` only once complete: a temp file
    ``.<name>.<random>.tmp`` beside it, fsync-ed and renamed when the block ends,
    removed if the block raises. Readers see the old file or the new one, never half."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        Path(tmp).replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            Path(tmp).unlink()
        raise


@contextlib.contextmanager
def atomic_text(path: Path) -> Iterator[TextIO]:
    """``atomic_file`` for UTF-8 text."""
    with atomic_file(path) as raw:
        f = io.TextIOWrapper(raw, encoding="utf-8", newline="")
        try:
            yield f
        finally:
            f.detach()  # flushes; atomic_file fsyncs and closes the binary file


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON atomically (see ``atomic_text``), creating the directory if need be."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_text(path) as f:
        json.dump(data, f, ensure_ascii=False, indent=1)


def replace_dir(work: Path, final: Path, *, locked: bool = False) -> Path | None:
    """Rename the complete directory ``work`` to ``final``; return the earlier one, set aside.

    An existing ``final`` is first renamed to ``.old-<name>-<random>`` beside it, and
    renamed back if the second rename fails (the OSError propagates). The caller
    deletes the returned directory. Both renames happen under the directory's replace
    lock, so :func:`recover_replaced` never mistakes a replace in progress for one a
    crash interrupted; after a crash between them, it puts the earlier version back.
    """
    with contextlib.nullcontext() if locked else replace_lock(final.parent):
        old = None
        if final.exists():
            old = final.with_name(f"{OLD_PREFIX}{final.name}-{secrets.token_hex(4)}")
            final.rename(old)
        try:
            work.rename(final)
        except OSError:
            if old is not None:
                old.rename(final)
            raise
        return old


OLD_PREFIX = ".old-"


@contextlib.contextmanager
def replace_lock(root: Path) -> Iterator[None]:
    """Hold ``root``'s replace lock across processes: a flock on the directory itself,
    so no lock file is left in it."""
    if sys.platform == "win32":  # pragma: no cover - directories cannot be opened there
        yield
        return
    fd = os.open(root, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        _lock_fd(fd, f"{root.name} (a replace in progress)", 6 * LOCK_WAIT_SECONDS)
        try:
            yield
        finally:
            _unlock_fd(fd)
    finally:
        os.close(fd)


def replaced_name(path: Path) -> str | None:
    """The name a ``.old-<name>-<hex>`` directory was set aside from, else None."""
    if not path.name.startswith(OLD_PREFIX):
        return None
    name = path.name[len(OLD_PREFIX) :].rsplit("-", 1)[0]
    return name or None


def recover_replaced(root: Path) -> list[str]:
    """Finish every replace in ``root`` that a crash interrupted; return what was restored.

    A ``.old-<name>-…`` directory whose ``<name>`` is missing is the earlier version of a
    replace killed between its two renames: it is renamed back. One whose ``<name>``
    exists is what a completed replace left to delete: it is deleted.
    """
    if not root.is_dir() or not any(replaced_name(p) for p in root.iterdir()):
        return []
    restored: list[str] = []
    with replace_lock(root):
        for p in sorted(root.iterdir()):
            name = replaced_name(p)
            if name is None or not p.is_dir():
                continue
            if not (root / name).exists():
                try:
                    p.rename(root / name)
                    restored.append(name)
                    continue
                except OSError as exc:
                    log.error("cannot restore %s from %s: %s", name, p, exc.strerror)
                    continue
            shutil.rmtree(p, ignore_errors=True)
    return restored


def read_at(fd: int, offset: int, size: int) -> bytes:
    """``size`` bytes of the open file ``fd`` from ``offset`` (fewer only at its end):
    a ``pread`` may return less than asked (Linux stops at about 2 GiB), so it is read
    again from where it stopped."""
    parts = [os.pread(fd, size, offset)]
    got = len(parts[0])
    while got < size and parts[-1]:
        parts.append(os.pread(fd, size - got, offset + got))
        got += len(parts[-1])
    return b"".join(parts) if len(parts) > 1 else parts[0]


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``; None when the file is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


LOCK_WAIT_SECONDS = 10.0  # how long a journal lock is waited for before "busy"


def _lock_fd(fd: int, what: str, wait: float = LOCK_WAIT_SECONDS) -> None:
    """Take the exclusive OS lock on ``fd`` within ``wait`` seconds, else raise Busy.

    filelock supplies the primitive (flock, or LockFileEx on Windows); the deadline is
    ours: a process stopped (Ctrl-Z, SIGSTOP, a debugger) while it holds the lock must
    not hang its peers for good, so they poll and give up with an error to retry.
    """
    deadline = time.monotonic() + wait
    pause = 0.001
    while not filelock.lock_descriptor(fd, blocking=False):
        if time.monotonic() >= deadline:
            raise Busy(
                f"{what} is busy: another process has held its lock for over {wait:g} s; "
                "try again in a moment"
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


_unlock_fd = filelock.unlock_descriptor


def file_stamp(path: str | Path) -> tuple[int, int, int] | None:
    """(inode, mtime, size) of a file, or None when it cannot be read: what tells a file
    replaced or rewritten since apart (every atomic write makes a new inode)."""
    try:
        st = os.stat(path)  # noqa: PTH116  (a string path: listings pay this per entry)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def subdirs(root: Path) -> list[str]:
    """Names of the directories in ``root`` that are not hidden (none if it is missing)."""
    try:
        with os.scandir(root) as found:
            return [e.name for e in found if not e.name.startswith(".") and e.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []


@contextlib.contextmanager
def file_lock(path: Path, what: str, wait: float = LOCK_WAIT_SECONDS) -> Iterator[None]:
    """Hold the exclusive OS lock of the file ``path`` (made if missing); Busy after ``wait``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _lock_fd(fd, what, wait)
        try:
            yield
        finally:
            _unlock_fd(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class JournalPosition:
    """How far a journal was read: the offset, the file's first bytes and the bytes just
    before the offset (which identify the file and the offset), and the lines skipped."""

    offset: int
    head: bytes
    tail: bytes
    skipped: int


class Journal:
    """An append-only JSONL file shared by processes: whole-line writes under an OS lock.

    ``read_new`` returns records appended since the last call (by anyone) and
    counts lines that do not parse; a torn last line left by a crashed writer is
    closed off by the next append, so it is skipped exactly once by every reader.

    A journal is replaced only by :meth:`rewrite` (a purge). Readers recognise the
    file they have been reading by its inode *and* its first bytes: a freed inode
    number is soon given to a new file, so the inode alone would let a reader take a
    rewritten log for the old one and read on from a stale offset. A rewritten file
    starts with an identity line (kind ``rewrite``, a random id) that no other file
    starts with; ``read_new`` hides it.
    """

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
        # The last bytes read or written, just before the offset: if they change, the
        # file was replaced in place and the offset means nothing any more.
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
                    _unlock_fd(self._fd)
                    os.close(self._fd)
                    self._fd = None

    def _open(self) -> int:
        """The journal opened for appending, or, where it cannot be written (a read-only
        file system or file), for reading only: reads never need write access."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            self.writable = True
            return fd
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
                _lock_fd(fd, f"session {self.path.parent.name!r}")
            except Busy:
                os.close(fd)
                raise
            held = os.fstat(fd)
            try:
                current = self.path.stat()
            except FileNotFoundError:
                current = None
            if current is None or (current.st_dev, current.st_ino) != (held.st_dev, held.st_ino):
                _unlock_fd(fd)  # a rewrite renamed a new file in while we waited
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
        """Go on reading from ``at`` (a position this file had) if the file still starts
        with the same bytes and holds the same bytes just before that offset; False,
        changing nothing, when it does not (a rewrite, a truncation, another file)."""
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
        """Replace the whole file with ``records`` atomically; call under :meth:`locked`.

        The new file starts with a fresh identity line; it is written and fsynced
        beside the old one and renamed over it while the old one's lock is held.
        Other processes notice the new file (its inode or its first bytes) when they
        next lock it, and replay it from the start. This one reads on after
        ``records``: an append that locked the new file before us comes next.
        """
        assert self._fd is not None, "rewrite needs the lock"
        for stale in self.path.parent.glob(f".{self.path.name}.*.tmp"):
            with contextlib.suppress(OSError):  # only a killed rewrite leaves one: we hold the lock
                stale.unlink()
        identity = {"kind": REWRITE, "id": secrets.token_hex(12), "at": time.time()}
        payload = b"".join(jsonl_line(r) for r in [identity, *records])
        fd, tmp = tempfile.mkstemp(
            prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent
        )
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            Path(tmp).replace(self.path)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                Path(tmp).unlink()
            if isinstance(exc, OSError):
                raise StorageError(f"cannot rewrite {self.path}: {exc.strerror}") from exc
            raise
        _fsync_dir(self.path.parent)
        new_fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        try:  # if another process locked it first, its append is replayed too
            _lock_fd(new_fd, f"session {self.path.parent.name!r}", 6 * LOCK_WAIT_SECONDS)
        except Busy:
            os.close(new_fd)
            raise
        old_fd, self._fd = self._fd, new_fd
        _unlock_fd(old_fd)
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
            # Truncated, or restored from a copy, in place (same inode): read it afresh,
            # as after a purge (the caller replays from the start).
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
        # Under the lock no writer is mid-line, so a tail without newline is torn: a write
        # that never finished, so never acknowledged. It is skipped even when it parses
        # (every byte but the newline), and the next append closes it off unparseable.
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
            # A short write (a full disk, a file size limit) left part of the lines: cut
            # them off, or the next append would close the partial line into a record
            # that the caller was told had failed.
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


def storage_error(exc: OSError, what: str) -> StorageError:
    """A StorageError for ``exc`` that says plainly when the disk is full or read-only."""
    reason = {
        errno.ENOSPC: "no space left on the device (the disk is full)",
        errno.EDQUOT: "over the disk quota",
        errno.EROFS: "read-only file system",
        errno.EACCES: "permission denied",
    }.get(exc.errno or 0, exc.strerror or type(exc).__name__)
    return StorageError(f"{what}: {reason}")


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


WORK_PREFIX = ".tmp-"
LEGACY_WORK_SECONDS = 3600.0  # an older release's work directory (no owner lock) this old
_OWNER = ".lock"  # beside each work directory: locked by the process doing the work


@contextlib.contextmanager
def work_dir(root: Path, name: str) -> Iterator[Path]:
    """A fresh hidden path ``root/.tmp-<name>-<hex>`` for work in progress, marked live.

    The lock file ``<path>.lock`` beside it is created and flock-ed before the work
    starts and released when the block ends, so :func:`sweep_work` can tell work a
    living process is doing (even one stopped or asleep, with a clock far off) from
    what a crash left. The caller creates the directory and removes it on failure.
    """
    root.mkdir(parents=True, exist_ok=True)
    work = root / f"{WORK_PREFIX}{name}-{secrets.token_hex(4)}"
    owner = work.with_name(work.name + _OWNER)
    fd = os.open(owner, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        _lock_fd(fd, str(owner))
        yield work
    finally:
        with contextlib.suppress(OSError):
            owner.unlink()
        os.close(fd)


def work_is_live(work: Path) -> bool | None:
    """Whether a living process holds ``work``'s owner lock; None without a lock file."""
    owner = work.with_name(work.name + _OWNER)
    try:
        fd = os.open(owner, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError:
        return True  # cannot tell: leave it alone
    try:
        try:
            _lock_fd(fd, str(owner), wait=0)  # one try: held means the owner lives
        except Busy:
            return True
        _unlock_fd(fd)
        return False
    finally:
        os.close(fd)


def sweep_work(root: Path, legacy_seconds: float = LEGACY_WORK_SECONDS) -> list[str]:
    """Remove work directories (and their lock files) whose owner is gone; return their names.

    Liveness is the owner's lock, never a timestamp: a process whose clock is an hour
    ahead, or that wakes from sleep, cannot take another's live work for a leftover.
    Only a work directory without a lock file (an older release's) falls back to its
    age. ``.trash-`` directories are what a finished delete left: always removed.
    """
    if not root.is_dir():
        return []
    removed: list[str] = []
    for p in sorted(root.iterdir()):
        if p.name.startswith(".trash-") and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p.name)
        elif p.name.startswith(WORK_PREFIX) and p.name.endswith(_OWNER) and not p.is_dir():
            work = p.with_name(p.name[: -len(_OWNER)])
            if not work.exists() and work_is_live(work) is False:
                with contextlib.suppress(OSError):
                    p.unlink()
        elif p.name.startswith(WORK_PREFIX) and p.is_dir():
            live = work_is_live(p)
            try:
                stale = time.time() - p.stat().st_mtime > legacy_seconds
            except OSError:
                continue
            if live is False or (live is None and stale):
                shutil.rmtree(p, ignore_errors=True)
                with contextlib.suppress(OSError):
                    p.with_name(p.name + _OWNER).unlink()
                removed.append(p.name)
    return removed


def write_access(directory: Path) -> str | None:
    """Why ``directory`` cannot be written to, or None when it can (asked without writing)."""
    if os.access(directory, os.W_OK | os.X_OK):
        return None
    with contextlib.suppress(OSError):
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return "a read-only file system"
    return "permission denied"
