"""Purge: deleted and expired entries are erased from the file, nothing else is lost, and
writers in other processes (or other open sessions) keep every append across the rewrite."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path

import anyio

from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter

from .support import FixedClock, acked_lines, add, kill_at_random, record, service_for, writer

DAY = 86_400.0


def log_of(data_dir: Path, sid: str) -> bytes:
    return (data_dir / "sessions" / sid / "entries.jsonl").read_bytes()


def test_purge_erases_deleted_and_expired_and_keeps_the_rest(data_dir: Path) -> None:
    clock = FixedClock()
    service = service_for(data_dir)
    store = SessionStore(data_dir, service.counter, clock)
    s = store.open("p")[0]
    gone = s.append("secret-deleted alpha")
    s.update(gone.id, pinned=True)
    s.update(gone.id, deleted=True)
    pinned = s.append("pinned but old gamma", ttl_days=1, pinned=True)
    folded = [s.append(f"folded note {i} delta /srv/{i}") for i in range(3)]
    service.sessions = store
    compaction = anyio.run(service.compact, "p", 0, 64)
    assert compaction.entry is not None and len(compaction.plan.entries) == 3
    short = s.append("secret-expired beta", ttl_days=1)
    keep = s.append("kept note epsilon", tags=["t"])
    s.update(folded[0].id, deleted=True)  # erased, though the summary still paraphrases it
    clock.now += 2 * DAY

    before = {e.id: e for e in s.entries(include_hidden=True)}
    dry = s.purge(dry_run=True)
    assert log_of(data_dir, "p").count(b"secret-deleted") == 1  # a dry run writes nothing
    done = s.purge()
    assert dry == done
    assert set(done.entries) == {gone.id, short.id, folded[0].id}
    assert done.patches == 3  # gone's pin and delete, folded[0]'s delete
    # The summary may still paraphrase an erased entry it folded: the purge names the pair.
    assert done.folded == ((folded[0].id, compaction.entry.id),)
    raw = log_of(data_dir, "p")
    assert b"secret-deleted" not in raw and b"secret-expired" not in raw
    assert folded[0].id.encode() not in raw  # not even in the summary's replaces list
    identity, *records = [json.loads(line) for line in raw.splitlines()]
    assert identity["kind"] == "rewrite" and len(identity["id"]) == 24  # new file, new identity
    assert len(records) == done.kept
    # Everything else reads back exactly as before, in this process and in a fresh one.
    for view in (s, SessionStore(data_dir, service.counter, clock).open("p")[0]):
        after = {e.id: e for e in view.entries(include_hidden=True)}
        assert set(after) == set(before) - set(done.entries)
        for eid, e in after.items():
            old = before[eid]
            if eid == compaction.entry.id:
                assert e.replaces == tuple(f.id for f in folded[1:])
                old = old.__class__(**{**old.__dict__, "replaces": e.replaces})
            assert e == old
        assert view.get(pinned.id).live and view.get(keep.id).tags == ("t",)
        assert view.stats().skipped_lines == 0 and view.stats().orphan_patches == 0
    # A second purge finds nothing more.
    assert s.purge().entries == ()


def test_a_session_opened_elsewhere_replays_the_purged_log(data_dir: Path) -> None:
    counter = TokenCounter(0.27)
    mine = SessionStore(data_dir, counter).open("p")[0]
    other = SessionStore(data_dir, counter).open("p")[0]  # its own journal handle and lock
    doomed = mine.append("to be erased")
    mine.append("stays")
    mine.update(doomed.id, deleted=True)
    assert other.stats().total == 2
    mine.purge()
    # The other handle sees the rewrite: the erased entry is gone from its memory too,
    # and its next append lands in the new file, where mine reads it.
    assert other.stats().total == 1
    late = other.append("written after the purge")
    assert [e.text for e in mine.entries()] == ["stays", "written after the purge"]
    assert b"to be erased" not in log_of(data_dir, "p")
    assert mine.get(late.id).seq == 3  # seq continues after the newest kept entry


def test_purge_while_processes_append_loses_nothing(data_dir: Path) -> None:
    procs_n, appends = 2, 200
    store = SessionStore(data_dir, TokenCounter(0.27))
    s = store.open("shared")[0]
    procs = [
        writer("burst", str(data_dir), "shared", str(appends), f"p{i}", stdin=True)
        for i in range(procs_n)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    stop = threading.Event()
    purges = [0]

    def purge_loop() -> None:  # delete something and purge, over and over, meanwhile
        while not stop.is_set():
            s.update(s.append("doomed").id, deleted=True)
            s.purge()
            purges[0] += 1

    thread = threading.Thread(target=purge_loop)
    thread.start()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        p.stdin.flush()
    acked: list[str] = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err.decode()
            acked += acked_lines(out)[-1].split()
    finally:
        stop.set()
        thread.join()
    s.purge()
    lines = [json.loads(line) for line in log_of(data_dir, "shared").splitlines()]
    records = [r for r in lines if r["kind"] != "rewrite"]
    assert lines[0]["kind"] == "rewrite" and len(lines) == len(records) + 1
    ids = [r["id"] for r in records]
    assert sorted(ids) == sorted(acked), "every acknowledged append survives, none twice"
    assert all(r["text"] != "doomed" for r in records)
    fresh = SessionStore(data_dir, TokenCounter(0.27)).open("shared")[0]
    assert fresh.stats().total == procs_n * appends == s.stats().total
    assert purges[0] > 0
    record("purges racing 2 appending processes (appends kept)", f"{purges[0]} ({len(acked)})")


PURGE_KILL_ROUNDS = 15


def test_purge_survives_sigkill(data_dir: Path) -> None:
    """Kill a process that appends, deletes and purges; nothing acknowledged is lost."""
    rng = random.Random(11)
    sid = "purging"
    SessionStore(data_dir, TokenCounter(0.27)).open(sid)
    kept: set[str] = set()  # acknowledged appends never deleted
    doomed: set[str] = set()  # a delete began: it may have landed unacknowledged
    deleted: set[str] = set()  # acknowledged deletions: present-deleted or erased
    erased: set[str] = set()  # erased by a purge that returned
    purges = 0
    kills_since_purge = 0  # each kill may tear one line; a purge drops the torn ones
    for rnd in range(PURGE_KILL_ROUNDS):
        kills_since_purge += 1
        for line in kill_at_random(["purge", str(data_dir), sid, str(rnd)], rng, 0.3):
            kind, *ids = line.split()
            if kind == "A":
                kept.update(ids)
            elif kind == "d":
                doomed.update(ids)
            elif kind == "D":
                kept.difference_update(ids)
                deleted.update(ids)
            else:
                erased.update(ids)
                purges += 1
                kills_since_purge = 1
        session = SessionStore(data_dir, TokenCounter(0.27)).open(sid)[0]
        present = {e.id: e for e in session.entries(include_hidden=True)}
        # Only an entry whose delete landed before its acknowledgement (doomed) may be
        # gone: a later purge erases it, acknowledged or killed before it could say so.
        assert kept - set(present) <= doomed, f"round {rnd}: acknowledged appends lost"
        assert all(present[e].live for e in kept - doomed)
        assert not erased & set(present), f"round {rnd}: an erased entry came back"
        assert all(present[e].deleted for e in deleted & set(present))
        assert session.stats().skipped_lines <= kills_since_purge
        leftovers = list((data_dir / "sessions" / sid).glob(".entries.jsonl.*.tmp"))
        assert len(leftovers) <= 1  # a killed purge's temp file, removed by the next purge
    session = SessionStore(data_dir, TokenCounter(0.27)).open(sid)[0]
    session.purge()
    assert not list((data_dir / "sessions" / sid).glob(".entries.jsonl.*.tmp"))
    remaining = {e.id for e in session.entries(include_hidden=True)}
    # What remains: every acknowledged append (bar one whose delete landed unacknowledged),
    # plus any written but killed before its ack.
    assert kept - doomed <= remaining and not remaining & (deleted | erased)
    assert purges > 0
    add("crash rounds survived (purge, SIGKILL)", PURGE_KILL_ROUNDS)
    record("purges completed before kills", purges)
