"""documents/answers.py: the search answer's header reads as people say it."""

from __future__ import annotations

import pytest

from context_window.documents.answers import search_header


@pytest.mark.parametrize(
    ("omitted", "tail"),
    [
        (0, ""),
        (1, " · 1 more matching line not shown"),
        (2, " · 2 more matching lines not shown"),
        (1234, " · 1,234 more matching lines not shown"),
    ],
)
def test_the_header_counts_what_did_not_fit(omitted: int, tail: str) -> None:
    assert search_header(1, 250, 300, omitted) == "1 hit, best first · 250/300 tokens" + tail
    assert search_header(3, 9, 64, omitted, terse=True) == "3 hits · 9/64"
