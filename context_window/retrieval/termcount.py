"""Term counts of many chunks at once, equal to ``Analyzer.counts`` of each, vectorized.

For ASCII chunks the raw words (maximal runs of ``[A-Za-z0-9_$]``) are packed into
8-byte keys and found distinct by sorting in numpy, so only distinct words become
Python strings (``findall`` would make ~20M of them for a 100 MB log); other chunks,
and runs over ``_MAX_PACKED`` bytes, go through ``Analyzer.counts``. With
``numbers=True`` runs of 2 to 19 digits are integer keys in a ``NumberTable`` and their
term ids carry the ``NUMBER`` bit: a log's many numbers never become strings.
"""

from __future__ import annotations

import heapq
import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from context_window.retrieval import wordscan
from context_window.retrieval.analyzer import ANSI_ESCAPE, Analyzer, plain
from context_window.retrieval.wordscan import NUMBER_DIGITS

U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

_MAX_PACKED = 64  # runs up to this many bytes are packed into keys; longer ones are rare
_MEMO_LIMIT = 100_000
_ANSI_BYTES = re.compile(ANSI_ESCAPE.encode())
_WORD_BYTES = np.isin(
    np.arange(256),
    np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$", np.uint8),
)
_WORD_BYTES.flags.writeable = False
# _KEEP_BYTES[v] keeps the first v bytes (the low ones) of a little-endian uint64.
_KEEP_BYTES = np.array([(1 << (8 * v)) - 1 for v in range(9)], dtype=np.uint64)
_KEEP_BYTES.flags.writeable = False
NUMBER = 1 << 31  # the bit of a term id that numbers the term in a NumberTable
# _SHORTER[n]: digit strings shorter than n; n digits of value v key as _SHORTER[n] + v.
_SHORTER = np.array([(10**n - 1) // 9 for n in range(NUMBER_DIGITS + 2)], dtype=np.uint64)
_SHORTER.flags.writeable = False
_SHORTER_INT: list[int] = _SHORTER.tolist()
_WORDS_PER_WRITE = 65_536
_WORDS_PER_READ = 4096  # a merge reads every run at once: little of each
# A batch of ASCII text this long is counted by the compiled scan, when numba is there.
SCAN_MIN_CHARS = 1 << 18


@dataclass(frozen=True)
class Sizes:
    """How much counting holds at once: defaults for a 1 GB log; tests make them small."""

    words_per_run: int = 1 << 18  # a counter with a spill folder keeps about this many words
    scan_words: int = 1 << 18  # the scan's table of raw words is emptied past this many
    number_piece: int = 1 << 20  # keys in one piece of a NumberTable's large part (12 MB)
    recent_floor: int = 65_536  # a NumberTable's recent part merges from this size on


def is_number_term(term: str) -> bool:
    """Whether ``term`` is kept in a NumberTable: 2 to 19 ASCII digits."""
    return 2 <= len(term) <= NUMBER_DIGITS and term.isascii() and term.isdigit()


def number_key(term: str) -> int:
    """The key of a number term (see ``is_number_term``)."""
    return _SHORTER_INT[len(term)] + int(term)


def number_text(key: int) -> str:
    """The number term whose key is ``key``."""
    n = int(np.searchsorted(_SHORTER, np.uint64(key), side="right")) - 1
    return f"{key - int(_SHORTER[n]):0{n}d}"


class NumberTable:
    """Ids of number terms by key, in sorted arrays: a recent part merged into the large
    part (sorted pieces of at most ``sizes.number_piece`` keys) once it holds a quarter
    as many, so adding a batch costs work in proportion to the table only now and then."""

    def __init__(self, sizes: Sizes = Sizes()) -> None:
        self.sizes = sizes
        self.size = 0
        self._pieces: list[tuple[U64, U32]] = []  # ascending, no key in two
        self._recent = _empty_part()

    def ids(self, keys: U64) -> U32:
        """The ids of ``keys`` (numbering new ones), as term ids with the NUMBER bit."""
        # Sorted, they are searched faster: numpy's binary search starts from the last hit.
        uniq, inverse = np.unique(keys, return_inverse=True)
        out = np.full(len(uniq), -1, dtype=np.int64)
        for (part_keys, part_ids), lo, hi in [(self._recent, 0, len(uniq)), *self._routes(uniq)]:
            if len(part_keys) and hi > lo:
                at = np.minimum(np.searchsorted(part_keys, uniq[lo:hi]), len(part_keys) - 1)
                hit = np.flatnonzero(part_keys[at] == uniq[lo:hi])
                out[lo + hit] = part_ids[at[hit]]
        new = np.flatnonzero(out < 0)
        fresh = np.arange(self.size, self.size + len(new), dtype=np.uint32)
        out[new] = fresh
        self.size += len(fresh)
        self._recent = _merged(self._recent, (uniq[new], fresh))
        held = sum(len(k) for k, _ in self._pieces)
        if len(self._recent[0]) > max(self.sizes.recent_floor, held // 4):
            self._fold()
        ids: U32 = out[inverse.ravel()].astype(np.uint32)
        ids |= np.uint32(NUMBER)
        return ids

    def _routes(self, keys: U64) -> list[tuple[tuple[U64, U32], int, int]]:
        """Each piece with the slice of the sorted ``keys`` that falls in its range."""
        if not self._pieces:
            return []
        firsts = np.array([k[0] for k, _ in self._pieces[1:]], dtype=np.uint64)
        bounds = [0, *np.searchsorted(keys, firsts).tolist(), len(keys)]
        return [(piece, bounds[i], bounds[i + 1]) for i, piece in enumerate(self._pieces)]

    def _fold(self) -> None:
        """Merge the recent part into the pieces one at a time: never held twice."""
        keys, ids = self._recent
        self._recent = _empty_part()
        routes = self._routes(keys) or [(_empty_part(), 0, len(keys))]
        self._pieces = []
        routes.reverse()
        while routes:
            piece, lo, hi = routes.pop()
            merged = _merged(piece, (keys[lo:hi], ids[lo:hi])) if hi > lo else piece
            del piece
            if len(merged[0]) <= self.sizes.number_piece:
                self._pieces.append(merged)
                continue
            for at in range(
                0, len(merged[0]), self.sizes.number_piece
            ):  # copies: a view would keep all
                cut = slice(at, at + self.sizes.number_piece)
                self._pieces.append((merged[0][cut].copy(), merged[1][cut].copy()))
        self._pieces = [p for p in self._pieces if len(p[0])]

    def sorted(self) -> tuple[U64, U32]:
        """Every key, ascending, and its id (the table is left as it is)."""
        if not self._pieces:
            return self._recent
        whole = (
            np.concatenate([k for k, _ in self._pieces]),
            np.concatenate([i for _, i in self._pieces]),
        )
        return _merged(whole, self._recent)

    def drain(self) -> Iterator[tuple[U64, U32]]:
        """Every key ascending with its id, a piece at a time, emptying the table."""
        self._fold()
        pieces, self._pieces, self.size = self._pieces[::-1], [], 0
        while pieces:
            yield pieces.pop()


def _empty_part() -> tuple[U64, U32]:
    return np.zeros(0, np.uint64), np.zeros(0, np.uint32)


def _merged(a: tuple[U64, U32], b: tuple[U64, U32]) -> tuple[U64, U32]:
    """Two (sorted keys, ids) with no key in common, merged."""
    at = np.searchsorted(a[0], b[0])
    return np.insert(a[0], at, b[0]), np.insert(a[1], at, b[1])


@dataclass(frozen=True)
class Triples:
    """Term counts of a batch: ``chunk[i]`` holds ``term[i]`` ``tf[i]`` times, sorted by chunk."""

    chunk: U32
    term: U32
    tf: U32
    lengths: I64  # total term count of each chunk of the batch


class TermCounter:
    """Counts terms of chunk texts and numbers the terms in a vocabulary it grows."""

    def __init__(
        self,
        analyzer: Analyzer | None = None,
        numbers: bool = False,
        spill: Path | None = None,
        scan: bool | None = None,
        sizes: Sizes = Sizes(),
    ) -> None:
        """``scan``: compiled scan always, never, or when numba loads (None); needs numbers."""
        # Its own analyzer needs little memo: this counter remembers each word's ids.
        self.analyzer = analyzer or Analyzer(memo_limit=_MEMO_LIMIT // 4)
        self.vocab: dict[str, int] = {}  # every term but those in ``numbers`` (since a run)
        self.sizes = sizes
        self.numbers = NumberTable(sizes) if numbers else None
        self._memo: dict[bytes, tuple[int, ...]] = {}
        self._spill = spill
        self._runs: list[Path] = []
        self._base = 0  # ids given to the words of earlier runs
        if scan and not numbers:
            raise ValueError("the compiled scan keeps numbers apart: it needs numbers=True")
        self._scan = scan if numbers else False
        self._scanner: wordscan.Scanner | None = None
        self._no_raw()

    @property
    def word_ids(self) -> int:
        """How many ids words were given (a word spilled in two runs has two)."""
        return self._base + len(self.vocab)

    def ids_of(self, expansions: Sequence[Sequence[str]]) -> list[tuple[int, ...]]:
        """Term ids of several words' terms (adding new terms)."""
        vocab, base = self.vocab, self._base
        if self.numbers is None:
            return [tuple(vocab.setdefault(t, base + len(vocab)) for t in ts) for ts in expansions]
        numeric = [  # is_number_term, inline: it is asked of every new term
            t
            for t in {t for ts in expansions for t in ts if t.isdigit()}
            if 2 <= len(t) <= NUMBER_DIGITS and t.isascii()
        ]
        known: dict[str, int] = {}
        if numeric:
            keys = np.fromiter(map(number_key, numeric), np.uint64, count=len(numeric))
            known = dict(zip(numeric, self.numbers.ids(keys).tolist(), strict=True))
        return [
            tuple(known[t] if t in known else vocab.setdefault(t, base + len(vocab)) for t in ts)
            for ts in expansions
        ]

    def _spill_if_full(self) -> None:
        """Spill the words once a run's worth are held (between batches)."""
        if self._spill is not None and len(self.vocab) >= self.sizes.words_per_run:
            self._spill_run()

    def _spill_run(self) -> None:
        """Move the words to a sorted run file; later words get new ids (``sorted_words``)."""
        assert self._spill is not None
        path = self._spill / f".words{len(self._runs)}.part"
        words = sorted(self.vocab)
        with path.open("w", encoding="utf-8", newline="\n") as f:
            for at in range(0, len(words), _WORDS_PER_WRITE):
                f.write("".join(w + "\n" for w in words[at : at + _WORDS_PER_WRITE]))
        ids = np.fromiter(map(self.vocab.__getitem__, words), np.uint32, count=len(words))
        ids.tofile(path.with_suffix(".ids"))
        self._runs.append(path)
        self._base += len(self.vocab)
        self.vocab.clear()
        self._memo.clear()  # it holds ids of the words spilled
        self._forget_raw()  # so do the scanner's raw words

    def sorted_words(self) -> Iterator[tuple[str, int]]:
        """Every (word, id) in word order, runs' copies together, emptying the words."""
        if not self._runs:
            words = sorted(self.vocab)
            ids = [self.vocab[w] for w in words]
            self.vocab.clear()
            yield from zip(words, ids, strict=True)
            return
        if self.vocab:
            self._spill_run()
        try:
            yield from heapq.merge(*map(_run, self._runs))
        finally:
            for path in self._runs:
                path.unlink(missing_ok=True)
                path.with_suffix(".ids").unlink(missing_ok=True)

    def term_ids(self, raw: str) -> tuple[int, ...]:
        """Vocabulary ids of the index terms of one raw word (adding new terms)."""
        return self.ids_of([self.analyzer.expand(raw)])[0]

    def count(self, texts: Sequence[str]) -> Triples:
        """Term counts of each text, as triples sorted by (chunk, term id)."""
        self._spill_if_full()
        texts = [plain(t) for t in texts]
        ascii_rows = [i for i, t in enumerate(texts) if t.isascii()]
        other_rows = [i for i, t in enumerate(texts) if not t.isascii()]
        ascii_texts = [texts[i] for i in ascii_rows]
        if ascii_texts and self._scanning(sum(map(len, ascii_texts))):
            parts = [self._count_joined(ascii_texts, ascii_rows)]
        else:
            parts = [self._count_ascii(ascii_texts, ascii_rows)]
        parts.extend(self._count_slow(texts[i], i) for i in other_rows)
        chunk = np.concatenate([p[0] for p in parts])
        term = np.concatenate([p[1] for p in parts])
        tf = np.concatenate([p[2] for p in parts])
        return _aggregate(chunk, term, tf, len(texts))

    def count_spans(self, data: bytes, starts: I64, ends: I64) -> Triples:
        """``count`` of the texts ``data[starts[i]:ends[i]]``, for ASCII ``data``."""
        if b"\x1b" in data:  # as ``plain`` blanks them: the offsets hold
            data = _ANSI_BYTES.sub(lambda m: b" " * len(m[0]), data)
        if not self._scanning(int((ends - starts).sum())):
            texts = [
                data[a:b].decode("ascii")
                for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
            ]
            return self.count(texts)
        self._spill_if_full()
        buf = np.frombuffer(data, dtype=np.uint8)
        rows = np.arange(len(starts), dtype=np.int32)
        starts, ends = np.ascontiguousarray(starts), np.ascontiguousarray(ends)
        return _aggregate(*self._count_scanned(buf, starts, ends, rows), len(starts))

    def _scanning(self, chars: int) -> bool:
        if self._scan is None:  # once begun, a document is scanned to its end
            scanning = self._scanner is not None
            return scanning or (chars >= SCAN_MIN_CHARS and wordscan.available())
        return self._scan

    def done_counting(self) -> None:
        """Let go of the scan's tables; the words and numbers stay for the index."""
        self._scanner = None
        self._no_raw()
        self._memo.clear()

    def _no_raw(self) -> None:
        # Raw word w's term ids: _raw_len[w] from _raw_off[w] in _raw_flat (grown by doubling).
        self._raw_len = np.zeros(0, dtype=np.int64)
        self._raw_off = np.zeros(0, dtype=np.int64)
        self._raw_flat = np.zeros(0, dtype=np.uint32)
        self._raw_used = 0

    def _forget_raw(self) -> None:
        if self._scanner is not None:
            self._scanner.forget_words()
        self._raw_used = 0

    def _count_joined(self, texts: list[str], rows: list[int]) -> tuple[U32, U32, U32]:
        """``_count_ascii``'s counts, by the compiled scan of the texts joined."""
        raw = "\n".join(texts).encode("ascii")
        sizes = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        ends = np.cumsum(sizes + 1) - 1
        buf = np.frombuffer(raw, dtype=np.uint8)
        return self._count_scanned(buf, ends - sizes, ends, np.asarray(rows, np.int32))

    def _count_scanned(
        self, buf: npt.NDArray[np.uint8], starts: I64, ends: I64, rows: npt.NDArray[np.int32]
    ) -> tuple[U32, U32, U32]:
        """Counts of ASCII texts by the compiled scan: only new raw words become strings."""
        if self._scanner is None:
            self._scanner = wordscan.Scanner(_SHORTER, wordscan.compiled_kernels())
        elif self._scanner.n_words > self.sizes.scan_words:
            self._forget_raw()
        scanner = self._scanner
        seen = scanner.n_words
        found = scanner.scan(buf, starts, ends, rows)
        if scanner.n_words > seen:
            expand = self.analyzer.expand
            fresh = self.ids_of(
                [expand(scanner.word(w).decode("ascii")) for w in range(seen, scanner.n_words)]
            )
            lens = np.fromiter(map(len, fresh), dtype=np.int64, count=len(fresh))
            flat = np.fromiter(
                itertools.chain.from_iterable(fresh), np.uint32, count=int(lens.sum())
            )
            used = self._raw_used
            self._raw_len = _with_room(self._raw_len, scanner.n_words)
            self._raw_off = _with_room(self._raw_off, scanner.n_words)
            self._raw_flat = _with_room(self._raw_flat, used + len(flat))
            self._raw_len[seen : scanner.n_words] = lens
            self._raw_off[seen : scanner.n_words] = used + np.cumsum(lens) - lens
            self._raw_flat[used : used + len(flat)] = flat
            self._raw_used = used + len(flat)
        numeric = found.num
        assert self.numbers is not None
        number_ids = self.numbers.ids(found.keys)
        word = ~numeric
        w_val, w_row, w_n = found.val[word], found.row[word], found.n[word]
        rep = self._raw_len[w_val]
        terms = self._raw_flat[_run_positions(self._raw_off[w_val], rep)]
        return (
            np.concatenate([np.repeat(w_row, rep), found.row[numeric]]).astype(np.uint32),
            np.concatenate([terms, number_ids[found.val[numeric]]]),
            np.concatenate([np.repeat(w_n, rep), found.n[numeric]]).astype(np.uint32),
        )

    def _count_slow(self, text: str, row: int) -> tuple[U32, U32, U32]:
        """One chunk through ``Analyzer.counts`` (non-ASCII text)."""
        counts = self.analyzer.counts(text)
        ids = self.ids_of([tuple(counts)])[0]
        terms = np.fromiter(ids, dtype=np.uint32, count=len(counts))
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
        # No word spans two texts (a newline parts them): each text owns a run of words.
        per_text = np.diff(np.searchsorted(starts, text_starts), append=len(starts))
        owner = np.repeat(np.asarray(rows, dtype=np.uint32), per_text)
        out_c: list[U32] = []
        out_t: list[U32] = []
        out_n: list[U32] = []
        # Runs by their number of 8-byte blocks (all longer than _MAX_PACKED together).
        long = _MAX_PACKED // 8 + 1
        blocks = np.minimum((lens + 7) // 8, long).astype(np.uint8)
        by_blocks = np.argsort(blocks, kind="stable")  # a radix sort; text order kept
        ends = np.cumsum(np.bincount(blocks, minlength=long + 1))
        for k in range(1, long + 1):
            sel = by_blocks[ends[k - 1] : ends[k]]
            if not len(sel):
                continue
            if k == long:
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
        """Counts for runs of 8(k-1)+1 .. 8k bytes: one sort by a 64-bit key groups equal
        runs (a collision may split a group, never merge two words), a second sort of
        (group, chunk) counts each pair."""
        blocks = 8 * np.arange(k, dtype=np.int64)
        words = stream[starts[:, None] + blocks]  # (n, k): the run's bytes, 8 at a time
        words &= _KEEP_BYTES[np.clip(lens[:, None] - blocks, 0, 8)]  # zero what follows
        key = words[:, 0].copy()
        for j in range(1, k):
            key = key * np.uint64(0x9E3779B97F4A7C15) + (words[:, j] ^ (key >> np.uint64(29)))
        order = np.argsort(key)
        sorted_words = words[order]
        new_raw = np.empty(len(order), dtype=bool)
        new_raw[0] = True
        new_raw[1:] = np.any(sorted_words[1:] != sorted_words[:-1], axis=1)
        pair = (np.cumsum(new_raw, dtype=np.uint64) - np.uint64(1)) << np.uint64(32)
        pair |= owner[order]
        pair.sort()
        firsts = np.flatnonzero(np.concatenate(([True], pair[1:] != pair[:-1])))
        counts = np.diff(firsts, append=len(order)).astype(np.uint32)
        pair_chunk = (pair[firsts] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        pair_raw = (pair[firsts] >> np.uint64(32)).astype(np.int64)
        reps = sorted_words[new_raw]
        exp_len, flat = self._expand_rows(reps)
        exp_off = np.cumsum(exp_len) - exp_len
        rep = exp_len[pair_raw]
        terms = flat[_run_positions(exp_off[pair_raw], rep)]
        return np.repeat(pair_chunk, rep), terms, np.repeat(counts, rep)

    def _expand_rows(self, reps: U64) -> tuple[I64, U32]:
        """Term ids of each distinct raw word (8-byte rows): counts and ids in row order."""
        digits = None
        if self.numbers is not None and reps.shape[1] * 8 <= NUMBER_DIGITS + 5:
            digits = _digit_runs(reps)
        if digits is None:
            expansions = self._expand_words(reps)
            exp_len = np.fromiter(map(len, expansions), dtype=np.int64, count=len(reps))
            flat = np.fromiter(
                itertools.chain.from_iterable(expansions), np.uint32, count=int(exp_len.sum())
            )
            return exp_len, flat
        length, keys = digits
        assert self.numbers is not None
        other = np.flatnonzero(length == 0)
        expansions = self._expand_words(reps[other])
        exp_len = (length >= 2).astype(np.int64)  # one term a number; a lone digit none
        exp_len[other] = np.fromiter(map(len, expansions), dtype=np.int64, count=len(other))
        flat = np.empty(int(exp_len.sum()), dtype=np.uint32)
        starts = np.cumsum(exp_len) - exp_len
        numeric = np.flatnonzero(length >= 2)
        flat[starts[numeric]] = self.numbers.ids(keys[numeric])
        other = other[exp_len[other] > 0]
        at = _run_positions(starts[other], exp_len[other])
        flat[at] = np.fromiter(itertools.chain.from_iterable(expansions), np.uint32, count=len(at))
        return exp_len, flat

    def _expand_words(self, reps: npt.NDArray[np.uint64]) -> list[tuple[int, ...]]:
        """Term ids of each distinct raw word, given as rows of little-endian 8-byte blocks."""
        memo = self._memo
        width = reps.shape[1] * 8
        # As fixed-width bytes, numpy drops the zero padding when it hands out each item.
        keys: list[bytes] = np.ascontiguousarray(reps).view(f"S{width}").ravel().tolist()
        out = list(map(memo.get, keys))
        missed = [i for i, hit in enumerate(out) if hit is None]
        if not missed:
            return out  # type: ignore[return-value]
        if len(memo) + len(missed) > _MEMO_LIMIT:
            memo.clear()
        expand = self.analyzer.expand
        found = self.ids_of([expand(keys[i].decode("ascii")) for i in missed])
        for i, ids in zip(missed, found, strict=True):
            out[i] = memo[keys[i]] = ids
        return out  # type: ignore[return-value]


def _run_positions(starts: I64, lens: I64) -> I64:
    """The positions ``starts[i]`` to ``starts[i] + lens[i] - 1`` for each i, end to end."""
    within = np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
    positions: I64 = np.repeat(starts, lens) + within
    return positions


def _with_room(a: npt.NDArray[Any], size: int) -> npt.NDArray[Any]:
    """``a``, or a copy at least twice as long, so that it holds ``size`` items."""
    return a if len(a) >= size else wordscan.resized(a, max(size, 2 * len(a)))


def _run(path: Path) -> Iterator[tuple[str, int]]:
    """The (word, id) pairs of a run file, in order."""
    with (
        path.open(encoding="utf-8", newline="\n") as lines,
        path.with_suffix(".ids").open("rb") as ids,
    ):
        while block := np.fromfile(ids, dtype=np.uint32, count=_WORDS_PER_READ).tolist():
            words = [next(lines)[:-1] for _ in block]
            yield from zip(words, block, strict=True)


def _digit_runs(reps: U64) -> tuple[I64, U64] | None:
    """Per 8-byte row, its length if all digits (else 0) and its key; None if none is."""
    raw = np.ascontiguousarray(reps).view(np.uint8).reshape(len(reps), -1)
    size = (raw != 0).sum(axis=1)
    digit = (raw >= 0x30) & (raw <= 0x39)
    numeric = (digit.sum(axis=1) == size) & (size <= NUMBER_DIGITS)
    if not numeric.any():
        return None
    value = np.zeros(len(reps), dtype=np.uint64)
    for j in range(raw.shape[1]):  # Horner's rule over the columns, up to each length
        more = digit[:, j] & numeric
        value[more] = value[more] * np.uint64(10) + (raw[more, j] - 0x30).astype(np.uint64)
    length = np.where(numeric, size, 0).astype(np.int64)
    return length, _SHORTER[length] + value


def _aggregate(chunk: U32, term: U32, tf: U32, n_texts: int) -> Triples:
    """Sum duplicate (chunk, term) pairs; sort by chunk, then term id."""
    lengths = np.bincount(chunk, weights=tf, minlength=n_texts).astype(np.int64)
    if len(chunk) == 0:
        return Triples(chunk, term, tf, lengths)
    key = chunk.astype(np.uint64) << np.uint64(32) | term.astype(np.uint64)
    order = np.argsort(key)  # sums do not depend on the order of equal keys
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
