"""The analyzer: text to retrieval terms, on the index and the query alike.

Lowercase words in Unicode compatibility form (NFKC: "ﬁle" is "file", a decomposed
"café" the composed one); identifiers whole and by their parts (``getUserName``:
``getusername get user name``); runs of Han, kana or Hangul also by each pair of
letters; stop words dropped; alphabetic terms Snowball-stemmed (PyStemmer); ANSI colour
codes are not words.
"""

from __future__ import annotations

import threading
import unicodedata
from collections import Counter
from dataclasses import dataclass

import regex
import Stemmer

from context_window.errors import InvalidInput
from context_window.wording import plural

_WORD = regex.compile(r"[\w$]+")
# An ANSI escape sequence (a CI log's colours: "\x1b[31merror\x1b[0m") is no part of a word.
ANSI_ESCAPE = r"\x1b\[[0-?]*[ -/]*[@-~]"
_ANSI = regex.compile(ANSI_ESCAPE)
# What answers leave out besides (ECMA-48): a title or link (OSC, DCS …: up to BEL or ST)
# and a two-character escape (``ESC ( B``, ``ESC =``). The index reads them as it did.
_ESCAPES = regex.compile(
    ANSI_ESCAPE + r"|\x1b[\]PX^_][^\x07\x1b]{0,4096}(?:\x07|\x1b\\)|\x1b[ -/]*[0-~]"
)
_ZEROS = regex.compile("\x00+")
# Han, kana and Hangul write words without spaces between them: each pair of letters
# in such a run is a term too, as Lucene's CJK bigrams make them ("数据" in "数据库连接").
_CJK_RUN = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]{3,}")
# Nor a space after a sentence: it ends at a wide full stop, ! or ?, and a closing bracket
# or quote (a pattern for the sentence splitters of passages and summaries).
WIDE_SENTENCE_END = r"[\u3002\uff01\uff1f]+[\u300d\u300f\u201d\u2019\uff09]*"
# Unicode-wide case classes keep "naïve" or "Straße" whole; caseless runs (CJK) stay together.
_PART = regex.compile(r"\p{Lu}+(?=\p{Lu}\p{Ll})|\p{Lu}?\p{Ll}+|\p{Lu}+|\d+|[^\W\d_\p{Lu}\p{Ll}]+")
# Function words only: "out" of memory, link "down", power "off" carry meaning and stay.
STOP_WORDS = frozenset(
    "a about also am an and are as at be been being but by can could did do does doing for "
    "from had has have having he her here hers herself him himself his how i if in into is it "
    "its itself just let may me might must my myself no nor not of on or our ours ourselves "
    "shall she should so than that the their theirs them themselves then there these they "
    "this those to too up us was we were what when where which while who whom why will with "
    "would you your yours yourself yourselves".split()
)
_MEMO_LIMIT = 500_000
MAX_QUERY_CHARS = 2_000
MAX_QUERY_TERMS = 64


@dataclass(frozen=True)
class QueryLimits:
    """How long a query may be, and how many distinct terms it may search for."""

    max_chars: int = MAX_QUERY_CHARS
    max_terms: int = MAX_QUERY_TERMS


# Bumped whenever ``Analyzer`` changes its terms: state saved with older ones is rebuilt
# (bump ``documents.index.INDEX_VERSION`` too: 2, NFKC and CJK pairs, came with index 5;
# 3, ANSI escapes blanked, with 6).
ANALYZER_VERSION = 3


def plain(text: str) -> str:
    """``text`` with each ANSI escape sequence blanked, its length kept."""
    return _ANSI.sub(lambda m: " " * len(m[0]), text) if "\x1b" in text else text


def readable(text: str) -> str:
    r"""``text`` as answers show it: without the colour codes of a terminal or the ``\r`` of
    Windows line ends, and each run of zero bytes (a crash leaves blocks of them in a log)
    named by its length, not sent."""
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    if "\x1b" in text:
        text = _ESCAPES.sub("", text)
    if "\x00" in text:
        text = _ZEROS.sub(lambda m: f"[{plural(len(m[0]), 'zero byte')}]", text)
    return text


def letter_pairs(word: str) -> list[str]:
    """Each pair of neighbouring letters in the word's runs of 3+ Han, kana or Hangul."""
    if word.isascii():
        return []
    return [run[i : i + 2] for run in _CJK_RUN.findall(word) for i in range(len(run) - 1)]


class Analyzer:
    """Turns text into index terms; memoizes identifier splitting per raw word."""

    def __init__(self, limits: QueryLimits | None = None, memo_limit: int = _MEMO_LIMIT) -> None:
        self.limits = limits or QueryLimits()
        self._memo: dict[str, tuple[str, ...]] = {}
        self._memo_limit = memo_limit
        self._stemmer = Stemmer.Stemmer("english")
        self._stem_lock = threading.Lock()  # a PyStemmer object is not safe across threads

    def _stem(self, word: str) -> str:
        """The Snowball stem of an alphabetic word; other terms (ids, numbers) stay whole."""
        if not word.isalpha():
            return word
        with self._stem_lock:
            return str(self._stemmer.stemWord(word))

    def expand(self, raw: str) -> tuple[str, ...]:
        """Index terms for one raw word: the whole word, then its identifier parts."""
        hit = self._memo.get(raw)
        if hit is not None:
            return hit
        if len(self._memo) > self._memo_limit:
            self._memo.clear()
        word = unicodedata.normalize("NFKC", raw)
        whole = word.lower().strip("_")  # "blk_" of "blk_-42" is "blk", as in "blk_42"
        out: list[str] = []
        parts = _PART.findall(word)
        split = len(parts) > 1 or bool(parts and parts[0].lower() != whole)
        if len(whole) >= 2 and whole not in STOP_WORDS:
            # Stemmed even as an identifier: "getusername" must find "getUserName".
            out.append(self._stem(whole))
        if split:
            for part in parts:
                low = part.lower()
                if len(low) >= 2 and low not in STOP_WORDS and low != whole:
                    stem = self._stem(low)
                    if stem not in out:
                        out.append(stem)
        pairs = letter_pairs(word)
        result = tuple(dict.fromkeys(out + pairs) if pairs else out)
        self._memo[raw] = result
        return result

    def counts(self, text: str) -> dict[str, int]:
        """Term frequencies of ``text``."""
        out: dict[str, int] = {}
        for raw, n in Counter(_WORD.findall(plain(text))).items():
            for term in self.expand(raw):
                out[term] = out.get(term, 0) + n
        return out

    def terms(self, text: str) -> list[str]:
        """Index terms of ``text`` in order, repeats kept."""
        return [term for raw in _WORD.findall(plain(text)) for term in self.expand(raw)]

    def query(self, text: str) -> list[str]:
        """A query's distinct terms, first seen first; InvalidInput past ``limits``."""
        limits = self.limits
        if len(text) > limits.max_chars:
            raise InvalidInput(
                f"query is {len(text):,} characters; the limit is {limits.max_chars:,} "
                "(max_query_chars): search with a few distinctive words"
            )
        terms = list(dict.fromkeys(self.terms(text)))
        if len(terms) > limits.max_terms:
            raise InvalidInput(
                f"query has {len(terms):,} distinct search terms; the limit is "
                f"{limits.max_terms:,} (max_query_terms): search with fewer words"
            )
        return terms
