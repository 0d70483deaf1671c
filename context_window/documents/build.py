"""Building one document directory: source, chunks, chunk table and index, meta.json last.

Written into a hidden temporary directory the store renames into place once ``meta.json``
exists, streamed in batches. Files besides ``index``'s: ``source.txt`` (the one copy of
the text), ``index/spans.npy`` (each chunk's bytes), ``index/chunks.npy`` (characters,
tokens, first line), ``index/heading_ids.npy`` into ``index/headings.json``.
"""

from __future__ import annotations

import codecs
import hashlib
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from context_window.documents.chunking import BOM, chunk_text
from context_window.documents.index import IndexBuilder
from context_window.documents.sandbox import decode_utf8, not_utf8, utf16_error
from context_window.documents.segments import (
    Part,
    Plan,
    byte_spans,
    number_lines,
    segments,
)
from context_window.errors import InvalidInput
from context_window.retrieval import wordscan
from context_window.retrieval.termcount import TermCounter
from context_window.storage import write_json_atomic

Progress = Callable[[float, str], None]
BATCH_CHARS = 2_000_000  # chunk text analysed per numpy batch
BATCH_CHUNKS = 4096
SEGMENT_CHARS = 2_000_000  # large headingless texts are chunked this much at a time
# From this many characters, a child process chunks segments while this one counts terms.
CHILD_MIN_CHARS = 16_000_000
# A structured text is chunked whole, in memory: a limit of its own, below the files'.
MAX_STRUCTURED_CHARS = 256 * 1024 * 1024
# Searched as "\n" + marker: a literal first character scans fast (0.6 s to 0.08 s/100 MB).
_STRUCTURE = re.compile(BOM + r"? {0,3}(?:#{1,6}[ \t]|```|~~~)")  # a text's start
_STRUCTURE_AFTER_NEWLINE = re.compile(r"\n {0,3}(?:#{1,6}[ \t]|```|~~~)")


@dataclass(frozen=True)
class BuildSpec:
    """What to build: the id, title and where the text came from, and how to chunk it."""

    doc_id: str
    title: str
    source: str
    sha256: str
    chunk_tokens: int
    chunk_overlap: int
    ratio: float
    max_chars: int
    mtime_ns: int | None = None  # a file source's mtime, recorded to tell when it changes
    segment_chars: int = SEGMENT_CHARS  # headingless texts longer than this are read in parts
    child_min_chars: int | None = CHILD_MIN_CHARS  # from this length, in a child (None: never)
    max_structured_chars: int = MAX_STRUCTURED_CHARS


def no_progress(_fraction: float, _message: str) -> None:
    """A progress callback that ignores progress."""


def sha256_of(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def encode_text(text: str) -> bytes:
    """Inline text as UTF-8, or InvalidInput naming the first unencodable character."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"text has an unpaired surrogate at character {exc.start}; send valid Unicode"
        ) from None


def build(
    directory: Path, spec: BuildSpec, holder: list[bytes], progress: Progress = no_progress
) -> dict[str, Any]:
    """Write a document into ``directory`` from ``holder``'s bytes (emptied); return meta."""
    data = holder.pop()
    progress(0.02, "decoding")
    text = decode_utf8(data, spec.source)
    _check_size(spec, len(text), not text.removeprefix(BOM).strip())
    directory.mkdir(parents=True)
    (directory / "source.txt").write_bytes(data)
    n_bytes = len(data)
    del data
    segmented = len(text) > spec.segment_chars and not _has_structure(text)
    texts = [len(text) if segmented else text]  # segments are read back from source.txt
    del text
    return _finish(directory, spec, n_bytes, texts, progress)


def build_file(
    directory: Path,
    spec: BuildSpec,
    copied: Copied,
    progress: Progress = no_progress,
    stored: bool = False,
) -> dict[str, Any]:
    """Write a complete document around the ``source.txt`` ``copy_source`` wrote; return
    meta. A large text without structure is chunked from disk a segment at a time; any
    other is read whole, up to ``spec.max_structured_chars`` unless ``stored``."""
    _check_size(spec, copied.chars, copied.blank)
    if copied.structured and not stored and copied.chars > spec.max_structured_chars:
        raise InvalidInput(
            f"{spec.source} is {copied.chars:,} characters with headings or code fences; "
            f"such a text is chunked whole, so its limit is {spec.max_structured_chars:,}. "
            "Split it at headings, or ingest the part you need"
        )
    segmented = copied.chars > spec.segment_chars and not copied.structured
    source = directory / "source.txt"
    # As bytes, then decoded: read_text would turn "\r\n" into "\n" and move every offset.
    texts = [copied.chars if segmented else source.read_bytes().decode("utf-8")]
    return _finish(directory, spec, copied.bytes, texts, progress)


def _check_size(spec: BuildSpec, chars: int, blank: bool) -> None:
    if chars > spec.max_chars:
        raise InvalidInput(
            f"{spec.source} is {chars:,} characters; the limit is {spec.max_chars:,}. "
            "Split it, or ingest the part you need"
        )
    if blank:
        raise InvalidInput(f"{spec.source} is empty: nothing to ingest")


def _finish(
    directory: Path, spec: BuildSpec, n_bytes: int, texts: list[str | int], progress: Progress
) -> dict[str, Any]:
    """Chunk and index source.txt, then write meta.json (``texts``: the text, or its length)."""
    progress(0.05, "chunking")
    text = texts.pop()
    parts: Iterator[Part]
    if isinstance(text, int):
        chars = text
        plan = Plan(
            directory / "source.txt",
            chars,
            spec.chunk_tokens,
            spec.chunk_overlap,
            spec.ratio,
            spec.segment_chars,
        )
        child = spec.child_min_chars is not None and chars >= spec.child_min_chars
        if child:  # numba loads (a quarter second) while the child starts and chunks
            threading.Thread(target=wordscan.available, daemon=True).start()
        parts = segments(plan, child=child)
    else:
        chars = len(text)
        chunks = chunk_text(text, spec.chunk_tokens, spec.chunk_overlap, spec.ratio)
        parts = iter([Part.of_chunks(text, number_lines(text, chunks), byte_spans(text, chunks))])
        del text, chunks
    totals = _write_chunks(directory, parts, chars, progress)
    meta: dict[str, Any] = {
        "id": spec.doc_id,
        "title": spec.title,
        "source": spec.source,
        "sha256": spec.sha256,
        "bytes": n_bytes,
        "chars": chars,
        "chunks": totals["chunks"],
        "tokens": totals["tokens"],
        "terms": totals["terms"],
        "cursor": 0,
        "created_at": time.time(),
        "chunk_tokens": spec.chunk_tokens,
        "chunk_overlap": spec.chunk_overlap,
        "ratio": spec.ratio,
    }
    if spec.mtime_ns is not None:
        meta["source_stat"] = {"size": n_bytes, "mtime_ns": spec.mtime_ns}
    progress(0.98, "writing meta.json")
    write_json_atomic(directory / "meta.json", meta)  # last: its presence marks completion
    return meta


@dataclass(frozen=True)
class Copied:
    """What ``copy_source`` wrote: the source's digest, size, length and kind of text."""

    sha256: str
    bytes: int
    chars: int
    structured: bool  # a line opens an ATX heading or a code fence
    blank: bool  # nothing but whitespace, after any BOM


_HEAD = 16  # characters that hold any heading or fence marker, with its newline


def copy_source(blocks: Iterable[bytes], dest: Path, what: str) -> Copied:
    """Copy ``blocks`` to ``dest`` in constant memory, hashing them and checking UTF-8."""
    digest = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")()
    n = chars = 0
    structured, blank = False, True
    head = tail = ""  # the text's first characters; the last ones so far
    with dest.open("xb") as out:
        for block in blocks:
            if n == 0 and (utf16 := utf16_error(what, block[:4096])):
                raise utf16
            digest.update(block)
            out.write(block)
            text = _decode(decoder, block, n, what)
            n += len(block)
            rest = text[chars == 0 and text.startswith(BOM) :]  # a BOM is no text
            chars += len(text)
            blank = blank and (not rest or rest.isspace())
            if len(head) < _HEAD:
                head += text[: _HEAD - len(head)]
            if not structured and text:  # a marker may straddle two blocks: keep a tail
                probe = tail + text
                structured = bool(_STRUCTURE_AFTER_NEWLINE.search(probe))
                tail = probe[-_HEAD:]
        pending = len(decoder.getstate()[0])  # a last character begun and not finished
        _decode(decoder, b"", n, what, final=True, cut=pending if chars < n - pending else 0)
    structured = structured or bool(_STRUCTURE.match(head))
    return Copied(digest.hexdigest(), n, chars, structured, blank)


def _decode(
    decoder: codecs.IncrementalDecoder,
    block: bytes,
    at: int,
    what: str,
    final: bool = False,
    cut: int = 0,  # (final) bytes of a last character left unfinished by UTF-8 text
) -> str:
    pending = len(decoder.getstate()[0])  # bytes of a character begun in the last block
    try:
        return decoder.decode(block, final)
    except UnicodeDecodeError as exc:
        start = at - pending + exc.start
        around = exc.object[max(0, exc.start - 2048) : exc.start + 2048]
        raise not_utf8(what, start, around, exc.object[:16] if at == 0 else b"", cut) from None


def _has_structure(text: str) -> bool:
    """Whether any line of ``text`` opens an ATX heading or a code fence."""
    return bool(_STRUCTURE.match(text) or _STRUCTURE_AFTER_NEWLINE.search(text))


def _write_chunks(
    directory: Path, parts: Iterator[Part], chars: int, progress: Progress
) -> dict[str, int]:
    """Write the chunk table and build the index, batch by batch."""
    index_dir = directory / "index"
    index_dir.mkdir()
    tables: list[npt.NDArray[np.int64]] = []  # start, end, tokens, first line
    heading_ids: list[npt.NDArray[np.uint32]] = []
    spans: list[npt.NDArray[np.int64]] = []
    trails: dict[str, int] = {}
    counter = TermCounter(numbers=True, spill=index_dir)  # its words, too, wait on disk
    builder = IndexBuilder(spill=index_dir)  # postings wait on disk, not in memory
    prev_end = 0
    tokens = 0.0  # each chunk's tokens pro rata to the characters its predecessor lacks
    done = 0
    for part in parts:
        rows = part.rows
        tables.append(rows)
        spans.append(part.spans)
        heads = part.heads if part.heads is not None else [""] * len(rows)
        heading_ids.append(
            np.fromiter((trails.setdefault(h, len(trails)) for h in heads), np.uint32, len(heads))
        )
        if len(rows):
            # Summed in order, from the total so far, as one loop over the chunks would.
            starts, ends = rows[:, 0], rows[:, 1]
            before = np.maximum.accumulate(np.concatenate(([prev_end], ends)))[:-1]
            new = np.maximum(0, ends - np.maximum(starts, before))
            shares = rows[:, 2] * new / (ends - starts)
            tokens = float(np.cumsum(np.concatenate(([tokens], shares)))[-1])
            prev_end = max(prev_end, int(ends.max()))
        scan = part.heads is None and part.data is not None and part.data.isascii()
        sizes = np.cumsum(rows[:, 1] - rows[:, 0])
        at = 0
        while at < len(rows):
            size_before = int(sizes[at - 1]) if at else 0
            fits = int(np.searchsorted(sizes, size_before + BATCH_CHARS, side="right"))
            end = min(len(rows), at + BATCH_CHUNKS, max(at + 1, fits))
            if scan:
                assert part.data is not None
                where = part.spans[at:end] - part.first_byte
                builder.add(counter.count_spans(part.data, where[:, 0], where[:, 1]))
            else:
                builder.add(counter.count(part.texts(at, end)))
            done += end - at
            at = end
            last = int(rows[at - 1, 1])
            progress(
                0.05 + 0.85 * last / max(chars, 1), f"indexed {last:,} of {chars:,} characters"
            )
    progress(0.92, "sorting the index")
    counter.done_counting()
    stats = builder.write(index_dir, counter)
    np.save(index_dir / "spans.npy", _joined(spans, 2, np.int64))
    np.save(index_dir / "chunks.npy", _joined(tables, 4, np.int64))
    np.save(index_dir / "heading_ids.npy", _joined(heading_ids, 0, np.uint32))
    write_json_atomic(index_dir / "headings.json", {"trails": list(trails)})
    return {"chunks": done, "tokens": math.ceil(tokens), "terms": int(stats["terms"])}


def _joined(
    arrays: list[npt.NDArray[Any]], width: int, dtype: type[np.generic]
) -> npt.NDArray[Any]:
    """``arrays`` end to end (rows of ``width``, or one column when 0); empty if none."""
    if arrays:
        return np.concatenate(arrays)
    return np.zeros((0, width) if width else 0, dtype=dtype)
