"""Line-level search answers: the best lines (or paragraphs) of the best chunks, numbered.

Chunks are the ranking unit of the index, but a chunk fills most of a small
budget, so an answer shows *passages*: a paragraph when it fits one hit's share
of the budget, else its lines, else a long line's sentences. The best-ranked
chunks are split into passages, which are scored with BM25 (idf from the
document index, lengths relative to the other passages), plus half the score of
the passages just before and after (an answer often sits beside the line that
names the topic). Passages of the same shape (the same words once numbers, ids
and addresses are masked) that match the same query terms collapse into the
earliest one, which lists the others' line numbers. Passages are taken greedily in score order
while they fit the budget, opening at most ``limit`` hits (chunks); each hit then
shows its passages in line order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import regex

from context_window.models import Chunk, Count, Hit
from context_window.packing import pack
from context_window.retrieval.bm25 import K1, NEIGHBOUR_WEIGHT, B
from context_window.tokens import TokenCounter

LIKE_SHOWN = 5  # line numbers listed for the passages a shown one stands for
# A token holding a digit (a number, time, id, address or versioned name) is masked in a
# passage's shape, so lines that differ only in those have one shape.
# (The look-behind only starts a match at a token's start: the same result, less backtracking.)
_VARIABLE = re.compile(r"(?<![\w.:/@$+-])[\w.:/@$+-]*\d[\w.:/@$+-]*")
# The same for ASCII text, where spelling the classes out spares Unicode look-ups (~40 %).
_VARIABLE_ASCII = re.compile(
    r"(?<![A-Za-z0-9_.:/@$+-])[A-Za-z0-9_.:/@$+-]*[0-9][A-Za-z0-9_.:/@$+-]*"
)
_WORD = re.compile(r"[\w$]+")  # the index's raw words (the stdlib engine is faster here)
_NON_WORD_BYTES = bytes(
    c if chr(c).isascii() and (chr(c).isalnum() or chr(c) in "_$") else 0x20 for c in range(256)
)
_WORD_RUN = re.compile(r"[\w$]*")  # the rest of a raw word, from a position
_SENTENCE_END = regex.compile(r"(?<=[.!?])\s+(?=\S)")


@dataclass
class Passage:
    """Lines ``first..last`` of a document (1-based), as shown in an answer."""

    first: int
    last: int
    text: str
    doc: str = ""
    maybe: bool = True  # may hold a query term (else it is only context)
    terms: dict[str, int] = field(default_factory=dict)  # query terms held, with counts
    counted: bool = False  # ``terms`` and ``length`` are already known
    length: int = 0
    score: float = 0.0
    like: list[int] = field(default_factory=list)  # lines of same-shaped passages it stands for

    def render(self) -> str:
        """``first: text`` (``first-last:`` for several lines), with the lines it stands for."""
        where = str(self.first) if self.first == self.last else f"{self.first}-{self.last}"
        out = f"{where}: {self.text}"
        if self.like:
            shown = ", ".join(map(str, self.like[:LIKE_SHOWN]))
            more = ", …" if len(self.like) > LIKE_SHOWN else ""
            out += f" (+{len(self.like)} like it: lines {shown}{more})"
        return out


@dataclass(frozen=True)
class LineHit:
    """One chunk's passages in an answer."""

    doc_id: str
    title: str
    chunk: int
    heading: str
    first_line: int
    last_line: int
    score: float
    passages: tuple[Passage, ...]

    def header(self, short: bool = False) -> str:
        """``# doc [chunk] heading · lines a-b`` (without the heading when ``short``)."""
        heading = f" {self.heading}" if self.heading and not short else ""
        return f"# {self.doc_id} [{self.chunk}]{heading} · lines {self.first_line}-{self.last_line}"


@dataclass(frozen=True)
class Answer:
    """The hits chosen for a query, best first, and what was left out."""

    hits: tuple[LineHit, ...]
    chunks_matched: int
    omitted: int  # matching passages that did not fit, or beyond the hit limit
    used_tokens: int
    budget: int
    short: bool = False  # hit headers without their heading trails (a tiny budget)


def split_passages(chunk: Chunk, max_tokens: int, count: Count) -> list[Passage]:
    """A chunk's passages: lines, a wrapped paragraph's lines joined, a long line's sentences.

    A line continues the one before it (as hard-wrapped prose does) when that one does
    not end a sentence or a record and this one starts in lower case; log records,
    list items and code lines each stay a passage of their own.
    """
    out: list[Passage] = []
    base = max(chunk.line, 1)
    run: list[tuple[int, str]] = []

    def close() -> None:
        if not run:
            return
        text = "\n".join(t for _, t in run)
        if 2 * len(text) <= max_tokens or count(text) <= max_tokens:  # see _sentences
            out.append(Passage(run[0][0], run[-1][0], text))
        else:
            for number, line in run:
                out.extend(_sentences(number, line, max_tokens, count))
        run.clear()

    for k, line in enumerate(chunk.text.split("\n")):
        line = line.rstrip("\r")
        if not line.strip():
            close()
            continue
        if run and not _continues(run[-1][1], line):
            close()
        run.append((base + k, line))
    close()
    return out


def _continues(previous: str, line: str) -> bool:
    """Whether ``line`` reads as the wrapped continuation of ``previous``."""
    first = line.lstrip()[:1]
    return first.islower() and previous.rstrip()[-1:] not in ".!?:;)]}>\"'"


def _sentences(number: int, line: str, max_tokens: int, count: Count) -> list[Passage]:
    """A long line as runs of whole sentences, each within ``max_tokens`` where it can be."""
    # An estimate never exceeds 2 tokens a character (the highest ratio calibration accepts).
    if 2 * len(line) <= max_tokens or count(line) <= max_tokens:
        return [Passage(number, number, line)]
    out: list[Passage] = []
    run = ""
    for sentence in _SENTENCE_END.split(line):
        joined = f"{run} {sentence}" if run else sentence
        if run and count(joined) > max_tokens:
            out.append(Passage(number, number, run))
            run = sentence
        else:
            run = joined
    if run:
        out.append(Passage(number, number, run))
    return out


def shape(text: str) -> str:
    """The passage lowercased, tokens holding a digit masked, spaces collapsed."""
    low = text.lower()
    return " ".join((_VARIABLE_ASCII if low.isascii() else _VARIABLE).sub("#", low).split())


_ZERO_DIGITS = bytes.maketrans(b"123456789", b"000000000")


def _digit_twins_key(text: str) -> bytes:
    """One key for texts that differ only in which digits they hold (their UTF-8 with
    every digit made 0: a byte translation, which keeps every token's bounds)."""
    return text.encode("utf-8", "surrogatepass").translate(_ZERO_DIGITS)


class Shapes:
    """``shape`` for many passages: texts that differ only in their digits share one.

    Masking is a regular-expression pass over the text; the lines of a log mostly
    differ in their numbers, and zeroing every digit (a byte translation) keeps the
    token boundaries, so such lines are shaped once.
    """

    def __init__(self) -> None:
        self._known: dict[bytes, str] = {}

    def __call__(self, text: str) -> str:
        key = _digit_twins_key(text)
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = shape(text)
        return found


def word_count(text: str) -> int:
    """How many raw words (runs of ``[\\w$]``) ``text`` holds, as the index counts them."""
    if text.isascii():  # every other byte becomes a space: a C-speed count
        return len(text.encode("ascii").translate(_NON_WORD_BYTES).split())
    return len(_WORD.findall(text))


class Scorer:
    """Scores passages for one query: BM25 over words, with the index's idf.

    Only the words that can yield a query term are analysed: those holding one of
    the query's ``prefilter`` keys, found by one scan of the lowercased text. Each
    distinct raw word is analysed once (its query terms are remembered). A passage's
    length is its count of raw words (of whitespace-separated words for a line that
    is only context), relative to the average of the candidate passages.
    """

    def __init__(
        self,
        query: Sequence[str],
        idf: dict[str, float],
        expand: Callable[[str], tuple[str, ...]],
    ) -> None:
        self.idf = idf
        self._wanted = set(query)
        self._expand = expand
        self._matches: dict[str, tuple[str, ...]] = {}
        self._counted: dict[tuple[str, ...], dict[str, int]] = {}
        self._lines: dict[str | bytes, tuple[dict[str, int], int]] = {}
        self._digit_blind = not any(c.isdigit() for t in query for c in t)
        # Longest first, so a key that begins another does not hide it.
        alternatives = sorted(prefilter(query), key=len, reverse=True)
        keys = "|".join(map(re.escape, alternatives)) or "(?!)"
        self._key_word = re.compile(f"(?:{keys})[\\w$]*")  # a key and the rest of its word
        self.average = 0.0

    def may_match(self, low: str) -> bool:
        """Whether lowercased text holds a key (a query term may be there)."""
        return self._key_word.search(low) is not None

    def terms_of(self, text: str) -> dict[str, int]:
        """The query terms in ``text``, with their counts (as the index's analyzer finds them)."""
        low = text.lower()
        if len(low) != len(text):  # lowercasing moved the offsets: read every word
            return self.count(_WORD.findall(text))
        words: list[str] = []
        back = ""
        for m in self._key_word.finditer(low):
            start = at = m.start()
            if at and ((c := low[at - 1]).isalnum() or c in "_$"):  # the key is inside a word
                back = back or low[::-1]  # read the word's start backwards
                start = len(low) - _WORD_RUN.match(back, len(low) - at).end()  # type: ignore[union-attr]
            words.append(text[start : m.end()])
        return self.count(words) if words else {}

    def line_terms(self, line: str) -> tuple[dict[str, int], int]:
        """A line's query terms (as ``terms_of``) and its length in raw words.

        Log lines mostly differ in their numbers: lines that differ only in which digits
        they hold have the same words but for digit runs (identifier parts split at
        digits), so, when no query term holds a digit, they hold the same query terms
        and are read once.
        """
        key: str | bytes = line
        if self._digit_blind:
            key = _digit_twins_key(line)
        found = self._lines.get(key)
        if found is None:
            found = self._lines[key] = (self.terms_of(line), word_count(line))
        return found

    def count(self, words: list[str]) -> dict[str, int]:
        """The query terms that ``words`` (raw words) yield, with their counts (shared: not
        to be changed). Log lines repeat their words, so each list is counted once."""
        key = tuple(words)
        found = self._counted.get(key)
        if found is not None:
            return found
        matches, wanted = self._matches, self._wanted
        found = {}
        for w in words:
            hit = matches.get(w)
            if hit is None:
                hit = matches[w] = tuple(t for t in self._expand(w) if t in wanted)
            for t in hit:
                found[t] = found.get(t, 0) + 1
        self._counted[key] = found
        return found

    def count_terms(self, passages: Sequence[Passage]) -> None:
        """Fill in each passage's length and the query terms it holds."""
        for p in passages:
            if p.counted:
                continue
            if p.maybe:
                p.length = word_count(p.text)
                p.terms = self.terms_of(p.text)
            else:  # context only: its length just shapes the average
                p.length = len(p.text.split())

    def score(self, passages: Sequence[Passage]) -> None:
        """Each passage's own BM25 score (after ``count_terms``; the first call sets the mean)."""
        if not self.average and passages:
            self.average = max(1.0, sum(p.length for p in passages) / len(passages))
        known: dict[tuple[int, int], float] = {}  # lines read once (see line_terms) score once
        for p in passages:
            if not p.terms:
                p.score = 0.0
                continue
            key = (id(p.terms), p.length)
            score = known.get(key)
            if score is None:
                norm = K1 * (1.0 - B + B * p.length / self.average)
                score = known[key] = sum(
                    self.idf.get(t, 0.0) * tf * (K1 + 1.0) / (tf + norm)
                    for t, tf in p.terms.items()
                )
            p.score = score


# A line that does not end a sentence or record, followed by one starting in lower case:
# the chunk holds hard-wrapped prose, whose paragraphs must be read whole.
_WRAPPED = regex.compile(r"[^.!?:;)\]}>\"'\s]\r?\n[ \t]*\p{Ll}")


def prefilter(query: Sequence[str]) -> tuple[str, ...]:
    """Lowercase strings one of which every word yielding a query term contains.

    A Snowball stem is its word's prefix but for its last letter (retry -> retri), and
    an identifier part is a substring of the whole, so the stem less its last letter
    is found in the line (Snowball's few irregular forms, such as dying -> die, are
    the exception); what the filter lets through is checked exactly afterwards.
    """
    return tuple(sorted({t[:-1] if len(t) > 3 else t for t in query}))


@dataclass
class Group:
    """One candidate chunk's passages in line order; ``full`` when every line is there."""

    hit: Hit
    passages: list[Passage]
    full: bool

    @cached_property
    def lines(self) -> list[str]:
        """The chunk's lines."""
        return self.hit.chunk.text.split("\n")


def candidate_passages(
    hits: Sequence[Hit],
    share: int,
    count: Count,
    scorer: Scorer,
    seen: set[tuple[str, int]],
) -> list[Group]:
    """Per hit, its passages near a possible match, scored; lines in ``seen`` are left out.

    A chunk of records (log lines, code, lists) yields only the lines that may match
    and the lines beside them; a chunk of wrapped prose is split whole.
    """
    groups: list[Group] = []
    for hit in hits:
        text = hit.chunk.text
        low = text.lower()
        if not scorer.may_match(low):
            groups.append(Group(hit, [], False))
            continue
        full = bool(_WRAPPED.search(text))
        found = (
            split_passages(hit.chunk, share, count)
            if full
            else _near(hit.chunk, share, count, scorer)
        )
        fresh = [p for p in found if (hit.doc_id, p.first) not in seen]
        for p in fresh:
            p.doc = hit.doc_id
            seen.add((hit.doc_id, p.first))
        groups.append(Group(hit, fresh, full))
    flat = [p for g in groups for p in g.passages]
    scorer.count_terms(flat)
    scorer.score(flat)
    return groups


def _near(chunk: Chunk, share: int, count: Count, scorer: Scorer) -> list[Passage]:
    """The lines of a chunk of records holding a query term, and the lines beside them.

    A line's terms and length are found here, unless it is cut into sentences (each
    is then counted alone).
    """
    lines = chunk.text.split("\n")
    found = [scorer.line_terms(line) for line in lines]
    base = max(chunk.line, 1)
    last = len(lines) - 1
    out: list[Passage] = []
    for i, line in enumerate(lines):
        terms, length = found[i]
        near = terms or (i and found[i - 1][0]) or (i < last and found[i + 1][0])
        if not near or not line.strip():
            continue
        line = line.rstrip("\r")
        if 2 * len(line) <= share:  # short enough to be one passage (see _sentences)
            p = Passage(base + i, base + i, line, maybe=bool(terms), counted=True)
            p.terms, p.length = terms, length if terms else len(line.split())
            out.append(p)
            continue
        for p in _sentences(base + i, line, share, count):
            p.maybe = bool(terms)
            out.append(p)
    return out


def surroundings(
    group: Group, shown: Sequence[Passage]
) -> list[tuple[int, int, Passage | int, int]]:
    """``(distance, line, what, characters)`` for each line of the chunk that is not shown.

    ``what`` is the passage (prose groups hold them all) or, in a chunk of records, the
    line's index in the chunk: such a line becomes a passage only if the budget
    reaches it (see ``_materialize``).
    """
    firsts = sorted(p.first for p in shown)
    taken = set(firsts)
    if group.full:
        rest = [p for p in group.passages if p.first not in taken]
        far = _distances([p.first for p in rest], firsts)
        return [(d, p.first, p, len(p.text)) for d, p in zip(far, rest, strict=True)]
    base = max(group.hit.chunk.line, 1)
    lines = [
        (base + i, i, len(line))
        for i, line in enumerate(group.lines)
        if base + i not in taken and line.strip()
    ]
    far = _distances([at for at, _, _ in lines], firsts)
    return [(d, at, i, size) for d, (at, i, size) in zip(far, lines, strict=True)]


def _distances(numbers: Sequence[int], marks: Sequence[int]) -> list[int]:
    """For ascending ``numbers``, each one's distance to the nearest of ascending ``marks``
    (one sweep of both)."""
    out: list[int] = []
    j, n = 0, len(marks)
    for x in numbers:
        while j < n and marks[j] < x:
            j += 1
        d = marks[j] - x if j < n else x - marks[-1]
        if j and x - marks[j - 1] < d:
            d = x - marks[j - 1]
        out.append(d)
    return out


def _materialize(group: Group, what: Passage | int, share: int, count: Count) -> list[Passage]:
    """The passages of one surrounding line (see ``surroundings``)."""
    if isinstance(what, Passage):
        return [what]
    base = max(group.hit.chunk.line, 1)
    line = group.lines[what].rstrip("\r")
    out = _sentences(base + what, line, share, count)
    for p in out:
        p.doc = group.hit.doc_id
    return out


def smooth(groups: Sequence[Group]) -> None:
    """Each passage gains ``NEIGHBOUR_WEIGHT`` x the own scores of the passages beside it."""
    for group in groups:
        ps = group.passages
        own = [p.score for p in ps]
        for i, p in enumerate(ps):
            near = 0.0
            if i > 0 and (group.full or ps[i - 1].last + 1 == p.first):
                near += own[i - 1]
            if i + 1 < len(ps) and (group.full or p.last + 1 == ps[i + 1].first):
                near += own[i + 1]
            p.score = own[i] + NEIGHBOUR_WEIGHT * near


def answer(
    groups: Sequence[Group],
    counter: TokenCounter,
    *,
    limit: int,
    budget: int,
    reserve: int,
    share: int,
    probes: Sequence[Group] = (),
) -> Answer:
    """Fill ``budget`` (less ``reserve`` for the caller's header) with the best passages.

    ``groups`` hold the candidate chunks, best first, with their scored and smoothed
    passages; at most ``limit`` chunks are shown. ``probes`` are earlier chunks read
    for the first occurrences of the best matches: only their passages that hold all
    the terms of one of the best matches are kept, ranked as that match is.
    """
    count = counter.count
    every = [*groups, *probes]
    ranked: list[tuple[float, int, int, Passage]] = [
        (p.score, k, p.first, p) for k, g in enumerate(groups) for p in g.passages if p.score > 0
    ]
    wanted = best_matches(ranked)
    for k in range(len(groups), len(every)):
        for p in every[k].passages:
            found = set(p.terms)
            scores = [v for (d, m), v in wanted.items() if d == p.doc and found >= m]
            if scores:
                p.score = max(scores)
                ranked.append((p.score, k, p.first, p))
    # Matching passages of one shape that match the same query terms collapse into the
    # first one in the document (a query naming sda2 keeps sda2 lines apart from sda0's).
    first_of: dict[tuple[str, str, frozenset[str]], Passage] = {}
    shape_of = Shapes()
    held: dict[int, frozenset[str]] = {}  # passages' terms are shared (see line_terms)
    standing: set[tuple[str, int]] = set()
    for _, _, _, p in sorted(ranked, key=lambda r: (r[3].doc, r[2])):
        if not p.terms:
            continue
        terms = held.get(id(p.terms))
        if terms is None:
            terms = held[id(p.terms)] = frozenset(p.terms)
        key = (p.doc, shape_of(p.text), terms)
        rep = first_of.get(key)
        if rep is None:
            first_of[key] = p
        else:
            rep.like.append(p.first)
            rep.score = max(rep.score, p.score)
            standing.add((p.doc, p.first))
    # A passage that matches nothing ranks only beside a matching one that is still shown:
    # the neighbours of a line collapsed into its first occurrence do not open hits.
    anchors: set[tuple[str, int]] = set()
    for g in every:
        ps = g.passages
        for i, p in enumerate(ps):
            if not p.terms or (p.doc, p.first) in standing:
                continue
            if i > 0 and (g.full or ps[i - 1].last + 1 == p.first):
                anchors.add((p.doc, ps[i - 1].first))
            if i + 1 < len(ps) and (g.full or p.last + 1 == ps[i + 1].first):
                anchors.add((p.doc, ps[i + 1].first))
    ranked = [
        r
        for r in ranked
        if (r[3].doc, r[2]) not in standing and (r[3].terms or (r[3].doc, r[2]) in anchors)
    ]
    ranked.sort(key=lambda r: (-r[3].score, r[2], r[1]))
    room = budget - reserve
    chosen: dict[int, list[Passage]] = {}
    ratio = counter.ratio  # an estimate is never below characters x ratio: a lower bound

    def measure(i: int) -> int | None:
        _, k, _, p = ranked[i]
        cost = count(p.render()) + 1
        if k not in chosen:
            if len(chosen) >= limit:
                return None
            cost += count(_header_of(every[k].hit, [p]).header()) + 2
        return cost

    def take(i: int) -> None:
        _, k, _, p = ranked[i]
        chosen.setdefault(k, []).append(p)

    bounds = [int(ratio * len(r[3].text)) for r in ranked]
    main = pack(bounds, room, exact=measure, taken=take)
    used, omitted = main.used_tokens, main.omitted
    # What is left of the budget goes to the shown passages' surroundings, nearest first.
    shown = {(p.doc, p.first) for ps in chosen.values() for p in ps}  # chunks overlap
    candidates = [
        (d, at, g, what, size)
        for g, ps in chosen.items()
        for d, at, what, size in surroundings(every[g], ps)
    ]
    around: list[tuple[int, int, int, Passage | int, int]] = []
    for item in sorted(candidates, key=lambda a: a[:3]):
        spot = (every[item[2]].hit.doc_id, item[1])
        if spot not in standing and spot not in shown:
            shown.add(spot)
            around.append(item)
    made: dict[int, list[Passage]] = {}

    def measure_around(i: int) -> int:
        _, _, k, what, _ = around[i]
        made[i] = _materialize(every[k], what, share, count)
        return sum(count(p.render()) + 1 for p in made[i])

    def take_around(i: int) -> None:
        chosen[around[i][2]].extend(made[i])

    extra = pack(
        [int(ratio * a[4]) for a in around], room - used, exact=measure_around, taken=take_around
    )
    used += extra.used_tokens
    short = False
    if not chosen and ranked:  # even the best passage is over budget: cut it to fit
        _, k, _, p = ranked[0]
        head = count(_header_of(every[k].hit, [p]).header()) + 2
        if room - head < 8:  # a budget this small has no room for the heading trail
            short = True
            head = count(_header_of(every[k].hit, [p]).header(short=True)) + 2
        p.text = counter.truncate(p.text, max(1, room - head - 4))
        p.like = []
        chosen[k] = [p]
        used = head + count(p.render()) + 1
        omitted = len(ranked) - 1
    out = [
        _header_of(every[k].hit, sorted(ps, key=lambda p: p.first))
        for k, ps in sorted(chosen.items(), key=lambda kv: -max(p.score for p in kv[1]))
    ]
    return Answer(tuple(out), len(groups), omitted, used + reserve, budget, short)


def best_matches(ranked: Sequence[tuple[float, int, int, Passage]]) -> dict[Any, float]:
    """The best passages' (doc, matched terms) with their scores: those within half the top."""
    top = max((r[0] for r in ranked), default=0.0)
    out: dict[Any, float] = {}
    for score, _, _, p in ranked:
        if p.terms and score >= top / 2:
            key = (p.doc, frozenset(p.terms))
            out[key] = max(out.get(key, 0.0), score)
    return out


def _header_of(hit: Hit, passages: list[Passage]) -> LineHit:
    """A LineHit for ``hit`` showing ``passages``; its line range is the chunk's."""
    c = hit.chunk
    first = max(c.line, 1)
    last = first + c.text.count("\n") - (1 if c.text.endswith("\n") else 0)
    return LineHit(
        hit.doc_id, hit.title, c.index, c.heading, first, last, max(0.0, hit.score), tuple(passages)
    )


def idf_of(query: Sequence[str], n_chunks: int, doc_freq: Callable[[str], int]) -> dict[str, float]:
    """Per query term, ``ln(1 + (N - df + 0.5) / (df + 0.5))`` over the chunks: never negative.

    Passages are scored within a few chunks, so a term in most chunks must still
    count for a little, not flip the sign of a passage's score.
    """
    out: dict[str, float] = {}
    for t in set(query):
        df = doc_freq(t)
        if df:
            out[t] = math.log1p((n_chunks - df + 0.5) / (df + 0.5))
    return out
