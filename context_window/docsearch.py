"""Line-level search answers: the best lines (or paragraphs) of the best chunks, numbered.

Chunks are the ranking unit of the index, but a chunk fills most of a small
budget, so an answer shows *passages*: a paragraph when it fits one hit's share
of the budget, else its lines, else a long line's sentences. The best-ranked
chunks are split into passages, which are scored with BM25 (idf from the
document index, lengths relative to the other passages), plus half the score of
the passages just before and after (an answer often sits beside the line that
names the topic). Passages of the same shape (the same words once numbers, ids
and addresses are masked) that match the query collapse into the earliest one,
which lists the others' line numbers. Passages are taken greedily in score order
while they fit the budget, opening at most ``limit`` hits (chunks); each hit then
shows its passages in line order.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from context_window.models import Chunk, Hit
from context_window.textindex import K1, B
from context_window.tokens import TokenCounter

NEIGHBOUR_WEIGHT = 0.5  # share of the adjacent passages' score a passage gains
LIKE_SHOWN = 5  # line numbers listed for the passages a shown one stands for
# A token holding a digit (numbers, ids, addresses, times) is masked in a passage's shape.
_VARIABLE = regex.compile(r"[\w.:/@$+-]*\d[\w.:/@$+-]*")
_SENTENCE_END = regex.compile(r"(?<=[.!?])\s+(?=\S)")

Count = Callable[[str], int]


@dataclass
class Passage:
    """Lines ``first..last`` of a document (1-based), as shown in an answer."""

    first: int
    last: int
    text: str
    doc: str = ""
    terms: Counter[str] = field(default_factory=Counter)
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
        if count(text) <= max_tokens:
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
    if count(line) <= max_tokens:
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
    """The passage with every token that holds a digit masked, lowercased, spaces collapsed."""
    return " ".join(_VARIABLE.sub("#", text.lower()).split())


def score_passages(
    passages: list[Passage],
    query: Sequence[str],
    idf: dict[str, float],
    terms: Callable[[str], list[str]],
) -> None:
    """Set each passage's BM25 score for ``query`` (idf given), lengths relative to the others."""
    wanted = set(query)
    for p in passages:
        found = terms(p.text)
        p.length = len(found)
        p.terms = Counter(t for t in found if t in wanted)
    avg = sum(p.length for p in passages) / len(passages) if passages else 1.0
    for p in passages:
        norm = K1 * (1.0 - B + B * p.length / (avg or 1.0))
        p.score = sum(idf.get(t, 0.0) * tf * (K1 + 1.0) / (tf + norm) for t, tf in p.terms.items())


def answer(
    hits: Sequence[Hit],
    query: Sequence[str],
    idf: dict[str, float],
    terms: Callable[[str], list[str]],
    counter: TokenCounter,
    *,
    limit: int,
    budget: int,
    reserve: int,
    probes: Sequence[Hit] = (),
) -> Answer:
    """Fill ``budget`` (less ``reserve`` for the caller's header) with the best passages.

    ``hits`` are the candidate chunks, best first; at most ``limit`` of them are shown.
    ``probes`` are earlier chunks read only for the first occurrences of the matching
    passages found in ``hits``: their other passages are left out.
    """
    count = counter.count
    share = max(32, (budget - reserve) // max(1, min(limit, len(hits) or 1)))
    seen: set[tuple[str, int]] = set()  # (doc, line): chunks overlap
    groups: list[list[Passage]] = []  # per candidate chunk, its passages in line order
    for hit in [*hits, *probes]:
        fresh = [
            p for p in split_passages(hit.chunk, share, count) if (hit.doc_id, p.first) not in seen
        ]
        for p in fresh:
            p.doc = hit.doc_id
        seen.update((hit.doc_id, p.first) for p in fresh)
        groups.append(fresh)
    flat = [p for g in groups for p in g]
    score_passages(flat, query, idf, terms)
    every = [*hits, *probes]
    ranked: list[tuple[float, int, int, Passage]] = []
    for k, group in enumerate(groups[: len(hits)]):
        own = [p.score for p in group]
        for i, p in enumerate(group):
            near = (own[i - 1] if i > 0 else 0.0) + (own[i + 1] if i + 1 < len(own) else 0.0)
            p.score = own[i] + NEIGHBOUR_WEIGHT * near
            if p.score > 0:
                ranked.append((p.score, k, p.first, p))
    # A probe passage is kept when it matches the same query terms as one of the best
    # passages found, and ranks as that passage does: it shows where such a line first occurs.
    wanted = best_matches(ranked)
    for k in range(len(hits), len(every)):
        for p in groups[k]:
            found = set(p.terms)
            scores = [v for (d, m), v in wanted.items() if d == p.doc and found >= m]
            if scores:
                p.score = max(scores)
                ranked.append((p.score, k, p.first, p))
    ranked.sort(key=lambda r: (-r[0], r[2], r[1]))
    # Same-shaped matching passages collapse into the first one in the document.
    first_of: dict[tuple[str, str], Passage] = {}
    by_line = sorted(ranked, key=lambda r: (every[r[1]].doc_id, r[2]))
    standing: set[int] = set()
    for _, k, _, p in by_line:
        if not p.terms:
            continue
        key = (every[k].doc_id, shape(p.text))
        rep = first_of.get(key)
        if rep is None:
            first_of[key] = p
        else:
            rep.like.append(p.first)
            rep.score = max(rep.score, p.score)
            standing.add(id(p))
    # A passage that matches nothing ranks only beside a matching one that is still shown:
    # the neighbours of a line collapsed into its first occurrence do not open hits.
    anchors = {
        id(p)
        for g in groups
        for i, p in enumerate(g)
        if not p.terms
        and any(q.terms and id(q) not in standing for q in g[max(0, i - 1) : i + 2] if q is not p)
    }
    ranked = [r for r in ranked if id(r[3]) not in standing and (r[3].terms or id(r[3]) in anchors)]
    ranked.sort(key=lambda r: (-r[3].score, r[2], r[1]))
    room = budget - reserve
    used = omitted = 0
    chosen: dict[int, list[Passage]] = {}
    for _, k, _, p in ranked:
        cost = count(p.render()) + 1
        if k not in chosen:
            if len(chosen) >= limit:
                omitted += 1
                continue
            cost += count(_header_of(every[k], [p]).header()) + 2
        if used + cost > room:
            omitted += 1
            continue
        chosen.setdefault(k, []).append(p)
        used += cost
    # What is left of the budget goes to the shown passages' surroundings, nearest first.
    context = [
        (min(abs(p.first - q.first) for q in chosen[k]), p.first, k, p)
        for k in chosen
        for p in groups[k]
        if id(p) not in standing and all(p is not q for q in chosen[k])
    ]
    for _, _, k, p in sorted(context, key=lambda c: (c[0], c[1])):
        cost = count(p.render()) + 1
        if used + cost <= room:
            chosen[k].append(p)
            used += cost
    short = False
    if not chosen and ranked:  # even the best passage is over budget: cut it to fit
        _, k, _, p = ranked[0]
        head = count(_header_of(every[k], [p]).header()) + 2
        if room - head < 8:  # a budget this small has no room for the heading trail
            short = True
            head = count(_header_of(every[k], [p]).header(short=True)) + 2
        p.text = counter.truncate(p.text, max(1, room - head - 4))
        p.like = []
        chosen[k] = [p]
        used = head + count(p.render()) + 1
        omitted = len(ranked) - 1
    out = [
        _header_of(every[k], sorted(ps, key=lambda p: p.first))
        for k, ps in sorted(chosen.items(), key=lambda kv: -max(p.score for p in kv[1]))
    ]
    return Answer(tuple(out), len(hits), omitted, used + reserve, budget, short)


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
