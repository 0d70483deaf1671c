"""A failed append is not live: a short write is cut off, reported, and never replayed.

The short write is real: a child process appends under RLIMIT_FSIZE set so the kernel
writes every byte of the entry's line but its newline (SIGXFSZ ignored, so write()
returns short). Before, the caller got an error, yet the bytes stayed; the next append
closed the line off and the "failed" entry was live for every later reader.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from .support import service_for

CHILD = """
import json, resource, signal, sys
from pathlib import Path
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from context_window.config import Settings
from context_window.errors import StorageError
from context_window.service import Service
data, text, limit = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
service = Service(Settings(data_dir=data, llm_enabled=False, audit=False), clock=lambda: 1.8e9)
session = service.sessions.get("s")
if limit:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
try:
    entry = session.append(text)
except StorageError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    print(json.dumps({"id": entry.id}))
"""
TEXT = "the deploy key lives in vault path secret/deploy " * 4


def _append(data: Path, text: str, limit: int = 0) -> dict[str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(data), text, str(limit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(json.loads(proc.stdout))


def _texts(data: Path) -> list[str]:
    session = service_for(data).sessions.get("s")  # a fresh process's view: full replay
    return [e.text for e in session.entries()]


def test_a_short_write_is_cut_off_and_a_retry_is_not_a_duplicate(tmp_path: Path) -> None:
    data = tmp_path / "data"
    session, _ = service_for(data).sessions.open("s")
    session.append("first note")
    journal = data / "sessions" / "s" / "entries.jsonl"
    before = journal.read_bytes()

    probe = tmp_path / "probe"  # how long the entry's line is, on a copy
    shutil.copytree(data, probe)
    _append(probe, TEXT)
    line = len((probe / "sessions" / "s" / "entries.jsonl").read_bytes()) - len(before)

    failed = _append(data, TEXT, limit=len(before) + line - 1)  # all but the newline
    assert "error" in failed and "try again" in failed["error"]
    assert journal.read_bytes() == before  # the partial line was cut off
    assert _texts(data) == ["first note"]

    retried = _append(data, TEXT)
    assert "id" in retried
    assert _texts(data) == ["first note", TEXT]  # once, not twice
    _append(data, "later note")
    assert _texts(data) == ["first note", TEXT, "later note"]


def test_a_torn_line_that_parses_is_never_live(tmp_path: Path) -> None:
    """A writer killed after all but the newline: the line parses, but was never acknowledged."""
    data = tmp_path / "data"
    session, _ = service_for(data).sessions.open("s")
    session.append("first note")
    journal = data / "sessions" / "s" / "entries.jsonl"
    record = json.loads(journal.read_bytes().splitlines()[-1])
    torn = {**record, "id": record["id"][:-3] + "zzz", "seq": 99, "text": "never acknowledged"}
    with journal.open("ab") as f:
        f.write(json.dumps(torn).encode())  # no newline: the write did not finish
    assert _texts(data) == ["first note"]
    service_for(data).sessions.get("s").append("second note")  # closes the torn line off
    assert _texts(data) == ["first note", "second note"]
    stats = service_for(data).sessions.get("s").stats()
    assert stats.skipped_lines == 1 and stats.live == 2
