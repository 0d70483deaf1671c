"""Fit ranked items into a token budget: greedy in rank order, skipping what does not fit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from context_window.models import Packed


def pack(costs: Sequence[int], budget: int, *, at_least_one: bool = False) -> Packed:
    """Choose items (by position in ``costs``, which is rank order) whose costs sum within budget.

    An item that does not fit is skipped and counted, and smaller ones after it
    still get their chance. With ``at_least_one``, the first item is taken even
    if it alone exceeds the budget (the caller truncates it).
    """
    chosen: list[int] = []
    used = 0
    omitted = 0
    for i, cost in enumerate(costs):
        if used + cost <= budget or (at_least_one and not chosen and i == 0):
            chosen.append(i)
            used += cost
        else:
            omitted += 1
    return Packed(items=tuple(chosen), used_tokens=used, omitted=omitted, budget=budget)


def pack_ranked(costs: npt.NDArray[np.int64], budget: int) -> Packed:
    """``pack`` over ``costs``, stopping once nothing further down the ranking could still fit."""
    n = len(costs)
    if n == 0:
        return pack([], budget)
    suffix_min = np.minimum.accumulate(costs[::-1])[::-1]
    size = 256
    while True:
        size = min(size, n)
        packed = pack(costs[:size].tolist(), budget)
        if size == n or budget - packed.used_tokens < suffix_min[size]:
            return replace(packed, omitted=packed.omitted + n - size)
        size *= 4
