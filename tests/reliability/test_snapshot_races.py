"""Two processes append to one session and save snapshots of it all the while (one every
few records): neither loses the other's writes, a third that opens the session again
and again meanwhile reads only texts that were written, and a reader that starts from
whichever snapshot was renamed in last sees exactly what a replay of the journal gives."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from context_window.sessions.snapshot import SNAPSHOT
from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter

WRITER = """
import sys
from pathlib import Path
from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter
data, name, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
store = SessionStore(data, TokenCounter(0.27), snapshot_after=25)
session = store.open("shared")[0]
for i in range(n):
    entry = session.append(f"{name} note {i} about the parser and the cache")
    if i % 7 == 0:
        session.update(entry.id, pinned=True)
    if i % 10 == 0:
        session.recall("parser", 500)  # a refresh: saves a snapshot when one is due
    if i % 40 == 0:
        session.save_snapshot()
print("done", flush=True)
"""


READER = """
import re, sys, time
from pathlib import Path
from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter
data, stop = Path(sys.argv[1]), Path(sys.argv[2])
note = re.compile(r"[ab] note [0-9]+ about the parser and the cache")
loads = from_snapshot = 0
while not stop.exists():
    s = SessionStore(data, TokenCounter(0.27), snapshot_after=None).get("shared")
    texts = [e.text for e in s.entries()]  # read from the snapshot file, lazily
    bad = [t for t in texts if not note.fullmatch(t)]
    assert not bad and len(set(texts)) == len(texts), (bad[:3], len(texts))
    loads += 1
    from_snapshot += s.from_snapshot > 0
print("read", loads, from_snapshot, flush=True)
"""


def view(data: Path) -> tuple[object, ...]:
    s = SessionStore(data, TokenCounter(0.27), snapshot_after=None).get("shared")
    r = s.recall("parser cache", 100_000)
    return s.from_snapshot, [e.id for e in s.entries()], s.stats(), r.scores


def test_two_writers_saving_snapshots_lose_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    SessionStore(data, TokenCounter(0.27)).open("shared")
    n = 300
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(data), name, str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    # A reader opens the session again and again meanwhile, from whichever snapshot is
    # there: every text it reads lazily from a snapshot file is one that was written.
    stop = tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(data), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "done", err[-2000:]
    stop.touch()
    out, err = reader.communicate(timeout=300)
    assert reader.returncode == 0, err[-2000:]
    _, loads, from_snapshots = out.split()
    assert int(loads) > 0 and int(from_snapshots) > 0, out
    folder = data / "sessions" / "shared"
    assert (folder / SNAPSHOT).is_file()
    from_snapshot, ids, stats, scores = view(data)
    assert from_snapshot > 0  # the reader started from a snapshot and replayed the rest
    replay = tmp_path / "replay"
    shutil.copytree(data, replay, ignore=shutil.ignore_patterns(SNAPSHOT, ".*.tmp"))
    assert view(replay)[1:] == (ids, stats, scores)
    texts = [e.text for e in SessionStore(replay, TokenCounter(0.27)).get("shared").entries()]
    for name in ("a", "b"):  # every write of both writers is there, once
        mine = [t for t in texts if t.startswith(f"{name} note ")]
        assert sorted(mine) == sorted(
            f"{name} note {i} about the parser and the cache" for i in range(n)
        )
    assert stats.skipped_lines == 0 and stats.total == 2 * n
