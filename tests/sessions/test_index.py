"""A session's in-memory index scores as rank_bm25.BM25Okapi (the reference) does."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

from context_window.retrieval.analyzer import Analyzer
from context_window.sessions.index import FOLD_POSTINGS, MemoryIndex


def reference(corpus: list[list[str]], query: list[str]) -> np.ndarray:
    return np.asarray(BM25Okapi(corpus, k1=1.2, b=0.75, epsilon=0.25).get_scores(query))


def ours(corpus: list[list[str]], query: list[str]) -> np.ndarray:
    index = MemoryIndex()
    for doc in corpus:
        index.add(dict(Counter(doc)))
    return index.scores(query)


# --- BM25 parity ----------------------------------------------------------------------

CORPORA = {
    "plain": (
        [
            ["cache", "miss", "latency", "server"],
            ["server", "restart", "config"],
            ["database", "index", "cache", "cache"],
            ["user", "login", "token", "expiry", "token"],
            ["config", "yaml", "parse", "error"],
        ],
        ["cache", "server", "token"],
    ),
    "common term in most docs (negative idf floored)": (
        [
            ["error", "disk"],
            ["error", "net"],
            ["error", "cpu", "disk"],
            ["error"],
            ["ok", "disk"],
            ["error", "error", "mem"],
        ],
        ["error", "disk", "mem"],
    ),
    "repeated and unseen query terms": (
        [["alpha", "beta"], ["beta", "gamma", "gamma"], ["delta"], ["alpha", "alpha", "zeta"]],
        ["gamma", "gamma", "nowhere", "alpha", "alpha", "alpha"],
    ),
    "term in exactly half the docs (idf 0)": (
        [["a1", "b1"], ["a1", "c1"], ["d1"], ["e1"]],
        ["a1", "d1"],
    ),
    "single document": ([["only", "one", "doc", "doc"]], ["doc", "only", "missing"]),
    "an empty document among others": ([["x1", "y1"], [], ["x1"]], ["x1", "y1"]),
}


@pytest.mark.parametrize("name", list(CORPORA))
def test_scores_match_rank_bm25(name: str) -> None:
    corpus, query = CORPORA[name]
    expected = reference(corpus, query)
    got = ours(corpus, query)
    assert got.shape == expected.shape
    assert np.allclose(got, expected, rtol=1e-9, atol=1e-12), (got, expected)


def test_negative_idf_corpus_really_exercises_the_floor() -> None:
    corpus, _ = CORPORA["common term in most docs (negative idf floored)"]
    bm = BM25Okapi(corpus, k1=1.2, b=0.75, epsilon=0.25)
    assert bm.idf["error"] == pytest.approx(0.25 * bm.average_idf)
    assert ours(corpus, ["error"])[4] == 0.0  # the doc without the term
    assert ours(corpus, ["error"])[0] > 0.0


def test_empty_index_and_empty_query() -> None:
    assert ours([], ["x"]).shape == (0,)
    assert not ours([["a1"], ["b1"]], []).any()


def test_scores_update_as_documents_are_added() -> None:
    corpus = [["red", "apple"], ["green", "apple"], ["red", "car"]]
    index = MemoryIndex()
    for n, doc in enumerate(corpus, start=1):
        index.add(dict(Counter(doc)))
        assert np.allclose(index.scores(["red", "apple"]), reference(corpus[:n], ["red", "apple"]))


VOCAB = [f"w{i}" for i in range(12)]


@given(
    st.lists(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=15), min_size=1, max_size=25),
    st.lists(st.sampled_from([*VOCAB, "unseen"]), min_size=1, max_size=6),
)
@settings(max_examples=150, deadline=None)
def test_random_corpora_match_rank_bm25(corpus: list[list[str]], query: list[str]) -> None:
    assert np.allclose(ours(corpus, query), reference(corpus, query), rtol=1e-9, atol=1e-12)


def test_analyzer_feeds_the_index_like_rank_bm25_token_lists() -> None:
    texts = [
        "The getUserName helper returns the user's name",
        "HTTPServer restarts after config reload",
        "user login fails: token_expiry in auth_service",
        "name resolution for the HTTP server is slow",
    ]
    a = Analyzer()
    index = MemoryIndex()
    for t in texts:
        index.add(a.counts(t))
    query = a.terms("user name http")
    expected = reference([a.terms(t) for t in texts], query)
    assert np.allclose(index.scores(query), expected)
    assert int(np.argmax(expected)) == 0


REAL_TEXT = [
    Path(__file__).parents[1] / "data" / "docs" / "build.log",
    Path(__file__).parents[2] / "README.md",
]


@pytest.mark.parametrize("path", REAL_TEXT, ids=lambda p: p.name)
def test_scores_equal_rank_bm25_on_real_text(path: Path) -> None:
    """Every non-blank line of a real file is a document; each query is a line of it."""
    a = Analyzer()
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    corpus = [a.terms(line) for line in lines]
    index = MemoryIndex()
    for line in lines:
        index.add(a.counts(line))
    queries = [a.terms(lines[k]) for k in range(0, len(lines), max(1, len(lines) // 12))]
    assert len(corpus) > 50 and sum(map(len, queries)) > 50
    for query in queries:
        assert np.allclose(index.scores(query), reference(corpus, query), rtol=1e-9, atol=1e-12)


# --- statistics over what can be returned -----------------------------------------------


@pytest.mark.parametrize("name", sorted(CORPORA))
def test_excluded_documents_leave_the_statistics(name: str) -> None:
    corpus, query = CORPORA[name]
    index = MemoryIndex()
    for doc in corpus:
        index.add(dict(Counter(doc)))
    for drop in range(len(corpus)):
        exclude = np.zeros(len(corpus), dtype=np.bool_)
        exclude[drop] = True
        kept = [doc for i, doc in enumerate(corpus) if i != drop]
        if not any(kept):
            assert not index.scores(query, exclude=exclude).any()
            continue
        expected = np.insert(reference(kept, query), drop, 0.0)
        assert np.allclose(index.scores(query, exclude=exclude), expected)
    assert np.allclose(
        index.scores(query, exclude=np.zeros(len(corpus), bool)), ours(corpus, query)
    )


def test_folded_and_restored_index_scores_as_rank_bm25() -> None:
    # Postings added one document at a time go to per-term arrays, merged into flat base
    # arrays every FOLD_POSTINGS; a snapshot exports and restores the base. Scores (with
    # and without excluded documents) must stay rank_bm25's through folds, exports and
    # appends after a restore.
    rng = random.Random(11)
    words = [f"t{k}" for k in range(400)]
    corpus = [[rng.choice(words) for _ in range(rng.randint(5, 60))] for _ in range(6_000)]
    assert sum(len(set(d)) for d in corpus) > 2 * FOLD_POSTINGS  # several folds happen
    queries = [["t1", "t7"], ["t399", "t0", "t0"], ["t42", "nosuch"]]
    index = MemoryIndex()
    for i, doc in enumerate(corpus):
        index.add(dict(Counter(doc)))
        if i in (100, 3_500):  # queries between folds: cached postings must follow
            for q in queries:
                assert np.allclose(index.scores(q), reference(corpus[: i + 1], q))
    terms, arrays = index.export()
    again = MemoryIndex.restore(terms, arrays)
    new_words = [f"n{k}" for k in range(30)]  # terms the restored table does not hold
    more = [[rng.choice(words + new_words) for _ in range(20)] for _ in range(50)]
    for doc in more:
        again.add(dict(Counter(doc)))
    assert set(again._terms._added) == {w for d in more for w in d if w.startswith("n")}
    every = corpus + more
    exclude = np.zeros(len(every), dtype=np.bool_)
    exclude[::7] = True
    kept = [d for i, d in enumerate(every) if not exclude[i]]
    queries.append(["n3", "t5"])
    third = MemoryIndex.restore(*again.export())  # the table, the new terms merged in
    for q in queries:
        for restored in (again, third):
            assert np.allclose(restored.scores(q), reference(every, q))
        expected = np.zeros(len(every))
        expected[~exclude] = reference(kept, q)
        assert np.allclose(again.scores(q, exclude=exclude), expected)
    offsets = arrays["offsets"].copy()
    offsets[3] = offsets[2] - 1
    with pytest.raises(ValueError):
        MemoryIndex.restore(terms, {**arrays, "offsets": offsets})
    with pytest.raises(ValueError):
        MemoryIndex.restore(terms[:-1], arrays)


def test_a_batch_indexes_as_its_documents_one_at_a_time() -> None:
    """``add_many`` (a replayed tail, in termcount's shape) scores as ``add`` of each; the
    shared vocabulary holds terms the batch lacks, which take no number."""
    corpus, _ = CORPORA["plain"]
    vocabulary = ["unused", *sorted({w for d in corpus for w in d}), "also-unused"]
    at = {w: k for k, w in enumerate(vocabulary)}
    rows = [(i, at[w], n) for i, d in enumerate(corpus) for w, n in Counter(d).items()]
    doc, term, tf = (np.array(col, dtype=np.uint32) for col in zip(*rows, strict=True))
    batch = MemoryIndex()
    batch.add_many(doc, term, tf, np.array([len(d) for d in corpus]), vocabulary)
    for query in (["cache", "server"], ["token", "unused"], ["config"]):
        assert np.allclose(batch.scores(query), ours(corpus, query))
    assert "unused" not in batch._terms._added and "also-unused" not in batch._terms._added
