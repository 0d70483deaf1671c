"""A large text without headings or fences, chunked a segment at a time, in a child
process when it can be: chunking is Python, and runs there beside the term counting.

Segments are read from the source file, so only one segment's text and chunks exist
at once. Each segment but the last gives up its final chunk, and the next segment
starts where that chunk started, so the chunks come out as from one call (overlap
included). Cuts fall after a newline byte, which in UTF-8 is always a character
boundary.

The child (``python -m context_window.segments``) reads the source itself and sends
back only numbers: for each segment, where it lies and its chunks' rows and byte
spans. Its stdout is a pipe to this process, never the MCP stream; its stderr a
temporary file, read if it fails. When it cannot be started, or fails, or sends what
does not follow on from the last segment, the rest is chunked in this process, from
where the last good segment left off, into the same rows.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from context_window.chunking import chunk_text
from context_window.models import Chunk

I64 = npt.NDArray[np.int64]
_log = logging.getLogger(__name__)
# int64s before each segment's rows: its chunks, first and end byte, first character,
# and where the next begins (byte, character, line)
_HEADER = 7
_HELLO = b"cw-seg1\n"  # the child's first bytes: a program that is not it is not trusted


Resume = tuple[int, int, int]  # where the next segment begins: byte, character, line
_START: Resume = (0, 0, 1)


@dataclass(frozen=True)
class Part:
    """Chunks of ``text``, which begins at character ``base`` and byte ``first_byte`` of
    the document: ``rows`` (start, end, tokens, first line; character offsets into the
    document) and ``spans`` (start, end byte offsets). ``heads`` holds each chunk's
    heading trail; None when none has one. ``data`` is ``text`` as UTF-8, when at hand."""

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
        """The texts of chunks ``first`` to ``last - 1``, each with its heading trail on
        a line of its own after it: what is indexed of a chunk."""
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
    """Where each of ``chunks`` of ``text`` (in start order) lies in its UTF-8 bytes,
    ``text`` beginning at byte ``first_byte``: rows of (start, end)."""
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


@functools.cache
def fix_mmap_threshold() -> None:
    """Fix glibc's mmap threshold at 1 MiB, once, before a large text is chunked or indexed.

    glibc raises the threshold to the size of the largest mapped block freed (up to 32
    MiB), after which numpy's per-batch temporaries come from the heap, and the pages
    they free there stay with the process: a 1 GB log's ingest peaked ~90 MB higher.
    Fixed, arrays of 1 MiB or more are mapped apart and handed back when freed."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to fix
            ctypes.CDLL(None).mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD


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
    """The parts of ``plan.source``, a segment each, chunked in a child process if
    ``child`` and one can be started, else here: the same parts either way. Should the
    child fail or be killed, the segments it had not sent are chunked here."""
    resume = _START
    if child:
        with tempfile.TemporaryFile() as errors:
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "context_window.segments"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=errors,
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                )
            except OSError as exc:
                _log.warning("chunking in this process: no child process (%s)", exc)
            else:
                for part in _from_child(proc, plan, errors):
                    yield part
                    assert part.after is not None
                    resume = part.after
    yield from _chunked(plan, resume)  # nothing, when the child chunked every segment


def _from_child(proc: subprocess.Popen[bytes], plan: Plan, errors: IO[bytes]) -> Iterator[Part]:
    """The parts the child sends, each with its text read from the source here."""
    assert proc.stdin is not None and proc.stdout is not None
    done = False
    try:
        proc.stdin.write(json.dumps(_plan_json(plan)).encode() + b"\n")
        proc.stdin.close()
        if proc.stdout.read(len(_HELLO)) != _HELLO:
            raise ValueError("it did not start as the chunking process does")
        expected = _START
        with plan.source.open("rb") as f:
            while len(header := _read_ints(proc.stdout, _HEADER)):
                n, first_byte, end_byte, base, *after = header.tolist()
                if n < 0:  # the end: the child's peak memory, in kB
                    _log.info(  # peak_kb: for whoever measures it (the benchmarks)
                        "chunked %s in a child process: peak RSS %d kB",
                        plan.source,
                        base,
                        extra={"peak_kb": base},
                    )
                    done = True
                    break
                if (first_byte, base) != expected[:2] or not first_byte < after[0] <= end_byte:
                    raise ValueError(f"segment at byte {first_byte} does not follow {expected}")
                rows = _read_ints(proc.stdout, 4 * n).reshape(n, 4)
                spans = _read_ints(proc.stdout, 2 * n).reshape(n, 2)
                f.seek(first_byte)
                data = f.read(end_byte - first_byte)
                expected = (after[0], after[1], after[2])
                yield Part(rows, spans, None, base, first_byte, None, data, expected)
        done = done and proc.wait() == 0
    except (OSError, ValueError) as exc:  # a broken pipe, a torn or stray frame
        _log.warning("the chunking process's output broke off: %s", exc)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        errors.seek(0)
        err = errors.read()[-2000:].decode("utf-8", "replace").strip()
    if not done:
        _log.warning(
            "the chunking process ended (status %s) before the last segment; "
            "chunking the rest in this process. %s",
            proc.returncode,
            err,
        )


def _read_ints(stream: IO[bytes], count: int) -> I64:
    """``count`` int64s from ``stream``; none at its end (only where a frame begins)."""
    data = stream.read(8 * count) if count else b""
    if data and len(data) != 8 * count:
        raise ValueError("the chunking process stopped in the middle of a frame")
    ints: I64 = np.frombuffer(data, dtype=np.int64).copy()
    return ints


def _plan_json(plan: Plan) -> dict[str, Any]:
    return {**dataclasses.asdict(plan), "source": str(plan.source)}


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
    """This process's peak RSS in kB (VmHWM: ru_maxrss would count the parent's pages
    from before the exec), or 0 where /proc cannot tell."""
    try:
        with Path("/proc/self/status").open(encoding="ascii") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return 0


def _child_main() -> int:
    """Chunk the plan read from stdin; write each segment's numbers to stdout."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # nothing printed by mistake can reach the pipe
    fix_mmap_threshold()
    out.write(_HELLO)
    fields = json.loads(sys.stdin.readline())
    plan = Plan(**{**fields, "source": Path(fields["source"])})
    for part in _chunked(plan):
        assert part.data is not None and part.after is not None
        header = np.array(
            [len(part.rows), part.first_byte, part.first_byte + len(part.data), part.base],
            dtype=np.int64,
        )
        header = np.concatenate([header, np.array(part.after, dtype=np.int64)])
        out.write(header.tobytes() + part.rows.tobytes() + part.spans.tobytes())
        out.flush()
    out.write(np.array([-1, 0, 0, _peak_kb(), 0, 0, 0], dtype=np.int64).tobytes())
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
