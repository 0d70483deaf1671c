"""Meaning beside words: a lexical score and a cosine, each min-max normalised over the
candidates, added at equal weight (an outside study measured it ahead of reciprocal
rank fusion, +0.031 against +0.007, with two models)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
WORDS = 0.5  # the lexical score's weight; the cosine has the rest
WORDS_ONLY = " · words only"  # an answer's header, when meaning was asked for and not had


def min_max(x: F64) -> F64:
    """``x`` scaled to 0..1 (all zeros when every value is the same)."""
    lo, hi = (float(x.min()), float(x.max())) if x.size else (0.0, 0.0)
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def interpolate(words: F64, cosines: F64) -> F64:
    """The hybrid score of each candidate; a missing cosine (NaN) counts as the least."""
    known = cosines[~np.isnan(cosines)]
    floor = float(known.min()) if known.size else 0.0
    return WORDS * min_max(words) + (1 - WORDS) * min_max(np.nan_to_num(cosines, nan=floor))
