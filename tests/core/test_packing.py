"""Greedy packing into a budget: never over, skips big items, keeps trying smaller ones."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from context_window.models import Packed
from context_window.packing import CUT, excerpt, fit_data, fit_lines, leading, pack
from context_window.tokens import TokenCounter


def test_takes_items_in_rank_order_while_they_fit() -> None:
    p = pack([10, 20, 30], 35)
    assert p.items == (0, 1)
    assert (p.used_tokens, p.omitted, p.budget) == (30, 1, 35)


def test_skips_an_item_too_big_and_keeps_trying_smaller_ones() -> None:
    p = pack([50, 500, 20, 40, 10], 100)
    assert p.items == (0, 2, 4)
    assert p.used_tokens == 80
    assert p.omitted == 2


def test_nothing_fits() -> None:
    p = pack([200, 300], 100)
    assert p.items == ()
    assert (p.used_tokens, p.omitted) == (0, 2)


def test_empty_input() -> None:
    p = pack([], 100)
    assert (p.items, p.used_tokens, p.omitted) == ((), 0, 0)


def test_at_least_one_takes_an_oversized_first_item_only() -> None:
    p = pack([500, 10, 20], 100, at_least_one=True)
    assert p.items == (0,)
    assert p.omitted == 2
    assert pack([10, 500], 100, at_least_one=True).items == (0,)


def test_zero_cost_items_always_fit() -> None:
    assert pack([0, 0, 5], 0).items == (0, 1)


@given(st.lists(st.integers(0, 300), max_size=60), st.integers(0, 1000))
def test_never_exceeds_budget_and_accounts_for_every_item(costs: list[int], budget: int) -> None:
    p = pack(costs, budget)
    assert p.used_tokens == sum(costs[i] for i in p.items) <= budget
    assert len(p.items) + p.omitted == len(costs)
    assert list(p.items) == sorted(set(p.items))
    # Greedy: every skipped item would have overflowed at the moment it was considered.
    used = 0
    for i, cost in enumerate(costs):
        if i in p.items:
            used += cost
        else:
            assert used + cost > budget


def test_exact_costs_are_asked_only_while_the_bound_still_fits() -> None:
    asked: list[int] = []
    taken: list[int] = []
    true = [30, 40, 500, 50, 5]

    def exact(i: int) -> int:
        asked.append(i)
        return true[i]

    # Bounds below the true costs: item 1 fits by its bound but not by its true cost.
    p = pack([20, 20, 400, 45, 5], 60, exact=exact, taken=taken.append)
    assert p.items == (0, 4) and p.used_tokens == 35 and p.omitted == 3
    assert asked == [0, 1, 4]  # 2 and 3 were passed over on their bounds alone
    assert taken == [0, 4]


def test_exact_none_means_the_item_cannot_be_taken() -> None:
    p = pack([10, 10, 10], 100, exact=lambda i: None if i == 1 else 10)
    assert p.items == (0, 2) and p.omitted == 1


@given(
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 100)), max_size=50),
    st.integers(0, 800),
)
def test_lazy_packing_never_exceeds_and_matches_the_plain_greedy(
    items: list[tuple[int, int]], budget: int
) -> None:
    true = [b + extra for b, extra in items]
    lazy = pack([b for b, _ in items], budget, exact=true.__getitem__)
    assert lazy.used_tokens == sum(true[i] for i in lazy.items) <= budget
    assert len(lazy.items) + lazy.omitted == len(items)
    assert lazy == pack(true, budget)  # lower bounds only save work, never change the choice


def test_overshoot_bounds_the_items_measured_in_vain() -> None:
    # 10 items fill the budget; then 5,000 small items each fit by their bound (the text)
    # but not by their true cost (text and label): without a bound all are measured.
    bounds = [10] * 10 + [1] * 5_000
    true = [10] * 10 + [9] * 5_000
    asked: list[int] = []

    def exact(i: int) -> int:
        asked.append(i)
        return true[i]

    plain = pack(bounds, 102, exact=exact)
    assert len(asked) == 5_010 and plain.items == tuple(range(10))
    asked.clear()
    bounded = pack(bounds, 102, exact=exact, overshoot=16)
    assert bounded == plain  # the same choice, the same count of what was left out
    assert len(asked) == 10 + 10 + 16 + 1  # what it shows, as many again, and 16 more


@given(
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 100)), max_size=50),
    st.integers(0, 800),
    st.integers(0, 8),
)
def test_overshoot_never_exceeds_and_takes_a_prefix_of_the_choice(
    items: list[tuple[int, int]], budget: int, overshoot: int
) -> None:
    true = [b + extra for b, extra in items]
    full = pack(true, budget)
    cut = pack([b for b, _ in items], budget, exact=true.__getitem__, overshoot=overshoot)
    assert cut.used_tokens == sum(true[i] for i in cut.items) <= budget
    assert len(cut.items) + cut.omitted == len(items)
    assert cut.items == full.items[: len(cut.items)]  # it stops early, never chooses otherwise


# --- leading and fit_lines ----------------------------------------------------------


@given(st.lists(st.integers(0, 50), max_size=30), st.integers(0, 400))
def test_leading_is_the_longest_run_from_the_start(costs: list[int], budget: int) -> None:
    n = leading(costs, budget)
    assert sum(costs[:n]) <= budget
    assert n == len(costs) or sum(costs[: n + 1]) > budget
    assert leading(np.array(costs, dtype=np.int64), budget) == n
    assert leading(iter(costs), budget) == n


def test_leading_reads_a_lazy_iterable_only_until_the_budget_is_passed() -> None:
    read: list[int] = []

    def costs() -> Iterator[int]:
        for i in range(1000):
            read.append(i)
            yield 10

    assert leading(costs(), 35) == 3
    assert len(read) == 4


@pytest.mark.parametrize("budget", [20, 40, 80, 200, 5000])
def test_fit_lines_keeps_the_whole_answer_within_the_budget(budget: int) -> None:
    counter = TokenCounter(0.25)
    lines = [f"line {i}: " + "word " * (i % 7) for i in range(300)]
    text = fit_lines("Outline of doc:", lines, budget, counter, lambda n: f"… {n:,} more lines")
    assert counter.count(text) <= budget
    shown = text.splitlines()[1:]
    if budget == 5000:
        assert shown == lines
    else:
        assert shown[-1] == f"… {300 - (len(shown) - 1):,} more lines"
        assert shown[:-1] == lines[: len(shown) - 1]


JSON_COUNT = TokenCounter(0.25).count


@pytest.mark.parametrize("budget", [64, 100, 300, 1000])
def test_structured_content_is_fitted_to_the_budget(budget: int) -> None:
    data = {
        "session_id": "s",
        "entries": [{"id": f"e{i}", "text": "word " * 40 + str(i)} for i in range(60)],
        "omitted": 0,
    }
    out = fit_data(data, budget, JSON_COUNT)
    size = JSON_COUNT(json.dumps(out, ensure_ascii=False, separators=(",", ":")))
    assert size <= budget
    assert out["cut"] is True
    kept = out["entries"]
    assert 1 <= len(kept) < 60 and kept[0]["id"] == "e0"  # best first: the front is kept


def test_data_within_the_budget_is_left_alone() -> None:
    data = {"hits": [{"id": "a", "text": "short"}], "query": "q"}
    assert fit_data(data, 1000, JSON_COUNT) is data


def test_fit_data_measures_the_json_it_returns() -> None:
    # The list's JSON is assembled from its items' own: the size must be the real one,
    # wherever the list sits among the keys and whatever its strings hold.
    for place in range(3):
        keys = ["a", "b"]
        keys.insert(place, "rows")
        rows = [{"t": f'say "hi"\n{i} é · 東'} for i in range(30)]
        data = {k: rows if k == "rows" else f"{k}\\" for k in keys}
        full = JSON_COUNT(json.dumps(data, ensure_ascii=False, separators=(",", ":")))
        assert fit_data(data, full, JSON_COUNT) is data
        out = fit_data(data, full - 1, JSON_COUNT)
        assert out["cut"] is True and list(out)[1:] == keys
        assert out["rows"] == rows[: len(out["rows"])] and len(out["rows"]) < 30
        size = JSON_COUNT(json.dumps(out, ensure_ascii=False, separators=(",", ":")))
        assert size <= full - 1


@given(
    st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=40),
    st.integers(min_value=0, max_value=40),
    st.integers(min_value=0, max_value=300),
    st.integers(min_value=0, max_value=4),
)
def test_a_pack_of_the_listed_items_is_the_whole_lists_or_says_it_is_not(
    costs: list[int], listed: int, budget: int, overshoot: int
) -> None:
    """Items past ``listed`` stand as ``beyond`` (their least cost): the walk either
    stops among the listed ones, choosing what the whole list gives, or says it
    reached the unlisted ones (a pack then lists them and goes again)."""
    listed = min(listed, len(costs))
    extra = [c + 5 for c in costs]  # exact costs above the bounds: some are measured in vain

    def run(n: int, beyond: int | None) -> Packed:
        return pack(costs[:n], budget, exact=lambda k: extra[k], overshoot=overshoot, beyond=beyond)

    whole = run(len(costs), None)
    part = run(listed, min(costs[listed:]) if listed < len(costs) else None)
    if not part.unlisted:
        assert part.items == whole.items and part.used_tokens == whole.used_tokens
    else:
        assert set(part.items) <= set(whole.items)


@given(
    lines=st.lists(st.text(st.characters(exclude_characters="\n"), max_size=80), min_size=1),
    where=st.floats(0, 1),
    budget=st.integers(0, 400),
)
def test_an_excerpt_is_a_run_around_the_best_line_within_the_budget(
    lines: list[str], where: float, budget: int
) -> None:
    counter = TokenCounter(0.27)
    best = min(int(where * len(lines)), len(lines) - 1)
    text = excerpt(lines, best, budget, counter)
    assert counter.count(text) <= budget
    if not text:  # the best line is empty, or not a word of it fits
        room = budget - 2 * counter.count(CUT + "\n")
        assert not lines[best] or not counter.truncate(lines[best], max(room - 1, 0))
        return
    shown = text.split("\n")
    head, tail = shown[0] == CUT and best > 0, shown[-1] == CUT and best < len(lines) - 1
    run = shown[head : len(shown) - tail]
    starts = [i for i in range(len(lines)) if lines[i : i + len(run)] == run]
    if starts:  # whole lines, around the best; a mark exactly where lines are left out
        assert any(s <= best < s + len(run) and (s > 0) == head for s in starts)
    else:  # the best line alone, cut at its end
        assert len(run) == 1 and run[0].endswith(" …") and lines[best].startswith(run[0][:-2])


def test_an_excerpt_grows_on_its_shorter_side_first() -> None:
    lines = [f"line {i:03d} of the trace" for i in range(200)]
    counter = TokenCounter(0.27)
    shown = excerpt(lines, 120, 60, counter).split("\n")
    assert shown[0] == shown[-1] == CUT
    numbers = [int(line.split()[1]) for line in shown[1:-1]]
    assert numbers == list(range(numbers[0], numbers[-1] + 1))
    assert (numbers[-1] - 120) - (120 - numbers[0]) in (0, 1)  # balanced, the later first
    assert excerpt(lines, 0, 60, counter).split("\n")[0] == "line 000 of the trace"
    assert excerpt(lines, 5, 10_000, counter) == "\n".join(lines)  # all fit: no mark
