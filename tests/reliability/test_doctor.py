"""context-window doctor: a clean dir exits 0; each kind of damage exits 1 and is named."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from context_window import main as cli_main
from context_window.cli.doctor import audit, run
from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter

from .support import service_for, snapshot, writer


def doctor(data: Path) -> tuple[int, str]:
    """Run the doctor on ``data``; return its exit status and report."""
    out = io.StringIO()
    status = run(data, out)
    return status, out.getvalue()


def healthy(data: Path) -> list[str]:
    """Two sessions with patches and a compaction; returns the entry ids of session 'a'."""
    service = service_for(data)
    a, _ = service.sessions.open("a", "first")
    ids = [a.append(f"fact {i}. It matters.").id for i in range(6)]
    a.update(ids[0], pinned=True)
    a.update(ids[1], deleted=True)
    a.update(ids[1], deleted=False)
    assert anyio.run(service.compact, "a", 1, 32).entry is not None
    b, _ = service.sessions.open("b")
    b.append("hello")
    service.sessions.open("empty")  # a session with no log yet is fine
    return ids


def journal(data: Path, sid: str = "a") -> Path:
    return data / "sessions" / sid / "entries.jsonl"


def append_line(path: Path, line: bytes) -> None:
    with path.open("ab") as f:
        f.write(line)


def test_clean_dir_exits_0(data_dir: Path) -> None:
    healthy(data_dir)
    status, text = doctor(data_dir)
    assert status == 0, text
    assert text.startswith("OK in ") and "3 sessions (8 entries)" in text
    assert text.count("\n") == 1


def test_empty_dir_is_clean(data_dir: Path) -> None:
    assert doctor(data_dir)[0] == 0


def test_doctor_changes_nothing(data_dir: Path) -> None:
    healthy(data_dir)
    append_line(journal(data_dir), b'{"kind":"entry","id":"torn","te')
    (data_dir / "sessions" / "b" / "meta.json").unlink()
    before = snapshot(data_dir)
    assert doctor(data_dir)[0] == 1
    assert snapshot(data_dir) == before


def _torn(d: Path) -> None:
    append_line(journal(d), b'{"kind":"entry","id":"e-half","text":"cut of')


def _garbage(d: Path) -> None:
    lines = journal(d).read_bytes().split(b"\n")
    journal(d).write_bytes(b"\n".join([lines[0], b"\x00\xffgarbage", *lines[1:]]))


def _orphan(d: Path) -> None:
    append_line(journal(d), b'{"kind":"patch","id":"e-ghost","deleted":true}\n')


def _replaces_unknown(d: Path) -> None:
    rec = {"kind": "entry", "id": "s-bad", "seq": 99, "text": "sum", "replaces": ["e-ghost"]}
    append_line(journal(d), json.dumps(rec).encode() + b"\n")


def _folded_twice(d: Path) -> None:
    ids = [json.loads(x)["id"] for x in journal(d).read_bytes().split(b"\n")[:2]]
    rec = {"kind": "entry", "id": "s-two", "seq": 98, "text": "again", "replaces": ids[1:]}
    append_line(journal(d), json.dumps(rec).encode() + b"\n")


def _duplicate_id(d: Path) -> None:
    append_line(journal(d), journal(d).read_bytes().split(b"\n")[0] + b"\n")


def _duplicate_seq(d: Path) -> None:
    append_line(journal(d), b'{"kind":"entry","id":"e-dup","seq":1,"text":"x"}\n')


def _unknown_kind(d: Path) -> None:
    append_line(journal(d), b'{"kind":"mystery"}\n')


def _not_an_object(d: Path) -> None:
    append_line(journal(d), b"[1, 2]\n")


def _entry_without_text(d: Path) -> None:
    append_line(journal(d), b'{"kind":"entry","id":"e-notext","seq":97}\n')


def _meta_missing(d: Path) -> None:
    (d / "sessions" / "a" / "meta.json").unlink()


def _meta_corrupt(d: Path) -> None:
    (d / "sessions" / "a" / "meta.json").write_bytes(b'{"id": "a", "tit')


def _meta_wrong_id(d: Path) -> None:
    meta = d / "sessions" / "a" / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "id": "zzz"}))


def _stray_file(d: Path) -> None:
    (d / "sessions" / "notes.txt").write_text("hi")


def _bad_dir_name(d: Path) -> None:
    (d / "sessions" / "-bad name").mkdir()


def _leftover_temp(d: Path) -> None:
    (d / "sessions" / "a" / ".meta.json.x1y2.tmp").write_text("{")


def _meta_set_aside(d: Path) -> None:
    (d / "sessions" / "a" / "meta.json.corrupt").write_bytes(b'{"id": "a", "tit')


def _calibration_corrupt(d: Path) -> None:
    (d / "calibration.json").write_text("{nope")


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "torn last line": (_torn, "entries.jsonl line 11: torn last line"),
    "garbage line": (_garbage, "entries.jsonl line 2: unreadable line"),
    "orphan patch": (_orphan, "patch for unknown entry 'e-ghost' (orphan)"),
    "replaces unknown": (_replaces_unknown, "summary s-bad replaces unknown entry 'e-ghost'"),
    "folded twice": (_folded_twice, "already folded by"),
    "duplicate id": (_duplicate_id, "duplicate entry id"),
    "duplicate seq": (_duplicate_seq, "seq 1 already used"),
    "unknown kind": (_unknown_kind, "unknown record kind 'mystery'"),
    "not an object": (_not_an_object, "unreadable line"),
    "entry without text": (_entry_without_text, "entry without a string id and text"),
    "meta missing": (_meta_missing, "sessions/a/meta.json: missing"),
    "meta corrupt": (_meta_corrupt, "sessions/a/meta.json: unreadable"),
    "meta wrong id": (_meta_wrong_id, "id 'zzz' does not match"),
    "stray file": (_stray_file, "sessions/notes.txt: not a session directory"),
    "bad dir name": (_bad_dir_name, "not a valid session id"),
    "leftover temp": (_leftover_temp, "leftover temporary file"),
    "meta set aside": (_meta_set_aside, "a damaged meta.json the server set aside"),
    "calibration corrupt": (_calibration_corrupt, "calibration.json: unreadable JSON"),
}


@pytest.mark.parametrize("name", list(DAMAGE))
def test_each_damage_exits_1_and_is_named(data_dir: Path, name: str) -> None:
    healthy(data_dir)
    damage, expected = DAMAGE[name]
    damage(data_dir)
    status, text = doctor(data_dir)
    assert status == 1, text
    problems = [ln for ln in text.splitlines() if ln.startswith("problem: ")]
    assert len(problems) == 1, text
    assert expected in problems[0], text
    assert text.splitlines()[-1].startswith("1 problem found in ")


def test_doctor_counts_what_the_server_skips(data_dir: Path) -> None:
    healthy(data_dir)
    for damage in (_garbage, _orphan, _duplicate_id, _unknown_kind, _not_an_object):
        damage(data_dir)
    _entry_without_text(data_dir)
    _torn(data_dir)  # last: a torn line swallows whatever is appended without closing it
    stats = SessionStore(data_dir, TokenCounter(0.27)).open("a")[0].stats()
    report = audit(data_dir)
    assert len(report.problems) == stats.skipped_lines + stats.orphan_patches == 7


def test_cli_doctor(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    healthy(data_dir)
    assert cli_main(["doctor", "--data-dir", str(data_dir)]) == 0
    assert capsys.readouterr().out.startswith("OK in ")
    _orphan(data_dir)
    assert cli_main(["doctor", "--data-dir", str(data_dir)]) == 1
    assert "orphan" in capsys.readouterr().out


def test_cli_doctor_subprocess(data_dir: Path) -> None:
    healthy(data_dir)
    _torn(data_dir)
    done = subprocess.run(
        [sys.executable, "-m", "context_window", "doctor", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "torn last line" in done.stdout
    assert done.stdout.splitlines()[-3].startswith("1 problem found")
    assert done.stdout.splitlines()[-2].startswith("word scan of large ingests: ")
    assert done.stdout.splitlines()[-1].startswith("tool schemas (tools/list): ~")


def test_doctor_beside_a_live_writer(data_dir: Path) -> None:
    """Lines being written by a live server are never reported as torn."""
    proc = writer("append", str(data_dir), "live", "3")
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    assert proc.stdout.readline().startswith(b"A ")  # at least one entry before the audits
    try:
        for _ in range(40):
            report = audit(data_dir)
            assert report.ok, report.render()
    finally:
        proc.kill()
        proc.communicate()
    assert report.entries > 0


def test_doctor_on_a_fresh_install_says_the_dir_comes_later(tmp_path: Path) -> None:
    fresh = tmp_path / "never-started" / "data"
    done = subprocess.run(
        [sys.executable, "-m", "context_window", "doctor", "--data-dir", str(fresh)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"note: the data dir {fresh} does not exist yet" in done.stdout
    assert "creates it on its first start" in done.stdout
    assert not (tmp_path / "never-started").exists()  # doctor never creates it


def test_doctor_names_a_data_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("not a directory")
    report = audit(tmp_path / "data")
    assert not report.ok
    assert [p.message for p in report.problems] == ["the data dir is not a directory"]
