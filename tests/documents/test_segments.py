"""A large headingless text is chunked a segment at a time in a child process, which
gives the same parts as chunking here, and whose death costs only speed."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from context_window.documents.segments import Part, Plan, segments
from context_window.documents.store import DocumentStore
from context_window.tokens import TokenCounter

LOGHUB = Path(__file__).resolve().parents[3] / "shared" / "data" / "loghub"
if not LOGHUB.is_dir():
    LOGHUB = Path("/work/shared/data/loghub")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """Three real logs and lines of multibyte text, about 1 MB, no headings."""
    parts = [(LOGHUB / s / f"{s}_2k.log").read_bytes() for s in ("HDFS", "Linux", "Apache")]
    parts.insert(1, "".join(f"{i:05d} café 東京 naïve straße\r\n" for i in range(3000)).encode())
    path = tmp_path / "source.txt"
    path.write_bytes(b"".join(parts))
    return path


def plan_of(path: Path, segment_chars: int = 60_000) -> Plan:
    chars = len(path.read_bytes().decode("utf-8"))
    return Plan(path, chars, 200, 40, 0.27, segment_chars)


def fields(parts: list[Part]) -> list[tuple[object, ...]]:
    return [
        (p.rows.tolist(), p.spans.tolist(), p.base, p.first_byte, p.data, p.after, p.text)
        for p in parts
    ]


def test_the_child_gives_the_parts_chunked_here(
    source: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plan = plan_of(source)
    with caplog.at_level(logging.INFO, logger="context_window.documents.segments"):
        from_child = list(segments(plan, child=True))
    here = list(segments(plan, child=False))
    assert len(here) > 10
    assert fields(from_child) == fields(here)
    peak = [r.peak_kb for r in caplog.records if hasattr(r, "peak_kb")]
    assert len(peak) == 1 and int(peak[0]) > 0
    # Every character but blank ones is in a chunk; the texts and lines are the source's.
    text = source.read_bytes().decode("utf-8")
    covered = np.zeros(len(text), dtype=bool)
    for part in here:
        for start, end, _, line in part.rows.tolist():
            assert part.text[start - part.base : end - part.base] == text[start:end]
            assert line == text.count("\n", 0, start) + 1
            covered[start:end] = True
    assert all(c.isspace() for c in np.array(list(text))[~covered])


def pool_workers() -> list[int]:
    """The pids of this process's spawned pool workers (not its resource tracker)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            ppid = next(
                int(line.split()[1])
                for line in status.read_text().splitlines()
                if line.startswith("PPid:")
            )
            cmdline = (status.parent / "cmdline").read_bytes()
        except (OSError, StopIteration):
            continue
        if ppid == os.getpid() and b"spawn_main" in cmdline:
            found.append(int(status.parent.name))
    return found


def test_a_killed_child_leaves_the_rest_to_this_process(
    source: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plan = plan_of(source, segment_chars=20_000)
    got: list[Part] = []
    killed: list[int] = []
    with caplog.at_level(logging.WARNING, logger="context_window.documents.segments"):
        for part in segments(plan, child=True):
            got.append(part)
            if len(got) == 2:
                killed = pool_workers()
                assert len(killed) == 1
                os.kill(killed[0], signal.SIGKILL)
    assert any(
        "before the last segment (BrokenProcessPool" in r.getMessage() for r in caplog.records
    )
    assert fields(got) == fields(list(segments(plan, child=False)))
    assert len(got) > 10


def test_a_document_chunked_in_a_child_equals_one_chunked_here(
    source: Path, tmp_path: Path
) -> None:
    def store_with(child_min_chars: int | None) -> DocumentStore:
        return DocumentStore(
            tmp_path / "data",
            TokenCounter(0.27),
            ingest_roots=[source.parent],
            segment_chars=50_000,
            child_min_chars=child_min_chars,
        )

    child = store_with(0).ingest(file_path=source.name, doc_id="child").doc
    here = store_with(None).ingest(text=source.read_bytes().decode("utf-8"), doc_id="here").doc
    store = store_with(None)
    assert (child.chunks, child.tokens, child.chars) == (here.chunks, here.tokens, here.chars)
    a, b = store.root / "child" / "index", store.root / "here" / "index"
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()) and "chunks.npy" in names
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert store.search("café 東京 02999", "child")[0].chunk.text.count("02999") == 1
