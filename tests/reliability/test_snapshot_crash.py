"""A process killed (SIGKILL) while it writes a session snapshot leaves the previous
snapshot or none, never one that is used wrongly: the next process reads exactly what a
replay of the journal gives."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from context_window.sessions.snapshot import SNAPSHOT
from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter

ENTRIES = 40_000
CHILD = """
import sys
from pathlib import Path
from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter
s = SessionStore(Path(sys.argv[1]), TokenCounter(0.27), snapshot_after=None).get("big")
print("replayed", flush=True)
s.save_snapshot()
print("saved", flush=True)
"""


def write_journal(data: Path, n: int) -> None:
    folder = data / "sessions" / "big"
    folder.mkdir(parents=True)
    words = "parser socket timeout retry cache index token budget window chunk".split()
    with (folder / "entries.jsonl").open("w", encoding="utf-8") as f:
        for i in range(n):
            text = f"note {i}: " + " ".join(words[(i * k) % len(words)] for k in range(1, 9))
            rec = {"kind": "entry", "id": f"e{i:07d}", "seq": i + 1, "created_at": 1.7e9 + i}
            f.write(json.dumps({**rec, "role": "note", "text": text}) + "\n")
            if i % 1000 == 7:
                f.write(json.dumps({"kind": "patch", "id": f"e{i:07d}", "pinned": True}) + "\n")
    meta = {"id": "big", "title": "big", "created_at": 1.7e9, "updated_at": 1.7e9}
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")


def shown(data: Path) -> tuple[object, ...]:
    s = SessionStore(data, TokenCounter(0.27), snapshot_after=None).get("big")
    r = s.recall("parser window", 2_000)
    return s.from_snapshot, s.stats(), [e.id for e in r.entries], r.scores, len(s.entries())


def test_a_kill_while_writing_a_snapshot_never_misleads_a_reader(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_journal(data, ENTRIES)
    folder = data / "sessions" / "big"
    reference = tmp_path / "reference"
    shutil.copytree(data, reference)
    want = shown(reference)[1:]
    rng = random.Random(7)

    def start() -> subprocess.Popen[str]:
        (folder / SNAPSHOT).unlink(missing_ok=True)
        for old in folder.glob("snapshot-*"):
            shutil.rmtree(old)
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(data)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "replayed"
        return child

    def temps() -> list[Path]:
        """What a save in progress has written: its arrays' directory (under a
        temporary name, then its own) or the temporary file of ``snapshot.json``."""
        return [*folder.glob(".snapshot-*.tmp"), *folder.glob(f".{SNAPSHOT}.*.tmp")] + [
            p for p in folder.glob("snapshot-*") if not (folder / SNAPSHOT).exists()
        ]

    def when(ready: Callable[[], object], child: subprocess.Popen[str]) -> float:
        """The moment ``ready()`` first holds, polled while the child runs."""
        while not ready():
            assert child.poll() is None, "the child ended before the point looked for"
            time.sleep(0.0005)
        return time.monotonic()

    # One save left alone: how long the file's write (temp file to rename) takes here.
    child = start()
    write_s = -when(temps, child) + when((folder / SNAPSHOT).exists, child)
    assert child.stdout is not None and child.stdout.readline().strip() == "saved"
    child.wait()
    outcomes = {"torn write left a temp file": 0, "complete": 0}
    for _ in range(12):
        child = start()
        when(temps, child)  # the write has begun: kill somewhere inside it
        time.sleep(rng.uniform(0.0, 0.8) * write_s)
        child.kill()
        child.wait()
        if (folder / SNAPSHOT).exists():
            outcomes["complete"] += 1
        else:
            assert temps(), "a killed writer leaves its temp file"
            outcomes["torn write left a temp file"] += 1
        got = shown(data)
        assert got[1:] == want  # never a torn snapshot taken for the state
        assert got[0] in (0, ENTRIES)  # read whole from a snapshot, or not at all
        if outcomes["torn write left a temp file"] >= 2:
            break
    assert outcomes["torn write left a temp file"] >= 1, outcomes  # the kill hit the write
    # The next save sweeps what killed writers left, and its snapshot is used.
    s = SessionStore(data, TokenCounter(0.27), snapshot_after=None).get("big")
    s.save_snapshot()
    assert not list(folder.glob(".snapshot*.tmp")) and len(list(folder.glob("snapshot-*"))) == 1
    assert shown(data)[0] == ENTRIES and shown(data)[1:] == want
