"""A large headingless text is chunked a segment at a time in a child process, which
gives the same parts as chunking here, and whose death costs only speed."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
import pytest

from context_window import segments as segments_module
from context_window.documents import build
from context_window.documents.store import DocumentStore
from context_window.segments import Part, Plan, segments
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
    with caplog.at_level(logging.INFO, logger="context_window.segments"):
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


def test_a_killed_child_leaves_the_rest_to_this_process(
    source: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    plan = plan_of(source, segment_chars=20_000)
    children: list[subprocess.Popen[bytes]] = []
    real = segments_module._from_child

    def watched(proc: subprocess.Popen[bytes], plan: Plan, errors: IO[bytes]) -> Iterator[Part]:
        children.append(proc)
        yield from real(proc, plan, errors)

    monkeypatch.setattr(segments_module, "_from_child", watched)
    got = []
    with caplog.at_level(logging.WARNING, logger="context_window.segments"):
        for part in segments(plan, child=True):
            got.append(part)
            if len(got) == 2:
                os.kill(children[0].pid, signal.SIGKILL)
    assert children[0].returncode == -signal.SIGKILL
    assert any("before the last segment" in r.getMessage() for r in caplog.records)
    assert fields(got) == fields(list(segments(plan, child=False)))


def test_without_a_child_process_the_text_is_chunked_here(
    source: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    plan = plan_of(source)
    monkeypatch.setattr(sys, "executable", str(source.parent / "no-such-python"))
    with caplog.at_level(logging.WARNING, logger="context_window.segments"):
        got = list(segments(plan, child=True))
    assert any("no child process" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()
    assert fields(got) == fields(list(segments(plan, child=False)))


def test_a_document_chunked_in_a_child_equals_one_chunked_here(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DocumentStore(
        tmp_path / "data", TokenCounter(0.27), ingest_roots=[source.parent], segment_chars=50_000
    )
    monkeypatch.setattr(build, "CHILD_MIN_CHARS", 0)
    child = store.ingest(file_path=source.name, doc_id="child").doc
    monkeypatch.setattr(build, "CHUNK_IN_CHILD", False)
    here = store.ingest(text=source.read_bytes().decode("utf-8"), doc_id="here").doc
    assert (child.chunks, child.tokens, child.chars) == (here.chunks, here.tokens, here.chars)
    a, b = store.root / "child" / "index", store.root / "here" / "index"
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()) and "chunks.npy" in names
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert store.search("café 東京 02999", "child")[0].chunk.text.count("02999") == 1


def test_a_program_that_is_not_the_chunker_is_not_trusted(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Say a frozen build's "python" is the server itself: it answers, but not in frames.
    impostor = tmp_path / "impostor"
    impostor.write_text(
        "#!/bin/sh\ncat >/dev/null\nprintf 'not the chunker at all, only prose\\n'\n"
    )
    impostor.chmod(0o755)
    plan = plan_of(source)
    monkeypatch.setattr(sys, "executable", str(impostor))
    with caplog.at_level(logging.WARNING, logger="context_window.segments"):
        got = list(segments(plan, child=True))
    monkeypatch.undo()
    assert any("did not start as the chunking process" in r.getMessage() for r in caplog.records)
    assert fields(got) == fields(list(segments(plan, child=False)))
