"""The persisted document index: exact term counts, BM25 parity with rank_bm25, mmap reopen."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from context_window.documents.checks import IN_MEMORY_BYTES
from context_window.documents.index import (
    Corpus,
    DocIndex,
    IndexBuilder,
    score_all,
)
from context_window.documents.passages import (
    _VARIABLE,
    _VARIABLE_ASCII,
    Scorer,
    Shapes,
    _distances,
    shape,
    word_count,
)
from context_window.retrieval import wordscan
from context_window.retrieval.analyzer import Analyzer
from context_window.retrieval.termcount import (
    NUMBER,
    NumberTable,
    Sizes,
    TermCounter,
    Triples,
    is_number_term,
    number_key,
    number_text,
)

LOGHUB = Path(__file__).resolve().parents[3] / "shared" / "data" / "loghub"
if not LOGHUB.is_dir():
    LOGHUB = Path("/work/shared/data/loghub")

TEXTS = [
    "getUserName returns the user's name; snake_case_names split too.",
    "PacketResponder 1 for block blk_38865049064139660 terminating",
    "Ünïcode naïve Straße ÉcoleNormale café 東京 mixed with ASCII words",
    "x" * 100 + " " + "Ab" * 40 + " $dollar_var and a_b_c and $ alone",
    "The the THE tHe is a stop word heavy sentence, but Error ERROR error count.",
    "",
    "!!! ??? ...",
    "jk2_init() Found child 6725 in scoreboard slot 10 workerEnv.init() ok",
    "07 007 0 00 1234567890123456789 12345678901234567890 9999999999999999999 x86_64 0x7f",
]


def build(
    tmp_path: Path,
    texts: list[str],
    batch: int = 3,
    sizes: Sizes = Sizes(),
    scan: bool | None = None,
    **passes: int,
) -> tuple[DocIndex, Analyzer]:
    (tmp_path / "index").mkdir(parents=True, exist_ok=True)
    counter = TermCounter(numbers=True, spill=tmp_path / "index", scan=scan, sizes=sizes)
    builder = IndexBuilder(tmp_path / "index", **passes)
    for i in range(0, len(texts), batch):
        builder.add(counter.count(texts[i : i + batch]))
    builder.write(tmp_path / "index", counter)
    return DocIndex(tmp_path / "index"), counter.analyzer


def names_of(counter: TermCounter) -> dict[int, str]:
    """Every term id the counter gave, with its term."""
    names = {v: k for k, v in counter.vocab.items()}
    if counter.numbers is not None:
        keys, ids = counter.numbers.sorted()
        names.update(
            (NUMBER | i, number_text(k)) for k, i in zip(keys.tolist(), ids.tolist(), strict=True)
        )
    return names


needs_numba = pytest.mark.skipif(not wordscan.available(), reason="numba is not installed")
# (numbers kept apart, compiled scan): every way a counter can count
COUNTERS = [(False, False), (True, False), pytest.param(True, True, marks=needs_numba)]


@pytest.mark.parametrize(("numbers", "scan"), COUNTERS)
def test_term_counts_equal_the_analyzer_on_every_text(numbers: bool, scan: bool) -> None:
    counter = TermCounter(numbers=numbers, scan=scan)
    triples = counter.count(TEXTS)
    names = names_of(counter)
    if numbers:  # no number term among the words, and every one among the numbers
        assert not [t for t in counter.vocab if is_number_term(t)]
        assert {"07", "007", "00", "1234567890123456789", "9999999999999999999"} <= set(
            names.values()
        )
        assert "12345678901234567890" in counter.vocab  # 20 digits: a word
    analyzer = Analyzer()
    for row, text in enumerate(TEXTS):
        mask = triples.chunk == row
        pairs = zip(triples.term[mask], triples.tf[mask], strict=True)
        got = {names[int(t)]: int(n) for t, n in pairs}
        assert got == analyzer.counts(text), text
        assert triples.lengths[row] == sum(analyzer.counts(text).values())


@pytest.mark.parametrize(("numbers", "scan"), COUNTERS)
@pytest.mark.parametrize("system", ["HDFS", "Apache", "Linux"])
def test_term_counts_equal_the_analyzer_on_real_logs(
    system: str, numbers: bool, scan: bool
) -> None:
    lines = (LOGHUB / system / f"{system}_2k.log").read_text().splitlines()
    texts = ["\n".join(lines[i : i + 40]) for i in range(0, len(lines), 40)]
    counter = TermCounter(numbers=numbers, scan=scan)
    triples = counter.count(texts)
    names = names_of(counter)
    analyzer = Analyzer()
    for row, text in enumerate(texts):
        mask = triples.chunk == row
        pairs = zip(triples.term[mask], triples.tf[mask], strict=True)
        got = {names[int(t)]: int(n) for t, n in pairs}
        assert got == analyzer.counts(text)


@pytest.mark.parametrize(
    "query",
    ["user name", "error", "block terminating blk_38865049064139660", "café naïve", "the"],
)
def test_scores_equal_rank_bm25(tmp_path: Path, query: str) -> None:
    corpus = [t for t in TEXTS if t] + [
        "error in module one",
        "another error here",
        "user session opened for user root",
        "nothing relevant at all in this one",
    ]
    index, analyzer = build(tmp_path, corpus)
    reference = BM25Okapi([analyzer.terms(t) for t in corpus], k1=1.2, b=0.75)
    terms = analyzer.terms(query)
    np.testing.assert_allclose(index.scores(terms), reference.get_scores(terms), rtol=1e-12)


def test_many_documents_use_summed_statistics(tmp_path: Path) -> None:
    """Searching two documents scores like one index of all their chunks (epsilon aside)."""
    a = ["alpha beta gamma", "beta delta", "gamma epsilon zeta"]
    b = ["alpha alpha omega", "omega psi", "beta psi chi", "chi phi"]
    ia, analyzer = build(tmp_path / "a", a)
    ib, _ = build(tmp_path / "b", b)
    both, _ = build(tmp_path / "ab", a + b)
    terms = analyzer.terms("alpha omega chi")  # all rare: no epsilon floor involved
    split = np.concatenate([s for s, _ in score_all([ia, ib], terms)])
    np.testing.assert_allclose(split, both.scores(terms), rtol=1e-12)


def test_a_corpus_remembers_joined_postings_and_scores_the_same(tmp_path: Path) -> None:
    a = ["alpha beta gamma", "beta delta", "gamma epsilon zeta"]
    b = ["alpha alpha omega", "omega psi", "beta psi chi", "chi phi"]
    ia, analyzer = build(tmp_path / "a", a)
    ib, _ = build(tmp_path / "b", b)
    both, _ = build(tmp_path / "ab", a + b)
    corpus = Corpus([ia, ib])
    for query in ("alpha omega chi", "psi", "alpha omega chi", "nothing here", "psi"):
        terms = analyzer.terms(query)
        scores, matched, bases = corpus.score(terms)
        np.testing.assert_allclose(scores, both.scores(terms), rtol=1e-12)
        assert list(bases) == [0, 3, 7]
        assert matched.sum() == sum(1 for t in a + b if set(analyzer.terms(t)) & set(terms))
    assert "psi" in corpus._joined and "omega" in corpus._joined  # remembered for next time


def test_reopened_small_index_is_read_whole_and_finds_terms(tmp_path: Path) -> None:
    index, _ = build(tmp_path, TEXTS)
    again = DocIndex(tmp_path / "index")
    maps = Path("/proc/self/maps").read_text()
    for name in ("terms.bin", "post_chunks.npy", "post_tfs.npy", "doc_len.npy"):
        assert str(tmp_path / "index" / name) not in maps, name  # small: no mapping held
    assert again.find("name") >= 0 and again.find("getusernam") >= 0
    assert again.find("nosuchterm") == -1
    assert again.doc_freq("error") == 1
    terms = (tmp_path / "index" / "terms.bin").read_bytes()
    assert b"stra\xc3\x9fe" in terms  # UTF-8, sorted by bytes
    np.testing.assert_array_equal(again.scores(["user"]), index.scores(["user"]))


@pytest.mark.parametrize(("per_pass", "per_run"), [(1 << 21, 1 << 18), (700, 50), (1, 1)])
def test_postings_sorted_in_passes_hold_every_chunk_of_every_term(
    tmp_path: Path, per_pass: int, per_run: int
) -> None:
    # Skewed term frequencies (a few terms in most chunks, many in one or two), built in
    # batches, read back in blocks and sorted a range of terms at a time (one range; ~17;
    # one per term): each term's postings must be exactly its chunks, ascending, with
    # their counts. Numbers and words alike, the words spilled in runs of at most
    # ``per_run`` (so most are in several runs, under other ids) or kept in memory.
    rng = np.random.default_rng(5)
    vocab = [f"w{k}z" if k % 3 else f"{k:04d}" for k in range(400)]
    texts = [
        " ".join(vocab[int(k)] for k in rng.zipf(1.3, size=40) % len(vocab)) for _ in range(300)
    ]
    index, analyzer = build(
        tmp_path,
        texts,
        batch=37,
        sizes=Sizes(words_per_run=per_run),
        postings_per_pass=per_pass,
        rows_per_read=1000,
    )
    assert not list((tmp_path / "index").glob(".*"))  # the spill files are gone
    expected: dict[str, dict[int, int]] = {}
    for c, text in enumerate(texts):
        for term, tf in analyzer.counts(text).items():
            expected.setdefault(term, {})[c] = tf
    assert index.n_terms == len(expected)
    for term, chunks in expected.items():
        got_chunks, got_tfs = index.postings(index.find(term))
        assert got_chunks.tolist() == sorted(chunks), term
        assert got_tfs.tolist() == [chunks[c] for c in sorted(chunks)], term


def test_a_small_vocabulary_in_memory_finds_what_the_file_search_finds(tmp_path: Path) -> None:
    index, _ = build(tmp_path, TEXTS)
    assert index._vocab is not None and len(index._vocab) == index.n_terms
    probes = [*index._vocab, "nosuchterm", "", "zzzz", "a", "straße", "STRASSE"]
    for term in probes:
        assert index.find(term) == index._search(term), term
    assert sorted(index._vocab.values()) == list(range(index.n_terms))


def test_large_index_arrays_are_memory_mapped(tmp_path: Path) -> None:
    texts = [" ".join(f"w{c}x{k}" for k in range(120)) for c in range(2_500)]
    build(tmp_path, texts, batch=500)
    assert (tmp_path / "index" / "post_chunks.npy").stat().st_size > IN_MEMORY_BYTES
    big = DocIndex(tmp_path / "index")
    maps = Path("/proc/self/maps").read_text()
    for name in ("terms.bin", "post_chunks.npy", "post_tfs.npy"):
        assert str(tmp_path / "index" / name) in maps, name  # mapped, not read into memory
    assert str(tmp_path / "index" / "doc_len.npy") not in maps  # 10 KB: read whole
    assert big.doc_freq("w7x3") == 1 and big.scores(["w7x3"]).argmax() == 7


def test_empty_vocabulary(tmp_path: Path) -> None:
    index, _ = build(tmp_path, ["!!!", "..."])
    assert index.n_terms == 0 and index.find("x") == -1
    assert list(index.scores(["anything"])) == [0.0, 0.0]


@pytest.mark.parametrize(
    "query",
    ["user name", "getUserName", "block terminating blk_38865049064139660", "café straße", "error"],
)
def test_passage_terms_equal_the_analyzer(query: str) -> None:
    # The scorer analyses only the words holding a query key; what it finds per line
    # must be what the index's analyzer finds there (Snowball's few irregular forms,
    # like dying -> die, are the documented exception and absent here).
    analyzer = Analyzer()
    terms = analyzer.query(query)
    scorer = Scorer(terms, {t: 1.0 for t in terms}, analyzer.expand)
    lines = [*TEXTS, "İstanbul user names", "USERNAME UserName user_name"]
    lines += (LOGHUB / "HDFS" / "HDFS_2k.log").read_text().splitlines()[:300]
    for line in lines:
        want = {t: n for t, n in analyzer.counts(line).items() if t in terms}
        assert scorer.terms_of(line) == want, line
        assert word_count(line) == len(re.findall(r"[\w$]+", line)), line
    # A line and its twin with other digits in the same places hold the same terms unless
    # a query term holds a digit: the scorer then reads them once, else each alone.
    digits = any(c.isdigit() for t in terms for c in t)
    for line in lines:
        twin = re.sub(r"\d", lambda d: str(9 - int(d[0])), line)
        for text in (line, twin):
            want = {t: n for t, n in analyzer.counts(text).items() if t in terms}
            assert scorer.line_terms(text) == (want, word_count(text)), text
    assert (len(scorer._lines) > len(set(lines))) == digits


def test_shapes_memo_equals_shape_and_merges_only_digit_changes() -> None:
    lines = (LOGHUB / "HDFS" / "HDFS_2k.log").read_text().splitlines()[:400]
    lines += [*TEXTS, "İstanbul 12 user", "İstanbul 34 user", "x9 y", "x y9", "x 9y", "\ud800 1"]
    lines += ["a.b:c/d@e$f+g-h_9 x", "(9) [x9] {9y} 'q9' \"9\" a=9,b;9 ~9 #9 9!"]
    shapes = Shapes()
    for line in lines + lines[::-1]:
        assert shapes(line) == shape(line), line
        low = line.lower()  # ASCII text takes the spelt-out pattern: it must mask the same
        assert not low.isascii() or _VARIABLE_ASCII.sub("#", low) == _VARIABLE.sub("#", low)
    assert len(shapes._known) < len(set(lines)) / 2  # log lines differ mostly in digits
    one = Shapes()
    assert one("blk_12 ok") == one("blk_98 ok") == "# ok" and len(one._known) == 1
    assert one("x9 y") == "# y" != one("x y9") == "x #"  # the same digits, other tokens


def test_first_with_all_lists_the_earliest_chunks_holding_every_term(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    words = ["alpha", "beta", "gamma", "delta"]
    texts = [" ".join(w for w in words if rng.random() < p) or "none" for p in [0.7] * 900]
    index, analyzer = build(tmp_path, texts, batch=100)
    held = [set(analyzer.terms(t)) for t in texts]
    for chosen in (["alpha"], ["alpha", "beta"], ["beta", "gamma", "delta"], words):
        terms = [analyzer.terms(w)[0] for w in chosen]
        for before, count in ((900, 32), (900, 1000), (450, 5), (3, 32), (0, 32)):
            want = [i for i in range(before) if held[i] >= set(terms)][:count]
            assert index.first_with_all(terms, before, count) == want, (chosen, before, count)
    assert index.first_with_all(["alpha", "absent"], 900, 32) == []


def test_distances_to_the_nearest_mark_equal_a_brute_force() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        marks = sorted({int(x) for x in rng.integers(0, 60, rng.integers(1, 6))})
        numbers = sorted({int(x) for x in rng.integers(0, 60, rng.integers(0, 30))})
        want = [min(abs(x - m) for m in marks) for x in numbers]
        assert _distances(numbers, marks) == want, (numbers, marks)


def test_number_keys_are_one_per_digit_string_in_length_then_value_order() -> None:
    rng = np.random.default_rng(3)
    terms = {"00", "000", "01", "10", "99", "100", "0" * 19, "9" * 19}
    terms |= {"".join(map(str, rng.integers(0, 10, size=n))) for n in rng.integers(2, 20, 500)}
    keys = {t: number_key(t) for t in terms}
    assert len(set(keys.values())) == len(terms)
    assert all(number_text(k) == t for t, k in keys.items())
    assert sorted(terms, key=lambda t: (len(t), t)) == sorted(terms, key=keys.__getitem__)
    assert max(keys.values()) < 2**64
    assert not is_number_term("7") and not is_number_term("1" * 20)
    assert not is_number_term("\u0661\u0662") and not is_number_term("12a")  # ASCII digits only


@pytest.mark.parametrize("piece", [1 << 20, 50])
def test_number_table_numbers_each_key_once_across_batches_and_merges(piece: int) -> None:
    # Merged into the large part often; with piece 50, in many pieces.
    rng = np.random.default_rng(11)
    table, seen = NumberTable(Sizes(recent_floor=8, number_piece=piece)), {}
    for _ in range(60):
        keys = rng.integers(0, 3_000, size=int(rng.integers(1, 200))).astype(np.uint64)
        ids = table.ids(keys)
        assert (ids & NUMBER).all()
        for k, i in zip(keys.tolist(), (ids & ~np.uint32(NUMBER)).tolist(), strict=True):
            assert seen.setdefault(k, i) == i  # the same key keeps its id
    assert sorted(seen.values()) == list(range(len(seen))) and table.size == len(seen)
    keys, ids = table.sorted()
    assert keys.tolist() == sorted(seen) and ids.tolist() == [seen[k] for k in sorted(seen)]
    pieces = list(table.drain())
    assert (len(pieces) > 10) == (piece == 50)
    assert all(len(k) <= piece for k, _ in pieces)
    assert np.concatenate([k for k, _ in pieces]).tolist() == sorted(seen)
    assert np.concatenate([i for _, i in pieces]).tolist() == [seen[k] for k in sorted(seen)]
    assert table.size == 0 and table.sorted()[0].size == 0


def test_numbers_are_found_in_the_index_by_key(tmp_path: Path) -> None:
    texts = ["port 8080 pid 00123 at 2015", "port 443 pid 123", "x86_64 build 2015 0x7f"]
    index, analyzer = build(tmp_path, texts, batch=2)
    reference = BM25Okapi([analyzer.terms(t) for t in texts], k1=1.2, b=0.75)
    every = {t for text in texts for t in analyzer.terms(text)}
    assert {"8080", "00123", "123", "2015", "443", "86", "64", "x86_64", "0x7f"} <= every
    for term in every:
        assert index.find(term) >= 0, term
        assert index._search(term) == index.find(term), term
        np.testing.assert_allclose(index.scores([term]), reference.get_scores([term]))
    assert index.find("0123") == -1 and index.find("8081") == -1
    numbers = np.load(tmp_path / "index" / "numbers.npy")
    assert [number_text(k) for k in numbers.tolist()] == sorted(
        {t for text in texts for t in analyzer.terms(text) if is_number_term(t)},
        key=lambda t: (len(t), t),
    )
    assert b"8080" not in (tmp_path / "index" / "terms.bin").read_bytes()


def named(triples: Triples, counter: TermCounter) -> set[tuple[int, str, int]]:
    names = names_of(counter)
    rows = zip(triples.chunk.tolist(), triples.term.tolist(), triples.tf.tolist(), strict=True)
    return {(c, names[t], n) for c, t, n in rows}


@pytest.mark.parametrize("scan", [False, pytest.param(True, marks=needs_numba)])
def test_a_log_in_colour_counts_as_the_analyzer_does(scan: bool) -> None:
    # A CI log's ANSI colours (ESC [ ... m) glue to the words beside them: "31merror".
    texts = [f"{i} \x1b[31merror\x1b[0m: link failed \x1b[1;33mwarn\x1b[0m x" for i in range(99)]
    data = "\n".join(texts).encode()
    sizes = np.array([len(t) + 1 for t in texts], dtype=np.int64)
    ends = np.cumsum(sizes) - 1
    counter = TermCounter(numbers=True, scan=scan)
    got = named(counter.count_spans(data, ends - sizes + 1, ends), counter)
    analyzer = Analyzer()
    want = {(row, t, n) for row, text in enumerate(texts) for t, n in analyzer.counts(text).items()}
    assert got == want and (5, "error", 1) in got and not [t for _, t, _ in got if "31m" in t]


@needs_numba
def test_the_compiled_scan_counts_as_numpy_does_batch_after_batch(tmp_path: Path) -> None:
    # Small limits, so the scan's table is emptied and the words spilled several times,
    # and its arrays grow from their first size (one text of 40 KB grows them at once).
    small = Sizes(scan_words=150, words_per_run=400)
    lines = [
        line
        for system in ("HDFS", "Linux", "Apache", "OpenSSH")
        for line in (LOGHUB / system / f"{system}_2k.log").read_text().splitlines()
    ]
    texts = ["\n".join(lines[i : i + 7]) for i in range(0, len(lines), 7)]
    texts[50:50] = [*TEXTS, " ".join(f"w{i} {i * 7919}" for i in range(5000))]
    numpy_counter = TermCounter(numbers=True, spill=tmp_path / "n", scan=False, sizes=small)
    scan_counter = TermCounter(numbers=True, spill=tmp_path / "s", scan=True, sizes=small)
    for path in (tmp_path / "n", tmp_path / "s"):
        path.mkdir()
    for at in range(0, len(texts), 37):
        batch = texts[at : at + 37]
        a, b = numpy_counter.count(batch), scan_counter.count(batch)
        assert named(a, numpy_counter) == named(b, scan_counter)
        assert a.lengths.tolist() == b.lengths.tolist()
    assert len(list((tmp_path / "s").glob(".words*.part"))) >= 3


@needs_numba
def test_a_document_built_with_the_compiled_scan_equals_one_built_without(tmp_path: Path) -> None:
    texts = [
        "\n".join(lines[i : i + 25])
        for system in ("HDFS", "Zookeeper")
        for lines in [(LOGHUB / system / f"{system}_2k.log").read_text().splitlines()]
        for i in range(0, len(lines), 25)
    ]
    build(tmp_path / "numpy", texts, batch=40, scan=False)
    build(tmp_path / "scan", texts, batch=40, scan=True)
    # And the numbers held in many small pieces, merged often: still the same index.
    build(tmp_path / "pieces", texts, batch=40, sizes=Sizes(number_piece=100, recent_floor=64))
    files = sorted(p.name for p in (tmp_path / "numpy" / "index").iterdir())
    assert "numbers.npy" in files
    for other in ("scan", "pieces"):
        assert files == sorted(p.name for p in (tmp_path / other / "index").iterdir())
        for name in files:
            a = (tmp_path / "numpy" / "index" / name).read_bytes()
            assert a == (tmp_path / other / "index" / name).read_bytes(), (other, name)


@pytest.mark.parametrize("scan", [False, pytest.param(True, marks=needs_numba)])
def test_a_counter_with_a_spill_folder_holds_a_run_of_words_at_most(
    tmp_path: Path, scan: bool
) -> None:
    counter = TermCounter(numbers=True, spill=tmp_path, scan=scan, sizes=Sizes(words_per_run=100))
    batches = [[f"alpha w{b}x{i} blk_{b}{i} 1{b}{i}" for i in range(30)] for b in range(20)]
    given: dict[int, str] = {}
    for batch in batches:
        triples = counter.count(batch)
        assert len(counter.vocab) <= 100 + 2 * 30  # a run, and one batch's new words
        given.update(names_of(counter))
        assert set(triples.term.tolist()) <= set(given)
    assert len(list(tmp_path.glob(".words*.part"))) >= 5  # spilled in runs
    merged = list(counter.sorted_words())
    words = [w for w, _ in merged]
    assert words == sorted(words) and {i for _, i in merged} == set(range(counter.word_ids))
    assert all(given[i] == w for w, i in merged)  # each id still names its word
    assert words.count("alpha") >= 5  # one id per run it was seen in
    assert list(tmp_path.iterdir()) == []  # the run files are gone


NO_NUMBA = """
import logging, sys
sys.modules["numba"] = None  # import numba raises ImportError, as in a base install
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from context_window.retrieval import termcount, wordscan
from context_window.retrieval.analyzer import Analyzer
text = "GPU 0000:3b:00 has fallen off the bus after retry 42; getUserName blk_-38 " * 4000
assert len(text) >= termcount.SCAN_MIN_CHARS and not wordscan.available()
counter = termcount.TermCounter(numbers=True)
triples = counter.count([text])
assert counter._scanner is None  # the numpy path counted it
names = {v: k for k, v in counter.vocab.items()}
keys, ids = counter.numbers.sorted()
names.update((termcount.NUMBER | i, termcount.number_text(k)) for k, i in zip(keys, ids))
got = {names[t]: n for t, n in zip(triples.term.tolist(), triples.tf.tolist())}
assert got == Analyzer().counts(text), "counts differ"
print("counted")
"""


def test_without_numba_the_numpy_path_counts() -> None:
    # A real interpreter in which numba cannot be imported, as in a base install.
    done = subprocess.run(
        [sys.executable, "-c", NO_NUMBA], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "counted", done.stderr
    assert "counting words with numpy (numba is not installed" in done.stderr
