"""Ids, atomic JSON files and the locked JSONL journal, on real files."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from context_window.errors import InvalidInput
from context_window.journal import Journal, parse_line
from context_window.sessions.session import Session
from context_window.sessions.store import SessionStore
from context_window.storage import check_id, new_id, read_json, spelled, write_json_atomic
from context_window.tokens import TokenCounter


def journal_lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")


def read_all(path: Path) -> tuple[list[dict[str, object]], int]:
    """Records and skipped count as a fresh reader sees them."""
    j = Journal(path)
    with j.locked():
        return j.read_new(), j.skipped


def append(path: Path, *records: dict[str, object]) -> None:
    j = Journal(path)
    with j.locked():
        j.read_new()
        j.write(list(records))


# --- ids ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    ["../x", "a/b", "a\\b", "a\x00b", "x" * 65, "x" * 200, ".", "..", "", ".hidden", "-x", "a b"],
)
def test_check_id_rejects_unsafe_ids(bad: str) -> None:
    with pytest.raises(InvalidInput, match="invalid session_id"):
        check_id(bad, "session_id")


@pytest.mark.parametrize("good", ["a", "A1", "my-task", "v1.2_x", "0", "x" * 64])
def test_check_id_accepts_safe_ids(good: str) -> None:
    assert check_id(good) == good


def test_check_id_rejects_non_strings() -> None:
    with pytest.raises(InvalidInput):
        check_id(None)  # type: ignore[arg-type]


def test_generated_ids_are_valid_unique_and_prefixed() -> None:
    before = int(time.time() * 1000)
    ids = [new_id("e") for _ in range(500)]
    after = int(time.time() * 1000)
    assert len(set(ids)) == 500
    for i in ids:
        assert i.startswith("e")
        assert check_id(i) == i
        assert before <= int(i[1:-10], 36) <= after  # the time in ms, then 10 random hex


def test_an_id_names_its_own_directory_first_then_one_in_any_case(tmp_path: Path) -> None:
    for name in ["Task1", "task1", "Spec", ".Hidden"]:
        (tmp_path / name).mkdir()
    (tmp_path / "notes").write_text("a file, not a directory")
    assert spelled(tmp_path, "task1") == "task1"  # an older data dir may hold both
    assert spelled(tmp_path, "TASK1") == "Task1"  # then the first in sort order
    assert spelled(tmp_path, "spec") == "Spec"
    assert spelled(tmp_path, "hidden") == "hidden"
    assert spelled(tmp_path, "Notes") == "Notes"
    assert spelled(tmp_path / "missing", "a") == "a"


# --- atomic JSON ----------------------------------------------------------------------


def test_write_json_atomic_round_trips_and_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "meta.json"
    for n in range(5):
        write_json_atomic(target, {"n": n, "title": "ünïcode ✓"})
    assert read_json(target) == {"n": 4, "title": "ünïcode ✓"}
    assert [p.name for p in target.parent.iterdir()] == ["meta.json"]


def test_write_json_atomic_failure_keeps_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "meta.json"
    write_json_atomic(target, {"ok": True})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"bad": object()})
    assert read_json(target) == {"ok": True}
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


@pytest.mark.parametrize("content", [None, "", "{not json", "[1, 2]", '"text"'])
def test_read_json_returns_none_for_missing_or_bad(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "meta.json"
    if content is not None:
        path.write_text(content)
    assert read_json(path) is None


# --- journal --------------------------------------------------------------------------


def test_empty_or_missing_journal_reads_nothing(tmp_path: Path) -> None:
    assert read_all(tmp_path / "none.jsonl") == ([], 0)
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert read_all(empty) == ([], 0)


def test_every_record_is_one_whole_line(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    append(path, {"a": 1}, {"b": "line\nbreak"})
    append(path, {"c": 3})
    lines = journal_lines(path)
    assert lines[-1] == b""
    assert [json.loads(x) for x in lines[:-1]] == [{"a": 1}, {"b": "line\nbreak"}, {"c": 3}]


def test_read_new_returns_only_what_was_appended_since(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    reader = Journal(path)
    append(path, {"n": 1})
    assert reader.changed()
    with reader.locked():
        assert reader.read_new() == [{"n": 1}]
    assert not reader.changed()
    append(path, {"n": 2}, {"n": 3})
    with reader.locked():
        assert reader.read_new() == [{"n": 2}, {"n": 3}]
        assert reader.read_new() == []


def test_torn_last_line_is_skipped_and_closed_off_by_next_append(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"n":1}\n{"n":2,"te')  # a writer died mid-line
    records, skipped = read_all(path)
    assert records == [{"n": 1}]
    assert skipped == 1
    append(path, {"n": 3})
    # closed off with a NUL, so the torn line can never parse
    assert path.read_bytes() == b'{"n":1}\n{"n":2,"te\x00\n{"n":3}\n'
    records, skipped = read_all(path)
    assert records == [{"n": 1}, {"n": 3}]
    assert skipped == 1


def test_reader_that_saw_torn_line_reads_next_append_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"n":1}\n{"n":2,"te')
    reader = Journal(path)
    with reader.locked():
        assert reader.read_new() == [{"n": 1}]
    append(path, {"n": 3})
    with reader.locked():
        assert reader.read_new() == [{"n": 3}]
    assert reader.skipped == 1


def test_garbage_in_the_middle_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"n":1}\nnot json at all\n\n[1,2]\n\xff\xfe\n{"n":2}\n')
    records, skipped = read_all(path)
    assert records == [{"n": 1}, {"n": 2}]
    assert skipped == 3  # text, a non-object, invalid UTF-8; the blank line is not counted


def test_a_journal_truncated_in_place_is_read_again_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    append(path, {"n": 1, "pad": "x" * 300}, {"n": 2})
    reader = Journal(path)
    with reader.locked():
        reader.read_new()
    first = path.read_bytes().split(b"\n")[0] + b"\n"
    path.write_bytes(first)  # same start, cut short (a backup restored in place)
    with reader.locked():
        assert reader.read_new() == [{"n": 1, "pad": "x" * 300}]
    assert reader.generation == 1  # readers replay from the start


def test_a_file_emptied_in_place_is_read_as_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    append(path, {"n": 1}, {"n": 2})
    reader = Journal(path)
    with reader.locked():
        reader.read_new()
    path.write_bytes(b"")
    append(path, {"n": 3})
    with reader.locked():
        assert reader.read_new() == [{"n": 3}] and reader.generation == 1


def test_a_rewrite_on_a_reused_inode_is_noticed(tmp_path: Path) -> None:
    """A purge's new file can get the inode number the old one freed; the head tells them apart."""
    path = tmp_path / "j.jsonl"
    append(path, *({"kind": "entry", "id": f"e{i}", "text": "old"} for i in range(3)))
    reader = Journal(path)
    with reader.locked():
        assert len(reader.read_new()) == 3
    offset, inode = path.stat().st_size, path.stat().st_ino
    writer = Journal(tmp_path / "other.jsonl")
    new = [{"kind": "entry", "id": f"n{i}", "text": "new " * 20} for i in range(4)]
    with writer.locked():
        writer.rewrite(new)  # a rewritten log: an identity line, then the records
    rewritten = (tmp_path / "other.jsonl").read_bytes()
    with path.open("r+b") as f:  # the same bytes on the same inode number as before
        f.truncate(0)
        f.write(rewritten)
    assert path.stat().st_ino == inode and path.stat().st_size > offset
    assert reader.changed()
    with reader.locked():
        assert reader.read_new() == new  # from the start, without the identity line
        assert reader.generation == 1 and reader.skipped == 0


# --- sessions on disk -------------------------------------------------------------------


def entry(eid: str, text: str, seq: int, **extra: object) -> dict[str, object]:
    return {"kind": "entry", "id": eid, "seq": seq, "created_at": 1.0 + seq, "role": "note",
            "text": text, "tokens": 1, "tags": [], "pinned": False, **extra}  # fmt: skip


def write_session(data: Path, sid: str, lines: list[bytes], meta: bytes | None = None) -> Path:
    d = data / "sessions" / sid
    d.mkdir(parents=True)
    (d / "entries.jsonl").write_bytes(b"".join(lines))
    if meta is not None:
        (d / "meta.json").write_bytes(meta)
    return d


def line(rec: dict[str, object]) -> bytes:
    return json.dumps(rec).encode() + b"\n"


def test_replay_applies_patches_last_value_wins(tmp_path: Path) -> None:
    lines = [
        line(entry("e1", "alpha", 1)),
        line(entry("e2", "beta", 2)),
        line({"kind": "patch", "id": "e1", "pinned": True}),
        line({"kind": "patch", "id": "e2", "deleted": True}),
        line({"kind": "patch", "id": "e1", "pinned": False}),
        line({"kind": "patch", "id": "e2", "deleted": False}),
        line({"kind": "patch", "id": "e1", "pinned": True}),
        line({"kind": "patch", "id": "e2", "deleted": True}),
        line({"kind": "patch", "id": "ghost", "pinned": True}),
    ]
    write_session(tmp_path, "s", lines, meta=b'{"id":"s","title":"T","created_at":1}')
    session, created = SessionStore(tmp_path, TokenCounter(0.27)).open("s")
    assert not created
    assert session.get("e1").pinned and not session.get("e1").deleted
    assert session.get("e2").deleted
    assert [e.id for e in session.entries()] == ["e1"]
    stats = session.stats()
    assert (stats.total, stats.live, stats.pinned, stats.deleted) == (2, 1, 1, 1)
    assert stats.orphan_patches == 1
    assert stats.skipped_lines == 0


def test_summary_record_supersedes_what_it_replaces(tmp_path: Path) -> None:
    lines = [
        line(entry("e1", "alpha", 1)),
        line(entry("e2", "beta", 2)),
        line(entry("s1", "alpha beta", 3, role="summary", replaces=["e1", "e2"])),
    ]
    write_session(tmp_path, "s", lines)
    session = SessionStore(tmp_path, TokenCounter(0.27)).open("s")[0]
    assert [e.id for e in session.entries()] == ["s1"]
    assert [e.id for e in session.entries(include_superseded=True)] == ["e1", "e2", "s1"]


def test_session_with_torn_and_garbage_lines_still_serves(tmp_path: Path) -> None:
    lines = [
        line(entry("e1", "alpha", 1)),
        b"{{{garbage\n",
        line({"kind": "mystery"}),
        line(entry("e1", "duplicate id", 9)),
        line(entry("e2", "beta", 2)),
        b'{"kind":"entry","id":"e3","te',
    ]
    write_session(tmp_path, "s", lines)
    store = SessionStore(tmp_path, TokenCounter(0.27))
    session = store.open("s")[0]
    assert [e.text for e in session.entries()] == ["alpha", "beta"]
    assert session.stats().skipped_lines == 4  # garbage, unknown kind, duplicate id, torn tail
    new = session.append("gamma")
    assert new.seq == 3
    raw = (tmp_path / "sessions" / "s" / "entries.jsonl").read_bytes()
    assert raw.endswith(b'"te\x00\n' + line_of(raw, -1) + b"\n")
    fresh = SessionStore(tmp_path, TokenCounter(0.27)).open("s")[0]
    assert [e.text for e in fresh.entries()] == ["alpha", "beta", "gamma"]
    assert fresh.stats().skipped_lines == 4


def line_of(raw: bytes, index: int) -> bytes:
    return raw.rstrip(b"\n").split(b"\n")[index]


def test_valid_json_with_wrong_field_types_does_not_break_replay(tmp_path: Path) -> None:
    bad_stamp = entry("e2", "bad stamp", 2, created_at="yesterday")
    bad_fields = {**entry("e3", "bad fields", 3), "seq": "x", "tags": "t", "created_at": [1]}
    no_text = {**entry("e4", "", 4), "text": 42}
    lines = [line(entry("e1", "alpha", 1)), line(bad_stamp), line(bad_fields), line(no_text)]
    lines.append(line(entry("e5", "gamma", 5)))
    write_session(tmp_path, "s", lines)
    session = SessionStore(tmp_path, TokenCounter(0.27)).open("s")[0]
    by_text = {e.text: e for e in session.entries()}
    assert list(by_text) == ["alpha", "bad stamp", "bad fields", "gamma"]
    assert by_text["bad stamp"].created_at == 0.0
    assert by_text["bad fields"].tags == ()
    assert session.stats().skipped_lines == 1  # only the entry without text
    assert session.append("delta").seq == 6


@pytest.mark.parametrize("meta", [None, b"", b"{corrupt", b"[]"])
def test_missing_or_corrupt_meta_still_opens_and_serves(tmp_path: Path, meta: bytes | None) -> None:
    write_session(tmp_path, "s", [line(entry("e1", "alpha", 1))], meta=meta)
    store = SessionStore(tmp_path, TokenCounter(0.27))
    session = store.get("s")
    assert session.id == "s"
    assert [e.text for e in session.entries()] == ["alpha"]
    session.append("beta")
    assert read_json(tmp_path / "sessions" / "s" / "meta.json") is not None
    assert [s.id for s in SessionStore(tmp_path, TokenCounter(0.27)).list()] == ["s"]


def test_list_tolerates_corrupt_meta_without_opening(tmp_path: Path) -> None:
    write_session(tmp_path, "s", [line(entry("e1", "alpha", 1))], meta=b"{corrupt")
    (infos,) = SessionStore(tmp_path, TokenCounter(0.27)).list()
    assert (infos.id, infos.title) == ("s", "s")


def test_session_files_leave_no_temp_files(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, TokenCounter(0.27))
    session = store.open("s", "first")[0]
    store.open("s", "second")
    session.append("x y z")
    names = sorted(p.name for p in (tmp_path / "sessions" / "s").iterdir())
    assert names == ["entries.jsonl", "meta.json"]
    assert read_json(tmp_path / "sessions" / "s" / "meta.json")["title"] == "second"  # type: ignore[index]


# --- several processes appending to one session ----------------------------------------

WRITER = """
import sys, time
from pathlib import Path
from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter

data, name, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
session = SessionStore(Path(data), TokenCounter(0.27)).get("shared")
Path(f"{go}.{name}").touch()
while not go.exists():
    time.sleep(0.001)
for i in range(count):
    session.append(f"{name} item {i} " + "padding words " * (i % 7), tags=[name])
"""


def _append_from_processes(
    data: Path, procs: int, per_proc: int, local: int
) -> tuple[Session, list[dict[str, Any]]]:
    """``procs`` writer processes and this one append to one session at once: this
    process's session, and the journal's records."""
    store = SessionStore(data, TokenCounter(0.27))
    session = store.open("shared")[0]
    go = data / "go"
    names = [f"p{k}" for k in range(procs)]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(data), name, str(per_proc), str(go)],
            stderr=subprocess.PIPE,
        )
        for name in names
    ]
    try:
        deadline = time.monotonic() + 30
        while not all(Path(f"{go}.{n}").exists() for n in names):
            assert time.monotonic() < deadline, "writers did not start"
            assert all(c.poll() is None for c in children), "a writer died early"
            time.sleep(0.01)
        go.touch()
        for i in range(local):
            session.append(f"local item {i}", tags=["local"])
        for child in children:
            _, err = child.communicate(timeout=60)
            assert child.returncode == 0, err.decode()
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    raw = (data / "sessions" / "shared" / "entries.jsonl").read_bytes()
    assert raw.endswith(b"\n")
    return session, [json.loads(x) for x in raw.split(b"\n")[:-1]]  # every line parses


def test_processes_appending_concurrently_never_interleave(tmp_path: Path) -> None:
    procs, per_proc, local = 4, 200, 50
    total = procs * per_proc + local
    # On a loaded machine the scheduler may run the writers one after another; then the
    # run shows nothing about concurrency, so it is repeated (up to three times) until
    # the writers' appends really alternate.
    for attempt in range(3):
        data = tmp_path / f"run{attempt}"
        session, records = _append_from_processes(data, procs, per_proc, local)
        assert len(records) == total
        seqs = [r["seq"] for r in records]
        assert sorted(seqs) == list(range(1, total + 1))
        assert seqs == sorted(seqs)  # seq follows file order: assigned under the lock
        writers = [r["tags"][0] for r in records]
        switches = sum(a != b for a, b in itertools.pairwise(writers))
        if switches > procs:
            break
    assert switches > procs  # the writers really did run at the same time
    names = [f"p{k}" for k in range(procs)]
    for name, n in [*((p, per_proc) for p in names), ("local", local)]:
        mine = [" ".join(r["text"].split()[:3]) for r in records if r["tags"] == [name]]
        assert mine == [f"{name} item {i}" for i in range(n)]

    # The long-lived in-process session picked up every other process's appends.
    seen = session.entries()
    assert len(seen) == total
    assert [e.seq for e in seen] == list(range(1, total + 1))
    assert session.stats().skipped_lines == 0
    # Among p3's own entries: across writers, a neighbour's credit can lift "p2 item 199"
    # above it when the writers' last appends sit side by side in the journal.
    hit = session.recall("p3 item 199", 200, limit=1, tags=["p3"]).entries
    assert [e.text.startswith("p3 item 199") for e in hit] == [True]


@pytest.mark.parametrize(
    "bad",
    [
        b'{"a": 1}, {"b": 2}',  # two values on one line: not one record
        b'"just a string"',
        b"[1, 2]",
        b'{"x": NaN}',
        b"[" * 5000,
        b'{"t": "\xff\xfe"}',  # not UTF-8
        b"{truncated",
    ],
)
def test_a_journal_parsed_at_once_reads_as_line_by_line(tmp_path: Path, bad: bytes) -> None:
    # A replay parses all its lines as one JSON array when that yields one object per
    # line; any line that would not parse alone must read exactly as it does alone.
    good = [
        json.dumps({"kind": "entry", "id": f"e{i}", "text": f"t {i}"}).encode() for i in range(5)
    ]
    lines = [good[0], good[1], bad, good[2], b"[1", b"2]", good[3], good[4]]
    path = tmp_path / "entries.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    records, skipped = read_all(path)
    alone = [parse_line(x) for x in lines]
    assert records == [r for r in alone if r is not None]
    assert skipped == sum(r is None for r in alone)
    assert [r["id"] for r in records] == ["e0", "e1", "e2", "e3", "e4"]
