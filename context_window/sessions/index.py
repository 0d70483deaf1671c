"""A session's in-memory inverted index: append-only, scored with BM25."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from context_window.retrieval.bm25 import FloatArray, average_idf, idf_values, term_scores
from context_window.sessions.keys import Keys

FOLD_POSTINGS = 65_536  # postings added before a MemoryIndex merges them into its base


class MemoryIndex:
    """An append-only in-memory inverted index; documents are numbered 0..n-1.

    Postings are a *base* of flat arrays (as a snapshot stores them) plus a small array
    per term for what was added since, which ``_fold`` merges in once it grows.
    """

    def __init__(self) -> None:
        self._terms = Keys()  # term -> its number
        self._base_off = np.zeros(1, dtype=np.int64)
        self._base_docs = np.zeros(0, dtype=np.uint32)
        self._base_tfs = np.zeros(0, dtype=np.uint32)
        self._tail_docs: dict[int, array[int]] = {}
        self._tail_tfs: dict[int, array[int]] = {}
        self._tail_size = 0
        self._cache: dict[int, tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64]]] = {}
        self._doc_len: array[int] = array("I")
        self._total_len = 0
        # The statistics as of the last query; the next updates df for _pending's terms.
        self._stats: tuple[int, float, npt.NDArray[np.int64]] | None = None
        self._df: npt.NDArray[np.int64] | None = None
        self._pending: list[int] = []
        self._excluded: tuple[tuple[int, int], npt.NDArray[np.int64]] | None = None

    def __len__(self) -> int:
        return len(self._doc_len)

    def _tail(self, tid: int) -> tuple[array[int], array[int]]:
        docs = self._tail_docs.get(tid)
        if docs is None:
            docs = self._tail_docs[tid] = array("I")
            self._tail_tfs[tid] = array("I")
        return docs, self._tail_tfs[tid]

    def add(self, counts: dict[str, int]) -> int:
        """Index one document's term counts; return its number."""
        doc = len(self._doc_len)
        tids = self._terms.numbers(list(counts))
        for tid, tf in zip(tids, counts.values(), strict=True):
            docs, tfs = self._tail(tid)
            docs.append(doc)
            tfs.append(tf)
        self._tail_size += len(counts)
        length = sum(counts.values())
        self._doc_len.append(length)
        self._total_len += length
        if self._df is not None:
            self._pending.extend(tids)
        self._fold_if_large()
        return doc

    def add_many(
        self,
        doc: npt.NDArray[np.uint32],
        term: npt.NDArray[np.uint32],
        tf: npt.NDArray[np.uint32],
        lengths: npt.NDArray[np.int64],
        vocabulary: Sequence[str],
    ) -> None:
        """Index a batch as :meth:`add` of each would (``termcount.Triples``' shape)."""
        base = len(self._doc_len)
        ids = np.empty(len(vocabulary), dtype=np.int64)
        # Only the terms this batch holds: a vocabulary shared by batches keeps growing.
        # (A mask, not np.unique, which imports numpy.ma: 10 ms of a restart's first call.)
        seen = np.zeros(len(vocabulary), dtype=bool)
        seen[term] = True
        held = np.flatnonzero(seen).tolist()
        ids[held] = self._terms.numbers([vocabulary[k] for k in held])
        tids = ids[term]
        order = np.argsort(tids, kind="stable")  # by term; documents stay ascending
        sorted_tids = tids[order]
        docs = (doc[order].astype(np.int64) + base).astype(np.uint32)
        tfs = tf[order].astype(np.uint32)
        if len(order):
            cuts = np.flatnonzero(np.diff(sorted_tids)) + 1
            firsts = np.concatenate(([0], cuts))
            lasts = np.concatenate((cuts, [len(order)])).tolist()
            for tid, a, b in zip(sorted_tids[firsts].tolist(), firsts.tolist(), lasts, strict=True):
                tail_docs, tail_tfs = self._tail(tid)
                tail_docs.frombytes(docs[a:b].tobytes())
                tail_tfs.frombytes(tfs[a:b].tobytes())
        self._tail_size += len(order)
        self._doc_len.frombytes(lengths.astype(np.uint32).tobytes())
        self._total_len += int(lengths.sum())
        if self._df is not None:
            self._pending.extend(tids.tolist())
        self._fold_if_large()

    def _fold_if_large(self) -> None:
        """Merge the per-term arrays into the base once they hold an eighth of it."""
        if self._tail_size > max(FOLD_POSTINGS, len(self._base_docs) // 8):
            self._fold()

    def _fold(self) -> None:
        """Merge the per-term arrays into the base, each term's new postings after its old."""
        if not self._tail_docs:
            return
        n_terms = len(self._terms)
        tids = np.array(sorted(self._tail_docs), dtype=np.int64)
        sizes = np.zeros(n_terms, dtype=np.int64)
        sizes[tids] = [len(self._tail_docs[t]) for t in tids.tolist()]
        base_off = np.full(n_terms + 1, self._base_off[-1], dtype=np.int64)
        base_off[: len(self._base_off)] = self._base_off
        at = np.repeat(base_off[tids + 1], sizes[tids])  # the end of each term's old run
        order = tids.tolist()
        docs = b"".join(bytes(self._tail_docs[t]) for t in order)
        tfs = b"".join(bytes(self._tail_tfs[t]) for t in order)
        # np.insert keeps the order of values bound for the same place.
        self._base_docs = np.insert(self._base_docs, at, np.frombuffer(docs, dtype=np.uint32))
        self._base_tfs = np.insert(self._base_tfs, at, np.frombuffer(tfs, dtype=np.uint32))
        self._base_off = base_off
        self._base_off[1:] += np.cumsum(sizes)
        self._tail_docs, self._tail_tfs, self._tail_size = {}, {}, 0

    def _sizes(self) -> npt.NDArray[np.int64]:
        """How many documents hold each term (its posting count), by term number."""
        out = np.zeros(len(self._terms), dtype=np.int64)
        base = np.diff(self._base_off)
        out[: len(base)] = base
        for tid, docs in self._tail_docs.items():
            out[tid] += len(docs)
        return out

    def export(self) -> tuple[list[str], dict[str, npt.NDArray[Any]]]:
        """The index as its terms (in number order) and flat arrays, for ``restore``."""
        self._fold()
        offsets = np.zeros(len(self._terms) + 1, dtype=np.int64)
        offsets[: len(self._base_off)] = self._base_off
        offsets[len(self._base_off) :] = self._base_off[-1]
        arrays: dict[str, npt.NDArray[Any]] = {
            "offsets": offsets,
            "docs": self._base_docs,
            "tfs": self._base_tfs,
            "doc_len": np.frombuffer(bytes(self._doc_len), dtype=np.uint32),
        }
        arrays["term_hashes"], arrays["term_numbers"] = self._terms.table()
        return self._terms.list, arrays

    @classmethod
    def restore(cls, terms: list[str], arrays: dict[str, npt.NDArray[Any]]) -> MemoryIndex:
        """The index ``export`` gave (ValueError if the parts do not fit together)."""
        offsets = arrays["offsets"].astype(np.int64)
        # Memory-mapped postings stay mapped: a query reads only its terms' pages.
        docs, tfs = np.asarray(arrays["docs"], np.uint32), np.asarray(arrays["tfs"], np.uint32)
        doc_len = arrays["doc_len"].astype(np.uint32)
        if len(offsets) != len(terms) + 1 or len(docs) != len(tfs) or int(offsets[-1]) != len(docs):
            raise ValueError("index arrays do not fit together")
        if offsets[0] != 0 or np.any(np.diff(offsets) < 0):
            raise ValueError("index offsets do not ascend")
        if len(docs) and int(docs.max()) >= len(doc_len):
            raise ValueError("a posting names a document past the end")
        out = cls()
        out._terms = Keys(terms, (arrays["term_hashes"], arrays["term_numbers"]))
        out._base_off, out._base_docs, out._base_tfs = offsets, docs, tfs
        out._doc_len = array("I", doc_len.tobytes())
        out._total_len = int(doc_len.sum(dtype=np.int64))
        return out

    def _postings(self, tid: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        tail = self._tail_docs.get(tid)
        size = len(tail) if tail is not None else 0
        if tid + 1 < len(self._base_off):
            a, b = int(self._base_off[tid]), int(self._base_off[tid + 1])
        else:
            a = b = 0
        total = b - a + size
        cached = self._cache.get(tid)
        if cached is None or cached[0] != total:
            docs = self._base_docs[a:b].astype(np.int64)
            tfs = self._base_tfs[a:b].astype(np.int64)
            if size:
                docs = np.concatenate((docs, np.array(tail, dtype=np.int64)))
                tfs = np.concatenate((tfs, np.array(self._tail_tfs[tid], dtype=np.int64)))
            cached = self._cache[tid] = (total, docs, tfs)
        return cached[1], cached[2]

    def _corpus_stats(self) -> tuple[float, npt.NDArray[np.int64]]:
        """Average idf and document lengths, recomputed only when documents were added."""
        n = len(self._doc_len)
        if self._stats is not None and self._stats[0] == n:
            return self._stats[1], self._stats[2]
        terms = len(self._terms)
        if self._stats is None or self._df is None:
            df = self._sizes()
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

    def scores(
        self, query_terms: Sequence[str], exclude: npt.NDArray[np.bool_] | None = None
    ) -> FloatArray:
        """BM25 of every document for the query; with ``exclude``, as over the others alone."""
        n_all = len(self._doc_len)
        out = np.zeros(n_all, dtype=np.float64)
        if n_all == 0 or not query_terms:
            return out
        avg_idf, doc_len = self._corpus_stats()
        n, total_len = n_all, self._total_len
        df_out: npt.NDArray[np.int64] | None = None
        if exclude is not None and exclude.any():
            gone = np.flatnonzero(exclude[:n_all])
            n -= len(gone)
            if n <= 0:
                return out
            total_len -= int(doc_len[gone].sum())
            df_out = self._excluded_df(exclude[:n_all], gone)
            assert self._df is not None
            df_in = self._df - df_out
            present = df_in > 0
            avg_idf = average_idf(df_in[present], n)
        avgdl = total_len / n
        for term in query_terms:
            tid = self._terms.get(term)
            if tid is None:
                continue
            docs, tfs = self._postings(tid)
            df = len(docs) - (int(df_out[tid]) if df_out is not None else 0)
            if df <= 0:
                continue
            idf = float(idf_values(np.array([df]), n, avg_idf)[0])
            out[docs] += term_scores(tfs, doc_len[docs], avgdl, idf)
        if df_out is not None and exclude is not None:
            out[exclude[:n_all]] = 0.0
        return out

    def _excluded_df(
        self, exclude: npt.NDArray[np.bool_], gone: npt.NDArray[np.intp]
    ) -> npt.NDArray[np.int64]:
        """Per term, how many excluded documents hold it (cached until the set changes)."""
        terms = len(self._terms)
        key = (len(gone), hash(gone.tobytes()))
        cached = self._excluded
        if cached is None or cached[0] != key:
            self._fold()
            tids = np.repeat(np.arange(len(self._base_off) - 1), np.diff(self._base_off))
            hit = exclude[self._base_docs.astype(np.int64)]
            df_out = np.bincount(tids[hit], minlength=terms).astype(np.int64)
            cached = self._excluded = (key, df_out)
        df_out = cached[1]
        if len(df_out) < terms:
            df_out = np.concatenate((df_out, np.zeros(terms - len(df_out), dtype=np.int64)))
            self._excluded = (key, df_out)
        return df_out

    def matching(self, query_terms: Sequence[str]) -> npt.NDArray[np.bool_]:
        """Which documents contain at least one query term, whatever the sign of their score."""
        out = np.zeros(len(self._doc_len), dtype=np.bool_)
        for term in set(query_terms):
            tid = self._terms.get(term)
            if tid is not None:
                out[self._postings(tid)[0]] = True
        return out
