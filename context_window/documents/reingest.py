"""Replacing a document by re-ingesting it: stable chunks, what was kept, cursors carried.

Chunking is greedy from the start, so with the old version's stored settings the
chunks before an edit come out the same. A chunk is unchanged when its range is the
same inside the two sources' common prefix, or, from the end, their common suffix.
A cursor in the prefix stays, one in the tail follows its chunk, any other moves back
to the first changed chunk (docs/documents.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from context_window.config import recorded_chunk_settings
from context_window.documents.cursors import all_cursors, write_cursor
from context_window.documents.tables import Kept
from context_window.storage import read_json, write_json_atomic
from context_window.wording import plural

BLOCK = 1 << 22
Bytes = npt.NDArray[np.uint8]


def chunk_settings(
    old_meta: dict[str, Any] | None, tokens: int, overlap: int, ratio: float
) -> tuple[int, int, float]:
    """The old version's valid (chunk tokens, overlap, ratio), else the given ones."""
    recorded = None if old_meta is None else recorded_chunk_settings(old_meta)
    return recorded or (tokens, overlap, ratio)


def compare(old_dir: Path, new_dir: Path) -> Kept:
    """Which chunks of the build in ``new_dir`` are unchanged from the one in ``old_dir``."""
    old = np.load(old_dir / "index" / "chunks.npy")[:, :2]
    new = np.load(new_dir / "index" / "chunks.npy")[:, :2]
    a, b = _map(old_dir / "source.txt"), _map(new_dir / "source.txt")
    head = _prefix(a, b)
    while any(head < len(x) and x[head] & 0xC0 == 0x80 for x in (a, b)):
        head -= 1  # a character cut by the first difference is not common
    head_chars = _chars(a[:head])
    back = _suffix(a, b, min(len(a), len(b)) - head)
    tail_chars = _chars(a[len(a) - back :])  # a cut character has no lead byte here
    old_len, new_len = _chars(a), _chars(b)
    del a, b
    m = min(len(old), len(new))
    same = (old[:m] == new[:m]).all(axis=1) & (new[:m, 1] <= head_chars)
    prefix = int(np.argmin(same)) if not same.all() else m
    k = min(len(old), len(new)) - prefix
    tail = 0
    if k > 0 and tail_chars:
        ot, nt = old[len(old) - k :], new[len(new) - k :]
        same = ((ot - old_len) == (nt - new_len)).all(axis=1) & (ot[:, 0] >= old_len - tail_chars)
        misses = np.flatnonzero(~same)
        tail = k - (int(misses[-1]) + 1 if len(misses) else 0)
    return Kept(len(old), len(new), prefix, tail, len(old) - tail, len(new) - len(old))


def carry_cursors(old_dir: Path, new_dir: Path, kept: Kept) -> None:
    """Write the old version's shared and session cursors, carried over, into ``new_dir``."""
    meta = read_json(new_dir / "meta.json")
    old = read_json(old_dir / "meta.json") or {}
    cursor = old.get("cursor")
    if meta is not None and isinstance(cursor, int) and cursor > 0:
        meta["cursor"] = kept.carry(cursor)
        write_json_atomic(new_dir / "meta.json", meta)
    for session_id, value in all_cursors(old_dir).items():
        write_cursor(new_dir, session_id, kept.carry(value))


def describe(kept: Kept) -> str:
    """``kept 41 of 42 chunks unchanged (0-40)``, naming where moved chunks went."""
    parts = []
    if kept.prefix:
        parts.append(f"0-{kept.prefix - 1}")
    if kept.tail:
        first = kept.tail_old + kept.shift
        was = f"{kept.tail_old}-{kept.old_chunks - 1}"
        parts.append(f"{first}-{kept.new_chunks - 1}" + (f" (were {was})" if kept.shift else ""))
    where = f" ({', '.join(parts)})" if parts else ""
    return f"kept {kept.unchanged:,} of {plural(kept.new_chunks, 'chunk')} unchanged{where}"


def _map(path: Path) -> Bytes:
    """A file's bytes, memory-mapped read-only (freed with the array)."""
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=np.uint8)
    return np.memmap(path, dtype=np.uint8, mode="r")


def _prefix(a: Bytes, b: Bytes) -> int:
    """Length of the common byte prefix of ``a`` and ``b``."""
    m = min(len(a), len(b))
    for pos in range(0, m, BLOCK):
        end = min(m, pos + BLOCK)
        diff = np.flatnonzero(a[pos:end] != b[pos:end])
        if len(diff):
            return pos + int(diff[0])
    return m


def _suffix(a: Bytes, b: Bytes, limit: int) -> int:
    """Length of the common byte suffix of ``a`` and ``b``, at most ``limit``."""
    m = min(len(a), len(b), limit)
    for pos in range(0, m, BLOCK):
        end = min(m, pos + BLOCK)
        x, y = a[len(a) - end : len(a) - pos], b[len(b) - end : len(b) - pos]
        diff = np.flatnonzero(x != y)
        if len(diff):
            return pos + (len(x) - 1 - int(diff[-1]))
    return m


def _chars(data: Bytes) -> int:
    """Characters in UTF-8 ``data``: the bytes that are not continuation bytes."""
    total = 0
    for pos in range(0, len(data), BLOCK):
        total += int(np.count_nonzero((data[pos : pos + BLOCK] & 0xC0) != 0x80))
    return total
