"""A document's records: its metadata, and its memory-mapped chunk table and index.

``Tables`` opens one document's ``index/`` and reads chunk texts from ``source.txt`` by
byte offset: the text is stored once, the table holds only offsets, tokens, first line
and heading trail.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path, PurePath
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from context_window.documents.checks import (
    Damaged,
    load_array,
    meta_problem,
    read_trails,
    summary_problem,
)
from context_window.documents.index import DocIndex
from context_window.errors import InvalidInput, StorageError
from context_window.models import Chunk, Count, Reserve
from context_window.retrieval.analyzer import readable
from context_window.storage import read_at
from context_window.wording import plural

# A document's index/ arrays and the rows each holds beyond one per chunk (None: not per chunk).
INDEX_ARRAYS: dict[str, int | None] = {
    "spans.npy": 0,
    "chunks.npy": 0,
    "heading_ids.npy": 0,
    "doc_len.npy": 0,
    "term_offsets.npy": None,
    "numbers.npy": None,
    "post_offsets.npy": None,
    "post_chunks.npy": None,
    "post_tfs.npy": None,
}


@dataclass(frozen=True)
class DocInfo:
    """A document's metadata as stored in meta.json."""

    id: str
    title: str
    source: str
    sha256: str
    chars: int
    chunks: int
    tokens: int
    cursor: int
    created_at: float
    ratio: float
    summary: dict[str, Any] | None
    source_stat: tuple[int, int] | None = None  # (size, mtime_ns) of a file source at ingest

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> DocInfo:
        """Parse meta.json (ValueError names the first bad field; a bad summary is dropped)."""
        problem = meta_problem(meta)
        if problem is not None:
            raise ValueError(problem)
        summary = meta.get("summary")
        return cls(
            id=meta["id"],
            title=meta.get("title") or meta["id"],
            source=meta.get("source", ""),
            sha256=meta.get("sha256", ""),
            chars=meta["chars"],
            chunks=meta["chunks"],
            tokens=meta["tokens"],
            cursor=meta.get("cursor", 0),
            created_at=float(meta.get("created_at", 0.0)),
            ratio=float(meta.get("ratio", 0.27)),
            summary=summary if summary_problem(summary) is None else None,
            source_stat=_stat(meta.get("source_stat")),
        )

    def is_named(self, folded: str) -> bool:
        """Whether ``folded`` is this document's title or its file's name, with or without
        its suffix, in any case."""
        file = PurePath(self.source)
        names = {self.title, file.name, file.stem} if file.is_absolute() else {self.title}
        return folded in {n.casefold() for n in names}

    def span(self, first: int | None, last: int | None) -> tuple[int, int]:
        """``first..last`` defaulted to the whole document, or InvalidInput naming the chunks."""
        lo = 0 if first is None else first
        hi = self.chunks - 1 if last is None else min(last, self.chunks - 1)
        if not 0 <= lo < self.chunks:
            raise InvalidInput(
                f"from={lo} is out of range: document {self.id!r} has "
                f"{plural(self.chunks, 'chunk')} (0-{self.chunks - 1})"
            )
        if last is not None and last < lo:
            raise InvalidInput(f"to ({last}) is before from ({lo}); give to >= from")
        return lo, hi


def _stat(value: Any) -> tuple[int, int] | None:
    """``(size, mtime_ns)`` from meta's source_stat; None when absent or not valid."""
    if not isinstance(value, dict):
        return None
    size, mtime = value.get("size"), value.get("mtime_ns")
    if isinstance(size, int) and isinstance(mtime, int):
        return size, mtime
    return None


@dataclass(frozen=True)
class Kept:
    """Chunks a re-ingest kept: ``0..prefix-1``, and the last ``tail`` shifted by ``shift``."""

    old_chunks: int
    new_chunks: int
    prefix: int
    tail: int
    tail_old: int
    shift: int

    @property
    def unchanged(self) -> int:
        """How many chunks of the new document have the text of an old one."""
        return self.prefix + self.tail

    def carry(self, cursor: int) -> int:
        """Where an old cursor points in the new document (rules in ``docreingest``)."""
        if cursor <= self.prefix:
            return min(cursor, self.new_chunks)
        if self.tail and cursor >= self.tail_old:
            return min(cursor + self.shift, self.new_chunks)
        return self.prefix


@dataclass(frozen=True)
class Ingested:
    """What an ingest did: the document, and whether it matched or replaced another."""

    doc: DocInfo
    duplicate_of: str | None
    reused: bool
    replaced: bool
    seconds: float
    kept: Kept | None = None


@dataclass(frozen=True)
class Window:
    """Consecutive chunks returned by doc_window, and where the cursor went."""

    doc: DocInfo
    chunks: tuple[Chunk, ...]
    truncated: bool
    cursor: int
    at_end: bool
    used_tokens: int
    session_id: str | None = None
    moved: bool = True  # False: the cursor could not be written (a read-only data dir)


class Tables:
    """A document's memory-mapped chunk table, byte spans, headings and index."""

    def __init__(self, directory: Path) -> None:
        index_dir = directory / "index"
        self.dir = directory
        self._source = str(directory / "source.txt")
        self.index = DocIndex(index_dir)  # first: an older release's layout is OldIndex
        self.spans = load_array(index_dir / "spans.npy")
        self.table = load_array(index_dir / "chunks.npy", math.inf)
        self.heading_ids = load_array(index_dir / "heading_ids.npy", math.inf)
        self.trails = read_trails(index_dir / "headings.json")
        n = self.index.n_chunks
        if self.spans.shape != (n, 2) or self.table.shape != (n, 4) or len(self.heading_ids) != n:
            raise ValueError(f"chunk table shapes do not agree with {n} chunks")
        if n and int(self.heading_ids.max()) >= len(self.trails):
            raise ValueError(f"heading {int(self.heading_ids.max())} of {len(self.trails)}")
        size = (directory / "source.txt").stat().st_size
        spans, starts, ends = self.spans, self.table[:, 0], self.table[:, 1]
        if n and not (
            int(spans.min()) >= 0 and int(spans[:, 1].max()) <= size and (starts >= 0).all()
        ):
            raise ValueError(f"chunk spans outside the {size:,}-byte source")
        if n and not ((spans[:, 0] <= spans[:, 1]).all() and (starts <= ends).all()):
            raise ValueError("chunk spans end before they start")

    def chunk_of(self, line: int) -> int:
        """The first chunk starting on source line ``line``, else the last before it."""
        starts = self.table[:, 3]
        i = int(np.searchsorted(starts, line, side="left"))
        if i < len(starts) and int(starts[i]) == line:
            return i
        return max(0, i - 1)

    def heading(self, i: int) -> str:
        """The heading trail of chunk ``i``."""
        return self.trails[int(self.heading_ids[i])]

    def tokens(self) -> npt.NDArray[np.int64]:
        """Estimated tokens of every chunk, at the ratio used at ingest."""
        return np.asarray(self.table[:, 2])

    def read(self, first: int, last: int, styled: bool = False) -> list[Chunk]:
        """Chunks ``first..last`` from source.txt, each checked against the table, as
        answers show them (``readable``) unless ``styled`` (then ``text`` is ``start..end``)."""
        try:
            if first < 0 or last >= len(self.spans) or last < first:
                raise IndexError(f"chunks {first}..{last} of {len(self.spans)}")
            spans = self.spans[first : last + 1].tolist()
            a, b = min(s for s, _ in spans), max(e for _, e in spans)
            data = _read_at(self._source, a, b - a)
            chunks = []
            for i, (s, e) in enumerate(spans, start=first):
                start, end, tokens, line = (int(v) for v in self.table[i])
                text = data[s - a : e - a].decode("utf-8")
                if len(text) != end - start:
                    raise ValueError(f"chunk {i} is {len(text)} characters, not {end - start}")
                text = text if styled else readable(text)
                chunks.append(Chunk(i, text, tokens, start, end, self.heading(i), line))
        except (OSError, ValueError, IndexError, TypeError) as exc:  # TypeError: a flat table
            raise self.damaged(f"{exc!s:.120}") from exc
        return chunks

    def cut(self, text: str) -> Iterator[Chunk]:
        """Every chunk cut from the source ``text``; StorageError once a range lies outside."""
        for i, row in enumerate(self.table.tolist()):
            start, end, tokens, line = (int(v) for v in row)
            if not 0 <= start <= end <= len(text):
                raise self.damaged(f"chunk {i} is at {start}..{end} of {len(text):,} characters")
            yield Chunk(i, text[start:end], tokens, start, end, self.heading(i), line)

    def damaged(self, what: str) -> StorageError:
        """The error for a document whose source no longer agrees with its index."""
        return Damaged(self.dir.name, what, "source.txt")


def _read_at(path: str, offset: int, size: int) -> bytes:
    """``size`` bytes of the file at ``path`` from ``offset`` (fewer at its end)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_at(fd, offset, size)
    finally:
        os.close(fd)


class WindowLayout(Protocol):
    """What an edge puts around a window's chunks, which packing leaves room for."""

    def label(self, chunk: Chunk) -> str:
        """The line above a chunk."""
        ...

    def reserve(self, doc: DocInfo, session_id: str | None, budget: int, count: Count) -> Reserve:
        """The header's widest size, for a window on ``doc``."""
        ...


def window_label(c: Chunk) -> str:
    """The line both edges put above each chunk of a window: ``[i] heading · line N``."""
    where = f" · line {c.line}" if c.line else ""
    return f"[{c.index}] {c.heading}".rstrip() + where


def from_line(chunk: Chunk, line: int) -> Chunk:
    """``chunk`` without the lines before source line ``line`` (if it holds them)."""
    pos = 0
    for _ in range(line - max(chunk.line, 1)):
        pos = chunk.text.find("\n", pos) + 1
        if pos == 0:
            return chunk
    return replace(chunk, text=chunk.text[pos:], start=chunk.start + pos, line=line)
