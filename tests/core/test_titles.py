"""Titles: the rule for a given one says which part of it was broken."""

from __future__ import annotations

import pytest

from context_window.errors import InvalidInput
from context_window.titles import check_title

ONE_LINE = "title must be one line of printable characters (no \\n, \\t or other controls)"


@pytest.mark.parametrize(
    ("title", "message"),
    [
        ("x" * 201, "title is 201 characters; the limit is 200"),
        ("line one\nline two", ONE_LINE),
        ("tab\there", ONE_LINE),
        ("surrogate \ud800", ONE_LINE),
    ],
)
def test_a_title_refused_says_why(title: str, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_title(title)
    assert str(caught.value) == message


def test_a_title_within_the_rule_is_kept() -> None:
    assert check_title("Release notes · 2026 ✓") == "Release notes · 2026 ✓"
    assert check_title("x" * 200) == "x" * 200
    assert check_title(None) is None
