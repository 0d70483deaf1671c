"""A document's inverted index, built once at ingest and memory-mapped at search time.

The files of ``<doc>/index/`` are listed in docs/storage.md. Numbers (2 to 19 digits, most
of a log's terms) are integer keys in ``numbers.npy``, never Python strings. Scores are
BM25 as ``rank_bm25.BM25Okapi`` computes them, with statistics summed over every document
searched.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
import mmap
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from context_window.documents.checks import (
    IN_MEMORY_BYTES,
    Damaged,
    check_offsets,
    check_span,
    load_array,
    mapped,
    stat_count,
    verify_index,
)
from context_window.retrieval.bm25 import average_idf, idf_values, term_scores
from context_window.retrieval.termcount import (
    NUMBER,
    NumberTable,
    TermCounter,
    Triples,
    is_number_term,
    number_key,
    number_text,
)
from context_window.storage import write_json_atomic

# 2: stemmed terms, first lines; 3: texts read from source.txt by spans.npy; 4: numbers.npy;
# 5: NFKC terms and CJK letter pairs (analyzer version 2); 6: ANSI escapes blanked (3).
INDEX_VERSION = 6
FOUND_MEMO = 4096  # terms whose numbers an open index remembers
VOCAB_IN_MEMORY = 8192  # an index of at most this many terms keeps them all in a dict
POSTINGS_PER_PASS = 1 << 20  # postings sorted into term order at a time (~30 MB of arrays)
ROWS_PER_READ = 1 << 18  # spilled postings read back this many at a time
TERMS_PER_WRITE = 65_536
_SPILLED = (".chunks.part", ".terms.part", ".tfs.part")  # IndexBuilder's spill files
_POSTING = np.dtype([("term", "<u4"), ("chunk", "<u4"), ("tf", "<u4")])
HELD_POSTINGS = 1024  # postings up to this long are remembered per term (12 KB at most)
F64 = npt.NDArray[np.float64]


class OldIndex(ValueError):
    """The index was written by another release; the document must be re-indexed."""


class IndexBuilder:
    """Collects term-count triples, spilled to ``spill``; ``write`` sorts them into postings."""

    def __init__(
        self,
        spill: Path,
        postings_per_pass: int = POSTINGS_PER_PASS,
        rows_per_read: int = ROWS_PER_READ,
    ) -> None:
        self._per_pass, self._per_read = postings_per_pass, rows_per_read
        self._lengths: list[npt.NDArray[np.int64]] = []
        self._spill = spill
        self._spilled: list[BinaryIO] = []
        self.n_chunks = 0
        self.n_postings = 0

    def add(self, batch: Triples) -> None:
        """Add one batch of chunks (numbered after those already added)."""
        if not self._spilled:
            self._spilled = [(self._spill / name).open("wb") for name in _SPILLED]
        columns = (batch.chunk + np.uint32(self.n_chunks), batch.term, batch.tf)
        for f, column in zip(self._spilled, columns, strict=True):
            f.write(column.astype(np.uint32, copy=False).tobytes())
        self._lengths.append(batch.lengths)
        self.n_chunks += len(batch.lengths)
        self.n_postings += len(batch.term)

    def _blocks(self, *columns: int, keep: bool = False) -> Iterator[list[npt.NDArray[np.uint32]]]:
        """The spilled columns (0 chunk, 1 term, 2 tf) in blocks; removed after unless ``keep``."""
        for f in self._spilled:
            f.close()
        self._spilled = []
        paths = [self._spill / name for name in _SPILLED]
        try:
            if self.n_postings:
                with contextlib.ExitStack() as stack:
                    files = [stack.enter_context(paths[k].open("rb")) for k in columns]
                    for _ in range(0, self.n_postings, self._per_read):
                        yield [np.fromfile(f, dtype=np.uint32, count=self._per_read) for f in files]
        finally:
            for path in paths if not keep else ():
                path.unlink(missing_ok=True)

    def write(self, directory: Path, counter: TermCounter) -> dict[str, Any]:
        """Write the index files into ``directory`` (emptying ``counter``'s words); the stats."""
        directory.mkdir(parents=True, exist_ok=True)
        n_words, word_rank = _write_words(directory, counter)
        number_rank = _write_numbers(directory, counter.numbers, n_words)
        n_terms = n_words + len(number_rank)
        df = np.zeros(n_terms, dtype=np.uint32)  # at most one posting per chunk
        for (term,) in self._blocks(1, keep=True):  # pass 1: the document frequencies
            # Not bincount: its array of every term, per block, would cost more at scale.
            np.add.at(df, _ranks(term, word_rank, number_rank), 1)
        offsets = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(df, out=offsets[1:])
        average = average_idf(df, self.n_chunks)
        np.save(directory / "post_offsets.npy", offsets)
        cuts, n_postings = _cuts(offsets, self._per_pass), int(offsets[-1])
        del df, offsets  # 12 bytes a term: not held through the passes to come
        # Pass 2: the postings are parted into buckets of terms, in chunk order.
        tf_max = 0
        with _Buckets(self._spill, cuts) as buckets:
            for chunk, term, tf in self._blocks(0, 1, 2):
                tf_max = max(tf_max, int(tf.max()))
                buckets.hold(_ranks(term, word_rank, number_rank), chunk, tf)
            del word_rank, number_rank
            # Pass 3: each bucket sorted by term (stably: chunks stay ascending).
            tf_type = np.uint16 if tf_max <= 0xFFFF else np.uint32
            _write_postings(directory, buckets.sorted_parts(), self.n_postings, tf_type)
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        np.save(directory / "doc_len.npy", lengths.astype(np.uint32))
        n = self.n_chunks
        stats = {
            "version": INDEX_VERSION,
            "chunks": n,
            "terms": n_terms,
            "postings": n_postings,
            "avgdl": float(lengths.sum()) / n if n else 0.0,
            "total_len": int(lengths.sum()),
            "average_idf": average,
        }
        write_json_atomic(directory / "stats.json", stats)
        return stats


def _write_numbers(
    directory: Path, numbers: NumberTable | None, n_words: int
) -> npt.NDArray[np.uint32]:
    """numbers.npy from the number table (emptied); each number id's rank after the words."""
    size = numbers.size if numbers is not None else 0
    rank = np.empty(size, dtype=np.uint32)
    with (directory / "numbers.npy").open("wb") as f:
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.uint64))}
        np.lib.format.write_array_header_1_0(
            f, {**header, "fortran_order": False, "shape": (size,)}
        )
        done = 0
        for keys, ids in numbers.drain() if numbers is not None else ():
            f.write(keys.astype("<u8", copy=False).tobytes())
            rank[ids] = np.arange(n_words + done, n_words + done + len(ids), dtype=np.uint32)
            done += len(ids)
    if done != size:
        raise RuntimeError(f"the number table gave {done} numbers of {size}")
    return rank


def _write_words(directory: Path, counter: TermCounter) -> tuple[int, npt.NDArray[np.uint32]]:
    """terms.bin and term_offsets.npy (emptying the words): their count, each id's rank."""
    rank = np.empty(counter.word_ids, dtype=np.uint32)
    lens: list[npt.NDArray[np.uint64]] = []  # the lengths of the words written, a slice each
    written = 0
    encoded: list[bytes] = []
    last = None

    def flush() -> None:
        nonlocal written, encoded
        lens.append(np.fromiter(map(len, encoded), np.uint64, count=len(encoded)))
        f.write(b"".join(encoded))
        written += len(encoded)
        encoded = []

    with (directory / "terms.bin").open("wb") as f:  # written a slice at a time
        for word, i in counter.sorted_words():
            if word != last:
                last = word
                encoded.append(word.encode("utf-8"))
                if len(encoded) == TERMS_PER_WRITE:
                    flush()
            rank[i] = written + len(encoded) - 1
        flush()
    offsets = np.zeros(written + 1, np.uint64)
    np.cumsum(np.concatenate(lens), out=offsets[1:])
    np.save(directory / "term_offsets.npy", offsets)
    return written, rank


def _ranks(
    term: npt.NDArray[np.uint32],
    word_rank: npt.NDArray[np.uint32],
    number_rank: npt.NDArray[np.uint32],
) -> npt.NDArray[np.uint32]:
    """Term ids as ranks: their places in the index's term order."""
    numbered = term >= NUMBER
    rank = np.empty_like(term)
    rank[~numbered] = word_rank[term[~numbered]]
    rank[numbered] = number_rank[term[numbered] - np.uint32(NUMBER)]
    return rank


def _cuts(offsets: npt.NDArray[np.int64], per_pass: int) -> list[int]:
    """Term ranks cutting the postings into ranges of about ``per_pass``, terms never split."""
    n, n_terms = int(offsets[-1]), len(offsets) - 1
    parts = max(1, -(-n // per_pass))
    # Integer bounds: float ones would make numpy copy every offset to float to compare.
    bounds = np.arange(1, parts, dtype=np.int64) * n // parts
    inner = np.searchsorted(offsets, bounds, side="right") - 1
    return sorted({0, n_terms, *(int(c) for c in inner if 0 < c < n_terms)})


class _Buckets:
    """Postings parted by term ranges (``cuts``) into files, each range sorted alone."""

    def __init__(self, folder: Path, cuts: list[int]) -> None:
        # The bucket of each term rank, looked up: faster than a search per posting.
        self._bucket_of = np.repeat(
            np.arange(max(0, len(cuts) - 1), dtype=np.uint16), np.diff(cuts)
        )
        self._paths = [folder / f".bucket{k}.part" for k in range(max(0, len(cuts) - 1))]
        self._stack = contextlib.ExitStack()
        self._files = [self._stack.enter_context(path.open("wb")) for path in self._paths]

    def __enter__(self) -> _Buckets:
        return self

    def __exit__(self, *_: object) -> None:
        self._stack.close()
        for path in self._paths:
            path.unlink(missing_ok=True)

    def hold(
        self,
        rank: npt.NDArray[np.uint32],
        chunk: npt.NDArray[np.uint32],
        tf: npt.NDArray[np.uint32],
    ) -> None:
        """Append one block of postings (in chunk order) to the buckets of their terms."""
        part = self._bucket_of[rank]
        order = np.argsort(part, kind="stable")  # a radix sort, and it keeps the chunk order
        records = np.empty(len(rank), dtype=_POSTING)
        records["term"], records["chunk"], records["tf"] = rank[order], chunk[order], tf[order]
        ends = np.searchsorted(part[order], np.arange(1, len(self._files) + 1), side="left")
        begin = 0
        for f, end in zip(self._files, ends.tolist(), strict=True):
            if end > begin:
                f.write(records[begin:end].tobytes())
            begin = end

    def sorted_parts(self) -> Iterator[tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]]:
        """Each bucket's (chunks, tfs) in term order, chunks ascending within a term."""
        self._stack.close()
        for path in self._paths:
            records = np.fromfile(path, dtype=_POSTING)
            path.unlink()
            # Each (term, chunk) is unique and chunks come in order: one integer key sorts.
            key = records["term"].astype(np.uint64) << np.uint64(32) | records["chunk"]
            order = np.argsort(key)
            del key
            yield records["chunk"][order], records["tf"][order]


def _write_postings(
    directory: Path,
    parts: Iterator[tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]],
    n: int,
    tf_type: type[np.unsignedinteger[Any]],
) -> None:
    """post_chunks.npy and post_tfs.npy: the ``n`` postings of ``parts``, in order."""
    dtypes = (np.dtype(np.uint32), np.dtype(tf_type))
    with (
        (directory / "post_chunks.npy").open("wb") as fc,
        (directory / "post_tfs.npy").open("wb") as ft,
    ):
        for f, dtype in zip((fc, ft), dtypes, strict=True):
            header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False}
            np.lib.format.write_array_header_1_0(f, {**header, "shape": (n,)})
        for chunks, tfs in parts:
            fc.write(chunks.tobytes())
            ft.write(tfs.astype(tf_type).tobytes())


Postings = tuple[npt.NDArray[np.uint32], npt.NDArray[np.generic], npt.NDArray[np.uint32]]
Joined = tuple[npt.NDArray[np.int64], npt.NDArray[np.generic], npt.NDArray[np.uint32]]
_UNSEEN = object()


class DocIndex:
    """A persisted index opened read-only; arrays are memory-mapped, nothing is rebuilt."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        stats = json.loads((directory / "stats.json").read_text(encoding="utf-8"))
        if stats.get("version") != INDEX_VERSION:
            raise OldIndex(f"index version {stats.get('version')} is not {INDEX_VERSION}")
        self.n_chunks, self.n_terms = stat_count(stats, "chunks"), stat_count(stats, "terms")
        self.avgdl = float(stats["avgdl"])
        self.total_len = int(stats.get("total_len", round(self.avgdl * self.n_chunks)))
        self.average_idf = float(stats["average_idf"])
        with (directory / "terms.bin").open("rb") as f:
            large = os.fstat(f.fileno()).st_size > IN_MEMORY_BYTES
            self._terms: mmap.mmap | bytes = mapped(f) if large else f.read()
        self._term_off = load_array(directory / "term_offsets.npy")
        self.n_words = len(self._term_off) - 1
        self._numbers = load_array(directory / "numbers.npy")
        if self.n_words + len(self._numbers) != self.n_terms:
            raise ValueError(
                f"{self.n_words} words and {len(self._numbers)} numbers, not {self.n_terms} terms"
            )
        self._post_off = load_array(directory / "post_offsets.npy")
        self._chunks = load_array(directory / "post_chunks.npy")
        self._tfs = load_array(directory / "post_tfs.npy")
        self._doc_len = load_array(directory / "doc_len.npy")
        check_offsets("term_offsets.npy", self._term_off, self.n_words + 1, len(self._terms))
        check_offsets("post_offsets.npy", self._post_off, self.n_terms + 1, len(self._chunks))
        if len(self._tfs) != len(self._chunks) or self._doc_len.shape != (self.n_chunks,):
            raise ValueError(f"array lengths do not agree with {self.n_chunks} chunks")
        self._found: dict[str, int] = {}  # term -> number: a query looks each term up often
        self._held: dict[str, Postings | None] = {}  # term -> its postings, for term_postings
        # A small vocabulary is read whole: many small documents cost a dict look-up each.
        self._vocab: dict[str, int] | None = None
        if self.n_terms <= VOCAB_IN_MEMORY:
            blob, off = bytes(self._terms), self._term_off.tolist()
            self._vocab = {
                blob[off[i] : off[i + 1]].decode("utf-8"): i for i in range(self.n_words)
            }
            for j, key in enumerate(self._numbers.tolist()):
                self._vocab[number_text(key)] = self.n_words + j

    def find(self, term: str) -> int:
        """The term's number, or -1: a binary search over the sorted term list (remembered)."""
        if self._vocab is not None:
            return self._vocab.get(term, -1)
        hit = self._found.get(term)
        if hit is None:
            if len(self._found) >= FOUND_MEMO:
                self._found.clear()
            hit = self._found[term] = self._search(term)
        return hit

    def _search(self, term: str) -> int:
        if is_number_term(term):
            number = np.uint64(number_key(term))
            at = int(np.searchsorted(self._numbers, number))
            found = at < len(self._numbers) and self._numbers[at] == number
            return self.n_words + at if found else -1
        key = term.encode("utf-8")
        off, blob = self._term_off, self._terms

        def word(i: int) -> bytes:
            return blob[int(off[i]) : int(off[i + 1])]

        at = bisect.bisect_left(range(self.n_words), key, key=word)
        return at if at < self.n_words and word(at) == key else -1

    def postings(self, term_id: int) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.generic]]:
        """(chunk numbers, term frequencies) of one term, checked as they are read."""
        a, b = self._span(term_id)
        chunks = np.asarray(self._chunks[a:b])
        if len(chunks) and int(chunks.max()) >= self.n_chunks:
            raise Damaged(self.dir.parent.name, f"a posting for chunk {int(chunks.max())}")
        return chunks, np.asarray(self._tfs[a:b])

    def _span(self, term_id: int) -> tuple[int, int]:
        try:
            return check_span("post_offsets.npy", self._post_off, term_id, len(self._chunks))
        except ValueError as exc:
            raise Damaged(self.dir.parent.name, str(exc)) from None

    def verify(self) -> list[str]:
        """Every value of this index checked at once, for doctor (``checks.verify_index``)."""
        terms, off = bytes(self._terms), self._term_off
        return verify_index(terms, off, self._numbers, self._post_off, self._chunks, self.n_chunks)

    def term_postings(self, term: str) -> Postings | None:
        """(chunks, tfs, chunk lengths) of ``term``, or None; short postings are remembered."""
        held = self._held.get(term, _UNSEEN)
        if held is not _UNSEEN:
            return held  # type: ignore[return-value]
        tid = self.find(term)
        if tid < 0:
            out: Postings | None = None
        else:
            chunks, tfs = self.postings(tid)
            out = (chunks, tfs, self.doc_lengths(chunks))
        if out is None or len(out[0]) <= HELD_POSTINGS:
            if len(self._held) >= FOUND_MEMO:
                self._held.clear()
            self._held[term] = out
        return out

    def doc_freq(self, term: str) -> int:
        """In how many chunks ``term`` occurs."""
        tid = self.find(term)
        if tid < 0:
            return 0
        a, b = self._span(tid)
        return b - a

    def first_with_all(self, terms: Sequence[str], before: int, count: int) -> list[int]:
        """Up to ``count`` earliest chunks below ``before`` that hold every one of ``terms``."""
        ids = [self.find(t) for t in set(terms)]
        if not ids or min(ids) < 0:
            return []
        lists = [self.postings(i)[0] for i in ids]  # ascending: keep what lies before
        shortest, *others = sorted((a[: np.searchsorted(a, before)] for a in lists), key=len)
        # The shortest list a block at a time, searched in the others: the earliest wanted.
        out: list[int] = []
        step = max(64, 4 * count)
        for at in range(0, len(shortest), step):
            block = shortest[at : at + step]
            for other in others:
                where = np.searchsorted(other, block)
                inside = where < len(other)
                block, where = block[inside], where[inside]
                block = block[other[where] == block]
            out.extend(block[: count - len(out)].tolist())
            if len(out) >= count:
                break
        return out

    def doc_lengths(self, chunks: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint32]:
        """Terms per chunk for the given chunk numbers."""
        return np.asarray(self._doc_len[chunks])

    def scores(self, query_terms: Sequence[str]) -> F64:
        """BM25 score of every chunk of this document alone (rank_bm25's numbers)."""
        return score_all([self], query_terms)[0][0]


@dataclass(frozen=True)
class CorpusStats:
    """BM25 statistics over several documents' chunks."""

    n: int
    avgdl: float
    average_idf: float


def corpus_stats(indexes: Sequence[DocIndex]) -> CorpusStats:
    """Summed chunk counts and lengths; the chunk-weighted mean of each average idf."""
    n = sum(ix.n_chunks for ix in indexes)
    total = sum(ix.total_len for ix in indexes)
    avg_idf = sum(ix.average_idf * ix.n_chunks for ix in indexes) / n if n else 0.0
    return CorpusStats(n, total / n if n else 0.0, avg_idf)


def score_all(
    indexes: Sequence[DocIndex], query_terms: Sequence[str]
) -> list[tuple[F64, npt.NDArray[np.bool_]]]:
    """BM25 (scores, matched) per index, over all; matched even where BM25 scores <= 0."""
    scores, matched, bases = Corpus(indexes).score(query_terms)
    return [(scores[a:b], matched[a:b]) for a, b in itertools.pairwise(bases)]


JOINED_POSTINGS = 65_536  # a term's joined postings up to this long are remembered


class Corpus:
    """Several documents' indexes searched as one, with statistics over all of them: each
    term is scored once over every index's postings joined, and remembered (the indexes
    never change, and a store keeps a corpus only while its documents do not)."""

    def __init__(self, indexes: Sequence[DocIndex]) -> None:
        self.indexes = list(indexes)
        self.bases = np.zeros(len(self.indexes) + 1, dtype=np.int64)
        np.cumsum([ix.n_chunks for ix in self.indexes], out=self.bases[1:])
        self.stats = corpus_stats(self.indexes)
        self._joined: dict[str, Joined | None] = {}

    def joined(self, term: str) -> Joined | None:
        """(joined chunk positions, tfs, chunk lengths) of ``term`` over every index."""
        held = self._joined.get(term, _UNSEEN)
        if held is not _UNSEEN:
            return held  # type: ignore[return-value]
        found = [(i, p) for i, ix in enumerate(self.indexes) if (p := ix.term_postings(term))]
        out: Joined | None = None
        if len(found) == 1:  # one document holds it: its own arrays, shifted
            i, (chunks, tfs, lengths) = found[0]
            out = (chunks.astype(np.int64) + self.bases[i], tfs, lengths)
        elif found:
            sizes = [len(p[0]) for _, p in found]
            owners = np.array([i for i, _ in found], dtype=np.int64)
            at = np.concatenate([p[0] for _, p in found]).astype(np.int64)
            at += np.repeat(self.bases[owners], sizes)
            tfs = np.concatenate([p[1] for _, p in found])
            out = (at, tfs, np.concatenate([p[2] for _, p in found]))
        if len(self.indexes) > 1 and (out is None or len(out[0]) <= JOINED_POSTINGS):
            if len(self._joined) >= FOUND_MEMO:
                self._joined.clear()
            self._joined[term] = out
        return out

    def score(
        self, query_terms: Sequence[str]
    ) -> tuple[F64, npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
        """(scores, matched, bases): index k's chunks are ``bases[k]:bases[k + 1]``."""
        n = int(self.bases[-1])
        scores = np.zeros(n, dtype=np.float64)
        matched = np.zeros(n, dtype=bool)
        if self.stats.n == 0:
            return scores, matched, self.bases
        for term in query_terms:  # repeated query terms count again, as in rank_bm25
            found = self.joined(term)
            if found is None:
                continue
            at, tfs, lengths = found
            idf = float(idf_values(np.array([len(at)]), self.stats.n, self.stats.average_idf)[0])
            scores[at] += term_scores(tfs, lengths, self.stats.avgdl, idf)
            matched[at] = True
        return scores, matched, self.bases
