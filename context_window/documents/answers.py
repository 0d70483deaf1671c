"""Line-level search answers: the best passages of the best chunks, numbered.

Passages of one shape matching the same query terms collapse into the earliest, which
lists the others' lines. Passages are taken in score order while they fit, opening at
most ``limit`` chunks; the rest of the budget goes to the lines around them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

from context_window.documents.passages import Group, Passage, Shapes, materialize, surroundings
from context_window.models import Count, Hit, Reserve
from context_window.packing import header_reserve, pack
from context_window.tokens import TokenCounter
from context_window.wording import plural


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

    def render(self, short: bool = False) -> str:
        """The header, then the passages in line order, each numbered."""
        return "\n".join([self.header(short), *(p.render() for p in self.passages)])

    def data(self) -> dict[str, Any]:
        """The hit as JSON: a tool's structured content and the CLI's ``--json``."""
        passages = [
            {"first_line": p.first, "last_line": p.last, "text": p.text, "like_lines": p.like}
            for p in self.passages
        ]
        fixed = {f.name: getattr(self, f.name) for f in fields(self)}
        return fixed | {"score": round(self.score, 4), "passages": passages}


@dataclass(frozen=True)
class Answer:
    """The hits chosen for a query, best first, and what was left out."""

    hits: tuple[LineHit, ...]
    omitted: int  # matching passages that did not fit, or beyond the hit limit
    used_tokens: int
    budget: int
    short: bool = False  # hit headers without their heading trails (a tiny budget)
    skipped: tuple[tuple[str, str], ...] = ()  # (doc id, why) a search of all left out


# The read-on line under the header is at most this long, so both edges pack the same lines.
TIP_ROOM = " ".join(["tip"] * 15)


def search_header(hits: int, used: int, budget: int, omitted: int, terse: bool = False) -> str:
    """A search answer's first line: what is shown, the tokens, what did not fit."""
    if terse:  # a budget too small for the full header
        return f"{plural(hits, 'hit')} · {used:,}/{budget:,}"
    head = f"{plural(hits, 'hit')}, best first · {used:,}/{budget:,} tokens"
    return f"{head} · {plural(omitted, 'more matching line')} not shown" if omitted else head


def search_reserve(budget: int, count: Count) -> Reserve:
    """Tokens for a search answer's header at its widest, and whether it must be terse."""
    big = int("9" * len(str(budget)))
    return header_reserve(
        lambda terse: (
            search_header(big, big, budget, 10**9, terse) + ("" if terse else "\n" + TIP_ROOM)
        ),
        budget,
        count,
    )


class Scored(NamedTuple):
    """A scored passage, with the group (candidate chunk) it belongs to."""

    score: float
    group: int
    first: int  # its first line
    passage: Passage


class Around(NamedTuple):
    """A passage (or a line number, made into one when measured) beside a shown one."""

    distance: int
    at: int
    group: int
    what: Passage | int
    size: int


def answer(
    groups: Sequence[Group],
    counter: TokenCounter,
    *,
    limit: int,
    budget: int,
    reserve: int,
    share: int,
    probes: Sequence[Group] = (),
    ranked_first: int | None = None,
) -> Answer:
    """Fill ``budget`` less ``reserve`` with the best passages of at most ``limit`` chunks.

    The first ``ranked_first`` groups rank by score together, later ones after them in
    chunk order; ``probes`` (earlier chunks) keep only passages holding every term of a
    best match, ranked as it is."""
    every = [*groups, *probes]
    first = len(groups) if ranked_first is None else ranked_first

    def tier(group: int) -> int:  # 0: ranked by score together; k: the k-th later chunk
        return group - first + 1 if first <= group < len(groups) else 0

    ranked = _ranked(groups, every, first)
    standing = _collapse(ranked, tier)
    anchors = _anchors(every, standing)
    ranked = [
        r
        for r in ranked
        if (r.passage.doc, r.first) not in standing
        and (r.passage.terms or (r.passage.doc, r.first) in anchors)
    ]
    ranked.sort(key=lambda r: (tier(r.group), -r.passage.score, r.first, r.group))
    room = budget - reserve
    chosen: dict[int, list[Passage]] = {}  # in the order the hits were opened
    used, omitted = _pack_best(ranked, every, chosen, counter, limit, room)
    used += _pack_around(every, chosen, standing, counter, room - used, share)
    short = False
    if not chosen and ranked:  # even the best passage is over budget: cut it to fit
        used, short = _cut_to_fit(ranked[0], every, chosen, counter, room)
        omitted = len(ranked) - 1
    out = [_header_of(every[k].hit, _in_order(ps, every[k])) for k, ps in chosen.items()]
    return Answer(tuple(out), omitted, used + reserve, budget, short)


def _in_order(shown: list[Passage], group: Group) -> list[Passage]:
    """``shown`` in text order: by line, a long line's pieces as the group lists them."""
    at = {id(p): i for i, p in enumerate(group.passages)}
    return sorted(shown, key=lambda p: (p.first, at.get(id(p), 0)))


def _ranked(groups: Sequence[Group], every: Sequence[Group], first: int) -> list[Scored]:
    """The matching passages of ``groups``, and the probes' holding a best match's terms."""
    ranked = [
        Scored(p.score, k, p.first, p) for k, g in enumerate(groups) for p in g.passages if p.score
    ]
    wanted = best_matches([r for r in ranked if r.group < first])
    for k in range(len(groups), len(every)):
        for p in every[k].passages:
            found = set(p.terms)
            scores = [v for (d, m), v in wanted.items() if d == p.doc and found >= m]
            if scores:
                p.score = max(scores)
                ranked.append(Scored(p.score, k, p.first, p))
    return ranked


def _collapse(ranked: Sequence[Scored], tier: Callable[[int], int]) -> set[tuple[str, int]]:
    """Collapse matching passages of one shape and query terms into the document's first,
    tier by tier (a later chunk never changes an earlier one); return the (doc, first
    line) of those collapsed."""
    first_of: dict[tuple[str, str, frozenset[str]], tuple[Passage, int]] = {}
    shape_of = Shapes()
    held: dict[int, frozenset[str]] = {}  # passages' terms are shared (see line_terms)
    standing: set[tuple[str, int]] = set()
    for r in sorted(ranked, key=lambda r: (tier(r.group), r.passage.doc, r.first)):
        p = r.passage
        if not p.terms or p.part:  # a piece's line is not its own: it stands alone
            continue
        terms = held.get(id(p.terms))
        if terms is None:
            terms = held[id(p.terms)] = frozenset(p.terms)
        key = (p.doc, shape_of(p.text), terms)
        level = tier(r.group)
        found = first_of.get(key)
        if found is None:
            first_of[key] = (p, level)
            continue
        rep, rep_level = found
        if rep_level == level:
            rep.like.append(p.first)
            rep.score = max(rep.score, p.score)
        standing.add((p.doc, p.first))
    for rep, _ in first_of.values():
        rep.like.sort()
    return standing


def _anchors(every: Sequence[Group], standing: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """The passages beside a matching one still shown (a non-matching one ranks only there)."""
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
    return anchors


def _pack_best(
    ranked: Sequence[Scored],
    every: Sequence[Group],
    chosen: dict[int, list[Passage]],
    counter: TokenCounter,
    limit: int,
    room: int,
) -> tuple[int, int]:
    """Take the best passages that fit ``room`` in at most ``limit`` hits; (used, left out)."""
    count = counter.count

    def measure(i: int) -> int | None:
        r = ranked[i]
        cost = count(r.passage.render()) + 1
        if r.group not in chosen:
            if len(chosen) >= limit:
                return None
            cost += count(_header_of(every[r.group].hit, [r.passage]).header()) + 2
        return cost

    def take(i: int) -> None:
        chosen.setdefault(ranked[i].group, []).append(ranked[i].passage)

    # An estimate is never below characters x ratio: a lower bound for the packer.
    bounds = [int(counter.ratio * len(r.passage.text)) for r in ranked]
    packed = pack(bounds, room, exact=measure, taken=take)
    return packed.used_tokens, packed.omitted


def _pack_around(
    every: Sequence[Group],
    chosen: dict[int, list[Passage]],
    standing: set[tuple[str, int]],
    counter: TokenCounter,
    room: int,
    share: int,
) -> int:
    """Fill ``room`` with the shown passages' surroundings, nearest first; the tokens used."""
    count = counter.count
    shown = {(p.doc, p.first) for ps in chosen.values() for p in ps}  # chunks overlap
    candidates = [
        Around(d, at, g, what, size)
        for g, ps in chosen.items()
        for d, at, what, size in surroundings(every[g], ps)
    ]
    around: list[Around] = []
    for item in sorted(candidates, key=lambda a: (a.distance, a.at, a.group)):
        spot = (every[item.group].hit.doc_id, item.at)
        if spot not in standing and spot not in shown:
            shown.add(spot)
            around.append(item)
    made: dict[int, list[Passage]] = {}

    def measure(i: int) -> int:
        made[i] = materialize(every[around[i].group], around[i].what, share, count)
        return sum(count(p.render()) + 1 for p in made[i])

    def take(i: int) -> None:
        chosen[around[i].group].extend(made[i])

    bounds = [int(counter.ratio * a.size) for a in around]
    return pack(bounds, room, exact=measure, taken=take).used_tokens


def _cut_to_fit(
    best: Scored,
    every: Sequence[Group],
    chosen: dict[int, list[Passage]],
    counter: TokenCounter,
    room: int,
) -> tuple[int, bool]:
    """Show the best passage cut to ``room``: (used, header without its heading trail)."""
    count, p = counter.count, best.passage
    hit = every[best.group].hit
    head = count(_header_of(hit, [p]).header()) + 2
    short = room - head < 8  # a budget this small has no room for the heading trail
    if short:
        head = count(_header_of(hit, [p]).header(short=True)) + 2
    p.text = counter.truncate(p.text, max(1, room - head - 4))
    p.like = []
    chosen[best.group] = [p]
    return head + count(p.render()) + 1, short


def best_matches(ranked: Sequence[Scored]) -> dict[Any, float]:
    """The best passages' (doc, matched terms) with their scores: those within half the top."""
    top = max((r.score for r in ranked), default=0.0)
    out: dict[Any, float] = {}
    for r in ranked:
        p = r.passage
        if p.terms and r.score >= top / 2:
            key = (p.doc, frozenset(p.terms))
            out[key] = max(out.get(key, 0.0), r.score)
    return out


def _header_of(hit: Hit, passages: list[Passage]) -> LineHit:
    """A LineHit for ``hit`` showing ``passages``; its line range is the chunk's."""
    c = hit.chunk
    first = max(c.line, 1)
    last = first + c.text.count("\n") - (1 if c.text.endswith("\n") else 0)
    return LineHit(
        hit.doc_id, hit.title, c.index, c.heading, first, last, max(0.0, hit.score), tuple(passages)
    )
