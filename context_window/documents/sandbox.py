"""Reading files for doc_ingest: only regular files inside the configured ingest roots.

A path is allowed when its real path lies inside a root's, by whole segments. The file
is stat-ed before opening (no devices, FIFOs or sockets), opened with ``O_NOFOLLOW`` and
``O_NONBLOCK``, and the descriptor checked again to be the same regular file, so a swap
between check and read is refused (docs/storage.md).
"""

from __future__ import annotations

import codecs
import contextlib
import difflib
import itertools
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from context_window.errors import SET_INGEST_ROOT, AccessDenied, InvalidInput, NotFound
from context_window.wording import plural

NO_ROOTS = "files can be read only under an ingest root, and none is configured"
_READ_BLOCK = 1 << 22


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    """Whether ``path`` equals or lies under one of ``roots`` (both already resolved)."""
    return any(path.is_relative_to(root) for root in roots)


def _kind(mode: int) -> str:
    """A name for a file type that is not a regular file."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def resolve_in_roots(file_path: str, roots: Sequence[Path]) -> Path:
    """The real path of ``file_path`` if it lies inside an ingest root, else AccessDenied."""
    if not roots:
        raise AccessDenied(NO_ROOTS, remedy=SET_INGEST_ROOT)
    if not isinstance(file_path, str) or not file_path.strip():
        raise InvalidInput("file_path must be a non-empty path")
    if "\x00" in file_path:
        raise AccessDenied("file_path contains a NUL byte; refusing it")
    real_roots = [root.resolve() for root in roots]
    for given in dict.fromkeys([Path(file_path).expanduser(), _as_written(file_path)]):
        candidate = given if given.is_absolute() else roots[0] / given
        try:
            real = candidate.resolve(strict=True)
        except (OSError, RuntimeError, ValueError):  # missing, a loop, a lone surrogate
            continue
        if _inside(real, real_roots):
            return real
    raise unavailable(file_path, roots, _near_names(candidate, real_roots))


def _near_names(path: Path, real_roots: Sequence[Path]) -> str:
    """The files beside a missing ``path`` whose names are near its name, in any case
    (``Build.log`` for ``build.log``), when its folder lies inside a root: nothing outside
    is ever named."""
    try:
        folder = path.parent.resolve(strict=True)
    except (OSError, RuntimeError, ValueError):
        return ""
    if not _inside(folder, real_roots):
        return ""
    by_case = {name.casefold(): name for name in _file_names(folder)}
    near = difflib.get_close_matches(path.name.casefold(), by_case, 3, 0.8)
    return " or ".join(by_case[n] for n in near)


def _file_names(folder: Path) -> list[str]:
    """The regular files of ``folder``, sorted ([] when it cannot be read)."""
    try:
        with os.scandir(folder) as found:
            listed = itertools.islice(found, 10_000)  # a huge folder is not read whole
            return sorted(f.name for f in listed if f.is_file(follow_symlinks=False))
    except OSError:
        return []


def _as_written(file_path: str) -> Path:
    """``file_path`` as a model or a file manager writes it: padded, in quotes (Windows'
    "Copy as path"), a ``file://`` URI (as MCP names roots), or under ``~``."""
    text = file_path.strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    if text.lower().startswith("file://"):
        from urllib.parse import urlsplit
        from urllib.request import url2pathname

        text = url2pathname(urlsplit(text).path)
    return Path(text).expanduser()


def unavailable(file_path: str, roots: Sequence[Path], near: str = "") -> NotFound:
    """One answer for a path missing, unresolvable or outside the roots: never an oracle
    (``near``: files inside a root with names like the one asked for)."""
    missing = [str(r) for r in roots if not r.is_dir()]
    if len(missing) == len(roots):
        return NotFound(
            f"no file {file_path!r:.200} can be read: the ingest root "
            f"{', '.join(missing)} does not exist on this machine",
            remedy=SET_INGEST_ROOT,
        )
    gone = f"; {', '.join(missing)} does not exist on this machine" if missing else ""
    return NotFound(
        f"no readable file {file_path!r:.200} inside the ingest roots "
        f"({', '.join(str(r) for r in roots)}; relative paths are read from {roots[0]}): "
        f"it is missing, or it is outside the ingest roots{gone}"
        + (f"; did you mean {near}?" if near else "")
    )


@dataclass(frozen=True)
class OpenFile:
    """A checked, open regular file inside an ingest root (see ``open_file``)."""

    fd: int
    path: Path
    size: int
    mtime_ns: int

    def blocks(self, max_bytes: int, size: int = _READ_BLOCK) -> Iterator[bytes]:
        """The file's bytes in blocks; InvalidInput once more than ``max_bytes`` came."""
        seen = 0
        while block := os.read(self.fd, size):
            seen += len(block)
            if seen > max_bytes:
                raise InvalidInput(_too_big(self.path, seen, max_bytes))
            yield block


@contextlib.contextmanager
def open_file(file_path: str, roots: Sequence[Path], max_bytes: int) -> Iterator[OpenFile]:
    """Open a regular file inside an ingest root until the block ends, else AccessDenied."""
    real = resolve_in_roots(file_path, roots)
    try:
        before = real.lstat()
    except OSError as exc:
        raise AccessDenied(f"cannot stat {real}: {exc.strerror}") from None
    if not stat.S_ISREG(before.st_mode):
        names = _file_names(real) if stat.S_ISDIR(before.st_mode) else []
        more = f" and {len(names) - 6} more" if len(names) > 6 else ""
        inside = (
            f"; ingest its files each by its path, as {str(real / names[0])!r} "
            f"({', '.join(names[:6])}{more})"
            if names
            else ""
        )
        raise AccessDenied(
            f"{real} is {_kind(before.st_mode)}; only regular files can be read{inside}"
        )
    if before.st_size > max_bytes:
        raise InvalidInput(_too_big(real, before.st_size, max_bytes))
    fd = _open_beneath(real, roots)
    try:
        after = os.fstat(fd)
        same = (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
        if not stat.S_ISREG(after.st_mode) or not same:
            raise AccessDenied(f"{real} changed while it was being opened; refusing it")
        if after.st_nlink > 1:
            raise AccessDenied(
                f"{real} has {after.st_nlink} hard links; a file linked from outside the "
                "ingest roots could be read through one, so only singly linked files are read"
            )
        _check_descriptor_path(fd, real, roots)
        yield OpenFile(fd, real, after.st_size, after.st_mtime_ns)
    finally:
        os.close(fd)


_FILE_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_DIR_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_DIRECTORY", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def _open_beneath(real: Path, roots: Sequence[Path]) -> int:
    """Open ``real`` a component at a time from its root with ``O_NOFOLLOW`` (as openat)."""
    if os.open not in os.supports_dir_fd:  # pragma: no cover - Windows: whole-path open
        try:
            return os.open(real, _FILE_FLAGS)
        except OSError as exc:
            raise AccessDenied(f"cannot open {real}: {exc.strerror}") from None
    root = next((r for r in (x.resolve() for x in roots) if real.is_relative_to(r)), None)
    parts = real.relative_to(root).parts if root is not None else ()
    if root is None or not parts:
        raise AccessDenied(f"{real} is not a file under an ingest root")
    changed = AccessDenied(f"{real} changed while it was being opened; refusing it")
    try:
        dir_fd = os.open(root, _DIR_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise AccessDenied(f"cannot open the ingest root {root}: {exc.strerror}") from None
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:  # ELOOP (a symlink now), ENOTDIR, ENOENT: not what was checked
                raise changed from None
            os.close(dir_fd)
            dir_fd = inner
        try:
            return os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
        except OSError:
            raise changed from None
    finally:
        os.close(dir_fd)


def _check_descriptor_path(fd: int, real: Path, roots: Sequence[Path]) -> None:
    """On Linux, confirm the open descriptor's own path is still inside a root."""
    if not sys.platform.startswith("linux"):
        return
    try:
        opened = Path(f"/proc/self/fd/{fd}").readlink()
    except OSError:
        return
    if not _inside(opened, [root.resolve() for root in roots]):
        raise AccessDenied(f"{real} changed while it was being opened; refusing it")


def _too_big(path: Path, size: int, max_bytes: int) -> str:
    """The message for a file over the size limit."""
    return (
        f"{path} is {size:,} bytes; the limit is {max_bytes:,}. "
        "Split the file, or ingest the part you need"
    )


def decode_utf8(data: bytes, what: str) -> str:
    """``data`` as text, or InvalidInput naming the byte offset of the first bad sequence."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        around = data[max(0, exc.start - 2048) : exc.start + 2048]
        utf8 = exc.reason == _CUT and not data[: exc.start].isascii()  # else it may be Latin-1
        cut = len(data) - exc.start if utf8 else 0
        raise not_utf8(what, exc.start, around, data[:16], cut) from None


# Files that are not text but hold some, known by their first bytes, and what to run.
_PACKED = (
    (b"\x1f\x8b", "gzip-compressed: decompress it first (e.g. gunzip -k {})"),
    (b"\xfd7zXZ\x00", "xz-compressed: decompress it first (e.g. unxz -k {})"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed: decompress it first (e.g. zstd -d {})"),
    (b"PK\x03\x04", "a zip archive: extract it (e.g. unzip {}), then ingest a text file in it"),
    (b"%PDF-", "a PDF: extract its text first (e.g. pdftotext -layout {})"),
)


def not_utf8(
    what: str, offset: int, around: bytes, head: bytes = b"", cut: int = 0
) -> InvalidInput:
    """The error for text not UTF-8 at ``offset`` (``head``: the file's first bytes, if
    known): what to run for a compressed file, an archive or a PDF; iconv advice if it
    looks like text; for UTF-8 text whose last ``cut`` bytes begin a character it lacks,
    that (ASCII before them may as well be Latin-1, as ``caf\xe9`` is)."""
    if cut:
        name = Path(what).name
        return InvalidInput(
            f"{what} ends inside a character ({plural(cut, 'byte')} of a UTF-8 character "
            "the text does not finish), as a file cut at a byte limit or still being written "
            "does: it is UTF-8 otherwise. Ingest it again once it is whole, or without that "
            f"part (e.g. head -c -{cut} {name} > whole-{name})"
        )
    for magic, advice in _PACKED:
        if head.startswith(magic):
            return InvalidInput(f"{what} is " + advice.format(Path(what).name))
    if utf16 := utf16_error(what, around):
        return utf16
    binary = b"\x00" in around or sum(b < 32 and b not in _TEXT_CONTROLS for b in around) > (
        len(around) // 100
    )
    if binary:
        return InvalidInput(
            f"{what} is not text: its bytes near offset {offset} hold NUL or control "
            "characters, as a binary file's do; only text files can be ingested"
        )
    return InvalidInput(
        f"{what} is not valid UTF-8 at byte offset {offset}; it looks like text in another "
        "encoding: convert it to UTF-8 first (e.g. iconv -f latin1 -t utf-8)"
    )


def utf16_error(what: str, data: bytes) -> InvalidInput | None:
    """The error for ``data`` that reads as UTF-16: a byte-order mark, or (Latin text) a
    zero byte in most code units, always on the same side."""
    units = len(data) // 2
    even, odd = data[0::2].count(0), data[1::2].count(0)
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    elif units >= 16 and max(even, odd) * 2 > units and min(even, odd) * 8 < units:
        encoding = "utf-16be" if even > odd else "utf-16le"
    else:
        return None
    return InvalidInput(
        f"{what} is UTF-16 text, and only UTF-8 is read: convert it first "
        f"(e.g. iconv -f {encoding} -t utf-8, or PowerShell's Out-File -Encoding utf8)"
    )


_CUT = "unexpected end of data"  # a character begun in the last bytes and not finished
_TEXT_CONTROLS = frozenset(b"\t\n\r\x0c\x1b")  # tab, newlines, form feed, ANSI colours
