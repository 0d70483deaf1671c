"""Retrieval terms and BM25 ranking (Okapi, as ``rank_bm25.BM25Okapi`` computes it).

Terms are lowercase words; identifiers are indexed whole and by their parts, so
``getUserName`` yields ``getusername get user name`` and ``blk_38`` yields
``blk_38 blk 38``. No stemming. Scores follow Robertson's BM25 with k1 = 1.2,
b = 0.75 and rank_bm25's floor for negative idf (epsilon x the average idf).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt
import regex

K1 = 1.2
B = 0.75
EPSILON = 0.25

FloatArray = npt.NDArray[np.float64]

_WORD = regex.compile(r"[\w$]+")
# Case classes are Unicode-wide so "naïve" or "Straße" stay whole instead of splitting at the
# accented letter; the last branch keeps runs of caseless letters (CJK, etc.) together.
_PART = regex.compile(r"\p{Lu}+(?=\p{Lu}\p{Ll})|\p{Lu}?\p{Ll}+|\p{Lu}+|\d+|[^\W\d_\p{Lu}\p{Ll}]+")
STOP_WORDS = frozenset(
    "a an and are as at be but by for from has have he her his i if in into is it its me my "
    "no not of on or our she so than that the their them then there these they this to was we "
    "were what when where which who will with you your".split()
)
_MEMO_LIMIT = 500_000


class Analyzer:
    """Turns text into index terms; memoizes identifier splitting per raw word."""

    def __init__(self) -> None:
        self._memo: dict[str, tuple[str, ...]] = {}

    def expand(self, raw: str) -> tuple[str, ...]:
        """Index terms for one raw word: the whole word, then its identifier parts."""
        hit = self._memo.get(raw)
        if hit is not None:
            return hit
        if len(self._memo) > _MEMO_LIMIT:
            self._memo.clear()
        whole = raw.lower()
        out: list[str] = []
        if len(whole) >= 2 and whole not in STOP_WORDS:
            out.append(whole)
        parts = _PART.findall(raw)
        if len(parts) > 1 or (parts and parts[0].lower() != whole):
            for part in parts:
                low = part.lower()
                if len(low) >= 2 and low not in STOP_WORDS and low != whole:
                    out.append(low)
        result = tuple(out)
        self._memo[raw] = result
        return result

    def counts(self, text: str) -> dict[str, int]:
        """Term frequencies of ``text``."""
        out: dict[str, int] = {}
        for raw, n in Counter(_WORD.findall(text)).items():
            for term in self.expand(raw):
                out[term] = out.get(term, 0) + n
        return out

    def terms(self, text: str) -> list[str]:
        """Index terms of ``text`` in order, repeats kept (a query's terms)."""
        return [term for raw in _WORD.findall(text) for term in self.expand(raw)]


def idf_values(df: npt.NDArray[np.int64], n_docs: int, average_idf: float) -> FloatArray:
    """BM25Okapi idf per term, negative ones floored to ``EPSILON * average_idf``."""
    raw = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
    return np.where(raw < 0, EPSILON * average_idf, raw)


def average_idf(df: npt.NDArray[np.int64], n_docs: int) -> float:
    """Mean raw idf over all terms of a corpus (rank_bm25's epsilon reference)."""
    if len(df) == 0:
        return 0.0
    return float(np.mean(np.log(n_docs - df + 0.5) - np.log(df + 0.5)))


def term_scores(
    tf: npt.NDArray[np.generic], doc_len: npt.NDArray[np.generic], avgdl: float, idf: float
) -> FloatArray:
    """One query term's BM25 contribution to each posting."""
    tf64 = tf.astype(np.float64)
    norm = K1 * (1.0 - B + B * doc_len.astype(np.float64) / (avgdl or 1.0))
    return np.asarray(idf * tf64 * (K1 + 1.0) / (tf64 + norm), dtype=np.float64)


class MemoryIndex:
    """An append-only in-memory inverted index; documents are numbered 0..n-1."""

    def __init__(self) -> None:
        self._term_ids: dict[str, int] = {}
        self._post_docs: list[list[int]] = []
        self._post_tfs: list[list[int]] = []
        self._cache: dict[int, tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64]]] = {}
        self._doc_len: list[int] = []
        self._total_len = 0
        # (documents, average idf, document lengths) as of the last query, and the
        # document frequencies behind it: after the first query, an append only adds
        # its own terms' ids to _pending, so the next query updates df instead of
        # walking every posting list again.
        self._stats: tuple[int, float, npt.NDArray[np.int64]] | None = None
        self._df: npt.NDArray[np.int64] | None = None
        self._pending: list[int] = []

    def __len__(self) -> int:
        return len(self._doc_len)

    def add(self, counts: dict[str, int]) -> int:
        """Index one document's term counts; return its number."""
        doc = len(self._doc_len)
        for term, tf in counts.items():
            tid = self._term_ids.get(term)
            if tid is None:
                tid = self._term_ids[term] = len(self._post_docs)
                self._post_docs.append([])
                self._post_tfs.append([])
            self._post_docs[tid].append(doc)
            self._post_tfs[tid].append(tf)
        length = sum(counts.values())
        self._doc_len.append(length)
        self._total_len += length
        if self._df is not None:
            self._pending.extend(map(self._term_ids.__getitem__, counts))
        return doc

    def add_many(
        self,
        doc: npt.NDArray[np.uint32],
        term: npt.NDArray[np.uint32],
        tf: npt.NDArray[np.uint32],
        lengths: npt.NDArray[np.int64],
        vocabulary: Sequence[str],
    ) -> None:
        """Index a batch of documents at once, as :meth:`add` of each would.

        ``doc[i]`` (0-based within the batch, ascending) holds ``vocabulary[term[i]]``
        ``tf[i]`` times, one triple per distinct (document, term); ``lengths`` is each
        document's total term count (``termcount.Triples`` has this shape).
        """
        base = len(self._doc_len)
        ids = np.empty(len(vocabulary), dtype=np.int64)
        for k, word in enumerate(vocabulary):
            tid = self._term_ids.get(word)
            if tid is None:
                tid = self._term_ids[word] = len(self._post_docs)
                self._post_docs.append([])
                self._post_tfs.append([])
            ids[k] = tid
        tids = ids[term]
        order = np.argsort(tids, kind="stable")  # by term; documents stay ascending
        sorted_tids = tids[order]
        docs = (doc[order].astype(np.int64) + base).tolist()
        tfs = tf[order].tolist()
        if len(order):
            cuts = np.flatnonzero(np.diff(sorted_tids)) + 1
            firsts = np.concatenate(([0], cuts))
            lasts = np.concatenate((cuts, [len(order)])).tolist()
            for tid, a, b in zip(sorted_tids[firsts].tolist(), firsts.tolist(), lasts, strict=True):
                self._post_docs[tid].extend(docs[a:b])
                self._post_tfs[tid].extend(tfs[a:b])
        self._doc_len.extend(lengths.tolist())
        self._total_len += int(lengths.sum())
        if self._df is not None:
            self._pending.extend(tids.tolist())

    def _postings(self, tid: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        docs = self._post_docs[tid]
        cached = self._cache.get(tid)
        if cached is None:
            cached = (len(docs), np.array(docs, dtype=np.int64), np.array(self._post_tfs[tid]))
            self._cache[tid] = cached
        elif cached[0] != len(docs):  # postings only grow: convert just the new tail
            old = cached[0]
            cached = (
                len(docs),
                np.concatenate((cached[1], np.array(docs[old:], dtype=np.int64))),
                np.concatenate((cached[2], np.array(self._post_tfs[tid][old:]))),
            )
            self._cache[tid] = cached
        return cached[1], cached[2]

    def _corpus_stats(self) -> tuple[float, npt.NDArray[np.int64]]:
        """Average idf and document lengths, recomputed only when documents were added."""
        n = len(self._doc_len)
        if self._stats is not None and self._stats[0] == n:
            return self._stats[1], self._stats[2]
        terms = len(self._post_docs)
        if self._stats is None or self._df is None:
            df = np.fromiter(map(len, self._post_docs), dtype=np.int64, count=terms)
            doc_len = np.array(self._doc_len, dtype=np.int64)
        else:
            df = self._df
            if len(df) < terms:
                df = np.concatenate((df, np.zeros(terms - len(df), dtype=np.int64)))
            np.add.at(df, np.array(self._pending, dtype=np.int64), 1)
            old = self._stats[2]
            doc_len = np.concatenate((old, np.array(self._doc_len[len(old) :], dtype=np.int64)))
        self._df, self._pending = df, []
        self._stats = (n, average_idf(df, n), doc_len)
        return self._stats[1], self._stats[2]

    def scores(self, query_terms: Sequence[str]) -> FloatArray:
        """BM25 score of every document for the query (repeated terms count again)."""
        n = len(self._doc_len)
        out = np.zeros(n, dtype=np.float64)
        if n == 0 or not query_terms:
            return out
        avg_idf, doc_len = self._corpus_stats()
        avgdl = self._total_len / n
        for term in query_terms:
            tid = self._term_ids.get(term)
            if tid is None:
                continue
            docs, tfs = self._postings(tid)
            idf = float(idf_values(np.array([len(docs)]), n, avg_idf)[0])
            out[docs] += term_scores(tfs, doc_len[docs], avgdl, idf)
        return out

    def matching(self, query_terms: Sequence[str]) -> npt.NDArray[np.bool_]:
        """Which documents contain at least one query term, whatever the sign of their score."""
        out = np.zeros(len(self._doc_len), dtype=np.bool_)
        for term in set(query_terms):
            tid = self._term_ids.get(term)
            if tid is not None:
                out[self._postings(tid)[0]] = True
        return out


def recency_weights(times: Iterable[float]) -> FloatArray:
    """``1 + 0.25 * recency`` with recency min-max scaled to [0, 1] over ``times``."""
    if isinstance(times, np.ndarray):
        arr = np.asarray(times, dtype=np.float64)
    else:
        arr = np.fromiter(times, dtype=np.float64)
    if len(arr) == 0:
        return arr
    lo, hi = float(arr.min()), float(arr.max())
    if math.isclose(lo, hi):
        return np.full(len(arr), 1.25)
    return np.asarray(1.0 + 0.25 * (arr - lo) / (hi - lo), dtype=np.float64)
