"""Re-ingesting a document under its id, on real loghub logs: which chunks survive, and cursors.

The files are copied from ``/work/shared/data/loghub`` into an ingest root, ingested,
changed (lines appended, a line edited near the end or in the middle) and ingested
again under the same doc_id. What the ingest reports as unchanged is checked
against an independent comparison of the chunk texts read back.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from server.test_document_tools import error, ok, serve

from context_window.documents.build import SEGMENT_CHARS
from context_window.documents.cursors import read_cursor, write_cursor
from context_window.documents.store import DocumentStore
from context_window.models import Chunk
from context_window.tokens import TokenCounter

LOGHUB = Path("/work/shared/data/loghub")
pytestmark = pytest.mark.skipif(not LOGHUB.is_dir(), reason="loghub samples not found")


def lines_of(system: str) -> list[str]:
    return (LOGHUB / system / f"{system}_2k.log").read_text(encoding="utf-8").splitlines(True)


def make_store(
    tmp_path: Path, ratio: float = 0.27, chunk_tokens: int = 200, segment_chars: int = SEGMENT_CHARS
) -> DocumentStore:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    return DocumentStore(
        tmp_path / "data",
        TokenCounter(ratio),
        ingest_roots=[root],
        chunk_tokens=chunk_tokens,
        chunk_overlap=chunk_tokens // 10,
        segment_chars=segment_chars,
    )


def all_chunks(store: DocumentStore, doc_id: str) -> list[Chunk]:
    doc = store.get(doc_id)
    return store.read_chunks(doc, 0, doc.chunks - 1)


def leading_same(old: list[Chunk], new: list[Chunk]) -> int:
    """How many chunks from the start have the same text at the same index."""
    n = 0
    while n < min(len(old), len(new)) and old[n].text == new[n].text:
        n += 1
    return n


def trailing_same(old: list[Chunk], new: list[Chunk], floor: int) -> int:
    """How many chunks from the end have the same text, counted back to ``floor``."""
    n = 0
    while n < min(len(old), len(new)) - floor and old[-1 - n].text == new[-1 - n].text:
        n += 1
    return n


def reingest(
    store: DocumentStore, path: Path, text: str
) -> tuple[list[Chunk], list[Chunk], dict[str, int]]:
    old = all_chunks(store, "log")
    path.write_text(text, encoding="utf-8")
    done = store.ingest(file_path=path.name, doc_id="log")
    assert done.replaced and done.kept is not None
    kept = done.kept
    return old, all_chunks(store, "log"), {"prefix": kept.prefix, "tail": kept.tail}


@pytest.mark.parametrize("system", ["HDFS", "Linux", "Spark", "Zookeeper"])
def test_appending_lines_keeps_every_earlier_chunk(tmp_path: Path, system: str) -> None:
    store = make_store(tmp_path)
    lines = lines_of(system)
    path = tmp_path / "root" / "app.log"
    path.write_text("".join(lines[:1500]), encoding="utf-8")
    store.ingest(file_path="app.log", doc_id="log")
    old, new, kept = reingest(store, path, "".join(lines))
    assert len(new) > len(old)
    # every chunk but the last, which the appended lines may extend, keeps index and text
    assert leading_same(old, new) >= len(old) - 1
    assert kept["prefix"] == leading_same(old, new) and kept["tail"] == 0


@pytest.mark.parametrize("system", ["Apache", "OpenSSH", "Hadoop"])
def test_an_edit_near_the_end_keeps_the_chunks_before_it(tmp_path: Path, system: str) -> None:
    store = make_store(tmp_path)
    lines = lines_of(system)
    path = tmp_path / "root" / "app.log"
    path.write_text("".join(lines), encoding="utf-8")
    store.ingest(file_path="app.log", doc_id="log")
    edited = lines[:]
    at = len(lines) - 30
    edited[at] = edited[at].rstrip("\n") + " [edited: retried twice]\n"
    offset = sum(len(line) for line in lines[:at])
    old, new, kept = reingest(store, path, "".join(edited))
    before = [c for c in old if c.end <= offset]
    assert before and new[: len(before)] == before  # index, text, offsets and heading
    assert kept["prefix"] == leading_same(old, new) >= len(before)


def test_a_middle_edit_reports_the_unchanged_tail(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    lines = lines_of("HDFS")
    path = tmp_path / "root" / "app.log"
    path.write_text("".join(lines), encoding="utf-8")
    store.ingest(file_path="app.log", doc_id="log")
    edited = [*lines[:1000], "081109 999999 INFO inserted diagnostic line\n", *lines[1000:]]
    old, new, kept = reingest(store, path, "".join(edited))
    prefix = leading_same(old, new)
    assert kept["prefix"] == prefix and prefix < len(old) // 2 + 10
    # greedy packing re-synchronises after the edit on this log; the report counts exactly
    # the trailing chunks whose text is unchanged
    assert kept["tail"] == trailing_same(old, new, prefix) > len(new) // 3


def test_reingest_reuses_the_stored_ratio_and_chunk_size(tmp_path: Path) -> None:
    first = make_store(tmp_path, ratio=0.27, chunk_tokens=200)
    lines = lines_of("Zookeeper")
    path = tmp_path / "root" / "app.log"
    path.write_text("".join(lines[:1200]), encoding="utf-8")
    first.ingest(file_path="app.log", doc_id="log")
    # a later server: recalibrated ratio and another chunk size
    later = make_store(tmp_path, ratio=0.41, chunk_tokens=500)
    old, new, kept = reingest(later, path, "".join(lines))
    assert kept["prefix"] == leading_same(old, new) >= len(old) - 1
    doc = later.get("log")
    assert doc.ratio == 0.27
    fresh = later.ingest(file_path="app.log", doc_id="other").doc  # a new id uses the new ones
    assert fresh.ratio == 0.41 and fresh.chunks < doc.chunks


def test_segmented_text_keeps_its_chunks_when_it_grows_past_a_segment(tmp_path: Path) -> None:
    store = make_store(tmp_path, segment_chars=40_000)
    lines = lines_of("Linux")
    path = tmp_path / "root" / "app.log"
    for cut in (300, 900):  # below one segment, then several segments
        path.write_text("".join(lines[:cut]), encoding="utf-8")
        store.ingest(file_path="app.log", doc_id="log")
        old, new, kept = reingest(store, path, "".join(lines[: cut + 500]))
        assert len("".join(lines[: cut + 500])) > 40_000
        assert leading_same(old, new) >= len(old) - 1 and kept["prefix"] == leading_same(old, new)


def test_cursors_are_carried_over(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    lines = lines_of("Spark")
    path = tmp_path / "root" / "app.log"
    path.write_text("".join(lines[:1500]), encoding="utf-8")
    n = store.ingest(file_path="app.log", doc_id="log").doc.chunks
    store.window("log", 0, 9)  # shared cursor at 10
    folder = store.root / "log"
    write_cursor(folder, "early", 3)
    write_cursor(folder, "done", n)  # read to the end
    old, _, kept = reingest(store, path, "".join(lines))
    folder = store.root / "log"
    assert store.get("log").cursor == 10
    assert read_cursor(folder, "early") == 3
    assert read_cursor(folder, "done") == kept["prefix"] == n - 1  # re-reads the grown chunk
    assert store.window("log", session_id="done").chunks[0].text.startswith(old[-1].text)


def test_a_middle_edit_moves_cursors_by_the_rules(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    lines = lines_of("HDFS")
    path = tmp_path / "root" / "app.log"
    path.write_text("".join(lines), encoding="utf-8")
    n = store.ingest(file_path="app.log", doc_id="log").doc.chunks
    inside = sum(len(line) for line in lines[:1020])  # within the edited lines 1000-1059
    past = next(c.index for c in all_chunks(store, "log") if c.start > inside)
    folder = store.root / "log"
    for name, value in {"before": 5, "past": past, "late": n - 3}.items():
        write_cursor(folder, name, value)
    edited = [*lines[:1000], *(f"{line.rstrip()} retried\n" for line in lines[1000:1060])]
    old, new, kept = reingest(store, path, "".join([*edited, *lines[1060:]]))
    tail_old = len(old) - kept["tail"]
    assert kept["prefix"] < past < tail_old < n - 3
    shift = len(new) - len(old)
    assert read_cursor(folder, "before") == 5
    assert read_cursor(folder, "past") == kept["prefix"]  # back to the first changed chunk
    assert read_cursor(folder, "late") == n - 3 + shift  # follows its unchanged chunk
    assert new[n - 3 + shift].text == old[n - 3].text


def test_multibyte_edits_compare_by_character(tmp_path: Path) -> None:
    store = make_store(tmp_path, chunk_tokens=40)
    body = "".join(f"{i:04d} café 東京 naïve straße ok\n" for i in range(400))
    store.ingest(text=body, doc_id="utf")
    old = all_chunks(store, "utf")
    done = store.ingest(text=body.replace("0390 café", "0390 cafè"), doc_id="utf")
    new = all_chunks(store, "utf")
    assert done.kept is not None and done.kept.prefix == leading_same(old, new) > 0
    assert done.kept.tail == trailing_same(old, new, done.kept.prefix)


@pytest.mark.anyio
async def test_reingest_reports_kept_chunks_through_the_tool(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    lines = lines_of("OpenSSH")
    (root / "ssh.log").write_text("".join(lines[:1500]), encoding="utf-8")
    async with serve(tmp_path, ingest_roots=[root]) as c:
        _, first = await ok(c, "doc_ingest", file_path="ssh.log", doc_id="ssh")
        assert "unchanged" not in first
        (root / "ssh.log").write_text("".join(lines), encoding="utf-8")
        text, data = await ok(c, "doc_ingest", file_path="ssh.log", doc_id="ssh")
        kept = data["unchanged"]
        assert data["replaced"] and kept >= first["chunks"] - 1
        assert f"kept {kept} of {data['chunks']} chunks unchanged (0-{kept - 1})" in text
        assert data["changed"] == data["chunks"] - kept
        assert data["unchanged_ranges"] == [[0, kept - 1]]
        assert "invalid doc_id" in await error(c, "doc_ingest", file_path="ssh.log", doc_id="../x")
