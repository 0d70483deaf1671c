"""One bad record never breaks more than itself.

Each damaged record below (hand-edited or crafted) stopped replay, listing, the CLI or
doctor before, or reused a sequence number. Now each is skipped or served around,
counted, and named by doctor; the session stays usable; imports refuse such records
in one line. The CLI and doctor run as real processes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import run_cli

from .support import service_for

BAD: dict[str, str] = {
    "self-replacing summary": json.dumps(
        {
            "kind": "entry",
            "id": "sx",
            "seq": 20,
            "created_at": 1.0,
            "role": "summary",
            "text": "folds itself",
            "replaces": ["sx"],
        }
    ),
    "400-digit seq": json.dumps(
        {"kind": "entry", "id": "e400", "seq": int("9" * 400), "created_at": 1.0, "text": "big"}
    ),
    "NaN time": '{"kind":"entry","id":"enan","seq":21,"created_at":NaN,"text":"nan time"}',
    "deep nesting": '{"kind":"entry","id":"deep","seq":22,"text":"d","tags":'
    + "[" * 5000
    + "]" * 5000
    + "}",
    "non-boolean patch": json.dumps({"kind": "patch", "id": "PLACEHOLDER", "pinned": "yes"}),
}
SERVED_AROUND = {  # kept, with the time read as unknown
    "future time": json.dumps(
        {"kind": "entry", "id": "efar", "seq": 23, "created_at": 1e300, "text": "far future"}
    ),
    "past time": json.dumps(
        {
            "kind": "entry",
            "id": "eneg",
            "seq": 24,
            "created_at": -1e300,
            "text": "far past",
            "expires_at": 1e300,
        }
    ),
}


def _cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, data=data)


@pytest.fixture
def damaged(tmp_path: Path) -> dict[str, Any]:
    data = tmp_path / "data"
    svc = service_for(data)
    session, _ = svc.sessions.open("s")
    first = session.append("alpha note")
    session.append("beta note")
    lines = [v.replace("PLACEHOLDER", first.id) for v in [*BAD.values(), *SERVED_AROUND.values()]]
    with (data / "sessions" / "s" / "entries.jsonl").open("a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    meta, _ = svc.sessions.open("m")
    meta.append("gamma note")
    (data / "sessions" / "m" / "meta.json").write_text(
        '{"id":"m","title":5,"created_at":"yesterday","updated_at":1e300,"ratio":"x"}'
    )
    broken, _ = svc.sessions.open("u")
    broken.append("delta note")
    journal = data / "sessions" / "u" / "entries.jsonl"
    journal.unlink()
    journal.mkdir()  # unreadable as a journal (root ignores permission bits)
    return {"data": data, "first": first.id}


def test_replay_serves_around_every_bad_record(damaged: dict[str, Any]) -> None:
    session = service_for(damaged["data"]).sessions.get("s")
    texts = sorted(e.text for e in session.entries())
    assert texts == sorted(["alpha note", "beta note", "far future", "far past"])
    times = {e.text: e.created_at for e in session.entries()}
    assert times["far future"] == 0.0 and times["far past"] == 0.0  # unknown
    stats = session.stats()
    assert stats.skipped_lines == len(BAD) and stats.live == 4
    new = session.append("after the damage")
    assert new.seq == 25  # after the highest valid seq (24), never the 400-digit one
    assert session.recall("alpha", 500).entries[0].text == "alpha note"


def test_the_cli_lists_shows_searches_and_exports_around_them(damaged: dict[str, Any]) -> None:
    data = damaged["data"]
    listed = _cli(data, "sessions")
    assert listed.returncode == 0, listed.stderr
    assert "s " in listed.stdout and "m " in listed.stdout
    assert "skipped session 'u'" in listed.stderr
    for args in (("show", "s"), ("show", "m"), ("search", "note")):
        done = _cli(data, *args)
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr
    exported = _cli(data, "export", "session", "s", "-o", str(data.parent / "s.jsonl"))
    assert exported.returncode == 0, exported.stderr
    imported = _cli(data, "import", str(data.parent / "s.jsonl"), "--session-id", "s2")
    assert imported.returncode == 0, imported.stderr  # every export imports back
    texts = sorted(e.text for e in service_for(data).sessions.get("s2").entries())
    assert texts == sorted(["alpha note", "beta note", "far future", "far past"])


def test_doctor_names_each_and_does_not_stop(damaged: dict[str, Any]) -> None:
    done = _cli(damaged["data"], "doctor")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    problems = [ln for ln in done.stdout.splitlines() if ln.startswith("problem: ")]
    joined = "\n".join(problems)
    assert "folds itself" in joined and "impossible seq" in joined
    assert "non-boolean pinned" in joined and "is not a time" in joined
    assert "sessions/u" in joined
    assert len([p for p in problems if "entries.jsonl line" in p]) >= len(BAD) + 2


@pytest.mark.parametrize("name", list(BAD))
def test_an_import_refuses_a_bad_record_in_one_line(tmp_path: Path, name: str) -> None:
    data = tmp_path / "data"
    entry = {"kind": "entry", "id": "e1", "seq": 1, "created_at": 1.0, "text": "fine"}
    header = {"format": "context-window-session", "version": 1, "id": "x", "title": "x"}
    crafted = tmp_path / "x.jsonl"
    bad = BAD[name].replace("PLACEHOLDER", "e1")
    crafted.write_text("\n".join([json.dumps(header), json.dumps(entry), bad]) + "\n")
    done = _cli(data, "import", str(crafted))
    assert done.returncode in (1, 2), done.stdout
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert not (data / "sessions" / "x").exists()
