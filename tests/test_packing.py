"""Greedy packing into a budget: never over, skips big items, keeps trying smaller ones."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from context_window.packing import pack


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
