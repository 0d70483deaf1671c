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
