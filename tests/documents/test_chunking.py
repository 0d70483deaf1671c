"""Chunking: golden files, the slice/coverage/bound invariants, and the edge cases."""

from __future__ import annotations

import json
import os
import random
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_window.documents.chunking import chunk_text
from context_window.errors import InvalidInput
from context_window.models import Chunk
from context_window.tokens import estimate

DATA = Path(__file__).parents[1] / "data" / "chunking"
GOLDEN_SOURCES = ("guide.md", "ledger.py.txt", "hdfs_600.log")
GOLDEN_SETTINGS = ((120, 20), (200, 20), (200, 60))


def read(name: str) -> str:
    """A data file exactly as stored (CRLF kept)."""
    with (DATA / name).open(encoding="utf-8", newline="") as f:
        return f.read()


def assert_valid(text: str, chunks: list[Chunk], target: int, ratio: float = 0.27) -> None:
    """The contract every chunking must keep."""
    covered = int(text.startswith("\ufeff"))  # a byte order mark is no text
    previous_start = 0
    for i, chunk in enumerate(chunks):
        assert chunk.index == i
        assert 0 <= chunk.start < chunk.end <= len(text)
        assert chunk.text == text[chunk.start : chunk.end]
        assert chunk.start >= previous_start
        assert chunk.text.strip(), "a chunk is never blank"
        assert chunk.text == chunk.text.rstrip(), "trailing whitespace is trimmed"
        assert chunk.tokens == estimate(chunk.text, ratio)
        assert chunk.tokens <= 1.5 * target
        assert not text[covered : chunk.start].strip(), "non-blank text left out"
        covered = max(covered, chunk.end)
        previous_start = chunk.start
    assert not text[covered:].strip(), "non-blank text left out at the end"


def line_starts(text: str) -> set[int]:
    """Offsets where a line begins."""
    return {0} | {i + 1 for i, ch in enumerate(text) if ch == "\n"}


def line_ends(text: str) -> set[int]:
    """Offsets where a line's content ends (before ``\\r\\n`` or ``\\n``), and EOF."""
    ends = {len(text)}
    for i, ch in enumerate(text):
        if ch == "\n":
            ends.add(i - 1 if i and text[i - 1] == "\r" else i)
    return ends


# golden files


def golden_cases() -> list[tuple[str, int, int]]:
    """Every (source, target, overlap) with a stored expectation."""
    return [(name, t, o) for name in GOLDEN_SOURCES for t, o in GOLDEN_SETTINGS]


@pytest.mark.parametrize(("name", "target", "overlap"), golden_cases())
def test_golden(name: str, target: int, overlap: int) -> None:
    text = read(name)
    chunks = chunk_text(text, target, overlap)
    assert_valid(text, chunks, target)
    got = {
        "source": name,
        "target_tokens": target,
        "overlap_tokens": overlap,
        "ratio": 0.27,
        "chunks": [
            {
                "index": c.index,
                "start": c.start,
                "end": c.end,
                "tokens": c.tokens,
                "heading": c.heading,
            }
            for c in chunks
        ],
    }
    path = DATA / f"{name.split('.')[0]}.t{target}.o{overlap}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    assert got == json.loads(path.read_text(encoding="utf-8"))


def test_golden_markdown_reads_structure() -> None:
    text = read("guide.md")
    chunks = chunk_text(text, 120, 20)
    headings = [c.heading for c in chunks]
    assert "Harbor Deploy Guide > Installation > From source" in headings
    assert "Reference > Exit codes" in headings
    assert not any("Release 1.4" in h or "Fixed" in h for h in headings), "heading in a fence"
    script = [c for c in chunks if c.heading.endswith("The rollout script")]
    assert len(script) >= 3, "the big fence is split by lines"
    starts, ends = line_starts(text), line_ends(text)
    assert all(c.start in starts and c.end in ends for c in chunks)


def test_golden_log_is_line_packed_with_overlap() -> None:
    text = read("hdfs_600.log")
    chunks = chunk_text(text, 200, 60)
    starts, ends = line_starts(text), line_ends(text)
    assert all(c.start in starts and c.end in ends and c.heading == "" for c in chunks)
    for a, b in pairwise(chunks):
        assert b.start < a.end, "each chunk repeats the tail of the one before"
        assert estimate(text[b.start : a.end], 0.27) <= 60


# arguments and trivial input


@pytest.mark.parametrize("text", ["", " ", "\n\n\n", " \t\r\n  \n"])
def test_blank_text_gives_no_chunks(text: str) -> None:
    assert chunk_text(text) == []


@pytest.mark.parametrize(
    ("target", "overlap", "ratio"),
    [(0, 0, 0.27), (100, 100, 0.27), (100, -1, 0.27), (100, 10, 0.0), (100, 10, float("nan"))],
)
def test_bad_arguments_are_rejected(target: int, overlap: int, ratio: float) -> None:
    with pytest.raises(InvalidInput):
        chunk_text("some text", target, overlap, ratio)


def test_small_text_is_one_chunk() -> None:
    text = "\n\n  # Title\n\nOne paragraph.\n\n"
    [chunk] = chunk_text(text)
    assert (chunk.text, chunk.heading) == ("  # Title\n\nOne paragraph.", "Title")
    assert chunk.start == text.index("  # Title"), "leading blank lines trimmed, indent kept"


# headings


def section(title: str, words: int) -> str:
    """A heading line and a paragraph of ``words`` words."""
    return f"{title}\n\n" + " ".join(f"w{i}" for i in range(words)) + "\n\n"


def test_heading_trail_pops_siblings_and_deeper_levels() -> None:
    text = "".join(
        section(t, 30)
        for t in ("# A", "## B", "### C", "## D", "#### Deep", "# E", "### F", "## G ##")
    )
    chunks = chunk_text(text, 60, 0)
    assert [c.heading for c in chunks] == [
        "A",
        "A > B",
        "A > B > C",
        "A > D",
        "A > D > Deep",
        "E",
        "E > F",
        "E > G",
    ]
    assert all(c.text.startswith("#") for c in chunks)


def test_heading_closes_a_half_full_chunk_only() -> None:
    text = section("# A", 25) + section("## B", 5) + section("## C", 5)
    small = chunk_text(text, 100, 0)  # A is about 35 tokens: under half, B joins
    assert [c.heading for c in small] == ["A"]
    full = chunk_text(text, 60, 0)  # A is over half of 60: B starts a new chunk
    assert [c.heading for c in full] == ["A", "A > B"]


def test_dangling_heading_moves_to_the_next_chunk() -> None:
    text = section("# A", 30) + "## B\n\n" + " ".join(["word"] * 30)
    chunks = chunk_text(text, 60, 0)
    assert [c.heading for c in chunks] == ["A", "A > B"]
    assert chunks[1].text.startswith("## B")
    assert not chunks[0].text.endswith("## B")


@pytest.mark.parametrize(
    ("line", "is_heading"),
    [
        ("# Title", True),
        ("   ### Indented three", True),
        ("    # indented four", False),
        ("#NoSpace", False),
        ("####### seven", False),
        ("#!/bin/sh", False),
    ],
)
def test_what_counts_as_a_heading(line: str, is_heading: bool) -> None:
    [chunk] = chunk_text(f"{line}\n\nbody\n")
    assert (chunk.heading != "") is is_heading


# fences


def test_heading_inside_a_fence_is_not_a_heading() -> None:
    text = "# Top\n\n```md\n# Not a heading\n## Nor this\n```\n\n## Real\n\ntext\n"
    chunks = chunk_text(text, 800, 0)
    assert [c.heading for c in chunks] == ["Top"]
    chunks = chunk_text(text, 16, 0)
    assert [c.heading for c in chunks][-1] == "Top > Real"
    assert all("Not" not in c.heading for c in chunks)


def test_fence_closes_only_on_same_char_and_length() -> None:
    text = "````\n```\n~~~~\n# inside\n````\n\n# Outside\n\ntext\n"
    chunks = chunk_text(text, 800, 0)
    assert chunks[0].heading == ""
    chunks = chunk_text(text, 10, 0)
    assert [c.heading for c in chunks if "inside" in c.text] == [""]
    assert chunks[-1].heading == "Outside"


def test_inline_triple_backticks_do_not_open_a_fence() -> None:
    text = "```not a fence``` here\n\n# Heading\n\ntext\n"
    chunks = chunk_text(text, 12, 0)
    assert chunks[-1].heading == "Heading"


def test_unclosed_fence_runs_to_the_end() -> None:
    code = "\n".join(f"# comment {i}\nx = {i}\n" for i in range(40))
    text = "# Doc\n\n~~~python\n" + code + "\n## Not a section\n"
    chunks = chunk_text(text, 60, 10)
    assert_valid(text, chunks, 60)
    assert {c.heading for c in chunks} == {"Doc"}
    assert chunks[-1].end == len(text.rstrip())


def test_code_fence_that_fits_is_kept_whole() -> None:
    fence = "```\n" + "\n\n".join(f"line_{i} = {i}" for i in range(12)) + "\n```"
    text = "intro " * 20 + "\n\n" + fence + "\n\nafter " * 5
    chunks = chunk_text(text, 80, 0)
    assert_valid(text, chunks, 80)
    assert any(fence in c.text for c in chunks)


def test_big_fence_is_split_at_line_boundaries() -> None:
    fence = "```\n" + "\n".join(f"value_{i} = compute({i}, {i + 1})" for i in range(200)) + "\n```"
    chunks = chunk_text(fence, 100, 20)
    assert_valid(fence, chunks, 100)
    starts, ends = line_starts(fence), line_ends(fence)
    assert len(chunks) > 5
    assert all(c.start in starts and c.end in ends for c in chunks)


# overlap


def log_text(lines: int) -> str:
    """A log: no blank lines, no headings."""
    rng = random.Random(7)
    return "".join(
        f"2024-05-01 12:00:{i % 60:02d} INFO worker-{rng.randint(1, 9)} "
        f"job {rng.randint(1, 10**6)} {rng.choice(['done', 'retrying after timeout'])}\n"
        for i in range(lines)
    )


def test_no_overlap_means_disjoint_chunks() -> None:
    text = log_text(400)
    chunks = chunk_text(text, 120, 0)
    assert_valid(text, chunks, 120)
    assert all(b.start > a.end for a, b in pairwise(chunks))


@pytest.mark.parametrize("overlap", [25, 60, 100])
def test_overlap_carries_whole_trailing_lines(overlap: int) -> None:
    text = log_text(400)
    chunks = chunk_text(text, 120, overlap)
    assert_valid(text, chunks, 120)
    starts = line_starts(text)
    shared = [a.end - b.start for a, b in pairwise(chunks)]
    assert all(s > 0 for s in shared), "the lines are short enough to overlap"
    for a, b in pairwise(chunks):
        assert b.start in starts and b.start > a.start
        assert estimate(text[b.start : a.end], 0.27) <= overlap
    assert len(chunks) > len(chunk_text(text, 120, 0))


def test_overlap_carries_whole_blocks() -> None:
    paragraphs = [" ".join(f"p{n}w{i}" for i in range(8)) for n in range(60)]
    text = "\n\n".join(paragraphs)
    chunks = chunk_text(text, 60, 25)
    assert_valid(text, chunks, 60)
    for a, b in pairwise(chunks):
        assert b.start < a.end
        assert text[b.start : a.end] in paragraphs or "\n\n" in text[b.start : a.end]
        assert b.start == 0 or text[b.start - 2 : b.start] == "\n\n"


def test_large_overlap_cannot_stall_or_overflow() -> None:
    text = log_text(200) + "\n" + "x" * 3000 + "\n" + log_text(50)
    chunks = chunk_text(text, 50, 49)
    assert_valid(text, chunks, 50)


# long lines, CJK, CRLF


def test_single_long_line_is_cut_at_whitespace() -> None:
    rng = random.Random(3)
    text = " ".join("".join(rng.choices("abcdefgh", k=rng.randint(1, 9))) for _ in range(9000))
    text = text[:50_000]
    chunks = chunk_text(text, 200, 20)
    assert_valid(text, chunks, 200)
    assert len(chunks) > 10
    for chunk in chunks[:-1]:
        assert text[chunk.end] == " ", "cut at a space, not inside a word"
    assert all(b.start > a.end for a, b in pairwise(chunks))


def test_single_long_line_without_spaces() -> None:
    text = "z" * 50_000
    chunks = chunk_text(text, 800, 80)
    assert_valid(text, chunks, 800)
    assert "".join(c.text for c in chunks) == text
    assert len(chunks) == -(-estimate(text, 0.27) // 800)


def test_cjk_text() -> None:
    sentence = "这是一个用于测试分块的中文句子没有空格。"
    text = "# 标题\n\n" + "\n\n".join(sentence * 5 for _ in range(30)) + "\n" + sentence * 300
    chunks = chunk_text(text, 100, 10)
    assert_valid(text, chunks, 100)
    assert all(c.heading == "标题" for c in chunks)
    assert max(c.tokens for c in chunks) > 80, "chunks are filled, not tiny"


def test_crlf_line_endings() -> None:
    lf = "".join(section(t, 30) for t in ("# A", "## B", "### C", "## D"))
    crlf = lf.replace("\n", "\r\n")
    chunks = chunk_text(crlf, 60, 10)
    assert_valid(crlf, chunks, 60)
    assert [c.heading for c in chunks] == [c.heading for c in chunk_text(lf, 60, 10)]
    assert [c.heading for c in chunks] == ["A", "A > B", "A > B > C", "A > D"]
    assert not any(c.text.endswith("\r") for c in chunks)


def test_crlf_golden_markdown_reads_the_same() -> None:
    lf = read("guide.md")
    crlf = lf.replace("\n", "\r\n")
    chunks = chunk_text(crlf, 800, 0)
    assert_valid(crlf, chunks, 800)
    expected = chunk_text(lf, 800, 0)
    assert [c.text.replace("\r\n", "\n") for c in chunks] == [c.text for c in expected]
    assert [c.heading for c in chunks] == [c.heading for c in expected]


def test_a_byte_order_mark_hides_no_heading() -> None:
    # Windows tools (PowerShell's Out-File -Encoding utf8, Visual Studio) start UTF-8 with one.
    lf = "".join(section(t, 30) for t in ("# A", "## B", "### C", "## D"))
    for text in ("\ufeff" + lf, "\ufeff" + lf.replace("\n", "\r\n")):
        chunks = chunk_text(text, 60, 10)
        assert_valid(text, chunks, 60)
        assert [c.heading for c in chunks] == ["A", "A > B", "A > B > C", "A > D"]
        assert chunks[0].start == 1 and not any("\ufeff" in c.text for c in chunks)
    assert chunk_text("\ufeff \n\n") == []
    assert [c.text for c in chunk_text("\ufeffplain text")] == ["plain text"]


def test_unicode_whitespace_lines_are_blank() -> None:
    text = "\u3000\r\n漢字\n\xa0\u2028\n\nword " * 30 + "\n\u3000\n"
    for target in (2, 3, 20, 800):
        chunks = chunk_text(text, target, target // 2)
        assert_valid(text, chunks, target)
        assert all(not c.text[0].isspace() for c in chunks)


# properties

PIECES = [
    "# Title\n",
    "## Sub ##\n",
    "### Deep\n",
    "#### Four\n",
    "```\n",
    "````py\n",
    "~~~\n",
    "\n",
    "\r\n",
    "   \n",
    "word ",
    "a sentence of several words. ",
    "漢字かな交じり",
    "x" * 300,
    " " * 40,
    "\t",
    "    # indented comment\n",
    "line\n",
    "`",
    "\u3000\n",
    "\xa0\x85",
    "\u2028",
    "\ufeff",
]


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.sampled_from(PIECES), max_size=120),
    target=st.integers(8, 300),
    overlap_share=st.floats(0, 0.99),
)
def test_invariants_on_structured_text(parts: list[str], target: int, overlap_share: float) -> None:
    text = "".join(parts)
    chunks = chunk_text(text, target, int(target * overlap_share))
    assert_valid(text, chunks, target)
    assert all(c.tokens <= target for c in chunks)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=2000), target=st.integers(4, 200), overlap=st.integers(0, 3))
def test_invariants_on_any_text(text: str, target: int, overlap: int) -> None:
    chunks = chunk_text(text, target, min(overlap, target - 1))
    assert_valid(text, chunks, target)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10**6), target=st.integers(20, 400))
def test_invariants_on_random_logs(seed: int, target: int) -> None:
    rng = random.Random(seed)
    text = "".join(
        " ".join(
            "".join(rng.choices("abc01 :", k=rng.randint(1, 12))) for _ in range(rng.randint(0, 40))
        )
        + rng.choice(["\n", "\r\n"])
        for _ in range(rng.randint(1, 300))
    )
    chunks = chunk_text(text, target, target // 5)
    assert_valid(text, chunks, target)
