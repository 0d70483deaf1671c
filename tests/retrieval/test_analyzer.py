"""The analyzer: identifiers split, stop words dropped, Snowball stems on index and query."""

from __future__ import annotations

import pytest

from context_window.retrieval.analyzer import STOP_WORDS, Analyzer, plain, readable
from tests.helpers import fullwidth

# --- tokenizer ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("getUserName", ["getusernam", "get", "user", "name"]),
        ("getusername", ["getusernam"]),
        ("snake_case_name", ["snake_case_name", "snake", "case", "name"]),
        ("HTTPServer", ["httpserver", "http", "server"]),
        ("parseHTTPResponse2", ["parsehttpresponse2", "pars", "http", "respons"]),
        ("blk_ blk_-42", ["blk", "blk", "42"]),
        ("__init__", ["init"]),
        ("blk_38 v2", ["blk_38", "blk", "38", "v2"]),
        ("abc123", ["abc123", "abc", "123"]),
        ("The cat and the HAT", ["cat", "hat"]),
        ("a x I is 42 7", ["42"]),
        ("isValid", ["isvalid", "valid"]),
        ("$scope", ["$scope", "scope"]),
        ("Straße naïve", ["straße", "naïv"]),
        ("ÉcoleNormale", ["écolenormal", "école", "normal"]),
        ("日本語テキスト", ["日本語テキスト", "日本", "本語", "語テ", "テキ", "キス", "スト"]),
        ("数据库、数据", ["数据库", "数据", "据库", "数据"]),  # a pair only from 3 letters on
        ("Python入门", ["python入门", "python", "入门"]),
        ("", []),
    ],
)
def test_terms(text: str, expected: list[str]) -> None:
    assert Analyzer().terms(text) == expected


@pytest.mark.parametrize(
    ("variant", "plain"),
    [
        ("conﬁguration ﬂags", "configuration flags"),  # ligatures, as PDF text has them
        ("cafe\u0301 \u212bngstr\u00f6m", "caf\u00e9 \u00c5ngstr\u00f6m"),  # decomposed; a sign
        (fullwidth("Fullwidth ID123"), "Fullwidth ID123"),
        (fullwidth("GetUserName"), "GetUserName"),
        ("\x1b[31merror\x1b[0m: \x1b[1;33mwarning\x1b[0m", "error: warning"),  # a CI log's colours
    ],
)
def test_compatibility_forms_give_the_plain_words_terms(variant: str, plain: str) -> None:
    a = Analyzer()
    assert a.terms(variant) == a.terms(plain) != []


def test_terms_keep_repeats_and_counts_add_them_up() -> None:
    a = Analyzer()
    assert a.terms("retry retries Retry") == ["retri", "retri", "retri"]
    assert a.counts("getUser user USER the") == {"getus": 1, "get": 1, "user": 3}


def test_snowball_stems_words_and_identifier_parts_alike() -> None:
    a = Analyzer()
    assert a.terms("running runs ran") == ["run", "run", "ran"]
    assert a.terms("connections connected") == ["connect", "connect"]
    assert a.terms("retryConnections") == ["retryconnect", "retri", "connect"]


def test_one_standard_stop_word_list() -> None:
    common = "about been can could did do does had how up why would the of and".split()
    assert all(w in STOP_WORDS for w in common)
    assert Analyzer().terms(" ".join(common)) == []


def test_readable_drops_every_escape_sequence_a_terminal_acts_on() -> None:
    """Besides colours (CSI), a captured terminal holds titles and links (OSC, ended by BEL
    or ST) and charset or keypad switches (``ESC ( B`` from ``tput sgr0``, ``ESC =``)."""
    link = "\x1b]8;;https://gcc.gnu.org/onlinedocs/gcc/Warning-Options.html\x1b\\"
    raw = (
        f"\x1b]0;make: step 3\x07\x1b[1mwarning:\x1b(B\x1b[m unused [{link}-Wunused\x1b]8;;\x1b\\]"
        "\x1b= done"
    )
    assert readable(raw) == "warning: unused [-Wunused] done"
    assert plain("\x1b[31mred\x1b[0m") == "     red    "  # the index's offsets hold
