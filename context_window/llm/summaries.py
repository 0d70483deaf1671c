"""Summaries: the LLM when it answers, extractive TF-ISF when it does not.

An extractive summary takes whole sentences by ``sum over distinct terms of
(ln(S / sf) + 1) / sqrt(terms)`` (a small boost for the first), greedily to ~90 % of
the target, in their original order: it never says what the input did not.
"""

from __future__ import annotations

import itertools
import math

import anyio
import regex

from context_window.errors import InvalidInput, UpstreamError
from context_window.llm.client import LLMClient
from context_window.models import Summary
from context_window.packing import pack
from context_window.retrieval.analyzer import STOP_WORDS, WIDE_SENTENCE_END, letter_pairs
from context_window.tokens import TokenCounter, truncate

SINGLE_CALL_TOKENS = 6000  # inputs up to this size go to the model in one call
SLICE_TOKENS = 3000  # map-reduce slice size for longer inputs
FILL = 0.9  # extractive summaries aim at this share of the target
MIN_MAP_TARGET = 64


def _words(spaced: str) -> frozenset[str]:
    """The set of space-separated words in ``spaced``."""
    return frozenset(spaced.split())


_TERM = regex.compile(r"[\w$]+")
_STOP = STOP_WORDS  # the index's list: what retrieval ignores, the summary ignores too
# Abbreviations after which a period never ends a sentence ("etc." ends one before a capital).
_ABBREV = _words(
    "e.g i.e cf vs dr mr mrs ms prof sr jr st mt inc ltd co corp dept approx ca al gen col "
    "lt sgt rev jan feb mar apr jun jul aug sep sept oct nov dec"
)
_NUMERIC_ABBREV = _words("no nos fig figs p pp vol vols eq eqs sec ch ver v")
_END = regex.compile(r"[.!?\u2026]+['\"\u2019\u201d)\]]*(?=\s)|" + WIDE_SENTENCE_END)
_LIST_ITEM = regex.compile(r"^\s*(?:[-*+•]\s|\d{1,3}[.)]\s|#{1,6}\s|>|\||```|~~~)")
_HEADING = regex.compile(r"^\s*#{1,6}\s")
_FENCE = regex.compile(r"^\s*(?:```|~~~)")
_BLANK_GAP = regex.compile(r"\n[ \t]*\n")
_NEXT = regex.compile(r"\S")
_NEWLINE = regex.compile(r"\n")
_WORD_SPAN = 64  # longer than any abbreviation or run of initials
_LAST_WORD = regex.compile(r"\S+$")
_INITIALS = regex.compile(r"(?:\p{L}\.)+\p{L}")


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, verbatim; abbreviations, initials and decimals do not split."""
    return [text[start:end] for start, end in _sentence_spans(text)]


def extractive(text: str, target_tokens: int, counter: TokenCounter) -> str:
    """The best-scoring original sentences within ``target_tokens``, in original order."""
    if target_tokens <= 0:
        return ""
    spans = [
        line  # a sentence over the target that runs over lines (a stack trace): by line
        for s, e in _sentence_spans(text)
        for line in (
            _lines(text, s, e)
            if "\n" in text[s:e] and counter.count(text[s:e]) > target_tokens
            else [(s, e)]
        )
    ]
    terms = [frozenset(_terms(text[s:e])) for s, e in spans]
    scores = _tfisf(terms)
    order = sorted((i for i in range(len(spans)) if scores[i] > 0), key=lambda i: -scores[i])
    chosen = _greedy(order, spans, text, counter, int(target_tokens * FILL))
    if not chosen:
        chosen = _greedy(order, spans, text, counter, target_tokens)
    result = _join(sorted(chosen), spans, text)
    while chosen and counter.count(result) > target_tokens:
        chosen.remove(min(chosen, key=lambda i: scores[i]))
        result = _join(sorted(chosen), spans, text)
    if not result and order:  # even the best sentence is too long: its head, marked as cut
        start, end = spans[order[0]]
        head = counter.truncate(text[start:end], target_tokens)
        result = head if head.strip(" \u2026") else ""
    return result


class Summarizer:
    """Summaries by the LLM when one is configured and answering, else extractive."""

    def __init__(self, counter: TokenCounter, llm: LLMClient | None) -> None:
        self._counter = counter
        self._llm = llm

    def describe(self) -> str:
        """One line for status output: which method summaries will use now."""
        if self._llm is None:
            return "extractive (LLM disabled)"
        if not self._llm.available():
            return f"extractive while LLM cools down ({self._llm.last_error})"
        return f"llm at {self._llm.base_url}"

    async def summarize(self, text: str, target_tokens: int, *, kind: str = "notes") -> Summary:
        """A summary of ``text`` within ``target_tokens``, saying how it was made and why."""
        if target_tokens <= 0:
            raise InvalidInput(f"target_tokens must be > 0, not {target_tokens}")
        tokens = self._counter.count(text)
        if tokens <= target_tokens:
            return Summary(text, "verbatim", tokens)
        if self._llm is None:
            reason = "LLM disabled (--no-llm)"
            return await anyio.to_thread.run_sync(self._extractive, text, target_tokens, reason)
        try:
            answer = await self._condense(self._llm, text, target_tokens, kind)
        except UpstreamError as exc:
            reason = f"LLM unavailable: {exc}"
            return await anyio.to_thread.run_sync(self._extractive, text, target_tokens, reason)
        answer = self._counter.truncate(answer, target_tokens)
        return Summary(answer, "llm", self._counter.count(answer))

    def _extractive(self, text: str, target_tokens: int, reason: str) -> Summary:
        """An extractive Summary carrying the reason the LLM was not used."""
        result = extractive(text, target_tokens, self._counter)
        return Summary(result, "extractive", self._counter.count(result), reason)

    async def _condense(self, llm: LLMClient, text: str, target: int, kind: str) -> str:
        """One call for short inputs; map over slices and reduce, repeatedly, for long ones."""
        merged = False
        while self._counter.count(text) > SINGLE_CALL_TOKENS:
            slices = self._slices(text, SLICE_TOKENS)
            part_target = max(MIN_MAP_TARGET, min(target, SINGLE_CALL_TOKENS // len(slices)))
            parts = [
                await self._ask(
                    llm, _prompt_part(part, i + 1, len(slices), kind, part_target), part_target
                )
                for i, part in enumerate(slices)
            ]
            text, merged = "\n\n".join(parts), True
        prompt = _prompt_merge(text, kind, target) if merged else _prompt_one(text, kind, target)
        return await self._ask(llm, prompt, target)

    async def _ask(self, llm: LLMClient, prompt: list[dict[str, str]], target: int) -> str:
        """The model's answer to one summary prompt, cut to ``target`` tokens."""
        result = await llm.chat(prompt, max_tokens=max(32, min(target, 8192)))
        return self._counter.truncate(result.text, target)

    def _slices(self, text: str, budget: int) -> list[str]:
        """``text`` cut into pieces of at most ``budget`` tokens at paragraph or line breaks."""
        pieces: list[str] = []
        for para in _BLANK_GAP.split(text):
            if self._counter.count(para) <= budget:
                pieces.append(para)
                continue
            for line in para.split("\n"):
                pieces.extend(self._cut_line(line, budget))
        out: list[str] = []
        current = ""
        for piece in pieces:
            if not piece.strip():
                continue
            joined = f"{current}\n\n{piece}" if current else piece
            if current and self._counter.count(joined) > budget:
                out.append(current)
                current = piece
            else:
                current = joined
        if current:
            out.append(current)
        return out

    def _cut_line(self, line: str, budget: int) -> list[str]:
        """A single line cut into pieces of at most ``budget`` tokens, at spaces if possible."""
        pieces: list[str] = []
        rest = line
        while self._counter.count(rest) > budget:
            head = truncate(rest, budget, self._counter.ratio, marker="")
            if not head:  # no whitespace and a tiny budget: force progress
                head = rest[: max(1, int(budget / max(self._counter.ratio, 1e-6)))]
            pieces.append(head)
            rest = rest[len(head) :].lstrip()
        if rest:
            pieces.append(rest)
        return pieces


def _system(kind: str) -> dict[str, str]:
    """The system message shared by every summary prompt."""
    return {
        "role": "system",
        "content": (
            f"You condense {kind} for an assistant with a small context window. Keep every "
            "decision, fact, identifier, file path, number and open question exactly as "
            "written. Drop chatter and repetition. Answer with the summary only, no preamble."
        ),
    }


def _limit(target: int) -> str:
    """The length instruction: tokens, with words for models that think in words."""
    return f"at most {target} tokens (about {max(1, int(target * 0.7))} words)"


def _prompt_one(text: str, kind: str, target: int) -> list[dict[str, str]]:
    """Prompt to summarize a whole input in one call."""
    ask = f"Summarize these {kind} in {_limit(target)}.\n\n{text}"
    return [_system(kind), {"role": "user", "content": ask}]


def _prompt_part(text: str, index: int, total: int, kind: str, target: int) -> list[dict[str, str]]:
    """Prompt to summarize one slice of a long input (the map step)."""
    ask = f"Summarize part {index} of {total} of these {kind} in {_limit(target)}.\n\n{text}"
    return [_system(kind), {"role": "user", "content": ask}]


def _prompt_merge(text: str, kind: str, target: int) -> list[dict[str, str]]:
    """Prompt to merge partial summaries into one (the reduce step)."""
    ask = (
        f"These are summaries of consecutive parts of the same {kind}. Merge them into one "
        f"summary in {_limit(target)}, in order, without repeating yourself.\n\n{text}"
    )
    return [_system(kind), {"role": "user", "content": ask}]


def _terms(sentence: str) -> list[str]:
    """Lowercase words of two or more characters, stop words removed; CJK letter pairs."""
    words = [t for t in _TERM.findall(sentence.lower()) if len(t) >= 2 and t not in _STOP]
    return words + [pair for w in words for pair in letter_pairs(w)]


def _tfisf(terms: list[frozenset[str]]) -> list[float]:
    """TF-ISF score of each sentence, with a small boost for the first three."""
    count = len(terms)
    freq: dict[str, int] = {}
    for sentence in terms:
        for term in sentence:
            freq[term] = freq.get(term, 0) + 1
    scores: list[float] = []
    for i, sentence in enumerate(terms):
        if not sentence:
            scores.append(0.0)
            continue
        total = sum(math.log(count / freq[t]) + 1.0 for t in sentence)
        boost = 1.0 + 0.2 * max(0, 3 - i) / 3
        scores.append(boost * total / math.sqrt(len(sentence)))
    return scores


def _greedy(
    order: list[int], spans: list[tuple[int, int]], text: str, counter: TokenCounter, budget: int
) -> list[int]:
    """Sentences taken in score order while they fit ``budget``; ones that do not are skipped."""
    costs = [counter.count(text[spans[i][0] : spans[i][1]]) + 1 for i in order]  # +1: separator
    return [order[k] for k in pack(costs, budget).items]


def _join(indices: list[int], spans: list[tuple[int, int]], text: str) -> str:
    """Selected sentences in order, separated by a newline where the original had one."""
    out: list[str] = []
    prev_end: int | None = None
    for i in indices:
        start, end = spans[i]
        if prev_end is not None:
            out.append("\n" if "\n" in text[prev_end:start] else " ")
        out.append(text[start:end])
        prev_end = end
    return "".join(out)


def _sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every sentence, stripped of surrounding whitespace."""
    spans: list[tuple[int, int]] = []
    for seg_start, seg_end, prose in _segments(text):
        cuts = [seg_start]
        if prose:
            segment = text[seg_start:seg_end]
            cuts += [seg_start + m.end() for m in _END.finditer(segment) if _ends(segment, m)]
        cuts.append(seg_end)
        spans += _trimmed(text, cuts)
    return spans


def _trimmed(text: str, cuts: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each non-blank piece between ``cuts``, without its outer whitespace."""
    spans = []
    for a, b in itertools.pairwise(cuts):
        piece = text[a:b]
        lead, trail = len(piece) - len(piece.lstrip()), len(piece.rstrip())
        if trail > lead:
            spans.append((a + lead, a + trail))
    return spans


def _lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """``_trimmed`` lines of ``text[start:end]``."""
    return _trimmed(text, [start, *(m.end() for m in _NEWLINE.finditer(text, start, end)), end])


def _segments(text: str) -> list[tuple[int, int, bool]]:
    """Runs of lines that may hold one sentence across line breaks; False inside code fences."""
    segments: list[tuple[int, int, bool]] = []
    pos = 0
    start: int | None = None
    in_fence = False
    prev = ""
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if _FENCE.match(body):
            if start is not None:
                segments.append((start, pos, True))
                start = None
            in_fence = not in_fence
        elif in_fence or not body.strip():
            if start is not None:
                segments.append((start, pos, True))
                start = None
            if in_fence and body.strip():
                segments.append((pos, pos + len(body), False))
        elif start is None:
            start = pos
        elif not _continues(prev, body):
            segments.append((start, pos, True))
            start = pos
        prev = body
        pos += len(line)
    if start is not None:
        segments.append((start, pos, True))
    return segments


def _continues(prev: str, line: str) -> bool:
    """Whether ``line`` carries on the sentence of the line before (hard-wrapped prose)."""
    if _LIST_ITEM.match(line) or _HEADING.match(prev):
        return False
    first = line.lstrip()[:1]
    return first.islower() or prev.rstrip()[-1:] in {",", ";", "-", "(", "&", "\u2013", "\u2014"}


def _ends(segment: str, match: regex.Match[str]) -> bool:
    """Whether the punctuation at ``match`` ends a sentence (not an abbreviation)."""
    nxt = _NEXT.search(segment, match.end())
    if nxt is None:
        return True
    if nxt.group().islower():
        return False
    if "." not in match.group() or match.group().startswith(".."):
        return True
    before = _LAST_WORD.search(segment, max(0, match.start() - _WORD_SPAN), match.start())
    if before is None or (before.start() == match.start() - _WORD_SPAN and before.start() > 0):
        return True  # no word before, or one too long to be an abbreviation or an initial
    word = before.group()
    token = word.lstrip("([{\"'\u201c\u2018").lower()
    if token in _ABBREV or (token in _NUMERIC_ABBREV and nxt.group().isdigit()):
        return False
    if len(token) == 1 and token.isalpha() and word[-1:].isupper():
        return False  # a single initial: "J. Smith"
    return not _INITIALS.fullmatch(token)  # "U.S", "J.R.R"
