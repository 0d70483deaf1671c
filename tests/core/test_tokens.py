"""Token estimates lean high; truncation always fits; calibration arithmetic."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_window.errors import InvalidInput
from context_window.tokens import (
    _CJK,
    _FIRST_CJK,
    WORD_WEIGHT,
    TokenCounter,
    calibrated_ratio,
    estimate,
    truncate,
)

RATIO = 0.27
texts = st.lists(
    st.sampled_from([*"abc xyz\n\t.,;漢字かなカナ한국é", "word ", "  ", "longidentifier"]),
    max_size=120,
).map("".join)


def test_empty_text_is_zero_tokens() -> None:
    assert estimate("", RATIO) == 0


def test_short_words_count_by_word_weight() -> None:
    # 9 short words, 17 characters: 17 * 0.27 = 4.59 < 9 * 1.35 = 12.15
    assert estimate("a b c d e f g h i", RATIO) == math.ceil(9 * 1.35)


def test_long_words_count_by_characters() -> None:
    text = "x" * 1000
    assert estimate(text, RATIO) == 270


def test_cjk_characters_count_one_token_each() -> None:
    text = "漢字" * 50  # 100 CJK chars, one "word"
    assert estimate(text, RATIO) == math.ceil(100 + 1.35)
    assert estimate("日本語のテキスト한국어", RATIO) >= 11


@given(texts)
def test_estimate_never_below_words_or_cjk_count(text: str) -> None:
    n = estimate(text, RATIO)
    assert n >= len(text.split()) * 1.35
    cjk = sum(ch in "漢字かなカナ한국" for ch in text)
    assert n >= cjk
    assert n >= len(text) * RATIO - cjk * RATIO - 1e-9


@given(texts, st.integers(0, 200))
@settings(max_examples=200)
def test_truncate_fits_the_budget_and_is_a_prefix(text: str, budget: int) -> None:
    out = truncate(text, budget, RATIO)
    assert estimate(out, RATIO) <= budget
    if estimate(text, RATIO) <= budget:
        assert out == text
    else:
        assert out == "" or out.endswith(" …")
        assert text.startswith(out.removesuffix(" …").rstrip())


def test_truncate_cuts_at_whitespace() -> None:
    text = " ".join(f"word{i}" for i in range(200))
    out = truncate(text, 40, RATIO)
    assert out.endswith(" …")
    body = out.removesuffix(" …")
    assert body.split()[-1] in text.split()  # a whole word, not a fragment
    assert estimate(out, RATIO) <= 40


def test_truncate_rejects_negative_budget() -> None:
    with pytest.raises(InvalidInput):
        truncate("text", -1, RATIO)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((100, 30, 1000, 255), 0.25 * 1.04),
        ((100, 30, 100, 30), None),  # no difference in length
        ((100, 30, 1000, 30), None),  # slope 0: implausible
        ((100, 30, 1000, 5000), None),  # slope > 2
    ],
)
def test_calibrated_ratio(args: tuple[int, int, int, int], expected: float | None) -> None:
    got = calibrated_ratio(*args)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_token_counter_follows_calibration() -> None:
    counter = TokenCounter(0.27)
    text = "x" * 1000
    assert counter.count(text) == 270
    assert "estimated" in counter.describe()
    counter.calibrate(0.5, "smol")
    assert counter.count(text) == 500
    assert counter.source == "calibrated"
    assert "smol" in counter.describe()
    assert estimate(counter.truncate(text, 100), 0.5) <= 100


def test_no_character_below_the_first_cjk_one_counts_as_cjk() -> None:
    # estimate skips the CJK scan when no character is at or above _FIRST_CJK: that is
    # only sound if no code point below it matches the CJK class.
    below = "".join(chr(c) for c in range(0x80, ord(_FIRST_CJK)) if not 0xD800 <= c < 0xE000)
    assert _CJK.findall(below) == []
    assert _CJK.match(_FIRST_CJK)
    accented = "naïve café Straße " * 50
    assert estimate(accented, 0.27) == estimate(accented.encode().decode(), 0.27)
    assert estimate("東京 " * 10, 0.27) > estimate("ab " * 10, 0.27)
    # A middle dot makes text non-ASCII; the CJK after it is still counted.
    mixed = "a · 東京 " * 10
    other = len(mixed) - 20
    assert estimate(mixed, 0.27) == math.ceil(20 + max(other * 0.27, 30 * WORD_WEIGHT))
