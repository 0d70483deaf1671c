"""Fitting into a token budget, in one place: ``pack`` (ranked items, skipping what does
not fit), ``leading``, ``fit_lines``, ``header_reserve``/``settle`` (an answer's own
header), ``fit_chunks``, ``fit_data`` (JSON) and ``excerpt`` (the lines of a text)."""

from __future__ import annotations

import copy
import itertools
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from context_window.models import Chunk, Count, Packed
from context_window.tokens import TokenCounter


def pack(
    costs: Sequence[int] | npt.NDArray[np.int64],
    budget: int,
    *,
    at_least_one: bool = False,
    exact: Callable[[int], int | None] | None = None,
    taken: Callable[[int], None] | None = None,
    overshoot: int | None = None,
    beyond: int | None = None,
) -> Packed:
    """Choose items (positions in ``costs``, in rank order) whose costs sum within budget.

    An item that does not fit is skipped, later smaller ones still tried; ``at_least_one``
    takes the first even if over. ``costs`` may be lower bounds, then ``exact(i)`` gives
    the true cost (None: not takeable), asked only while the bound fits; ``taken(i)``
    hears of each choice in order. ``overshoot`` stops a walk that measures too many in
    vain. ``beyond`` bounds unlisted items ranked after these: reaching it stops the
    walk as ``unlisted``, for the caller to list them all.
    """
    bounds = np.asarray(costs, dtype=np.int64)
    if beyond is not None:  # one item standing for the unlisted ones
        bounds = np.append(bounds, np.int64(beyond))
    n = len(bounds)
    floor = np.minimum.accumulate(bounds[::-1])[::-1] if n else bounds
    chosen: list[int] = []
    used = omitted = missed = 0
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
        if beyond is not None and k == n - 1:
            return Packed(tuple(chosen), used, omitted, budget, unlisted=True)
        cost = int(bounds[k]) if exact is None else exact(k)
        if cost is not None and (first or used + cost <= budget):
            chosen.append(k)
            used += cost
            if taken is not None:
                taken(k)
        else:
            omitted += 1
            missed += exact is not None
            if overshoot is not None and missed > len(chosen) + overshoot:
                omitted += n - k - 1
                break
        k += 1
    return Packed(items=tuple(chosen), used_tokens=used, omitted=omitted, budget=budget)


def leading(costs: Iterable[int] | npt.NDArray[np.integer], budget: int) -> int:
    """How many items from the start fit ``budget`` together; a lazy iterable will do."""
    if isinstance(costs, np.ndarray):
        return int(np.searchsorted(np.cumsum(costs), budget, side="right"))
    return sum(1 for _ in itertools.takewhile(budget.__ge__, itertools.accumulate(costs)))


def fit_lines(
    header: str,
    lines: Sequence[str],
    budget: int,
    counter: TokenCounter,
    omitted: Callable[[int], str],
) -> str:
    """``header`` and the ``lines`` that fit ``budget``, then ``omitted(n)``, all within it."""
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


CUT = "…"  # a line standing for the lines an excerpt leaves out


def excerpt(lines: Sequence[str], best: int, budget: int, counter: TokenCounter) -> str:
    """The run of ``lines`` around ``lines[best]`` that fits ``budget``, grown on its
    shorter side first, with a ``CUT`` line for each side left out; the best line alone is
    cut at its end when it does not fit ('' when not even a word does). Lines are costed
    one by one, each with its newline: the sum bounds the whole (estimates add up)."""
    cost = [counter.count(line + "\n") for line in lines]
    room = budget - 2 * counter.count(CUT + "\n")
    a, b = best, best + 1
    shown = [counter.truncate(lines[best], max(room - 1, 0))] if cost[best] > room else None
    if shown == [""]:
        return ""
    room -= cost[best]
    while shown is None:
        after = [b] * (b < len(lines) and cost[b] <= room)
        before = [a - 1] * (a > 0 and cost[a - 1] <= room)
        grow = after + before if b - 1 - best <= best - a else before + after
        if not grow:
            break
        room -= cost[grow[0]]
        a, b = min(a, grow[0]), max(b, grow[0] + 1)
    return "\n".join([*[CUT][: a > 0], *(shown or lines[a:b]), *[CUT][: b < len(lines)]])


def header_reserve(widest: Callable[[bool], str], budget: int, count: Count) -> tuple[int, bool]:
    """Tokens for an answer's header at its widest, and whether it must be terse."""
    for terse in (False, True):
        need = count(widest(terse)) + 2  # and the blank line after it
        if need <= budget // 2:
            break
    return need, terse


def settle(render: Callable[[int], str], budget: int, count: Count) -> tuple[str, int]:
    """``render(used)`` and ``used``, estimated with the widest figure (the budget)."""
    used = count(render(budget))
    return render(used), used


_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode  # made once


def fit_data(data: dict[str, Any], budget: int, count: Count) -> dict[str, Any]:
    """``data`` whose JSON fits ``budget``: trailing list items dropped and long strings
    cut, largest first, then whole lists emptied from the last key. Keys are never
    dropped (the output schema); ``"cut": true`` marks a fitted answer."""
    lists = [k for k, v in data.items() if isinstance(v, list) and v]
    # The common case: the longest prefix of the longest list that fits.
    key: str | None = None
    if len(lists) > 1:
        key = max(lists, key=lambda k: len(_json(data[k])))
    elif lists:
        key = lists[0]
    if key is None:
        if count(_json(data)) <= budget:
            return data
        out: dict[str, Any] = {"cut": True, **data}
    else:
        items = [_json(item) for item in data[key]]
        if count(_json_with(data, key, items)) <= budget:
            return data
        out = {"cut": True, **data}
        room = budget - count(_json({**out, key: []}))
        kept = max(1, leading((count(item) + 1 for item in items), room))  # one at least
        out[key] = data[key][:kept]  # cut to fit below if even that one is over
        if count(_json_with(out, key, items[:kept])) <= budget:
            return out
    out = copy.deepcopy(out)
    for _ in range(_FIT_ROUNDS):
        over = count(_json(out)) - budget
        if over <= 0:
            return out
        parent, key, node = _largest(out)
        share = over / max(1, count(_json(node)))  # the part of this node that must go
        if isinstance(node, list):
            parent[key] = node[: max(0, len(node) - max(1, math.ceil(len(node) * share)))]
        elif isinstance(node, str) and len(node) > 1:
            parent[key] = node[: max(0, len(node) - max(2, math.ceil(len(node) * share)))] + "…"
        else:
            break
    for key in reversed(list(out)):
        if count(_json(out)) <= budget:
            break
        value = out[key]
        if isinstance(value, list | dict) and value:
            out[key] = type(value)()
        elif isinstance(value, str) and len(value) > 1:
            out[key] = "…"
    return out


_FIT_ROUNDS = 200


def _json_with(data: dict[str, Any], key: str, items: Sequence[str]) -> str:
    """``_json(data)`` where ``data[key]`` is the list whose items encode as ``items``."""
    keys = list(data)
    at = keys.index(key)
    head = _json({k: data[k] for k in keys[:at]})[:-1]  # "{..." without its brace
    tail = _json({k: data[k] for k in keys[at + 1 :]})[1:]
    return (
        f"{head}{',' if at else ''}{_json(key)}:[{','.join(items)}]"
        f"{',' if at + 1 < len(keys) else ''}{tail}"
    )


def _largest(node: Any) -> tuple[Any, Any, Any]:
    """(container, key, value) to shrink next: the largest list or string, found greedily."""
    parent: Any = None
    key: Any = None
    while True:
        if isinstance(node, dict) and node:
            k = max(node, key=lambda k: len(_json(node[k])))
            parent, key, node = node, k, node[k]
        elif isinstance(node, list) and len(node) == 1:
            parent, key, node = node, 0, node[0]
        else:
            return parent, key, node


def fit_chunks(
    chunks: Sequence[Chunk],
    room: int,
    label: Callable[[Chunk], str] | None,
    counter: TokenCounter,
) -> tuple[list[Chunk], int, bool]:
    """The leading ``chunks`` that fit ``room``: (kept, used, truncated); one at least."""

    def cost(c: Chunk) -> int:
        head = counter.count(label(c)) if label is not None else 0
        return counter.count(c.text) + head + 2

    kept: list[Chunk] = []
    used = 0
    for c in chunks:
        if kept and used + cost(c) > room:
            break
        kept.append(c)
        used += cost(c)
    if used <= room:
        return kept, used, False
    one = kept[0]
    if room - cost(replace(one, text="")) < 1:  # no room for the heading trail either
        one = replace(one, heading="")
    cut = counter.truncate(one.text, max(1, room - cost(replace(one, text=""))))
    one = replace(one, text=cut, tokens=counter.count(cut))
    return [one], cost(one), True
