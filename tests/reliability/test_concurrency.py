"""Concurrency: many processes on one log, and many tool calls racing in one server."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from context_window.server.app import build_server
from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter

from .support import acked_lines, record, service_for, writer

PROCESSES = 4
APPENDS = 250


def test_processes_append_to_one_session(data_dir: Path) -> None:
    watcher, _ = SessionStore(data_dir, TokenCounter(0.27)).open("shared")
    procs = [
        writer("burst", str(data_dir), "shared", str(APPENDS), f"p{i}", stdin=True)
        for i in range(PROCESSES)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    for p in procs:  # release them together
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        p.stdin.flush()
    acked: dict[str, list[str]] = {}
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
        acked[f"p{i}"] = acked_lines(out)[-1].split()

    raw = (data_dir / "sessions" / "shared" / "entries.jsonl").read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    assert len(lines) == PROCESSES * APPENDS, "every append is exactly one line"
    records = [json.loads(line) for line in lines]  # no interleaved or torn line
    seqs = [r["seq"] for r in records]
    assert sorted(seqs) == list(range(1, PROCESSES * APPENDS + 1)), "seq numbers unique, no gaps"
    assert seqs == sorted(seqs), "seq follows file order"
    by_id = {r["id"]: r for r in records}
    for tag, ids in acked.items():
        assert len(ids) == APPENDS
        assert [by_id[i]["text"] for i in ids] == [f"{tag} entry {n}" for n in range(APPENDS)]
        assert [by_id[i]["seq"] for i in ids] == sorted(by_id[i]["seq"] for i in ids)
    tags_in_file_order = [r["tags"][0] for r in records]
    switches = sum(a != b for a, b in itertools.pairwise(tags_in_file_order))
    session = SessionStore(data_dir, TokenCounter(0.27)).open("shared")[0]
    stats = session.stats()
    assert (stats.total, stats.live, stats.skipped_lines) == (len(lines), len(lines), 0)
    # A session object opened before the writers started sees all of it too.
    assert watcher.stats() == stats
    assert [e.id for e in watcher.entries()] == [r["id"] for r in records]
    record("processes x appends to one session", f"{PROCESSES} x {APPENDS}")
    record("writer switches in the shared log (interleaving)", switches)


async def _hammer(data_dir: Path) -> dict[str, Any]:
    service = service_for(data_dir)
    app = build_server(service)
    appended: list[str] = []
    compacted: list[str] = []
    compact_errors: list[str] = []
    async with Client(app) as client:
        opened = await client.call_tool("context_open", {"session_id": "busy"})
        assert not opened.is_error

        async def appender(worker: int) -> None:
            for n in range(25):
                r = await client.call_tool(
                    "context_append",
                    {"session_id": "busy", "text": f"worker {worker} note {n}. Decided x{n}."},
                )
                assert not r.is_error, r.content
                assert r.structured_content is not None
                appended.append(r.structured_content["entry_id"])

        async def compactor() -> None:
            while len(appended) < 20:  # start once there is something to fold
                await anyio.sleep(0.005)
            for _ in range(4):
                await anyio.sleep(0.01)
                r = await client.call_tool(
                    "context_compact", {"session_id": "busy", "keep_recent": 5, "target_tokens": 64}
                )
                if r.is_error:  # a racing compaction folded the same entries first
                    text = r.content[0].text  # type: ignore[union-attr]
                    assert "changed while the summary was being written" in text, text
                    compact_errors.append(text)
                else:
                    assert r.structured_content is not None
                    if r.structured_content["summary_id"]:
                        compacted.append(r.structured_content["summary_id"])

        async def recaller() -> None:
            for _ in range(20):
                r = await client.call_tool(
                    "context_recall", {"session_id": "busy", "query": "worker note"}
                )
                assert not r.is_error, r.content
                s = await client.call_tool("context_status", {"session_id": "busy"})
                assert not s.is_error, s.content

        async with anyio.create_task_group() as tg:
            for w in range(8):
                tg.start_soon(appender, w)
            tg.start_soon(compactor)
            tg.start_soon(compactor)
            for _ in range(3):
                tg.start_soon(recaller)
    await service.aclose()
    return {"appended": appended, "compacted": compacted, "errors": compact_errors}


def test_tool_calls_race_in_one_server(data_dir: Path) -> None:
    outcome = anyio.run(_hammer, data_dir)
    appended, compacted = outcome["appended"], outcome["compacted"]
    assert len(appended) == len(set(appended)) == 200
    assert compacted, "at least one compaction ran"
    raw = (data_dir / "sessions" / "busy" / "entries.jsonl").read_bytes()
    records = [json.loads(line) for line in raw.split(b"\n")[:-1]]
    assert len(records) == 200 + len(compacted)
    seqs = [r["seq"] for r in records]
    assert sorted(seqs) == list(range(1, len(records) + 1))
    session = service_for(data_dir).sessions.get("busy")
    everything = session.entries(include_superseded=True)
    assert {e.id for e in everything} == set(appended) | set(compacted)
    folded = [old for e in everything for old in e.replaces]
    assert len(folded) == len(set(folded)), "no entry folded into two summaries"
    assert {e.id for e in everything if e.superseded} == set(folded)
    assert session.stats().skipped_lines == 0
    record(
        "concurrent tool calls in one server",
        f"200 appends, 8 compactions ({len(compacted)} folded, {len(outcome['errors'])} "
        "refused as racing), 120 reads",
    )
