"""context-window doctor on documents: healthy ones pass; each kind of damage is named."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from .support import service_for
from .test_doctor import doctor


def documents(data: Path) -> Path:
    """Two healthy documents under ``data``; returns the documents dir."""
    service = service_for(data, chunk_tokens=64, chunk_overlap=0)
    body = "\n\n".join(
        f"# Part {i}\n\nparagraph {i} about widgets and gears. " * 3 for i in range(6)
    )
    service.documents.ingest(text=body, doc_id="d1", title="one")
    service.documents.ingest(text=body + "\n\nmore", doc_id="d2", title="two")
    service.documents.window("d1", budget=100)  # moves the cursor: meta.json rewritten
    return data / "documents"


def _edit_meta(**changes: object) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        meta = d / "d1" / "meta.json"
        meta.write_text(json.dumps({**json.loads(meta.read_text()), **changes}))

    return edit


def _garbage_table(d: Path) -> None:
    (d / "d1" / "index" / "chunks.npy").write_bytes(b"\x93NUMPY garbage")


def _truncated_source(d: Path) -> None:
    p = d / "d1" / "source.txt"
    p.write_bytes(p.read_bytes()[:-30])


def _span_past_the_source(d: Path) -> None:
    p = d / "d1" / "index" / "spans.npy"
    spans = np.load(p)
    spans[-1, 1] += 1000
    np.save(p, spans)


DOC_DAMAGE: dict[str, tuple[Callable[[Path], object], str]] = {
    "meta missing": (lambda d: (d / "d1" / "meta.json").unlink(), "d1/meta.json: missing"),
    "meta torn": (lambda d: (d / "d1" / "meta.json").write_text('{"id"'), "meta.json: unreadable"),
    "chunk count": (_edit_meta(chunks=999), "but meta.json says 999"),
    "cursor": (_edit_meta(cursor=-5), "cursor -5 outside"),
    "chars": (_edit_meta(chars=3), "but meta.json says 3"),
    "sha256": (_edit_meta(sha256="0" * 64), "does not match the sha256"),
    "garbage chunk table": (_garbage_table, "d1/index: unreadable chunk table"),
    "truncated source": (_truncated_source, "do not fit the source"),
    "span past the source": (_span_past_the_source, "do not fit the source"),
    "spans missing": (lambda d: (d / "d1" / "index" / "spans.npy").unlink(), "spans.npy: missing"),
    "source missing": (lambda d: (d / "d1" / "source.txt").unlink(), "source.txt: missing"),
    "index missing": (
        lambda d: __import__("shutil").rmtree(d / "d1" / "index"),
        "d1/index: missing",
    ),
    "array missing": (
        lambda d: (d / "d1" / "index" / "post_chunks.npy").unlink(),
        "post_chunks.npy: missing",
    ),
    "array garbage": (
        lambda d: (d / "d1" / "index" / "doc_len.npy").write_bytes(b"junk"),
        "doc_len.npy: unreadable array",
    ),
    "array wrong length": (
        lambda d: __import__("numpy").save(d / "d1" / "index" / "heading_ids.npy", [0]),
        "heading_ids.npy: 1 rows, expected",
    ),
    "stats torn": (
        lambda d: (d / "d1" / "index" / "stats.json").write_text("{"),
        "stats.json: missing or unreadable",
    ),
    "half-written ingest": (
        lambda d: (d / ".tmp-d3-abcd1234").mkdir(),
        "leftover temporary directory (an interrupted ingest)",
    ),
    "trash left": (
        lambda d: (d / ".trash-d2-abcd1234").mkdir(),
        "leftover directory of a forgotten document",
    ),
    "stray file": (lambda d: (d / "notes.txt").write_text("x"), "not a document directory"),
}


@pytest.mark.parametrize("name", list(DOC_DAMAGE))
def test_each_document_damage_exits_1_and_is_named(data_dir: Path, name: str) -> None:
    docs = documents(data_dir)
    assert doctor(data_dir)[0] == 0, doctor(data_dir)[1]
    damage, expected = DOC_DAMAGE[name]
    damage(docs)
    status, text = doctor(data_dir)
    assert status == 1, text
    problems = [ln for ln in text.splitlines() if ln.startswith("problem: ")]
    assert any(expected in p for p in problems), text
    assert all("d2" not in p or name == "trash left" for p in problems), text


def test_clean_documents_are_counted(data_dir: Path) -> None:
    documents(data_dir)
    status, text = doctor(data_dir)
    assert status == 0, text
    assert "2 documents (" in text
