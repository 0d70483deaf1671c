"""Titles: the rule for a given one says which part of it was broken."""

from __future__ import annotations

import pytest

from context_window.errors import InvalidInput
from context_window.titles import check_title


@pytest.mark.parametrize(
    ("title", "message"),
    [
        ("x" * 201, "title is 201 characters; the limit is 200"),
        ("line one\nline two", "title must be one line, without control characters (\\n, \\t)"),
        ("tab\there", "title must be one line, without control characters (\\n, \\t)"),
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
