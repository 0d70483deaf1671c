"""Session snapshots: the state saved beside the journal is read back exactly as a replay
would build it, and it is never trusted over the journal (stale, damaged, purged, other
analyzer or format: the journal is replayed instead)."""

from __future__ import annotations

import gc
import json
import shutil
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from context_window.sessions.session import Session
from context_window.sessions.snapshot import LOCK, SNAPSHOT
from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter

NOW = 1.9e9
QUERIES = ["parser timeout", "cache", "deploy eu-west-1", "note 17", None]


def build(data: Path, n: int = 300) -> None:
    """A session with tags, pins, expiry, deletions and a compaction, written by one store."""
    clock = [NOW]
    store = SessionStore(data, TokenCounter(0.27), clock=lambda: clock[0], snapshot_after=None)
    s = store.open("s")[0]
    ids = []
    for i in range(n):
        ids.append(
            s.append(
                f"note {i}: {['parser timeout', 'cache miss', 'deploy eu-west-1', 'café'][i % 4]}",
                tags=["t1"] if i % 5 == 0 else None,
                pinned=i % 50 == 3,
                ttl_days=0.5 if i % 9 == 0 else None,
            ).id
        )
    for eid in ids[10:40:6]:
        s.update(eid, deleted=True)
    s.update(ids[7], pinned=True)
    plan = s.plan_compaction(keep_recent=100)
    s.commit_summary(plan, "summary of the early notes", "test")


def state_of(s: Session) -> dict[str, object]:
    """What a session shows: every entry, its counts, and recall for several queries."""
    out: dict[str, object] = {
        "entries": s.entries(include_hidden=True),
        "stats": s.stats(),
        "opened": [s.pinned_and_latest(k) for k in (0, 5, 120)],  # what context_open shows
    }
    for q in QUERIES:
        for superseded in (False, True):
            r = s.recall(q, 100_000, include_superseded=superseded, tags=None)
            out[f"{q}/{superseded}"] = ([e.id for e in r.entries], r.scores, r.candidates)
        r = s.recall(q, 100_000, tags=["t1", "T9"])  # any case; a column or a record
        out[f"{q}/tags"] = ([e.id for e in r.entries], r.scores)
    return out


def replayed(data: Path, tmp: Path, ratio: float = 0.27) -> dict[str, object]:
    """The state a replay from the journal alone gives (the snapshot left out)."""
    copy = tmp / "replay-copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(data, copy, ignore=shutil.ignore_patterns(SNAPSHOT))
    store = SessionStore(copy, TokenCounter(ratio), clock=lambda: NOW + 3600, snapshot_after=None)
    s = store.get("s")
    assert s.from_snapshot == 0
    return state_of(s)


def opened(data: Path, ratio: float = 0.27, after: int | None = 50) -> Session:
    store = SessionStore(data, TokenCounter(ratio), clock=lambda: NOW + 3600, snapshot_after=after)
    return store.get("s")


def test_a_snapshot_gives_what_a_replay_gives(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data)
    first = opened(data)
    assert first.from_snapshot == 0 and (data / "sessions" / "s" / SNAPSHOT).is_file()
    again = opened(data)
    assert again.from_snapshot > 300  # the entries, the patches' effects, the summary
    assert state_of(again) == state_of(first) == replayed(data, tmp_path)


def test_a_snapshot_finds_its_ids_without_hashing_them_into_a_map(tmp_path: Path) -> None:
    # A dict of a million ids takes a third of a second to make: a state read from a
    # snapshot finds an id through the saved table of hashes instead, and only ids
    # appended afterwards are held in a dict.
    data = tmp_path / "data"
    build(data)
    opened(data)
    s = opened(data)
    assert s.from_snapshot
    recalled = s.recall("parser timeout", 2_000)
    pins, latest = s.pinned_and_latest(5)
    assert recalled.entries and pins and latest
    target = latest[0].id
    assert s.update(target, pinned=True).pinned  # found by its id
    ids = s._state.pos
    assert ids._added == {} and ids[target] == s._state.order.index(target)
    assert all(ids[eid] == i for i, eid in enumerate(s._state.order))
    new = s.append("one more entry").id
    assert ids._added == {new: len(s._state.order) - 1} and ids.get("no-such-id") is None


def test_a_snapshot_listing_an_id_twice_keeps_its_first_place(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data)
    opened(data)
    folder = data / "sessions" / "s"
    ids = bytes(np.load(_arrays(folder) / "ids.npy")).decode().split("\n")
    first, second = ids[0], ids[1]
    twice = "\n".join([first, first, *ids[2:]]).encode()
    np.save(_arrays(folder) / "ids.npy", np.frombuffer(twice, dtype=np.uint8))
    s = opened(data)
    assert s.from_snapshot and s._state.pos[first] == 0 and second not in s._state.pos
    assert s.recall("note", 100_000).entries  # served around, nothing fails


def test_what_was_appended_after_the_snapshot_is_replayed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data)
    opened(data)  # saves the snapshot
    writer = opened(data, after=None)
    for i in range(30):
        writer.append(f"later note {i} about the parser")
    writer.update(writer.entries()[0].id, pinned=True)
    again = opened(data)
    assert again.from_snapshot and state_of(again) == replayed(data, tmp_path)
    assert any("later note 29" in e.text for e in again.entries())


def test_a_snapshot_is_ignored_after_a_purge_or_a_rewrite_in_place(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data)
    folder = data / "sessions" / "s"
    opened(data)
    stale = tmp_path / "stale"
    shutil.copytree(folder, stale)
    s = opened(data)
    s.purge()  # rewrites the journal without the deleted entries, drops the snapshot
    assert not (folder / SNAPSHOT).exists()
    for p in stale.iterdir():  # a stale one, as another process might leave
        if p.name.startswith("snapshot"):
            (shutil.copytree if p.is_dir() else shutil.copy)(p, folder / p.name)
    again = opened(data)
    assert again.from_snapshot == 0 and state_of(again) == replayed(data, tmp_path)
    # The journal cut short in place (same file, fewer bytes than the snapshot covers).
    opened(data)
    journal = folder / "entries.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(lines[: len(lines) // 2]))
    cut = opened(data)
    assert cut.from_snapshot == 0 and state_of(cut) == replayed(data, tmp_path)


def _arrays(folder: Path) -> Path:
    """The directory of arrays that ``snapshot.json`` names."""
    return folder / json.loads((folder / SNAPSHOT).read_text())["arrays"]


def _rewrite(folder: Path, name: str, change: Callable[[np.ndarray], np.ndarray]) -> None:
    path = _arrays(folder) / f"{name}.npy"
    np.save(path, change(np.load(path)))


def _meta_with(folder: Path, **changes: object) -> None:
    meta = json.loads((folder / SNAPSHOT).read_text())
    (folder / SNAPSHOT).write_text(json.dumps({**meta, **changes}))


def _swapped(ends: np.ndarray) -> np.ndarray:
    ends = ends.copy()
    ends[5], ends[6] = ends[6], ends[5]
    return ends


@pytest.mark.parametrize(
    "damage",
    [
        "truncated",
        "garbage",
        "format",
        "analyzer",
        "short column",
        "bad postings",
        "empty",
        "text ends",
        "role codes",
        "missing array",
        "missing directory",
        "pickled",
        "tags out of order",
        "a tag line short",
        "ids' table unsorted",
        "terms' table past the end",
    ],
)
def test_a_damaged_snapshot_is_ignored_and_rebuilt(tmp_path: Path, damage: str) -> None:
    data = tmp_path / "data"
    build(data)
    opened(data)
    folder = data / "sessions" / "s"
    path = folder / SNAPSHOT
    if damage == "truncated":
        texts = _arrays(folder) / "texts.npy"
        texts.write_bytes(texts.read_bytes()[: texts.stat().st_size // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00garbage" * 1000)
    elif damage == "format":
        _meta_with(folder, format=99)
    elif damage == "analyzer":
        _meta_with(folder, analyzer=-1)
    elif damage == "short column":
        _rewrite(folder, "costs", lambda a: a[:-1])
    elif damage == "bad postings":
        _rewrite(folder, "ix_docs", lambda a: a + 10**6)
    elif damage == "text ends":  # the texts would be cut in the wrong places
        _rewrite(folder, "text_ends", _swapped)
    elif damage == "role codes":
        _rewrite(folder, "roles", lambda a: a + 7)
    elif damage == "missing array":
        (_arrays(folder) / "seqs.npy").unlink()
    elif damage == "missing directory":
        shutil.rmtree(_arrays(folder))
    elif damage == "tags out of order":  # tags are read only when asked for: checked first
        _rewrite(folder, "tag_at", lambda a: a[::-1])
    elif damage == "a tag line short":
        _rewrite(folder, "tag_at", lambda a: np.append(a, a[-1] + 1))
    elif damage == "ids' table unsorted":  # an id would not be found: a duplicate would pass
        _rewrite(folder, "id_hashes", lambda a: a[::-1])
    elif damage == "terms' table past the end":
        _rewrite(folder, "ix_term_numbers", lambda a: a + len(a))
    elif damage == "pickled":  # an object array: never unpickled
        np.save(_arrays(folder) / "seqs.npy", np.array([{"x": 1}] * 3, dtype=object))
    else:
        path.write_bytes(b"")
    again = opened(data)
    assert again.from_snapshot == 0 and state_of(again) == replayed(data, tmp_path)
    assert opened(data).from_snapshot  # the replay saved a good one again


def test_a_snapshot_from_before_decisions_were_searchable_is_rebuilt(tmp_path: Path) -> None:
    """Format 4 indexed no role: its decisions would not match "decision" until rebuilt."""
    data = tmp_path / "data"
    build(data)
    store = SessionStore(data, TokenCounter(0.27), clock=lambda: NOW, snapshot_after=None)
    decided = store.get("s").append("keep the cache warm", role="decision").id
    opened(data)
    _meta_with(data / "sessions" / "s", format=4)
    again = opened(data)
    saved = opened(data)  # the replay saved a snapshot of format 5
    assert again.from_snapshot == 0 and saved.from_snapshot
    for s in (again, saved):
        assert [e.id for e in s.recall("decision", 4000).entries if not e.pinned] == [decided]


def test_a_calibrated_ratio_recounts_a_snapshots_tokens(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data)
    opened(data, ratio=0.27)
    again = opened(data, ratio=0.4)
    assert again.from_snapshot
    assert state_of(again) == replayed(data, tmp_path, ratio=0.4)


def test_reading_a_session_read_only_never_writes_a_snapshot(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data)
    store = SessionStore(data, TokenCounter(0.27), snapshot_after=50)
    store.read("s")
    assert not (data / "sessions" / "s" / SNAPSHOT).exists()
    opened(data)  # the server writes one; a read-only reader then uses it
    assert store.read("s").from_snapshot


def test_a_snapshot_saved_after_own_writes_reflects_exactly_its_position(tmp_path: Path) -> None:
    # Session a catches up on another process's records inside an append (a snapshot is
    # then due) and writes its own line; the snapshot saved next must hold exactly the
    # journal up to its position: reopened, nothing is applied twice or counted skipped.
    data = tmp_path / "data"
    build(data, n=20)
    a = opened(data)
    b = opened(data, after=None)
    for i in range(60):
        b.append(f"from b {i}")
    a.append("from a, after catching up")
    a.update(a.entries()[-1].id, pinned=True)
    a.recall("from", 1_000)  # the due snapshot is saved here
    again = opened(data)
    assert again.from_snapshot and again.stats().skipped_lines == 0
    assert state_of(again) == replayed(data, tmp_path)


def test_a_hand_edited_line_with_a_lone_surrogate_survives_a_snapshot(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data, n=60)
    journal = data / "sessions" / "s" / "entries.jsonl"
    with journal.open("ab") as f:  # JSON allows the escape; UTF-8 cannot encode it
        f.write(b'{"kind":"entry","id":"odd1","seq":999,"created_at":1.9e9,"role":"note",')
        f.write(b'"text":"half a pair \\ud800 here","tags":["t\\udfff"]}\n')
    first = opened(data)
    assert any("\ud800" in e.text for e in first.entries())
    again = opened(data)
    assert again.from_snapshot and state_of(again) == replayed(data, tmp_path)


def test_a_snapshot_is_read_lazily_and_saved_again_from_its_columns(tmp_path: Path) -> None:
    # Read from a snapshot, the entries are the snapshot's mapped columns: no text is in
    # memory until asked for. A snapshot saved later from such a state (columns for the
    # entries read, records for those added since: other roles, tags, a compaction)
    # reads back as a replay of the journal does.
    data = tmp_path / "data"
    build(data)
    opened(data)  # saves the first snapshot
    s = opened(data, after=40)
    assert s.from_snapshot
    snap = str(_arrays(data / "sessions" / "s"))
    assert snap in Path("/proc/self/maps").read_text()
    assert s._state.records.columns is not None and not s._state.records._held
    for i in range(45):
        s.append(f"later {i}: the parser cache", role="decision" if i % 3 else "user", tags=["t9"])
    plan = s.plan_compaction(keep_recent=10)
    s.commit_summary(plan, "summary of everything before", "test")
    s.recall("parser", 1_000)  # a snapshot is due: saved from the columns and the records
    again = opened(data, after=None)
    assert again.from_snapshot > s.from_snapshot
    assert state_of(again) == replayed(data, tmp_path)
    roles = {e.role for e in again.entries(include_hidden=True)}
    assert {"decision", "user", "note", "summary"} <= roles


def test_a_sessions_own_writes_make_a_snapshot_due(tmp_path: Path) -> None:
    # A server that appends to a session itself saves snapshots as it goes, so its
    # next start does not replay everything it wrote.
    store = SessionStore(tmp_path / "data", TokenCounter(0.27), snapshot_after=25)
    s = store.open("w")[0]
    for i in range(30):
        s.append(f"own note {i}")
    s.refresh()
    assert (tmp_path / "data" / "sessions" / "w" / SNAPSHOT).is_file()
    again = SessionStore(tmp_path / "data", TokenCounter(0.27), snapshot_after=None).get("w")
    assert again.from_snapshot == 30 and [e.text for e in again.entries()][-1] == "own note 29"


def test_a_dropped_state_is_freed_at_once_not_at_the_next_collection(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data, n=60)
    opened(data)  # saves the snapshot
    s = opened(data, after=None)
    assert s.from_snapshot
    ref = weakref.ref(s._state)
    gc.disable()
    try:
        s._clear()  # what a purge or a rewrite by another process does
        assert ref() is None  # no cycle through its records kept it
    finally:
        gc.enable()


def test_what_a_killed_save_left_never_costs_the_previous_snapshot(tmp_path: Path) -> None:
    # A save killed after writing some arrays (a temporary folder) or after renaming its
    # folder but before naming it (an orphan): the snapshot named stays in use, and the
    # next save removes both leftovers.
    data = tmp_path / "data"
    build(data)
    opened(data)
    folder = data / "sessions" / "s"
    named = _arrays(folder)
    (folder / ".snapshot-dead0000.tmp").mkdir()
    shutil.copytree(named, folder / "snapshot-0rphan00")
    again = opened(data)
    assert again.from_snapshot and state_of(again) == replayed(data, tmp_path)
    assert named.is_dir()
    for i in range(30):
        again.append(f"more {i}")
    again.save_snapshot()
    left = sorted(p.name for p in folder.iterdir() if "snapshot" in p.name and p.name != LOCK)
    assert left == sorted(["snapshot.json", _arrays(folder).name]), left


@pytest.mark.parametrize("line", ['{"t1": 1}', '["t1"], ["t1"]', '["t1"', ""])
def test_a_damaged_tag_line_costs_only_its_own_entrys_tags(tmp_path: Path, line: str) -> None:
    data = tmp_path / "data"
    s = SessionStore(data, TokenCounter(0.27), snapshot_after=None).open("s")[0]
    ids = [s.append(f"note {i}", tags=["t1", f"n{i}"]).id for i in range(20)]
    s.save_snapshot()
    folder = data / "sessions" / "s"

    def damaged(joined: np.ndarray) -> np.ndarray:
        lines = bytes(joined).decode().split("\n")
        lines[3] = line
        return np.frombuffer("\n".join(lines).encode(), np.uint8)

    _rewrite(folder, "tags", damaged)
    again = opened(data)
    assert again.from_snapshot == 20
    found = [e.id for e in again.recall(None, 100_000, tags=["T1"]).entries]
    assert sorted(found) == sorted(ids[:3] + ids[4:])
    assert [e.id for e in again.recall(None, 100_000, tags=["n7"]).entries] == [ids[7]]
