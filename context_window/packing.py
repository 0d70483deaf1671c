"""Fitting into a token budget, in one place.

``pack``: items in rank order, skipping what does not fit. ``leading``: the longest run
of items from the start. ``fit_lines``: a header and as many lines as fit, with a note
on the rest. ``header_reserve`` and ``settle``: room for an answer's own header.
(The longest prefix of one text within a budget is ``tokens.longest_prefix``.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from context_window.models import Packed
from context_window.tokens import TokenCounter


def pack(
    costs: Sequence[int] | npt.NDArray[np.int64],
    budget: int,
    *,
    at_least_one: bool = False,
    exact: Callable[[int], int | None] | None = None,
    taken: Callable[[int], None] | None = None,
) -> Packed:
    """Choose items (by position in ``costs``, which is rank order) whose costs sum within budget.

    An item that does not fit is skipped and counted, and smaller ones after it
    still get their chance. With ``at_least_one``, the first item is taken even
    if it alone exceeds the budget (the caller truncates it).

    When measuring an item is dear, ``costs`` may hold lower bounds: ``exact(i)``
    then gives item i's true cost (None: it cannot be taken), and is only asked
    while the bound still fits. Items whose bound no longer fits are passed over in
    one step, and the walk stops once no bound further down fits. ``taken(i)`` is
    told of each item chosen, in order, before the next is measured.
    """
    bounds = np.asarray(costs, dtype=np.int64)
    n = len(bounds)
    floor = np.minimum.accumulate(bounds[::-1])[::-1] if n else bounds
    chosen: list[int] = []
    used = omitted = 0
    k = 0
    while k < n:
        left = budget - used
        first = at_least_one and k == 0
        if not first and left < floor[k]:  # nothing further down can fit
            omitted += n - k
            break
        if not first and bounds[k] > left:  # pass over to the next that could still fit
            step = int(np.argmax(bounds[k:] <= left))
            omitted += step
            k += step
            continue
        cost = int(bounds[k]) if exact is None else exact(k)
        if cost is not None and (first or used + cost <= budget):
            chosen.append(k)
            used += cost
            if taken is not None:
                taken(k)
        else:
            omitted += 1
        k += 1
    return Packed(items=tuple(chosen), used_tokens=used, omitted=omitted, budget=budget)


def leading(costs: Iterable[int] | npt.NDArray[np.integer], budget: int) -> int:
    """How many items from the start fit ``budget`` together (none skipped).

    Costs are read only until the budget is passed, so a lazy iterable may be given.
    """
    if isinstance(costs, np.ndarray):
        return int(np.searchsorted(np.cumsum(costs), budget, side="right"))
    used = taken = 0
    for cost in costs:
        used += cost
        if used > budget:
            break
        taken += 1
    return taken


def fit_lines(
    header: str,
    lines: Sequence[str],
    budget: int,
    counter: TokenCounter,
    omitted: Callable[[int], str],
) -> str:
    """``header`` and as many of ``lines`` as fit ``budget``, then ``omitted(n)`` saying
    how many did not. The whole text, that note included, stays within ``budget``."""
    count = counter.count
    header = counter.truncate(header, budget)

    def take(room: int) -> int:
        return leading((count(line) + 1 for line in lines), room - count(header))

    kept = take(budget)
    if kept == len(lines):
        return "\n".join([header, *lines])
    note = omitted(len(lines))  # the widest figure, so the note never grows below
    kept = take(budget - count(note) - 1)
    note = omitted(len(lines) - kept)
    out = [header, *lines[:kept]]
    if count("\n".join([*out, note])) <= budget:
        out.append(note)
    return "\n".join(out)


def header_reserve(
    widest: Callable[[bool], str], budget: int, count: Callable[[str], int]
) -> tuple[int, bool]:
    """Tokens to keep for an answer's header, and whether the header must be terse.

    ``widest(terse)`` renders the header at its widest (the largest numbers it can
    show). The full header is used while it takes at most half the budget.
    """
    for terse in (False, True):
        need = count(widest(terse)) + 2  # and the blank line after it
        if need <= budget // 2:
            break
    return need, terse


def settle(
    render: Callable[[int], str], budget: int, count: Callable[[str], int]
) -> tuple[str, int]:
    """An answer whose header states its own size: ``render(used)`` and ``used``.

    ``used`` is the estimate of the answer rendered with the widest figure (the
    budget), so it is never below the estimate of the text returned.
    """
    used = count(render(budget))
    return render(used), used
