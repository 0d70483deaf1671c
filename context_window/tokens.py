"""Token estimates that lean high (undercounting overflows the window), and truncation."""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass

import regex

from context_window.errors import InvalidInput

WORD_WEIGHT = 1.35
_CJK = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]")
_FIRST_CJK = "\u1100"  # no character below it is in _CJK (a test checks every code point)
# Any possibly-CJK character: a regex finds one faster than max(text) walks the text.
_MAYBE_CJK = re.compile(f"[{_FIRST_CJK}-\U0010ffff]")
_SAFETY = 1.04  # calibrated ratios are stored with this margin


def estimate(text: str, ratio: float) -> int:
    """Estimated tokens: ``ceil(cjk + max(other_chars * ratio, words * 1.35))``."""
    if not text:
        return 0
    # The scan for CJK runs only when some character could be one: that test is far cheaper.
    cjk = 0 if text.isascii() or not _MAYBE_CJK.search(text) else len(_CJK.findall(text))
    other = len(text) - cjk
    words = len(text.split())
    return math.ceil(cjk + max(other * ratio, words * WORD_WEIGHT))


def truncate(text: str, budget: int, ratio: float, marker: str = " …") -> str:
    """Longest prefix of ``text`` (cut at whitespace where possible) within ``budget`` tokens."""
    if budget < 0:
        raise InvalidInput(f"budget must be >= 0, not {budget}")
    if estimate(text, ratio) <= budget:
        return text
    room = budget - estimate(marker, ratio)
    if room <= 0:
        return ""
    lo = longest_prefix(text, 0, len(text), room, ratio, shortest=0)
    cut = text[:lo]
    space = cut.rfind(" ")
    if space > lo * 0.8:
        cut = cut[:space]
    return cut.rstrip() + marker


def longest_prefix(
    text: str, start: int, end: int, budget: int, ratio: float, *, shortest: int = 1
) -> int:
    """The longest ``n`` whose ``text[start:start + n]`` fits ``budget`` (at least ``shortest``)."""
    over = bisect.bisect_left(
        range(shortest + 1, end - start + 1),
        True,
        key=lambda n: estimate(text[start : start + n], ratio) > budget,
    )
    return shortest + over


def calibrated_ratio(
    short_chars: int, short_tokens: int, long_chars: int, long_tokens: int
) -> float | None:
    """Tokens per character from two measured prompts, with margin; None if implausible."""
    if long_chars <= short_chars:
        return None
    slope = (long_tokens - short_tokens) / (long_chars - short_chars)
    if not 0.05 <= slope <= 2.0:
        return None
    return slope * _SAFETY


@dataclass
class TokenCounter:
    """The instance's tokens-per-char ratio; calibration may replace it while serving."""

    ratio: float
    source: str = "estimated"  # or "calibrated"
    model: str = ""

    def count(self, text: str) -> int:
        """Estimated tokens of ``text`` at the current ratio."""
        return estimate(text, self.ratio)

    def truncate(self, text: str, budget: int) -> str:
        """``text`` cut to fit ``budget`` tokens at the current ratio."""
        return truncate(text, budget, self.ratio)

    def calibrate(self, ratio: float, model: str) -> None:
        """Adopt a measured ratio for ``model``."""
        self.ratio, self.source, self.model = ratio, "calibrated", model

    def describe(self) -> str:
        """One line for status output: estimated or calibrated, and the ratio."""
        if self.source == "calibrated":
            return (
                f"calibrated to {self.model or 'the loaded model'} ({self.ratio:.3f} tokens/char)"
            )
        return f"estimated ({self.ratio:.3f} tokens/char, not calibrated)"
