"""Extractive TF-ISF summaries, sentence splitting, and the LLM-or-fallback policy."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from openai_fake import FakeOpenAI

from context_window.errors import InvalidInput
from context_window.llm.client import LLMClient
from context_window.llm.summaries import Summarizer, extractive, split_sentences
from context_window.tokens import TokenCounter

PROSE = (
    "The team chose SQLite for session storage because it needs no server. "
    "Dr. Patel reviewed the schema on Tuesday, e.g. the entries table and its indexes. "
    "Version 2.4.1 fixed the lock timeout in storage/locks.py at line 88. "
    "Nobody knows yet whether Windows needs a different lock, i.e. msvcrt instead of fcntl. "
    "Lunch was pizza again. "
    "The benchmark ran 3.5 times faster after the cache landed. "
    "J. Smith asked whether the cache survives restarts; this is still an open question. "
    "It rained all afternoon. "
    "The decision was to keep the JSONL log append-only and never rewrite it."
)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def counter() -> TokenCounter:
    return TokenCounter(0.27)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def long_text(paragraphs: int) -> str:
    """Many distinct paragraphs, each a few sentences with its own identifiers."""
    return "\n\n".join(
        f"Paragraph {i} records that module_{i}.py was changed by worker {i % 7}. "
        f"The value of limit_{i} is now {i * 13} and the reason is ticket CW-{1000 + i}. "
        f"Someone should check whether path /srv/data/{i}/cache is still used."
        for i in range(paragraphs)
    )


# --- sentence splitting -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One. Two! Three? Four.", ["One.", "Two!", "Three?", "Four."]),
        ("Use tools, e.g. grep and sed. Done.", ["Use tools, e.g. grep and sed.", "Done."]),
        ("Use e.g. Python here. Done.", ["Use e.g. Python here.", "Done."]),
        ("That is, i.e. Linux only. Next.", ["That is, i.e. Linux only.", "Next."]),
        ("Apples, pears, etc. are fine. Next.", ["Apples, pears, etc. are fine.", "Next."]),
        ("We met Dr. Who and Mr. Bean. Ok.", ["We met Dr. Who and Mr. Bean.", "Ok."]),
        ("Mrs. Jones won. Ms. Lee lost.", ["Mrs. Jones won.", "Ms. Lee lost."]),
        ("It is cats vs. Dogs today. Fine.", ["It is cats vs. Dogs today.", "Fine."]),
        ("Ask J. Smith about it. He knows.", ["Ask J. Smith about it.", "He knows."]),
        ("Read J.R.R. Tolkien now. Yes.", ["Read J.R.R. Tolkien now.", "Yes."]),
        ("Pi is 3.14 roughly. Yes.", ["Pi is 3.14 roughly.", "Yes."]),
        ("Upgrade to v1.2.3 now. Then test.", ["Upgrade to v1.2.3 now.", "Then test."]),
        ("It costs 3.50. Then more.", ["It costs 3.50.", "Then more."]),
        ("See fig. 3 for it. Ok.", ["See fig. 3 for it.", "Ok."]),
        ("Edit config.yaml first. Then run.", ["Edit config.yaml first.", "Then run."]),
        ('He said "stop." Then left.', ['He said "stop."', "Then left."]),
        ("Wait... What happened?", ["Wait...", "What happened?"]),
        ("服务器重启了。数据库超时！怎么办？", ["服务器重启了。", "数据库超时！", "怎么办？"]),  # noqa: RUF001
        ("「設定が違う。」と言った。", ["「設定が違う。」", "と言った。"]),
        ("No trailing punctuation", ["No trailing punctuation"]),
        ("", []),
        ("   \n\n  ", []),
    ],
)
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_split_newlines_and_bullets() -> None:
    text = (
        "# Plan\n"
        "We decided to ship on Friday. The tests\n"
        "pass on all platforms\n"
        "- first bullet without a period\n"
        "- second bullet that wraps\n"
        "  onto another line. And goes on.\n"
        "1. numbered item\n"
        "INFO server started\n"
        "INFO server stopped\n"
        "\n"
        "```python\n"
        "x = obj.method(). other\n"
        "```\n"
        "Last paragraph."
    )
    assert split_sentences(text) == [
        "# Plan",
        "We decided to ship on Friday.",
        "The tests\npass on all platforms",
        "- first bullet without a period",
        "- second bullet that wraps\n  onto another line.",
        "And goes on.",
        "1. numbered item",
        "INFO server started",
        "INFO server stopped",
        "x = obj.method(). other",
        "Last paragraph.",
    ]


# --- extractive -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "服务器在凌晨三点重启了。数据库连接超时了。明天再检查数据库连接日志？天气很好。",  # noqa: RUF001
        "Сервер перезагрузился ночью. База данных не отвечала. Проверим журналы базы данных "
        "и таймаут базы данных завтра. Погода хорошая.",
    ],
)
def test_extractive_summarizes_text_in_any_script(counter: TokenCounter, text: str) -> None:
    sentences = split_sentences(text)
    assert len(sentences) == 4
    for target in (10, 20, 40):  # whole sentences by their words' weight (none were weighed)
        result = extractive(text, target, counter)
        assert result and counter.count(result) <= target
        assert set(split_sentences(result)) <= set(sentences)


@pytest.mark.parametrize("target", [1, 5, 20, 40, 60, 100, 500])
def test_extractive_fits_target(counter: TokenCounter, target: int) -> None:
    result = extractive(PROSE, target, counter)
    assert counter.count(result) <= target


@pytest.mark.parametrize("target", [20, 40, 60, 100])
def test_extractive_only_original_sentences_in_order(counter: TokenCounter, target: int) -> None:
    original = split_sentences(PROSE)
    assert len(original) == 9
    result = extractive(PROSE, target, counter)
    chosen = split_sentences(result)
    assert chosen
    indices = [original.index(s) for s in chosen]
    assert indices == sorted(indices)
    assert len(set(indices)) == len(indices)
    assert is_selection(result, original)


def test_extractive_prefers_informative_sentences(counter: TokenCounter) -> None:
    result = extractive(PROSE, 50, counter)
    assert result.startswith("The team chose SQLite")  # first sentences get a small boost
    assert "Lunch was pizza again." not in result
    assert "It rained all afternoon." not in result


def test_extractive_aims_at_ninety_percent(counter: TokenCounter) -> None:
    text = long_text(20)
    result = extractive(text, 200, counter)
    assert 0.6 * 200 <= counter.count(result) <= 200


def test_extractive_edge_cases(counter: TokenCounter) -> None:
    assert extractive("", 50, counter) == ""
    assert extractive(PROSE, 0, counter) == ""
    assert extractive("--- *** ---", 50, counter) == ""


def test_extractive_cuts_a_single_oversized_sentence(counter: TokenCounter) -> None:
    sentence = " ".join(f"word{i}" for i in range(200)) + "."
    result = extractive(sentence, 20, counter)
    assert result
    assert counter.count(result) <= 20
    assert sentence.startswith(result.removesuffix(" …"))


def test_extractive_reads_an_oversized_run_of_lines_line_by_line(counter: TokenCounter) -> None:
    # A Java trace's lines start in lower case, so they read as one hard-wrapped sentence.
    trace = "\n".join(f"  at app.Module{i}.run(Module{i}.java:{i})" for i in range(300))
    others = "".join(f"\n\nchecked config {i}, fine." for i in range(3))  # notes, as folded
    notes = f"Stack trace of the crash in the payment service:\n{trace}{others}"
    result = extractive(notes, 120, counter)
    assert 0 < counter.count(result) <= 120
    assert result.startswith("Stack trace of the crash in the payment service:\nat app.")
    lines = result.split("\n")
    whole = [line.strip() for line in notes.split("\n")]
    assert all(line in whole for line in lines) and len(lines) > 3  # whole lines, as written


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "Alpha beta gamma.",
                "Dr. Who met J. Smith.",
                "Version 1.2.3 shipped!",
                "Is it 3.14?",
                "- a bullet",
                "\n\n",
                "\n",
                "e.g. this",
                "path/to/file.py changed.",
                "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
            ]
        ),
        max_size=40,
    ).map(" ".join),
    st.integers(min_value=1, max_value=80),
)
@example("Alpha beta gamma. \n e.g. this", 5)  # one sentence over two lines, over the target
def test_extractive_properties(text: str, target: int) -> None:
    counter = TokenCounter(0.27)
    result = extractive(text, target, counter)
    assert counter.count(result) <= target
    units = [  # sentences; one over the target that runs over lines is read by line
        unit
        for sentence in split_sentences(text)
        for unit in (
            [line.strip() for line in sentence.split("\n") if line.strip()]
            if "\n" in sentence and counter.count(sentence) > target
            else [sentence]
        )
    ]
    if result.endswith(" …"):  # the best unit alone was too long: its head
        assert any(unit.startswith(result[:-2]) for unit in units)
    else:
        assert is_selection(result, units)


def is_selection(result: str, sentences: list[str]) -> bool:
    """Whether ``result`` is some of ``sentences``, in order, joined by a space or newline."""

    @functools.cache
    def match(pos: int, index: int) -> bool:
        if pos == len(result):
            return True
        for i in range(index, len(sentences)):
            end = pos + len(sentences[i])
            if result.startswith(sentences[i], pos) and (
                end == len(result) or (result[end] in " \n" and match(end + 1, i + 1))
            ):
                return True
        return False

    return match(0, 0)


# --- Summarizer -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_text_that_fits_is_returned_verbatim(fake: FakeOpenAI, counter: TokenCounter) -> None:
    async with LLMClient(fake.base_url) as client:
        summary = await Summarizer(counter, client).summarize("Short note.", 50)
    assert summary.method == "verbatim"
    assert summary.text == "Short note."
    assert summary.tokens == counter.count("Short note.")
    assert fake.state.requests == []


@pytest.mark.anyio
async def test_no_llm_is_extractive_and_never_touches_the_network(
    fake: FakeOpenAI, counter: TokenCounter
) -> None:
    summarizer = Summarizer(counter, None)
    summary = await summarizer.summarize(PROSE, 40)
    assert summary.method == "extractive"
    assert summary.reason == "LLM disabled (--no-llm)"
    assert summary.tokens == counter.count(summary.text) <= 40
    assert summarizer.describe() == "extractive (LLM disabled)"
    assert fake.state.requests == []


@pytest.mark.anyio
async def test_target_must_be_positive(counter: TokenCounter) -> None:
    with pytest.raises(InvalidInput):
        await Summarizer(counter, None).summarize(PROSE, 0)


@pytest.mark.anyio
async def test_llm_single_call(fake: FakeOpenAI, counter: TokenCounter) -> None:
    async with LLMClient(fake.base_url) as client:
        summarizer = Summarizer(counter, client)
        summary = await summarizer.summarize(PROSE, 60, kind="session notes")
        assert summarizer.describe() == f"llm at {fake.base_url}"
    assert summary.method == "llm"
    assert summary.reason == ""
    assert summary.text.startswith("Summary of 2 messages")
    assert summary.tokens == counter.count(summary.text) <= 60
    (request,) = fake.state.chats()
    system, user = request.body["messages"]
    assert "decision" in system["content"] and "open question" in system["content"]
    assert "identifier" in system["content"] and "path" in system["content"]
    assert "session notes" in user["content"]
    assert "at most 60 tokens" in user["content"]
    assert PROSE in user["content"]
    assert 32 <= request.body["max_tokens"] <= 8192


@pytest.mark.anyio
async def test_llm_answer_is_truncated_to_target(fake: FakeOpenAI, counter: TokenCounter) -> None:
    fake.state.reply = lambda messages: "A very long answer that ignores the limit. " * 50
    async with LLMClient(fake.base_url) as client:
        summary = await Summarizer(counter, client).summarize(PROSE, 30)
    assert summary.method == "llm"
    assert summary.tokens == counter.count(summary.text) <= 30


@pytest.mark.anyio
async def test_a_reasoning_model_summarizes_without_its_thoughts(
    fake: FakeOpenAI, counter: TokenCounter
) -> None:
    think = "<think>\n" + "Let me read the notes one by one. " * 60
    fake.state.reply = lambda messages: f"{think}</think>\n\nThe linker fails on libfoo."
    async with LLMClient(fake.base_url) as client:
        summary = await Summarizer(counter, client).summarize(PROSE, 60)
        assert (summary.method, summary.text) == ("llm", "The linker fails on libfoo.")
        fake.state.reply = lambda messages: think  # max_tokens ran out while it thought
        summary = await Summarizer(counter, client).summarize(PROSE, 60)
    assert summary.method == "extractive" and "<think>" not in summary.text
    assert summary.reason.startswith("LLM unavailable: the model only reasoned")


@pytest.mark.anyio
async def test_map_reduce_over_slices(fake: FakeOpenAI, counter: TokenCounter) -> None:
    text = long_text(250)
    assert counter.count(text) > 6000
    async with LLMClient(fake.base_url) as client:
        summary = await Summarizer(counter, client).summarize(text, 300)
    assert summary.method == "llm"
    chats = fake.state.chats()
    slices = [c for c in chats if "Summarize part" in c.body["messages"][1]["content"]]
    merges = [c for c in chats if "Merge them" in c.body["messages"][1]["content"]]
    assert len(slices) >= 3
    assert len(merges) == 1
    assert len(chats) == len(slices) + 1
    assert chats[-1] is merges[0]
    for request in slices:
        assert counter.count(request.body["messages"][1]["content"]) <= 3000 + 100
        assert f"of {len(slices)} of these notes" in request.body["messages"][1]["content"]
    seen = "".join(c.body["messages"][1]["content"] for c in slices)
    for i in (0, 125, 249):  # slices cut at paragraph breaks: nothing is lost
        assert f"Paragraph {i} records that module_{i}.py was changed" in seen


@pytest.mark.anyio
async def test_map_reduce_recurses_when_partial_summaries_are_long(
    fake: FakeOpenAI, counter: TokenCounter
) -> None:
    fake.state.reply = lambda messages: "keep " * 400  # every partial summary fills its target
    text = long_text(1200)
    async with LLMClient(fake.base_url) as client:
        summary = await Summarizer(counter, client).summarize(text, 500)
    assert summary.method == "llm"
    assert summary.tokens <= 500
    chats = fake.state.chats()
    assert "Merge them" in chats[-1].body["messages"][1]["content"]
    assert all(counter.count(c.body["messages"][1]["content"]) <= 6200 for c in chats)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("500", "HTTP 500 from"),
        ("nonjson", "answer was not JSON"),
        ("empty", "empty answer"),
        ("no_choices", "no choices"),
        ("hang", "timed out after 0.3s"),
    ],
)
async def test_failures_fall_back_to_extractive_with_reason(
    fake: FakeOpenAI, counter: TokenCounter, mode: str, reason: str
) -> None:
    fake.state.mode = mode
    async with LLMClient(fake.base_url, timeout=0.3) as client:
        summary = await Summarizer(counter, client).summarize(PROSE, 40)
    assert summary.method == "extractive"
    assert summary.reason.startswith("LLM unavailable: ")
    assert reason in summary.reason
    assert summary.text == extractive(PROSE, 40, counter)
    assert summary.tokens <= 40


@pytest.mark.anyio
async def test_unreachable_falls_back(counter: TokenCounter) -> None:
    async with LLMClient("http://127.0.0.1:9/v1") as client:
        summary = await Summarizer(counter, client).summarize(PROSE, 40)
    assert summary.method == "extractive"
    assert summary.reason.startswith("LLM unavailable: unreachable at http://127.0.0.1:9/v1")


@pytest.mark.anyio
async def test_failure_midway_through_map_reduce_falls_back(
    fake: FakeOpenAI, counter: TokenCounter
) -> None:
    calls = []

    def reply(messages: list[dict[str, str]]) -> str:
        calls.append(1)
        if len(calls) == 2:
            fake.state.mode = "500"  # the third request fails
        return "part summary"

    fake.state.reply = reply
    text = long_text(250)
    async with LLMClient(fake.base_url) as client:
        summary = await Summarizer(counter, client).summarize(text, 200)
    assert summary.method == "extractive"
    assert "HTTP 500" in summary.reason
    assert len(fake.state.chats()) == 3
    assert summary.tokens <= 200


@pytest.mark.anyio
async def test_cooldown_skips_llm_then_retries(fake: FakeOpenAI, counter: TokenCounter) -> None:
    clock = Clock()
    fake.state.mode = "500"
    async with LLMClient(fake.base_url, clock=clock) as client:
        summarizer = Summarizer(counter, client)
        first = await summarizer.summarize(PROSE, 40)
        assert "HTTP 500" in first.reason
        assert len(fake.state.requests) == 1

        fake.state.mode = ""
        clock.now += 5
        second = await summarizer.summarize(PROSE, 40)
        assert second.method == "extractive"
        assert second.reason.startswith(
            "LLM unavailable: skipped: endpoint failed 5s ago (HTTP 500"
        )
        assert second.reason.endswith("retrying in 10s")
        assert len(fake.state.requests) == 1  # no request during the cooldown
        assert summarizer.describe().startswith("extractive while LLM cools down (HTTP 500")

        clock.now += 10
        third = await summarizer.summarize(PROSE, 40)
        assert third.method == "llm"
        assert len(fake.state.requests) == 2
