"""Chunk settings read back from disk pass the same check as the flags.

A meta.json is a file anyone can edit. ``chunk_tokens: 1`` in it used to be taken
on re-ingest (172,905 chunks from 200 KB), though the flag refuses anything under 32.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from context_window.config import check_chunk_settings
from context_window.errors import InvalidInput

from .support import service_for

TEXT = "\n\n".join(f"paragraph {i}: the upload failed with status {i % 7}" for i in range(4000))


@pytest.mark.parametrize(
    "edit",
    [
        {"chunk_tokens": 1, "chunk_overlap": 0},
        {"chunk_tokens": 31},
        {"chunk_tokens": 10**9},
        {"chunk_tokens": "800"},
        {"chunk_tokens": True},
        {"chunk_overlap": -1},
        {"chunk_overlap": 10_000},
        {"ratio": 0},
        {"ratio": 1e300},
        {"ratio": "x"},
        {"ratio": float("nan")},
    ],
)
def test_a_reingest_ignores_chunk_settings_edited_out_of_range(
    tmp_path: Path, edit: dict[str, Any]
) -> None:
    svc = service_for(tmp_path / "data")
    first = svc.documents.ingest(text=TEXT, doc_id="d")
    meta_path = tmp_path / "data" / "documents" / "d" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta.update(edit)
    meta_path.write_text(json.dumps(meta))  # NaN is written as the bare token NaN
    again = service_for(tmp_path / "data").documents.ingest(text=TEXT + "\n\nmore", doc_id="d")
    assert abs(again.doc.chunks - first.doc.chunks) <= 1  # the configured 800, not 1
    fresh = json.loads(meta_path.read_text())
    assert fresh["chunk_tokens"] == 800 and fresh["chunk_overlap"] == 80


def test_one_rule_for_flags_and_disk() -> None:
    from context_window.config import load_settings
    from context_window.errors import ConfigError

    for tokens, overlap in ((31, 0), (800, 800), (100_001, 80)):
        with pytest.raises(InvalidInput):
            check_chunk_settings(tokens, overlap, 0.27)
        with pytest.raises(ConfigError, match="chunk-"):
            load_settings(
                {"data_dir": "/tmp", "chunk_tokens": tokens, "chunk_overlap": overlap}, environ={}
            )
    assert check_chunk_settings(32, 0, 0.01) == (32, 0, 0.01)
