"""The document store on a real data dir: layout, replace, duplicates, forget, windows, crashes."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli
from opens import watching_opens

from context_window.documents.chunking import chunk_text
from context_window.documents.store import COARSE_SETTLED_NS, SETTLED_NS, DocumentStore
from context_window.errors import INGEST_FIRST, REINGEST, InvalidInput, NotFound, StorageError
from context_window.tokens import TokenCounter

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

DOCS = Path(__file__).parents[1] / "data" / "docs"


@pytest.fixture
def store(tmp_path: Path) -> DocumentStore:
    return DocumentStore(
        tmp_path / "data", TokenCounter(0.27), ingest_roots=[DOCS], chunk_tokens=200
    )


def test_layout_on_disk(store: DocumentStore) -> None:
    done = store.ingest(file_path="guide.md", doc_id="guide")
    folder = store.root / "guide"
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert {"source.txt", "meta.json", "index/stats.json", "index/spans.npy"} <= names
    assert "chunks.jsonl" not in names  # a chunk's text is kept once, in source.txt
    meta = json.loads((folder / "meta.json").read_text())
    for key in ("id", "title", "source", "sha256", "chars", "chunks", "tokens", "cursor"):
        assert key in meta
    assert meta["title"] == "guide.md" and meta["cursor"] == 0
    source = (folder / "source.txt").read_text(encoding="utf-8")
    assert source == (DOCS / "guide.md").read_text(encoding="utf-8")
    raw = (folder / "source.txt").read_bytes()
    spans = np.load(folder / "index" / "spans.npy")
    chunks = store.read_chunks(done.doc, 0, done.doc.chunks - 1)
    assert len(chunks) == len(spans) == done.doc.chunks
    for c, (a, b) in zip(chunks, spans.tolist(), strict=True):
        assert c.text == source[c.start : c.end] == raw[a:b].decode("utf-8")
        assert c.line == source.count("\n", 0, c.start) + 1  # where it starts
    assert chunks[0].heading.startswith("Build guide")


def test_reingest_replaces_and_duplicates_are_reported(store: DocumentStore) -> None:
    first = store.ingest(text="alpha beta gamma " * 50, doc_id="doc")
    again = store.ingest(text="delta epsilon " * 50, doc_id="doc")
    assert again.replaced and not first.replaced
    assert [d.id for d in store.all()] == ["doc"]
    assert store.search("delta", "doc") and not store.search("alpha", "doc")
    dup = store.ingest(text="delta epsilon " * 50)
    assert dup.reused and dup.duplicate_of == "doc" and len(store.all()) == 1
    named = store.ingest(text="delta epsilon " * 50, doc_id="copy")
    assert named.duplicate_of == "doc" and not named.reused and len(store.all()) == 2
    leftovers = [p.name for p in store.root.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_forget_leaves_no_files(store: DocumentStore) -> None:
    store.ingest(file_path="build.log", doc_id="log")
    store.window("log")
    store.forget("log")
    assert list(store.root.iterdir()) == []
    with pytest.raises(NotFound, match="no document 'log'") as err:
        store.get("log")
    assert err.value.remedy == INGEST_FIRST


def test_a_build_without_meta_is_never_listed(store: DocumentStore) -> None:
    store.ingest(text="complete document text here", doc_id="good")
    half = store.root / "half"
    half.mkdir()
    (half / "source.txt").write_text("crashed before meta.json")
    (store.root / ".tmp-x-1234").mkdir()
    assert [d.id for d in store.all()] == ["good"]
    with pytest.raises(StorageError, match=r"'half' has a damaged meta\.json") as err:
        store.get("half")  # named, not hidden: it is not "no document"
    assert err.value.remedy == REINGEST


def test_window_pages_with_a_cursor(store: DocumentStore) -> None:
    doc = store.ingest(file_path="build.log", doc_id="log").doc
    assert doc.chunks > 10
    seen: list[int] = []
    while True:
        w = store.window("log", budget=450)
        if not w.chunks:
            break
        assert w.used_tokens <= 450 or len(w.chunks) == 1
        seen.extend(c.index for c in w.chunks)
    assert seen == list(range(doc.chunks))
    end = store.window("log")
    assert end.at_end and not end.chunks
    restart = store.window("log", reset=True, budget=100)
    assert restart.chunks[0].index == 0
    explicit = store.window("log", 5, 6, budget=10_000)
    assert [c.index for c in explicit.chunks] == [5, 6] and explicit.cursor == 7
    with pytest.raises(InvalidInput, match="before from"):
        store.window("log", 6, 5)
    with pytest.raises(InvalidInput, match=f"has {doc.chunks} chunks"):
        store.window("log", doc.chunks)


def test_a_window_fills_its_budget_with_chunks_as_shown(store: DocumentStore) -> None:
    """A chunk's stored count includes a CI log's colour codes, which answers leave out:
    a window reads on while the next chunk, as shown, fits its budget."""
    lines = [f"\x1b[36m[{i:04d}]\x1b[0m \x1b[32mPASS\x1b[0m test_{i}" for i in range(2000)]
    store.ingest(text="\n".join(lines), doc_id="ci")
    budget = 1000
    w = store.window("ci", 0, budget=budget, move_cursor=False)
    assert not w.at_end and not w.truncated and w.used_tokens <= budget
    (after,) = store.window("ci", w.cursor, w.cursor, budget=10_000, move_cursor=False).chunks
    assert w.used_tokens + store.counter.count(after.text) + 2 > budget


def test_window_truncates_one_oversized_chunk(store: DocumentStore) -> None:
    store.ingest(file_path="build.log", doc_id="log")
    w = store.window("log", 0, budget=20)
    assert len(w.chunks) == 1 and w.truncated and w.used_tokens <= 20


def segmented(store: DocumentStore, segment_chars: int) -> DocumentStore:
    """A store like ``store`` (same data dir) that reads headingless texts in small parts."""
    return DocumentStore(
        store.root.parent,
        store.counter,
        ingest_roots=store.ingest_roots,
        chunk_tokens=store.chunk_tokens,
        segment_chars=segment_chars,
    )


def test_large_log_is_chunked_in_segments_like_one_call(store: DocumentStore) -> None:
    text = (DOCS / "build.log").read_text(encoding="utf-8")
    store = segmented(store, 10_000)
    doc = store.ingest(text=text, doc_id="seg").doc
    whole = chunk_text(text, 200, 80, 0.27)
    got = store.read_chunks(doc, 0, doc.chunks - 1)
    for c in got:
        assert c.text == text[c.start : c.end]
    covered = np.zeros(len(text), dtype=bool)
    for c in got:
        covered[c.start : c.end] = True
    assert all(covered[c.start : c.end].all() for c in whole)  # nothing lost
    assert abs(len(got) - len(whole)) <= len(text) // 10_000
    assert [c.index for c in got] == list(range(doc.chunks))


def test_search_reads_only_the_hits(store: DocumentStore) -> None:
    store.ingest(file_path="build.log", doc_id="log")
    fresh = DocumentStore(store.root.parent, TokenCounter(0.27))  # as after a restart
    reads: list[str] = []
    with watching_opens(lambda path: reads.append(path) if path.endswith("source.txt") else None):
        hits = fresh.search("maxConnections socket_pool", "log", limit=3)
    assert "maxConnections" in hits[0].chunk.text
    assert len(reads) == len(hits)  # one seek-and-read per hit, never the whole file


def test_segments_keep_character_offsets_with_multibyte_text(store: DocumentStore) -> None:
    text = "".join(f"{i:05d} café 東京 naïve straße ok\n" for i in range(3000))
    store = segmented(store, 7_000)
    doc = store.ingest(text=text, doc_id="utf").doc
    got = store.read_chunks(doc, 0, doc.chunks - 1)
    assert all(c.text == text[c.start : c.end] for c in got)
    assert got[-1].end == len(text.rstrip())
    assert store.search("02999 東京", "utf")[0].chunk.index == doc.chunks - 1


def test_tied_scores_break_by_chunk_index(store: DocumentStore) -> None:
    # Identical paragraphs, one per chunk: nearly every chunk scores the same for "needle"
    # (enough of them that numpy's selection no longer returns ties in index order).
    block = "needle in a haystack of hay and straw and more hay " * 14
    store.ingest(text="\n\n".join(block for _ in range(1200)), doc_id="ties")
    chunks = store.get("ties").chunks
    assert chunks > 1000
    first = [h.chunk.index for h in store.search("needle", "ties", limit=3)]
    again = [h.chunk.index for h in store.search("needle", "ties", limit=3)]
    ranked = store.search("needle", "ties", limit=1000)
    top = ranked[0].score
    tied = [h.chunk.index for h in ranked if h.score == top]
    assert first == again
    assert len(tied) > 3 and tied == sorted(tied)
    assert first == tied[:3] and first[0] < 10


def test_term_offsets_are_unsigned_integers(store: DocumentStore) -> None:
    store.ingest(text="alpha beta gamma delta " * 40, doc_id="offsets")
    offsets = np.load(store.root / "offsets" / "index" / "term_offsets.npy")
    assert offsets.dtype == np.uint64 and offsets[0] == 0


def test_listing_sees_what_another_store_changed(store: DocumentStore) -> None:
    # Listing stats each meta.json and reuses what it parsed while the file is unchanged;
    # every change another process makes (cursor, re-ingest, forget, a new document)
    # replaces the file or the directory, and must show at once.
    store.ingest(text="# A\n\nalpha parser notes", doc_id="a")
    store.ingest(text="# B\n\nbeta parser notes", doc_id="b")
    other = DocumentStore(store.root.parent, TokenCounter(0.27))
    assert [d.id for d in store.all()] == ["b", "a"]
    other.update_meta("a", cursor=1)
    assert store.get("a").cursor == 1
    assert next(d for d in store.all() if d.id == "a").cursor == 1
    other.ingest(text="# A again\n\ngamma parser", doc_id="a", title="A2")
    assert {d.id: d.title for d in store.all()}["a"] == "A2"
    shown = store.answer("gamma", None, 3, 500).hits[0].passages
    assert any("gamma" in p.text for p in shown)
    other.forget("b")
    assert [d.id for d in store.all()] == ["a"]
    other.ingest(text="# C\n\ndelta parser", doc_id="c")
    assert [d.id for d in store.all()] == ["c", "a"]
    assert {h.doc_id for h in store.answer("parser", None, 10, 2000).hits} == {"a", "c"}


def test_search_over_all_sees_what_another_process_ingests_and_forgets(tmp_path: Path) -> None:
    # A store reuses its listing while the documents directory is unchanged: another
    # store (another process) ingesting, replacing or forgetting a document changes it.
    a = DocumentStore(tmp_path / "data", TokenCounter(0.27))
    b = DocumentStore(tmp_path / "data", TokenCounter(0.27))
    a.ingest(text="the gearbox rattles at speed\n" * 20, doc_id="one", title="First")
    a.ingest(text="the gearbox is quiet\n" * 20, doc_id="two")
    time.sleep(0.25)  # older than SETTLED_NS: the next listing is kept
    assert {h.doc_id for h in a.search("gearbox")} == {"one", "two"}
    assert a._searched is not None  # the listing is being reused
    b.ingest(text="a gearbox of a third kind\n" * 20, doc_id="three")
    assert {h.doc_id for h in a.search("gearbox")} == {"one", "two", "three"}
    b.forget("two")
    assert {h.doc_id for h in a.search("gearbox")} == {"one", "three"}
    b.ingest(text="nothing of the kind\n" * 20, doc_id="one")  # replaced
    assert {h.doc_id for h in a.search("gearbox")} == {"three"}
    time.sleep(0.25)
    a.search("kind")
    b.update_meta("three", title="Renamed in place")  # no rename in the directory
    hit = next(h for h in a.search("gearbox") if h.doc_id == "three")
    assert hit.title == "Renamed in place"


def test_a_listing_on_whole_second_mtimes_waits_longer_before_it_is_reused(
    tmp_path: Path,
) -> None:
    # A file system that keeps no fractions of a second (FAT, ext3, HFS+) can give a
    # change within the same second the same mtime: such a listing is reused only once
    # the directory is COARSE_SETTLED_NS old, a finer one after SETTLED_NS.
    store = DocumentStore(tmp_path / "data", TokenCounter(0.27))
    store.ingest(text="the gearbox rattles\n" * 20, doc_id="one")
    now = time.time_ns()
    for age_ns, whole, reused in [
        (SETTLED_NS * 3, False, True),
        (SETTLED_NS * 3, True, False),
        (COARSE_SETTLED_NS + SETTLED_NS * 5, True, True),
    ]:
        mtime = now - age_ns
        if whole:
            mtime -= mtime % 1_000_000_000
        else:
            mtime -= mtime % 1_000_000_000 - 123_456_789  # a fraction of a second
        os.utime(store.root, ns=(mtime, mtime))
        store._searched = None
        store.search("gearbox")
        assert (store._searched is not None) == reused, (age_ns, whole)


def _open_files(soft: int, hard: int | None) -> Callable[[], None]:
    """For a child process: ``soft`` open files, raisable up to ``hard`` (None: as now)."""
    top = resource.getrlimit(resource.RLIMIT_NOFILE)[1] if hard is None else hard
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, top))


def _search_all(
    data: Path, query: str, soft: int, hard: int | None
) -> subprocess.CompletedProcess[str]:
    limit = _open_files(soft, hard)
    return run_cli("search", query, "--limit", "2", data=data, preexec_fn=limit)


@pytest.mark.skipif(resource is None, reason="open-file limits are POSIX")
def test_a_search_of_many_small_documents_holds_no_open_file(store: DocumentStore) -> None:
    """Each small index is read, not mapped: 120 documents are searched at 16 open files
    (they each kept two open, were skipped as damaged, and the best hit was lost)."""
    for i in range(120):
        text = f"service alpha{i} restarted after error code E{i % 50}\n" * 5
        store.ingest(text=text, doc_id=f"d{i}")
    found = _search_all(store.root.parent, "alpha7 restarted", 16, 16)
    assert found.returncode == 0, found.stderr
    assert found.stdout.split("\n# ")[1].startswith("d7 [0]"), found.stdout[:400]
    assert "damaged" not in found.stderr


@pytest.mark.skipif(resource is None, reason="open-file limits are POSIX")
def test_too_many_open_files_is_said_and_never_called_damage(store: DocumentStore) -> None:
    """Large indexes stay mapped; a mapping holds a descriptor before Python 3.13, which
    can map without one. Out of descriptors, the search says so: nothing is damaged. The
    program raises its soft limit to the hard one, so only a low hard limit runs out."""
    rng = random.Random(7)
    for i in range(10):  # each with a postings file over the size that is read whole
        lines = (f"{rng.getrandbits(32):08x} job {k} host{k % 97} ok\n" for k in range(35_000))
        store.ingest(text="".join(lines), doc_id=f"big{i}")
    raised = _search_all(store.root.parent, "job host5", 12, None)
    assert raised.returncode == 0 and "host5" in raised.stdout, raised.stderr
    found = _search_all(store.root.parent, "job host5", 12, 12)
    if sys.version_info >= (3, 13):
        assert found.returncode == 0, found.stderr
        assert "host5" in found.stdout
    else:
        assert found.returncode == 1
        assert "too many open files; nothing is damaged" in found.stderr
        assert "ulimit -n" in found.stderr
    assert "damaged index" not in found.stderr
    assert run_cli("doctor", data=store.root.parent).returncode == 0
