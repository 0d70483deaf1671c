"""A large text without headings or fences, chunked a segment at a time, in a child
process when it can be, beside the term counting.

Each segment but the last gives up its final chunk, where the next one starts, so the
chunks come out as from one call; cuts fall after a newline byte. The child is a
one-worker spawned ``ProcessPoolExecutor`` returning only numbers; if it cannot start,
breaks or is killed, the rest is chunked here from the last good segment.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from context_window.documents.chunking import chunk_text
from context_window.models import Chunk

I64 = npt.NDArray[np.int64]
_log = logging.getLogger(__name__)


Resume = tuple[int, int, int]  # where the next segment begins: byte, character, line
_START: Resume = (0, 0, 1)


@dataclass(frozen=True)
class Part:
    """Chunks of ``text`` at ``base``/``first_byte``: rows, byte spans, trails, UTF-8 data."""

    rows: I64
    spans: I64
    given_text: str | None  # None: decoded from ``data`` when first asked for
    base: int = 0
    first_byte: int = 0
    heads: list[str] | None = None
    data: bytes | None = None
    after: Resume | None = None  # of a segment: where the next one begins

    @classmethod
    def of_chunks(cls, text: str, chunks: list[Chunk], spans: I64) -> Part:
        """The part for ``chunks`` of the whole ``text`` (lines numbered)."""
        rows = np.array([(c.start, c.end, c.tokens, c.line) for c in chunks], dtype=np.int64)
        heads = [c.heading for c in chunks]
        return cls(rows.reshape(-1, 4), spans, text, heads=heads if any(heads) else None)

    @functools.cached_property
    def text(self) -> str:
        """The text the rows index (from character ``base``)."""
        if self.given_text is not None:
            return self.given_text
        assert self.data is not None
        return self.data.decode("utf-8")

    def texts(self, first: int, last: int) -> list[str]:
        """What is indexed of chunks ``first`` to ``last - 1``: text, then heading trail."""
        starts = (self.rows[first:last, 0] - self.base).tolist()
        ends = (self.rows[first:last, 1] - self.base).tolist()
        heads = self.heads[first:last] if self.heads is not None else [""] * len(starts)
        text = self.text
        return [f"{text[a:b]}\n{h}" for a, b, h in zip(starts, ends, heads, strict=True)]


def number_lines(text: str, chunks: list[Chunk], first_line: int = 1) -> list[Chunk]:
    """``chunks`` of ``text`` (in start order) with the line number of each start filled in."""
    out: list[Chunk] = []
    line, pos = first_line, 0
    for c in chunks:
        line += text.count("\n", pos, c.start)
        pos = c.start
        out.append(dataclasses.replace(c, line=line))
    return out


def byte_spans(text: str, chunks: list[Chunk], first_byte: int = 0) -> I64:
    """Each chunk's (start, end) in ``text``'s UTF-8, ``text`` beginning at ``first_byte``."""
    if text.isascii():  # a byte per character
        rows = [(first_byte + c.start, first_byte + c.end) for c in chunks]
    else:
        rows = []
        at, pos = first_byte, 0
        for c in chunks:
            at += len(text[pos : c.start].encode("utf-8"))
            pos = c.start
            rows.append((at, at + len(c.text.encode("utf-8"))))
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


@dataclass(frozen=True)
class Plan:
    """How to chunk a source: its file, length in characters, and the chunk settings."""

    source: Path
    chars: int
    chunk_tokens: int
    chunk_overlap: int
    ratio: float
    segment_chars: int


def segments(plan: Plan, child: bool = True) -> Iterator[Part]:
    """``plan.source``'s parts, a segment each, in a child process if ``child``, else here."""
    resume = _START
    if child:
        try:
            with ProcessPoolExecutor(1, _SPAWN, initializer=_quiet_stdout) as pool:
                with plan.source.open("rb") as f:
                    future = pool.submit(_segment_numbers, plan, resume)
                    while (numbers := future.result()) is not None:
                        rows, spans, first_byte, end_byte, base, after = numbers
                        follows = (first_byte, base) == resume[:2]
                        if not follows or not first_byte < after[0] <= end_byte:
                            raise ValueError(f"segment at {first_byte} does not follow {resume}")
                        future = pool.submit(_segment_numbers, plan, after)  # chunked meanwhile
                        f.seek(first_byte)
                        data = f.read(end_byte - first_byte)
                        yield Part(rows, spans, None, base, first_byte, None, data, after)
                        resume = after
                peak = pool.submit(_peak_kb).result()
            _log.info(  # peak_kb: for whoever measures it (the benchmarks)
                "chunked %s in a child process: peak RSS %d kB",
                plan.source,
                peak,
                extra={"peak_kb": peak},
            )
        except Exception as exc:  # BrokenProcessPool (killed), a pool that cannot start …
            _log.warning(
                "the chunking process stopped before the last segment (%s: %s); "
                "chunking the rest in this process",
                type(exc).__name__,
                exc,
            )
    yield from _chunked(plan, resume)  # nothing, when the child chunked every segment


_SPAWN = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked threads or locks


def _quiet_stdout() -> None:
    """In the child: what it prints goes to stderr, never to an MCP stream on stdout."""
    os.dup2(2, 1)


def _segment_numbers(plan: Plan, resume: Resume) -> tuple[I64, I64, int, int, int, Resume] | None:
    """In the child: the segment at ``resume`` as numbers, or None past the end."""
    part = next(_chunked(plan, resume), None)
    if part is None:
        return None
    assert part.data is not None and part.after is not None
    end = part.first_byte + len(part.data)
    return part.rows, part.spans, part.first_byte, end, part.base, part.after


def _chunked(plan: Plan, resume: Resume = _START) -> Iterator[Part]:
    """The parts from ``resume`` on, chunked in this process."""
    pos, base, line = resume
    with plan.source.open("rb") as f:
        size = f.seek(0, 2)
        while pos < size:
            f.seek(pos)
            block = f.read(plan.segment_chars)
            end = pos + len(block)
            newline = block.rfind(b"\n") if end < size else -1
            if newline >= 0:
                block = block[: newline + 1]
                end = pos + newline + 1
            text = block.decode("utf-8")
            part = chunk_text(text, plan.chunk_tokens, plan.chunk_overlap, plan.ratio)
            used = len(text)
            if end < size and len(part) > 1:
                used = part.pop().start
                end = pos + len(text[:used].encode("utf-8"))  # where the next begins
            part = number_lines(text, part, line)
            spans = byte_spans(text, part, pos)
            rows = np.array(
                [(c.start + base, c.end + base, c.tokens, c.line) for c in part], dtype=np.int64
            )
            after = (end, base + used, line + text.count("\n", 0, used))
            # The whole segment: a chunk kept may overlap the one given up.
            yield Part(rows.reshape(-1, 4), spans, text, base, pos, None, block, after)
            pos, base, line = after


def _peak_kb() -> int:
    """This process's peak RSS in kB (VmHWM, as ru_maxrss counts pre-exec pages), or 0."""
    try:
        with Path("/proc/self/status").open(encoding="ascii") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return 0
