"""Finding text in documents: the best chunks across documents, then their best passages."""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

from context_window.documents.answers import Answer, Scored, answer, best_matches
from context_window.documents.index import Corpus
from context_window.documents.passages import (
    Group,
    Passage,
    Scorer,
    candidate_passages,
    smooth,
)
from context_window.documents.tables import DocInfo, Tables
from context_window.models import Hit
from context_window.retrieval.analyzer import Analyzer
from context_window.retrieval.bm25 import idf_of
from context_window.tokens import TokenCounter

CANDIDATE_CHUNKS = 6  # the best chunks whose passages are ranked together (see best_passages)
READ_AT_ONCE = 64  # the most chunks read at once when all that match fit the budget
# A passage over this share of the room is cut into sentences, so this many hits fit.
HITS_THAT_FIT = 3
PROBES = 32  # earlier chunks read per search, to find where the best lines' kind first occurs


class RankedChunk(NamedTuple):
    """A chunk as ranked: its score, its document's place in the corpus, its number."""

    score: float
    doc: int
    chunk: int


Ranked = list[RankedChunk]  # best first


class Rescore(Protocol):
    """What rescores a search's passages in place (``PassageMeaning``)."""

    @property
    def chunks(self) -> int:
        """How many of the best chunks to rank together (0: ``CANDIDATE_CHUNKS``)."""

    def __call__(self, passages: list[Passage]) -> bool:
        """Rescore; whether it did (if not, words alone rank ``CANDIDATE_CHUNKS``)."""


def pool(meaning: Rescore | None) -> int:
    """How many of the best chunks a search ranks together."""
    return (meaning.chunks if meaning is not None else 0) or CANDIDATE_CHUNKS


def ranked_chunks(corpus: Corpus, terms: list[str], limit: int) -> Ranked:
    """The ``limit`` best chunks for ``terms``: (score, document's place, chunk number)."""
    scores, matched, bases = corpus.score(terms)
    candidates = np.flatnonzero(matched)
    if len(candidates) > limit:  # every chunk tied with the limit-th, then by position
        values = scores[candidates]
        kth = np.partition(values, len(values) - limit)[len(values) - limit]
        candidates = candidates[values >= kth]
    # Joined positions run document after document, chunk after chunk: the tie order.
    best = candidates[np.lexsort((candidates, -scores[candidates]))[:limit]]
    owners = np.searchsorted(bases, best, side="right") - 1
    return [
        RankedChunk(float(scores[g]), int(k), int(g - bases[k]))
        for g, k in zip(best, owners, strict=True)
    ]


def hits_of(docs: list[DocInfo], tables: list[Tables], ranked: Ranked) -> list[Hit]:
    """The ranked chunks, read."""
    return [
        Hit(docs[r.doc].id, docs[r.doc].title, tables[r.doc].read(r.chunk, r.chunk)[0], r.score)
        for r in ranked
    ]


def best_passages(
    hits: list[Hit],
    tables: dict[str, Tables],
    corpus: Corpus,
    terms: list[str],
    analyzer: Analyzer,
    counter: TokenCounter,
    limit: int,
    budget: int,
    reserve: int,
    meaning: Rescore | None = None,
) -> Answer:
    """The best passages of ``hits`` within ``budget`` less ``reserve``, with the first
    occurrence of each best line's kind of match found through the index.

    The first ``pool(meaning)`` hits rank by their passages, further ones after them in
    chunk order, so a rank never depends on ``limit``. ``meaning`` rescores those
    passages; if it cannot, the first ``CANDIDATE_CHUNKS`` rank by words alone.
    """
    idf = idf_of(terms, corpus.stats.n, lambda t: len(j[0]) if (j := corpus.joined(t)) else 0)
    count = counter.count
    size = pool(meaning)
    while True:
        scorer = Scorer(terms, idf, analyzer.expand)
        first, later = hits[:size], hits[size:]
        share = max(32, (budget - reserve) // max(1, min(HITS_THAT_FIT, len(first))))
        seen: set[tuple[str, int]] = set()
        groups = candidate_passages(first, share, count, scorer, seen)  # sets the mean length
        smooth(groups)
        if meaning is None or size != pool(meaning):
            break  # by words alone (asked once: meaning may wait for the endpoint)
        if meaning([p for g in groups for p in g.passages]) or size == CANDIDATE_CHUNKS:
            break
        size = CANDIDATE_CHUNKS
    # Where does each best line's match first occur? Read the earliest chunks holding it.
    have = {(h.doc_id, h.chunk.index) for h in first}
    ranked = [Scored(p.score, 0, p.first, p) for g in groups for p in g.passages if p.score > 0]
    probes: list[Group] = []
    reads = 0
    for (doc, matched), _ in best_matches(ranked).items():
        first_line = min(
            r.first for r in ranked if r.passage.doc == doc and set(r.passage.terms) >= matched
        )
        index, title = tables[doc].index, next(h.title for h in hits if h.doc_id == doc)
        for i in index.first_with_all(list(matched), tables[doc].chunk_of(first_line), PROBES):
            if (doc, i) in have or reads >= PROBES:
                break
            have.add((doc, i))
            reads += 1
            hit = Hit(doc, title, tables[doc].read(i, i)[0], 0.0)
            group = candidate_passages([hit], share, count, scorer, seen)[0]
            if any(set(p.terms) >= matched for p in group.passages):
                probes.append(group)
                break
    rest = candidate_passages(later, share, count, scorer, seen)
    smooth(rest)
    return answer(
        [*groups, *rest],
        counter,
        limit=limit,
        budget=budget,
        reserve=reserve,
        share=share,
        probes=probes,
        ranked_first=len(groups),
    )
