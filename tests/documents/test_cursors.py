"""Per-session document cursors through a real MCP client, on a real loghub log."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from server.test_document_tools import error, ok, serve

from context_window.documents.cursors import all_cursors, read_cursor, write_cursor
from context_window.documents.store import DocumentStore
from context_window.tokens import TokenCounter

LOG = Path("/work/shared/data/loghub/HDFS/HDFS_2k.log")
pytestmark = pytest.mark.skipif(not LOG.is_file(), reason="loghub samples not found")


def ingest_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    shutil.copy(LOG, root / "hdfs.log")
    return root


@pytest.mark.anyio
async def test_two_sessions_page_one_document_independently(tmp_path: Path) -> None:
    root = ingest_root(tmp_path)
    async with serve(tmp_path, ingest_roots=[root]) as c:
        await ok(c, "doc_ingest", file_path="hdfs.log", doc_id="hdfs")
        text, a1 = await ok(c, "doc_window", doc_id="hdfs", session_id="task-a", budget_tokens=600)
        assert a1["chunks"][0]["index"] == 0 and a1["session_id"] == "task-a"
        assert f"next: doc_window(doc_id='hdfs', session_id='task-a') from {a1['cursor']}" in text
        _, a2 = await ok(c, "doc_window", doc_id="hdfs", session_id="task-a", budget_tokens=600)
        assert a2["chunks"][0]["index"] == a1["cursor"]
        _, b1 = await ok(c, "doc_window", doc_id="hdfs", session_id="task-b", budget_tokens=300)
        assert b1["chunks"][0]["index"] == 0  # a session that never paged starts at 0
        _, listed = await ok(c, "doc_list")
        doc = listed["documents"][0]
        assert doc["cursor"] == 0  # the shared cursor did not move
        assert doc["session_cursors"] == {"task-a": a2["cursor"], "task-b": b1["cursor"]}
        _, shared = await ok(c, "doc_window", doc_id="hdfs", budget_tokens=300)
        assert shared["chunks"][0]["index"] == 0 and shared["session_id"] is None
        _, a3 = await ok(c, "doc_window", doc_id="hdfs", session_id="task-a", budget_tokens=300)
        assert a3["chunks"][0]["index"] == a2["cursor"]  # the shared read did not move it
        text, _ = await ok(c, "doc_list")
        assert "(+2 session cursors)" in text


@pytest.mark.anyio
async def test_session_cursors_survive_a_restart_and_reset_alone(tmp_path: Path) -> None:
    root = ingest_root(tmp_path)
    async with serve(tmp_path, ingest_roots=[root]) as c:
        await ok(c, "doc_ingest", file_path="hdfs.log", doc_id="hdfs")
        _, a = await ok(c, "doc_window", doc_id="hdfs", session_id="a", budget_tokens=500)
        _, b = await ok(c, "doc_window", doc_id="hdfs", session_id="b", budget_tokens=900)
        await ok(c, "doc_window", doc_id="hdfs", budget_tokens=700)
    async with serve(tmp_path, ingest_roots=[root]) as c:  # a new server on the same data dir
        _, before = await ok(c, "doc_list")
        assert before["documents"][0]["session_cursors"] == {"a": a["cursor"], "b": b["cursor"]}
        _, a2 = await ok(c, "doc_window", doc_id="hdfs", session_id="a", budget_tokens=500)
        assert a2["chunks"][0]["index"] == a["cursor"]
        _, b2 = await ok(c, "doc_window", doc_id="hdfs", session_id="b", reset=True)
        assert b2["chunks"][0]["index"] == 0
        _, a3 = await ok(c, "doc_window", doc_id="hdfs", session_id="a", budget_tokens=500)
        assert a3["chunks"][0]["index"] == a2["cursor"]  # b's reset left a alone
        _, listed = await ok(c, "doc_list")
        shared = listed["documents"][0]["cursor"]
        assert shared > 0 and shared not in (a2["cursor"], b2["cursor"])


@pytest.mark.anyio
async def test_invalid_session_id_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    root = ingest_root(tmp_path)
    async with serve(tmp_path, ingest_roots=[root]) as c:
        await ok(c, "doc_ingest", file_path="hdfs.log", doc_id="hdfs")
        for bad in ("../escape", "a/b", "x" * 65):
            msg = await error(c, "doc_window", doc_id="hdfs", session_id=bad)
            assert "invalid session_id" in msg and "A-Z a-z 0-9" in msg
        _, shared = await ok(c, "doc_window", doc_id="hdfs", session_id="", budget_tokens=300)
        assert shared["session_id"] is None  # blank is not given: the shared cursor
    folder = tmp_path / "data" / "documents" / "hdfs"
    assert not (folder / "cursors").exists()
    assert not (tmp_path / "data" / "documents" / "escape.json").exists()


@pytest.mark.anyio
async def test_forget_removes_the_session_cursors(tmp_path: Path) -> None:
    root = ingest_root(tmp_path)
    async with serve(tmp_path, ingest_roots=[root]) as c:
        await ok(c, "doc_ingest", file_path="hdfs.log", doc_id="hdfs")
        await ok(c, "doc_window", doc_id="hdfs", session_id="a")
        cursors = tmp_path / "data" / "documents" / "hdfs" / "cursors"
        assert (cursors / "a.json").is_file()
        await ok(c, "doc_forget", doc_id="hdfs")
        assert not cursors.exists() and not cursors.parent.exists()
        await ok(c, "doc_ingest", file_path="hdfs.log", doc_id="hdfs")
        _, again = await ok(c, "doc_window", doc_id="hdfs", session_id="a")
        assert again["chunks"][0]["index"] == 0


def test_two_stores_moving_different_sessions_lose_nothing(tmp_path: Path) -> None:
    root = ingest_root(tmp_path)
    one = DocumentStore(tmp_path / "data", TokenCounter(0.27), ingest_roots=[root])
    one.ingest(file_path="hdfs.log", doc_id="hdfs")
    two = DocumentStore(tmp_path / "data", TokenCounter(0.27), ingest_roots=[root])
    expected: dict[str, int] = {}
    for _ in range(6):  # interleaved, as two processes would
        for name, store, budget in (("p1", one, 900), ("p2", two, 2500)):
            w = store.window("hdfs", budget=budget, session_id=name)
            expected[name] = w.cursor
    folder = one.root / "hdfs"
    assert all_cursors(folder) == expected and 6 <= expected["p1"] < expected["p2"]
    assert one.get("hdfs").cursor == 0


def test_a_cursor_for_a_forgotten_document_is_not_recreated(tmp_path: Path) -> None:
    root = ingest_root(tmp_path)
    store = DocumentStore(tmp_path / "data", TokenCounter(0.27), ingest_roots=[root])
    store.ingest(file_path="hdfs.log", doc_id="hdfs")
    folder = store.root / "hdfs"
    store.forget("hdfs")
    with pytest.raises(Exception, match="forgotten"):
        write_cursor(folder, "late", 3)
    assert not folder.exists() and read_cursor(folder, "late") == 0
