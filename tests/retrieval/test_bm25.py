"""Ranking helpers: the best first, by score then by time, sorting only what is asked."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from context_window.retrieval.bm25 import best_first


@given(
    st.lists(st.integers(min_value=0, max_value=6), min_size=0, max_size=200),
    st.integers(min_value=1, max_value=50),
)
def test_the_first_ones_are_in_the_order_of_a_full_sort(values: list[int], first: int) -> None:
    scores = np.array(values, dtype=np.float64) / 2  # many ties, as a broad word gives
    times = np.random.default_rng(len(values)).permutation(len(values)).astype(np.float64)
    positions = np.arange(len(values))
    full, n_full = best_first(positions, scores, times)
    part, ordered = best_first(positions, scores, times, first)
    assert n_full == len(values) and sorted(part.tolist()) == list(range(len(values)))
    assert ordered >= min(first, len(values))  # ties with the last are put in order too
    assert part[:ordered].tolist() == full[:ordered].tolist()
    keys = [(-scores[i], -times[i]) for i in full]
    assert keys == sorted(keys)
