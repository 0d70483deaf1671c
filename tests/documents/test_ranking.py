"""A search's ranking depends on the query and the documents, never on ``limit``: asked
for more hits, ``doc_search`` shows the same best ones first and adds others after them."""

from __future__ import annotations

import itertools
import random
import re
from pathlib import Path

import pytest

from context_window.documents.ranking import CANDIDATE_CHUNKS
from context_window.documents.store import DocumentStore
from context_window.tokens import TokenCounter

DATA = Path(__file__).parents[1] / "data"
SOURCES = {
    "build": DATA / "docs" / "build.log",
    "guide": DATA / "docs" / "guide.md",
    "hdfs": DATA / "chunking" / "hdfs_600.log",
    "ledger": DATA / "chunking" / "ledger.py.txt",
}
LIMITS = (1, 2, 3, 5, CANDIDATE_CHUNKS, CANDIDATE_CHUNKS + 1, 10, 20, 40)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> DocumentStore:
    root = tmp_path_factory.mktemp("ranking")
    out = DocumentStore(root / "data", TokenCounter(0.27), chunk_tokens=120)
    for doc_id, path in SOURCES.items():
        out.ingest(text=path.read_text(encoding="utf-8"), doc_id=doc_id)
    return out


def queries(n: int, seed: int) -> list[str]:
    """Three or four words of random lines of the sources: broad and rare words alike."""
    rng = random.Random(seed)
    lines = [
        words
        for path in SOURCES.values()
        for line in path.read_text(encoding="utf-8").splitlines()
        if len(words := re.findall(r"[A-Za-z]{3,}", line)) >= 4
    ]
    return [" ".join(rng.sample(rng.choice(lines), rng.randint(3, 4))) for _ in range(n)]


def shown(
    store: DocumentStore, query: str, doc_id: str | None, limit: int, budget: int
) -> list[tuple[str, int]]:
    found = store.answer(query, doc_id, limit, budget)
    assert found is not None
    return [(h.doc_id, h.chunk) for h in found.hits]


@pytest.mark.parametrize("budget", [600, 4000])
@pytest.mark.parametrize("doc_id", [None, "hdfs", "guide"])
def test_a_higher_limit_keeps_the_hits_of_a_lower_one_first(
    store: DocumentStore, doc_id: str | None, budget: int
) -> None:
    reordered = []
    for query in queries(40, seed=len(str(doc_id)) + budget):
        answers = {limit: shown(store, query, doc_id, limit, budget) for limit in LIMITS}
        for low, high in itertools.pairwise(LIMITS):
            hits, more = answers[low], answers[high]
            assert len(hits) <= low
            if more[: len(hits)] != hits:
                reordered.append((query, low, high, hits, more))
    assert not reordered, f"{len(reordered)} reorderings, first: {reordered[0]}"
