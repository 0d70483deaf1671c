"""What a document's reader relies on, checked before it is relied on, so a damaged file
gives one clear error naming the document.

``load_array`` checks a header against the file's size before mapping; the readers
check each value as they use it (O(1) or O(what is read)); ``verify_index`` checks
every value at once, for doctor.
"""

from __future__ import annotations

import itertools
import json
import math
import mmap
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from context_window.errors import REINGEST, StorageError

IN_MEMORY_BYTES = 1 << 20  # a file up to this size is read, not memory-mapped
# Python keeps a duplicate descriptor open for each mapping unless told not to (3.13+):
# a search of every document maps all their indexes at once.
_UNTRACKED: dict[str, Any] = (
    {"trackfd": False} if sys.version_info >= (3, 13) and os.name == "posix" else {}
)
CHECKED_WHOLE = 1 << 16  # offsets checked whole when opened, up to this many (microseconds)
_HEADERS = {
    1: np.lib.format.read_array_header_1_0,
    2: np.lib.format.read_array_header_2_0,
}


class Damaged(StorageError):
    """A document whose files do not hold what the reader relies on."""

    def __init__(self, doc_id: str, what: str, part: str = "index") -> None:
        super().__init__(f"document {doc_id!r} has a damaged {part} ({what})", remedy=REINGEST)
        self.doc_id = doc_id


def mapped(f: BinaryIO) -> mmap.mmap:
    """The whole of ``f``, mapped read-only; no descriptor is kept where Python allows."""
    return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ, **_UNTRACKED)


def load_array(path: Path, in_memory_up_to: float = IN_MEMORY_BYTES) -> npt.NDArray[Any]:
    """``path``'s array, mapped past ``in_memory_up_to`` bytes; ValueError if the header lies."""
    with path.open("rb") as f:
        major, _ = np.lib.format.read_magic(f)
        read = _HEADERS.get(major)
        if read is None:
            raise ValueError(f"{path.name}: array format version {major} is not one we write")
        shape, fortran, dtype = read(f)
        offset, size = f.tell(), os.fstat(f.fileno()).st_size
        if dtype.hasobject or fortran:
            raise ValueError(f"{path.name}: not an array layout we write")
        count = math.prod(shape)
        if offset + count * dtype.itemsize != size:
            raise ValueError(
                f"{path.name}: its header says {shape} of {dtype} "
                f"({count * dtype.itemsize:,} bytes), the file holds {size - offset:,}"
            )
        if count and count * dtype.itemsize > in_memory_up_to:
            return np.frombuffer(mapped(f), dtype, count, offset).reshape(shape)
        return np.fromfile(f, dtype=dtype, count=count).reshape(shape)


def check_span(name: str, offsets: npt.NDArray[Any], i: int, end: int) -> tuple[int, int]:
    """``offsets[i]``, ``offsets[i + 1]`` as a slice within ``0..end``; ValueError if not."""
    a, b = int(offsets[i]), int(offsets[i + 1])
    if not 0 <= a <= b <= end:
        raise ValueError(f"{name}: entry {i} spans {a}..{b}, outside 0..{end}")
    return a, b


def check_offsets(name: str, offsets: npt.NDArray[Any], rows: int, end: int) -> None:
    """Offsets run from 0 to ``end``; values between are checked per slice (``check_span``)."""
    if offsets.ndim != 1 or len(offsets) != rows:
        raise ValueError(f"{name}: {offsets.shape} offsets, expected {rows}")
    if int(offsets[0]) != 0 or int(offsets[-1]) != end:
        raise ValueError(f"{name}: runs {int(offsets[0])}..{int(offsets[-1])}, not 0..{end}")
    if rows <= CHECKED_WHOLE and not _rising(offsets):
        raise ValueError(f"{name}: offsets fall")


def stat_count(stats: dict[str, Any], key: str) -> int:
    """A whole, non-negative number from stats.json; ValueError if it is not one."""
    value = stats.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"stats.json: {key} is {value!r:.40}, not a count")
    return value


def read_trails(path: Path) -> list[str]:
    """The heading trails of headings.json; ValueError when it is not a list of strings."""
    trails = json.loads(path.read_text(encoding="utf-8"))
    trails = trails.get("trails") if isinstance(trails, dict) else None
    if not isinstance(trails, list) or not all(isinstance(t, str) for t in trails):
        raise ValueError("headings.json: not a list of heading trails")
    return trails


def verify_index(
    terms: bytes,
    term_off: npt.NDArray[Any],
    numbers: npt.NDArray[Any],
    post_off: npt.NDArray[Any],
    post_chunks: npt.NDArray[Any],
    n_chunks: int,
) -> list[str]:
    """Every value of an index the readers rely on, checked at once: a line per problem."""
    problems: list[str] = []
    if not _rising(term_off):
        problems.append("term_offsets.npy: offsets fall")
    else:
        try:
            terms.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(f"terms.bin: not UTF-8 at byte {exc.start}")
        else:
            if any(a >= b for a, b in itertools.pairwise(_words(terms, term_off))):
                problems.append("terms.bin: terms out of order (a search would miss them)")
    if len(numbers) > 1 and not bool(np.all(numbers[1:] > numbers[:-1])):
        problems.append("numbers.npy: numbers out of order")
    if not _rising(post_off):
        problems.append("post_offsets.npy: offsets fall")
    if len(post_chunks) and int(post_chunks.max()) >= n_chunks:
        problems.append(f"post_chunks.npy: chunk {int(post_chunks.max())} of {n_chunks}")
    return problems


def _words(terms: bytes, term_off: npt.NDArray[Any], block: int = 1 << 16) -> Iterator[bytes]:
    """The terms in order, their offsets read a block at a time (bounded memory)."""
    for at in range(0, len(term_off) - 1, block):
        off = term_off[at : at + block + 1].tolist()
        for a, b in itertools.pairwise(off):
            yield terms[a:b]


def _rising(offsets: npt.NDArray[Any]) -> bool:
    """Whether ``offsets`` never fall (compared, not subtracted: they are unsigned)."""
    return bool(np.all(offsets[1:] >= offsets[:-1]))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: Any) -> bool:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return ok and math.isfinite(value)


_COUNTS = ("chars", "chunks", "tokens")
_TEXTS = ("title", "source", "sha256")


def meta_problem(meta: dict[str, Any]) -> str | None:
    """What makes a document's meta.json unusable (a field every tool reads), or None."""
    if not isinstance(meta.get("id"), str):
        return f"id is {meta.get('id')!r:.40}, not text"
    for key in _COUNTS:
        if not _is_count(meta.get(key)):
            return f"{key} is {meta.get(key)!r:.40}, not a count"
    if not _is_count(meta.get("cursor", 0)):
        return f"cursor is {meta.get('cursor')!r:.40}, not a count"
    for key in _TEXTS:
        if not isinstance(meta.get(key, ""), str) and not (key == "title" and meta[key] is None):
            return f"{key} is {meta.get(key)!r:.40}, not text"
    if not _is_number(meta.get("created_at", 0.0)):
        return f"created_at is {meta.get('created_at')!r:.40}, not a time"
    ratio = meta.get("ratio", 0.27)
    if not (_is_number(ratio) and ratio > 0):
        return f"ratio is {ratio!r:.40}, not a positive number"
    return None


def summary_problem(summary: Any) -> str | None:
    """What makes a cached summary unusable (it is then made again), or None."""
    if summary is None:
        return None
    if not isinstance(summary, dict):
        return "not an object"
    if not isinstance(summary.get("text"), str):
        return f"its text is {summary.get('text')!r:.40}, not text"
    for key in ("method", "reason", "note"):
        if not isinstance(summary.get(key, ""), str):
            return f"its {key} is {summary.get(key)!r:.40}, not text"
    if not _is_count(summary.get("tokens", 0)) or not _is_count(summary.get("target_tokens")):
        return "its token counts are not counts"
    return None
