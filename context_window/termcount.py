"""Term counts of many chunks at once, equal to ``Analyzer.counts`` of each, but vectorized.

Python's regex ``findall`` creates one string object per word, which for a 100 MB
log is ~20 million objects and most of the ingest time. For ASCII chunks this
module finds the words with numpy instead: the raw words are the maximal runs of
``[A-Za-z0-9_$]`` (what ``[\\w$]+`` matches in ASCII text); each run is packed into
whole 8-byte words and the distinct runs are found by sorting those keys. Only the
distinct raw words become Python strings, expanded into index terms by the same
``Analyzer.expand`` the sessions use. Chunks with any non-ASCII character, and runs
longer than ``_MAX_PACKED`` bytes, go through ``Analyzer.counts`` itself. The result
is exact: the same (chunk, term, count) triples as calling ``counts`` per chunk.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from context_window.textindex import Analyzer

U32 = npt.NDArray[np.uint32]
I64 = npt.NDArray[np.int64]

_MAX_PACKED = 64  # runs up to this many bytes are packed into keys; longer ones are rare
_MEMO_LIMIT = 100_000
_WORD_BYTES = np.isin(
    np.arange(256),
    np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$", np.uint8),
)
_WORD_BYTES.flags.writeable = False
# _KEEP_BYTES[v] keeps the first v bytes (the low ones) of a little-endian uint64.
_KEEP_BYTES = np.array([(1 << (8 * v)) - 1 for v in range(9)], dtype=np.uint64)
_KEEP_BYTES.flags.writeable = False


@dataclass(frozen=True)
class Triples:
    """Term counts of a batch: ``chunk[i]`` holds ``term[i]`` ``tf[i]`` times, sorted by chunk."""

    chunk: U32
    term: U32
    tf: U32
    lengths: I64  # total term count of each chunk of the batch


class TermCounter:
    """Counts terms of chunk texts and numbers the terms in a vocabulary it grows."""

    def __init__(self, analyzer: Analyzer | None = None) -> None:
        self.analyzer = analyzer or Analyzer()
        self.vocab: dict[str, int] = {}
        self._memo: dict[bytes, tuple[int, ...]] = {}

    def term_ids(self, raw: str) -> tuple[int, ...]:
        """Vocabulary ids of the index terms of one raw word (adding new terms)."""
        vocab = self.vocab
        if raw.isdigit():  # one plain part: no identifier split, no stem
            if len(raw) < 2:
                return ()
            return (vocab.setdefault(raw, len(vocab)),)
        return tuple(vocab.setdefault(t, len(vocab)) for t in self.analyzer.expand(raw))

    def count(self, texts: Sequence[str]) -> Triples:
        """Term counts of each text, as triples sorted by (chunk, term id)."""
        ascii_rows = [i for i, t in enumerate(texts) if t.isascii()]
        other_rows = [i for i, t in enumerate(texts) if not t.isascii()]
        parts = [self._count_ascii([texts[i] for i in ascii_rows], ascii_rows)]
        parts.extend(self._count_slow(texts[i], i) for i in other_rows)
        chunk = np.concatenate([p[0] for p in parts])
        term = np.concatenate([p[1] for p in parts])
        tf = np.concatenate([p[2] for p in parts])
        return _aggregate(chunk, term, tf, len(texts))

    def _count_slow(self, text: str, row: int) -> tuple[U32, U32, U32]:
        """One chunk through ``Analyzer.counts`` (non-ASCII text)."""
        counts = self.analyzer.counts(text)
        vocab = self.vocab
        terms = np.fromiter(
            (vocab.setdefault(t, len(vocab)) for t in counts), dtype=np.uint32, count=len(counts)
        )
        tfs = np.fromiter(counts.values(), dtype=np.uint32, count=len(counts))
        return np.full(len(terms), row, dtype=np.uint32), terms, tfs

    def _count_ascii(self, texts: list[str], rows: list[int]) -> tuple[U32, U32, U32]:
        """Vectorized counts of ASCII texts; ``rows`` gives each text's position in the batch."""
        empty = np.zeros(0, dtype=np.uint32)
        if not texts:
            return empty, empty, empty
        raw = "\n".join(texts).encode("ascii") + bytes(_MAX_PACKED + 8)  # zero padding
        buf = np.frombuffer(raw, dtype=np.uint8)
        # Every byte offset seen as the start of a little-endian 8-byte word (unaligned).
        words = np.ndarray(shape=(len(raw) - 7,), dtype="<u8", buffer=raw, strides=(1,))
        sizes = np.fromiter((len(t) + 1 for t in texts), dtype=np.int64, count=len(texts))
        text_starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        word = _WORD_BYTES[buf].view(np.int8)
        edges = np.diff(word, prepend=np.int8(0), append=np.int8(0))
        starts = np.flatnonzero(edges == 1)
        lens = np.flatnonzero(edges == -1) - starts
        del word, edges
        owner = np.asarray(rows, dtype=np.uint32)[
            np.searchsorted(text_starts, starts, side="right") - 1
        ]
        out_c: list[U32] = []
        out_t: list[U32] = []
        out_n: list[U32] = []
        blocks = (lens + 7) // 8
        for k in np.unique(blocks):
            sel = np.flatnonzero(blocks == k)
            if k * 8 > _MAX_PACKED:
                for i in sel:  # rare very long runs: exact, via Python strings
                    word_text = buf[starts[i] : starts[i] + lens[i]].tobytes().decode("ascii")
                    ids = self.term_ids(word_text)
                    out_c.append(np.full(len(ids), owner[i], dtype=np.uint32))
                    out_t.append(np.asarray(ids, dtype=np.uint32))
                    out_n.append(np.ones(len(ids), dtype=np.uint32))
                continue
            c, t, n = self._count_packed(words, starts[sel], lens[sel], owner[sel], int(k))
            out_c.append(c)
            out_t.append(t)
            out_n.append(n)
        if not out_c:
            return empty, empty, empty
        return np.concatenate(out_c), np.concatenate(out_t), np.concatenate(out_n)

    def _count_packed(
        self, stream: npt.NDArray[np.uint64], starts: I64, lens: I64, owner: U32, k: int
    ) -> tuple[U32, U32, U32]:
        """Counts for runs of 8(k-1)+1 .. 8k bytes, grouped by their zero-padded bytes.

        One stable sort by a 64-bit key (the bytes themselves when k = 1, a mix of the
        blocks otherwise) brings equal runs together in text order; a group ends
        wherever the key or any block changes, so a hash collision can split a group
        (summed again later) but never merge different words.
        """
        blocks = 8 * np.arange(k, dtype=np.int64)
        words = stream[starts[:, None] + blocks]  # (n, k): the run's bytes, 8 at a time
        words &= _KEEP_BYTES[np.clip(lens[:, None] - blocks, 0, 8)]  # zero what follows
        key = words[:, 0].copy()
        for j in range(1, k):
            key = key * np.uint64(0x9E3779B97F4A7C15) + (words[:, j] ^ (key >> np.uint64(29)))
        order = np.argsort(key, kind="stable")
        sorted_words = words[order]
        new_raw = np.empty(len(order), dtype=bool)
        new_raw[0] = True
        new_raw[1:] = np.any(sorted_words[1:] != sorted_words[:-1], axis=1)
        sorted_owner = owner[order]
        new_pair = new_raw.copy()
        new_pair[1:] |= sorted_owner[1:] != sorted_owner[:-1]
        raw_of = np.cumsum(new_raw) - 1
        firsts = np.flatnonzero(new_pair)
        counts = np.diff(firsts, append=len(order)).astype(np.uint32)
        pair_chunk = sorted_owner[firsts]
        pair_raw = raw_of[firsts]
        reps = sorted_words[new_raw]
        expansions = self._expand_words(reps)
        exp_len = np.fromiter(map(len, expansions), dtype=np.int64, count=len(reps))
        exp_off = np.cumsum(exp_len) - exp_len
        flat = np.fromiter(
            itertools.chain.from_iterable(expansions), dtype=np.uint32, count=int(exp_len.sum())
        )
        rep = exp_len[pair_raw]
        within = np.arange(int(rep.sum()), dtype=np.int64) - np.repeat(np.cumsum(rep) - rep, rep)
        terms = flat[np.repeat(exp_off[pair_raw], rep) + within]
        return np.repeat(pair_chunk, rep), terms, np.repeat(counts, rep)

    def _expand_words(self, reps: npt.NDArray[np.uint64]) -> list[tuple[int, ...]]:
        """Term ids of each distinct raw word, given as rows of little-endian 8-byte blocks."""
        memo = self._memo
        width = reps.shape[1] * 8
        # As fixed-width bytes, numpy drops the zero padding when it hands out each item.
        keys: list[bytes] = np.ascontiguousarray(reps).view(f"S{width}").ravel().tolist()
        out = list(map(memo.get, keys))
        for i, hit in enumerate(out):
            if hit is None:
                if len(memo) > _MEMO_LIMIT:
                    memo.clear()
                out[i] = memo[keys[i]] = self.term_ids(keys[i].decode("ascii"))
        return out  # type: ignore[return-value]


def _aggregate(chunk: U32, term: U32, tf: U32, n_texts: int) -> Triples:
    """Sum duplicate (chunk, term) pairs; sort by chunk, then term id."""
    lengths = np.bincount(chunk, weights=tf, minlength=n_texts).astype(np.int64)
    if len(chunk) == 0:
        return Triples(chunk, term, tf, lengths)
    key = chunk.astype(np.uint64) << np.uint64(32) | term.astype(np.uint64)
    order = np.argsort(key, kind="stable")
    key = key[order]
    first = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    sums = np.add.reduceat(tf[order].astype(np.uint64), first)
    key = key[first]
    return Triples(
        (key >> np.uint64(32)).astype(np.uint32),
        (key & np.uint64(0xFFFFFFFF)).astype(np.uint32),
        np.minimum(sums, np.iinfo(np.uint32).max).astype(np.uint32),
        lengths,
    )
