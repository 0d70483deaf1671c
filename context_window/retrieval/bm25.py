"""BM25 (Okapi) as ``rank_bm25.BM25Okapi`` computes it (k1 1.2, b 0.75, its idf floor)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

K1 = 1.2
B = 0.75
EPSILON = 0.25
# Share of adjacent units' BM25 a unit gains: an answer sits beside what names its topic.
NEIGHBOUR_WEIGHT = 0.5


FloatArray = npt.NDArray[np.float64]


def idf_values(df: npt.NDArray[np.int64], n_docs: int, average_idf: float) -> FloatArray:
    """BM25Okapi idf per term, negative ones floored to ``EPSILON * average_idf``."""
    raw = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
    return np.where(raw < 0, EPSILON * average_idf, raw)


IDF_BLOCK = 1 << 18  # terms whose idf is taken at once (a log has millions of terms)


def average_idf(df: npt.NDArray[np.integer[Any]], n_docs: int) -> float:
    """Mean raw idf over all terms of a corpus (rank_bm25's epsilon reference)."""
    if len(df) == 0:
        return 0.0
    total = 0.0
    for at in range(0, len(df), IDF_BLOCK):
        part = df[at : at + IDF_BLOCK].astype(np.float64)
        total += float(np.sum(np.log(n_docs - part + 0.5) - np.log(part + 0.5)))
    return total / len(df)


def term_scores(
    tf: npt.NDArray[np.generic], doc_len: npt.NDArray[np.generic], avgdl: float, idf: float
) -> FloatArray:
    """One query term's BM25 contribution to each posting."""
    tf64 = tf.astype(np.float64)
    norm = K1 * (1.0 - B + B * doc_len.astype(np.float64) / (avgdl or 1.0))
    return np.asarray(idf * tf64 * (K1 + 1.0) / (tf64 + norm), dtype=np.float64)


def smooth_neighbours(
    scores: npt.NDArray[np.float64], among: npt.NDArray[np.bool_], times: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """``scores`` plus ``NEIGHBOUR_WEIGHT`` x its time neighbours' among ``among``."""
    out = np.zeros_like(scores)
    idx = np.flatnonzero(among)
    if len(idx) == 0:
        return out
    if np.any(np.diff(times[idx]) < 0):  # positions are in time order until a compaction
        idx = idx[np.argsort(times[idx], kind="stable")]
    own = scores[idx]
    near = np.zeros_like(own)
    near[1:] += own[:-1]
    near[:-1] += own[1:]
    out[idx] = own + NEIGHBOUR_WEIGHT * near
    return out


def best_first(
    positions: npt.NDArray[np.intp],
    scores: npt.NDArray[np.float64],
    times: npt.NDArray[np.float64],
    first: int | None = None,
) -> tuple[npt.NDArray[np.intp], int]:
    """``positions`` best first, ties latest first; only the best ``first`` sorted."""
    if first is not None and len(positions) > first:
        own = scores[positions]
        kth = np.partition(own, len(own) - first)[len(own) - first]
        head, tail = positions[own >= kth], positions[own < kth]
        return np.concatenate([best_first(head, scores, times)[0], tail]), len(head)
    order = np.lexsort((-times[positions], -scores[positions]))
    return positions[order], len(positions)


def best_line(lines: Sequence[str], query: Iterable[str], terms: Callable[[str], list[str]]) -> int:
    """The line of ``lines`` whose ``query`` terms weigh most, lines taken as documents and
    weighed by Lucene's idf (never negative); the first on a tie or with no query."""
    wanted = set(query)
    found = [wanted.intersection(terms(line)) for line in lines]
    idf = idf_of(wanted, len(lines), Counter(t for words in found for t in words).__getitem__)
    return max(range(len(lines)), key=lambda i: (sum(idf[t] for t in found[i]), -i))


def idf_of(query: Iterable[str], n_docs: int, doc_freq: Callable[[str], int]) -> dict[str, float]:
    """Per query term ``ln(1 + (N - df + 0.5) / (df + 0.5))`` (Lucene's, never negative), for
    the terms some document holds."""
    out: dict[str, float] = {}
    for t in set(query):
        df = doc_freq(t)
        if df:
            out[t] = math.log1p((n_docs - df + 0.5) / (df + 0.5))
    return out
