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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from context_window.errors import Busy, InvalidInput, StorageError

log = logging.getLogger("context_window.storage")

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # fullmatch: "$" would allow a final \n


def check_id(value: str, what: str = "id") -> str:
    """Return ``value`` if it is a safe id, else raise InvalidInput saying the rule."""
    if not is_valid_id(value):
        raise InvalidInput(
            f"invalid {what} {repr(value)[:80]}: use 1-64 characters from A-Z a-z 0-9 . _ -, "
            "starting with a letter or digit"
        )
    return value


def is_valid_id(value: str) -> bool:
    """Whether ``value`` is a safe id: the rule ``check_id`` states."""
    return isinstance(value, str) and bool(_ID.fullmatch(value))


def new_id(prefix: str) -> str:
    """A fresh sortable id: ``<prefix><time in ms, base 36><random>``."""
    import numpy as np  # loaded by the first new id: the server's edge reads ids at start

    return f"{prefix}{np.base_repr(int(time.time() * 1000), 36).lower()}{secrets.token_hex(5)}"


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file that appears at ``path`` only once complete (temp, fsync, rename)."""
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
    """Rename the complete directory ``work`` to ``final``; return the earlier one, set
    aside as ``.old-<name>-<random>`` for the caller to delete. Both renames run under the
    replace lock, so ``recover_replaced`` puts the earlier version back after a crash."""
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
    """Hold ``root``'s replace lock across processes (a flock on the directory)."""
    if sys.platform == "win32":  # pragma: no cover - directories cannot be opened there
        yield
        return
    fd = os.open(root, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        lock_fd(fd, f"{root.name} (a replace in progress)", 6 * LOCK_WAIT_SECONDS)
        try:
            yield
        finally:
            unlock_fd(fd)
    finally:
        os.close(fd)


def replaced_name(path: Path) -> str | None:
    """The name a ``.old-<name>-<hex>`` directory was set aside from, else None."""
    if not path.name.startswith(OLD_PREFIX):
        return None
    name = path.name[len(OLD_PREFIX) :].rsplit("-", 1)[0]
    return name or None


def recover_replaced(root: Path) -> list[str]:
    """Finish every replace in ``root`` a crash interrupted; return the ids put back."""
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
    """``size`` bytes of ``fd`` from ``offset``, reading on after a short ``pread``."""
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


def lock_fd(fd: int, what: str, wait: float = LOCK_WAIT_SECONDS) -> None:
    """Take the exclusive OS lock on ``fd`` within ``wait`` seconds, else raise Busy.

    filelock gives the primitive; the deadline is ours, so a stopped holder (Ctrl-Z, a
    debugger) never hangs its peers for good."""
    import filelock  # loaded by the first lock, not at start

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


def unlock_fd(fd: int) -> None:
    """Release the lock ``lock_fd`` took."""
    import filelock

    filelock.unlock_descriptor(fd)


def file_stamp(path: str | Path) -> tuple[int, int, int] | None:
    """(inode, mtime, size) of a file, or None: what tells a replaced file apart."""
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


def spelled(root: Path, name: str) -> str:
    """The directory of ``root`` that ``name`` names: itself, else one spelled alike in
    any case. Ids ignore case, as the file systems of macOS and Windows do, so a data dir
    answers alike on every system and an archive moves between them."""
    names = subdirs(root)
    if name in names:
        return name
    folded = name.casefold()
    return min((n for n in names if n.casefold() == folded), default=name)


@contextlib.contextmanager
def file_lock(path: Path, what: str, wait: float = LOCK_WAIT_SECONDS) -> Iterator[None]:
    """Hold the exclusive OS lock of the file ``path`` (made if missing); Busy after ``wait``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        lock_fd(fd, what, wait)
        try:
            yield
        finally:
            unlock_fd(fd)
    finally:
        os.close(fd)


def unwritable(exc: OSError) -> bool:
    """Whether ``exc`` says nothing can be written there now (read-only, full, denied)."""
    return exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT)


def storage_error(exc: OSError, what: str) -> StorageError:
    """A StorageError for ``exc`` saying plainly what is wrong and what to do."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        where = f" on {exc.filename}" if exc.filename else ""
        uid = getattr(os, "getuid", lambda: None)()
        who = f"this server (uid {uid})" if uid is not None else "this server"
        return StorageError(
            f"{what}: permission denied{where}: {who} may not use it. Make the data dir "
            "readable and writable for it (chown it to that uid), or, in a container with a "
            "bind mount, run it as the folder's owner (docker run --user UID:GID)"
        )
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return StorageError(
            f"{what}: too many open files; nothing is damaged. Raise the limit of open files "
            "for this server (ulimit -n 4096 before it starts; docker run --ulimit nofile=4096)"
        )
    reason = {
        errno.ENOSPC: "no space left on the device (the disk is full)",
        errno.EDQUOT: "over the disk quota",
        errno.EROFS: "read-only file system",
        errno.ENOTDIR: f"a file is in the way ({CHOOSE_ANOTHER})",
    }.get(exc.errno or 0, exc.strerror or type(exc).__name__)
    return StorageError(f"{what}: {reason}")


WORK_PREFIX = ".tmp-"
LEGACY_WORK_SECONDS = 3600.0  # an older release's work directory (no owner lock) this old
_OWNER = ".lock"  # beside each work directory: locked by the process doing the work


@contextlib.contextmanager
def work_dir(root: Path, name: str) -> Iterator[Path]:
    """A fresh hidden path ``root/.tmp-<name>-<hex>`` for work, its ``.lock`` held while
    the block runs, so ``sweep_work`` tells live work from what a crash left. The caller
    creates the directory; a failing block's is removed."""
    root.mkdir(parents=True, exist_ok=True)
    work = root / f"{WORK_PREFIX}{name}-{secrets.token_hex(4)}"
    owner = work.with_name(work.name + _OWNER)
    fd = os.open(owner, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        lock_fd(fd, str(owner))
        yield work
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
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
            lock_fd(fd, str(owner), wait=0)  # one try: held means the owner lives
        except Busy:
            return True
        unlock_fd(fd)
        return False
    finally:
        os.close(fd)


def work_in_progress(root: Path, name: str) -> bool:
    """Whether a living process is at work on ``name`` in ``root`` (see ``work_dir``)."""
    work = re.compile(re.escape(f"{WORK_PREFIX}{name}-") + "[0-9a-f]{8}")
    try:
        with os.scandir(root) as found:
            works = [e.path for e in found if work.fullmatch(e.name)]
    except OSError:
        return False
    return any(work_is_live(Path(w)) for w in works)


def sweep_work(root: Path, legacy_seconds: float = LEGACY_WORK_SECONDS) -> list[str]:
    """Remove work directories whose owner's lock is free, and ``.trash-`` ones."""
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


CHOOSE_ANOTHER = "--data-dir or CTX_DATA_DIR chooses another"


def unwritable_line(data_dir: Path, reason: str) -> str:
    """The one line about a data dir that cannot be written: path, reason, remedy."""
    return (
        f"the data dir {data_dir} is not writable ({reason}): reads work, every write will "
        f"fail ({CHOOSE_ANOTHER})"
    )


def write_access(directory: Path) -> str | None:
    """Why ``directory`` cannot be written to, or None when it can (asked without writing)."""
    if os.access(directory, os.W_OK | os.X_OK):
        return None
    with contextlib.suppress(OSError):
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return "a read-only file system"
    return "permission denied"
