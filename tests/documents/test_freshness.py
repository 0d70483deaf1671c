"""Source freshness in doc_list: a real loghub log on disk, changed, touched, deleted."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from server.test_document_tools import ok, serve

from context_window.documents import freshness as docfresh
from context_window.documents.store import DocumentStore
from context_window.tokens import TokenCounter

LOG = Path("/work/shared/data/loghub/Zookeeper/Zookeeper_2k.log")
pytestmark = pytest.mark.skipif(not LOG.is_file(), reason="loghub samples not found")


def ingest_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    shutil.copy(LOG, root / "zk.log")
    return root


async def listed(c: Client) -> tuple[str, dict[str, dict[str, Any]]]:
    text, data = await ok(c, "doc_list")
    return text, {d["id"]: d for d in data["documents"]}


@pytest.mark.anyio
async def test_changed_source_is_flagged_until_reingested(tmp_path: Path) -> None:
    root = ingest_root(tmp_path)
    log = root / "zk.log"
    async with serve(tmp_path, ingest_roots=[root]) as c:
        await ok(c, "doc_ingest", file_path="zk.log", doc_id="zk")
        await ok(c, "doc_ingest", text="# Notes\n\nInline text is never stale.", doc_id="notes")
        text, docs = await listed(c)
        assert docs["zk"]["source_state"] == "fresh" and docs["notes"]["source_state"] == "inline"
        assert "STALE" not in text
        with log.open("a", encoding="utf-8") as f:
            f.write("2015-07-29 23:44:36,123 - WARN  [main:QuorumPeer@1] - appended line\n")
        text, docs = await listed(c)
        assert docs["zk"]["source_state"] == "changed"
        call = f"doc_ingest(file_path={str(log.resolve())!r}, doc_id='zk')"
        assert f"STALE: source changed since ingest (size {LOG.stat().st_size:,} ->" in text
        assert call in text and text.count("STALE") == 1
        await ok(c, "doc_ingest", file_path=str(log.resolve()), doc_id="zk")  # the named call
        text, docs = await listed(c)
        assert docs["zk"]["source_state"] == "fresh" and "STALE" not in text


@pytest.mark.anyio
async def test_same_size_edit_is_changed_and_a_touch_is_not(tmp_path: Path) -> None:
    root = ingest_root(tmp_path)
    log = root / "zk.log"
    async with serve(tmp_path, ingest_roots=[root]) as c:
        await ok(c, "doc_ingest", file_path="zk.log", doc_id="zk")
        meta_path = tmp_path / "data" / "documents" / "zk" / "meta.json"
        recorded = json.loads(meta_path.read_text())["source_stat"]
        assert recorded["size"] == log.stat().st_size
        later = recorded["mtime_ns"] + 5_000_000_000
        os.utime(log, ns=(later, later))  # touched, same bytes
        _, docs = await listed(c)
        assert docs["zk"]["source_state"] == "fresh"
        assert json.loads(meta_path.read_text())["source_stat"]["mtime_ns"] == later  # hashed once
        data = log.read_bytes()
        log.write_bytes(data.replace(b"INFO", b"WARN", 1))  # same size, other content
        os.utime(log, ns=(later + 10**9, later + 10**9))
        text, docs = await listed(c)
        assert docs["zk"]["source_state"] == "changed" and "content differs (same size)" in text


@pytest.mark.anyio
async def test_deleted_source_is_reported_missing(tmp_path: Path) -> None:
    root = ingest_root(tmp_path)
    async with serve(tmp_path, ingest_roots=[root]) as c:
        await ok(c, "doc_ingest", file_path="zk.log", doc_id="zk")
        (root / "zk.log").unlink()
        text, docs = await listed(c)
        assert docs["zk"]["source_state"] == "missing"
        assert "SOURCE MISSING" in text and "this copy still works" in text
        _, hits = await ok(c, "doc_search", query="QuorumPeer", doc_id="zk")
        assert hits["hits"]


def test_documents_from_before_tracking_are_unknown_not_stale(tmp_path: Path) -> None:
    root = ingest_root(tmp_path)
    store = DocumentStore(tmp_path / "data", TokenCounter(0.27), ingest_roots=[root])
    doc = store.ingest(file_path="zk.log", doc_id="zk").doc
    meta_path = store.root / "zk" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["source_stat"]
    meta_path.write_text(json.dumps(meta))
    with (root / "zk.log").open("a") as f:
        f.write("grown\n")
    assert store.source_state(store.get("zk")).state == docfresh.UNKNOWN
    assert store.source_state(doc).state == docfresh.CHANGED  # the stat it was ingested with


def test_a_touched_file_ingested_again_is_reused_and_fresh(tmp_path: Path) -> None:
    root = ingest_root(tmp_path)
    store = DocumentStore(tmp_path / "data", TokenCounter(0.27), ingest_roots=[root])
    store.ingest(file_path="zk.log")
    st = (root / "zk.log").stat()
    os.utime(root / "zk.log", ns=(st.st_atime_ns, st.st_mtime_ns + 7_000_000_000))
    again = store.ingest(file_path="zk.log")
    assert again.reused
    assert again.doc.source_stat == (st.st_size, st.st_mtime_ns + 7_000_000_000)
    assert store.source_state(again.doc).state == docfresh.FRESH


def test_a_source_swapped_for_a_link_outside_the_roots_is_not_read(tmp_path: Path) -> None:
    root = ingest_root(tmp_path)
    store = DocumentStore(tmp_path / "data", TokenCounter(0.27), ingest_roots=[root])
    store.ingest(file_path="zk.log", doc_id="zk")
    outside = tmp_path / "secret.log"
    shutil.copy(LOG, outside)
    (root / "zk.log").unlink()
    (root / "zk.log").symlink_to(outside)
    state = store.source_state(store.get("zk"))
    # Missing and outside look the same (an error must not say what lies outside).
    assert state.state == docfresh.MISSING and str(outside) not in state.reason
