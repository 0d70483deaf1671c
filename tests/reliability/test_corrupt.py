"""Torn and corrupt files: the server starts, serves what is readable, and says what it skipped."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import text_of
from mcp import Client

from context_window.server.app import build_server
from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter

from .support import service_for


def seed_session(data_dir: Path, sid: str = "s", n: int = 5) -> tuple[Path, list[str]]:
    """A session with ``n`` entries; returns its journal path and entry ids."""
    session, _ = SessionStore(data_dir, TokenCounter(0.27)).open(sid, "seeded")
    ids = [session.append(f"entry {i} about topic{i}").id for i in range(n)]
    return session.journal.path, ids


async def serve_and_check(data_dir: Path, sid: str) -> dict[str, Any]:
    """Start a server on the dir, call the session tools, append once; return what it said."""
    service = service_for(data_dir)
    async with Client(build_server(service)) as client:
        listed = await client.call_tool("context_list_sessions", {})
        assert not listed.is_error, text_of(listed)
        status = await client.call_tool("context_status", {"session_id": sid})
        assert not status.is_error, text_of(status)
        recall = await client.call_tool("context_recall", {"session_id": sid, "limit": 1000})
        assert not recall.is_error, text_of(recall)
        opened = await client.call_tool("context_open", {"session_id": sid})
        assert not opened.is_error, text_of(opened)
        appended = await client.call_tool("context_append", {"session_id": sid, "text": "works"})
        assert not appended.is_error, text_of(appended)
    await service.aclose()
    assert status.structured_content is not None and recall.structured_content is not None
    assert appended.structured_content is not None
    return {
        "status": status.structured_content,
        "status_text": text_of(status),
        # Recall without a query shows the newest first: back into time order.
        "recalled": [e["id"] for e in reversed(recall.structured_content["entries"])],
        "appended": appended.structured_content["entry_id"],
        "listed": text_of(listed),
    }


def replay_ids(data_dir: Path, sid: str) -> tuple[list[str], int]:
    """Entry ids and skipped-line count after a restart."""
    session = SessionStore(data_dir, TokenCounter(0.27)).open(sid)[0]
    return [e.id for e in session.entries()], session.stats().skipped_lines


def test_truncated_last_line(data_dir: Path) -> None:
    journal, ids = seed_session(data_dir)
    raw = journal.read_bytes()
    journal.write_bytes(raw[: len(raw) - 20])  # the last record loses its end and newline
    seen = anyio.run(serve_and_check, data_dir, "s")
    assert seen["status"]["skipped_lines"] == 1
    assert "skipped 1 unreadable line," in seen["status_text"]
    assert seen["recalled"] == ids[:-1]
    # The append closed the torn line off; a restart skips it once and sees the new entry.
    assert replay_ids(data_dir, "s") == ([*ids[:-1], seen["appended"]], 1)
    assert journal.read_bytes().endswith(b"\n")


@pytest.mark.parametrize(
    "garbage",
    [
        b"{not json",
        b"\x00\xff\xfe binary",
        b"[1, 2, 3]",
        b'"a string"',
        b'{"kind": "mystery", "id": "x"}',
        b'{"kind": "entry", "id": 5, "text": "id is not a string"}',
        b'{"kind": "entry", "id": "e1", "text": null}',
    ],
)
def test_garbage_line_in_the_middle(data_dir: Path, garbage: bytes) -> None:
    journal, ids = seed_session(data_dir)
    lines = journal.read_bytes().split(b"\n")
    journal.write_bytes(b"\n".join([*lines[:2], garbage, *lines[2:]]))
    seen = anyio.run(serve_and_check, data_dir, "s")
    assert seen["status"]["skipped_lines"] == 1
    assert seen["recalled"] == ids
    assert replay_ids(data_dir, "s") == ([*ids, seen["appended"]], 1)


def test_duplicate_entry_id_is_skipped_not_overwritten(data_dir: Path) -> None:
    journal, ids = seed_session(data_dir)
    first = journal.read_bytes().split(b"\n")[0]
    dup = json.loads(first)
    dup["text"] = "an impostor"
    with journal.open("ab") as f:
        f.write(json.dumps(dup).encode() + b"\n")
    seen = anyio.run(serve_and_check, data_dir, "s")
    assert seen["status"]["skipped_lines"] == 1
    session = SessionStore(data_dir, TokenCounter(0.27)).open("s")[0]
    assert session.get(ids[0]).text == "entry 0 about topic0"


def test_orphan_patch_is_reported(data_dir: Path) -> None:
    journal, ids = seed_session(data_dir)
    with journal.open("ab") as f:
        f.write(b'{"kind":"patch","id":"e-nobody","pinned":true}\n')
    seen = anyio.run(serve_and_check, data_dir, "s")
    assert seen["status"]["orphan_patches"] == 1
    assert "1 patch for unknown entries" in seen["status_text"]
    assert seen["recalled"] == ids


def test_empty_log(data_dir: Path) -> None:
    journal, _ = seed_session(data_dir, n=0)
    journal.write_bytes(b"")
    seen = anyio.run(serve_and_check, data_dir, "s")
    assert seen["status"]["total"] == 0 and seen["status"]["skipped_lines"] == 0
    assert replay_ids(data_dir, "s") == ([seen["appended"]], 0)


def test_only_blank_lines(data_dir: Path) -> None:
    journal, _ = seed_session(data_dir, n=0)
    journal.write_bytes(b"\n\n  \n")
    seen = anyio.run(serve_and_check, data_dir, "s")
    assert seen["status"]["skipped_lines"] == 0
    assert replay_ids(data_dir, "s") == ([seen["appended"]], 0)


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.unlink(),
        lambda p: p.write_bytes(b""),
        lambda p: p.write_bytes(b"{half"),
        lambda p: p.write_bytes(b"[]"),
        lambda p: p.write_bytes(b"\xff\xfe"),
    ],
    ids=["missing", "empty", "torn", "not-an-object", "not-utf8"],
)
def test_session_meta_missing_or_corrupt(data_dir: Path, damage: Callable[[Path], Any]) -> None:
    _, ids = seed_session(data_dir)
    damage(data_dir / "sessions" / "s" / "meta.json")
    seen = anyio.run(serve_and_check, data_dir, "s")
    assert "s:" in seen["listed"]
    assert seen["recalled"] == ids, "entries survive a lost meta.json"
    assert replay_ids(data_dir, "s") == ([*ids, seen["appended"]], 0)


def test_stray_files_in_the_sessions_dir(data_dir: Path) -> None:
    _, ids = seed_session(data_dir)
    (data_dir / "sessions" / "stray.txt").write_text("not a session")
    (data_dir / "sessions" / "emptydir").mkdir()
    (data_dir / "sessions" / ".tmp-leftover").mkdir()
    seen = anyio.run(serve_and_check, data_dir, "s")
    assert seen["recalled"] == ids
    assert "stray.txt" not in seen["listed"] and ".tmp-leftover" not in seen["listed"]


def test_corrupt_calibration_file(data_dir: Path) -> None:
    (data_dir / "calibration.json").write_bytes(b'{"ratio": "lots"')
    service = service_for(data_dir, llm_enabled=True, llm_base_url="http://127.0.0.1:9/v1")
    assert service.counter.source != "calibrated"
    anyio.run(service.aclose)
    (data_dir / "calibration.json").write_bytes(b'{"ratio": 99, "model": ""}')
    service = service_for(data_dir, llm_enabled=True, llm_base_url="http://127.0.0.1:9/v1")
    assert 0.05 <= service.counter.ratio <= 2
    anyio.run(service.aclose)
