"""Counts read as people say them, in every English plural the tool texts use."""

from __future__ import annotations

import pytest

from context_window.wording import plural


@pytest.mark.parametrize(
    ("n", "noun", "said"),
    [
        (1, "chunk", "1 chunk"),
        (0, "chunk", "0 chunks"),
        (2, "entry", "2 entries"),
        (1, "foldable entry", "1 foldable entry"),
        (3, "day", "3 days"),  # a vowel before the y keeps it
        (2, "patch", "2 patches"),
        (4, "match", "4 matches"),
        (2, "process", "2 processes"),
        (2, "patch record", "2 patch records"),
        (12345, "token", "12,345 tokens"),
    ],
)
def test_plural(n: int, noun: str, said: str) -> None:
    assert plural(n, noun) == said
