"""Crash: writers killed with SIGKILL at random moments lose nothing they acknowledged.

Each round starts a writer process (child_writer.py) that acknowledges an
operation on its stdout pipe only after the API call returned, kills it with
SIGKILL after a random delay, then replays the data dir in a fresh store and
checks: every acknowledged write is there, at most the one in-flight line per
kill is unreadable, and the next write works.
"""

from __future__ import annotations

import random
from pathlib import Path

import anyio

from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter

from .support import add, kill_at_random, record, service_for, unreadable_lines

APPEND_ROUNDS = 40
COMPACT_ROUNDS = 15
ROUNDS_PER_LOG = 5


def test_appends_survive_sigkill(data_dir: Path) -> None:
    rng = random.Random(20240601)
    acked: set[str] = set()
    present_before: set[str] = set()
    skipped_before = 0
    torn_seen = 0
    acked_total = 0
    for rnd in range(APPEND_ROUNDS):
        sid = f"crash{rnd // ROUNDS_PER_LOG}"  # bound each log's size, so replays stay quick
        if rnd % ROUNDS_PER_LOG == 0:
            acked, present_before, skipped_before = set(), set(), 0
        lines = kill_at_random(["append", str(data_dir), sid, str(rnd)], rng, 0.12)
        new_acks = {ln.split()[1] for ln in lines}
        acked |= new_acks

        session, created = SessionStore(data_dir, TokenCounter(0.27)).open(sid)
        assert not created or not acked  # a kill during start-up may precede the first write
        present = {e.id for e in session.entries(include_superseded=True)}
        assert acked <= present, f"round {rnd}: acknowledged entries lost: {acked - present}"
        in_flight = present - present_before - new_acks
        assert len(in_flight) <= 1, f"round {rnd}: {len(in_flight)} unacknowledged entries"
        stats = session.stats()
        assert stats.skipped_lines - skipped_before <= 1, f"round {rnd}: more than one torn line"
        torn_seen += stats.skipped_lines - skipped_before
        skipped_before = stats.skipped_lines

        # The next append works; the next round's replay checks it is there.
        after = session.append(f"after kill {rnd}")
        present_before = present | {after.id}
        acked.add(after.id)
        acked_total += len(new_acks) + 1

    torn: list[bytes] = []
    for journal in sorted((data_dir / "sessions").glob("*/entries.jsonl")):
        torn += unreadable_lines(journal)
        assert journal.read_bytes().endswith(b"\n")
        session = SessionStore(data_dir, TokenCounter(0.27)).open(journal.parent.name)[0]
        seqs = [e.seq for e in session.entries()]
        assert len(seqs) == len(set(seqs))
    assert len(torn) == torn_seen <= APPEND_ROUNDS
    add("crash rounds survived (append, SIGKILL)", APPEND_ROUNDS)
    add("acknowledged appends checked after kills", acked_total)
    add("torn lines left by kills (unacknowledged, skipped)", len(torn))
    add("bytes lost to kills (torn, never acknowledged)", sum(len(t) for t in torn))
    add("acknowledged bytes lost", 0)


def check_compaction_invariants(data_dir: Path, sid: str) -> tuple[set[str], int]:
    """Replay in a fresh Service; each entry is live or folded by exactly one present summary."""
    service = service_for(data_dir)
    session = service.sessions.get(sid)
    entries = session.entries(include_superseded=True)
    by_id = {e.id: e for e in entries}
    folded_by: dict[str, str] = {}
    for s in entries:
        for old in s.replaces:
            assert old in by_id, f"summary {s.id} replaces unknown entry {old}"
            assert old not in folded_by, f"{old} folded twice ({folded_by[old]}, {s.id})"
            folded_by[old] = s.id
            assert by_id[old].superseded, f"{old} is folded by {s.id} yet live"
    for e in entries:
        assert e.superseded == (e.id in folded_by), f"{e.id} superseded without a summary"
    return set(by_id), session.stats().skipped_lines


def test_compaction_survives_sigkill(data_dir: Path) -> None:
    rng = random.Random(7)
    sid = "compacting"
    service_for(data_dir).sessions.open(sid)
    acked: set[str] = set()
    summaries: dict[str, list[str]] = {}
    skipped_before = 0
    for rnd in range(COMPACT_ROUNDS):
        lines = kill_at_random(["compact", str(data_dir), sid, str(rnd)], rng, 0.4)
        for ln in lines:
            kind, eid, *rest = ln.split()
            acked.add(eid)
            if kind == "C":
                summaries[eid] = rest
        present, skipped = check_compaction_invariants(data_dir, sid)
        assert acked <= present, f"round {rnd}: acknowledged writes lost: {acked - present}"
        assert skipped - skipped_before <= 1
        skipped_before = skipped
        service = service_for(data_dir)
        session = service.sessions.get(sid)
        for sid_, originals in summaries.items():
            assert session.get(sid_).replaces == tuple(originals)
            assert all(session.get(o).superseded for o in originals)
        for i in range(3):
            acked.add(session.append(f"after compaction kill {rnd} item {i}. It works.").id)
        done = anyio.run(service.compact, sid, 0, 64)
        assert done.entry is not None
        acked.add(done.entry.id)
        summaries[done.entry.id] = [e.id for e in done.plan.entries]
        check_compaction_invariants(data_dir, sid)
    assert len(summaries) >= COMPACT_ROUNDS
    add("crash rounds survived (compaction, SIGKILL)", COMPACT_ROUNDS)
    record("compactions acknowledged before kills", len(summaries) - COMPACT_ROUNDS)


def test_torn_summary_leaves_originals_live(data_dir: Path) -> None:
    """A summary line cut mid-write is skipped: originals stay live, no half summary appears."""
    service = service_for(data_dir)
    session, _ = service.sessions.open("torn")
    ids = [session.append(f"fact number {i}. Keep it.").id for i in range(6)]
    journal = session.journal.path
    before = journal.read_bytes()
    done = anyio.run(service.compact, "torn", 1, 32)
    assert done.entry is not None
    full = journal.read_bytes()
    summary_line = full[len(before) :]
    for cut in (1, len(summary_line) // 2, len(summary_line) - 2):
        journal.write_bytes(before + summary_line[:cut])
        replayed = service_for(data_dir).sessions.get("torn")
        live = [e.id for e in replayed.entries()]
        assert live == ids, f"cut at {cut}: {live}"
        assert replayed.stats().skipped_lines == 1
        assert all(e.role != "summary" for e in replayed.entries(include_superseded=True))
        again = anyio.run(service_for(data_dir).compact, "torn", 1, 32)
        assert again.entry is not None and set(again.entry.replaces) == set(ids[:-1])
