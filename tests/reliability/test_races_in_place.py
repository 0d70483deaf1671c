"""A compaction racing a delete and a purge in another process refuses cleanly, and a
journal truncated or restored in place is picked up without a restart."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from context_window.errors import RETRY, StorageError

from .support import service_for

DELETE_AND_PURGE = """
import sys
from pathlib import Path
from context_window.config import Settings
from context_window.service import Service
service = Service(Settings(data_dir=Path(sys.argv[1]), llm_enabled=False, audit=False))
session = service.sessions.get("s")
session.update(sys.argv[2], deleted=True)
print(session.purge())
"""


def test_a_compaction_whose_original_was_purged_meanwhile_refuses_cleanly(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    session, _ = service_for(data).sessions.open("s")
    ids = [session.append(f"note {i} about the release").id for i in range(6)]
    plan = session.plan_compaction(2)
    assert ids[0] in [e.id for e in plan.entries]
    other = subprocess.run(  # another process deletes one of the originals and purges
        [sys.executable, "-c", DELETE_AND_PURGE, str(data), ids[0]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert other.returncode == 0, other.stderr[-2000:]
    with pytest.raises(StorageError, match="nothing was compacted") as err:
        session.commit_summary(plan, "a summary", "extractive")
    assert err.value.remedy == RETRY
    assert ids[0] not in [e.id for e in session.entries(include_hidden=True)]
    assert len(session.entries()) == 5  # nothing folded, nothing lost


def test_a_journal_restored_in_place_is_read_without_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    service = service_for(data)
    session, _ = service.sessions.open("s")
    session.append("kept in the backup")
    journal = data / "sessions" / "s" / "entries.jsonl"
    backup = tmp_path / "backup.jsonl"
    shutil.copyfile(journal, backup)
    for i in range(5):
        session.append(f"written after the backup {i}")
    assert len(session.recall(None, 2000).entries) == 6
    inode = journal.stat().st_ino
    shutil.copyfile(backup, journal)  # restored in place: same inode, shorter
    assert journal.stat().st_ino == inode
    texts = [e.text for e in service.sessions.get("s").recall(None, 2000).entries]
    assert texts == ["kept in the backup"]
    session.append("after the restore")
    fresh = [e.text for e in service_for(data).sessions.get("s").entries()]
    assert fresh == ["kept in the backup", "after the restore"]
    journal.write_bytes(b"")  # truncated in place
    assert not service.sessions.get("s").recall(None, 2000).entries


def test_a_longer_journal_restored_in_place_is_read_from_its_start(tmp_path: Path) -> None:
    """Same inode, same first bytes, longer than what was read: the offset means nothing."""
    data = tmp_path / "data"
    service = service_for(data)
    session, _ = service.sessions.open("s")
    session.append("first")
    session.append("short")
    assert len(session.recall(None, 5000).entries) == 2  # read up to the end
    journal = data / "sessions" / "s" / "entries.jsonl"
    other = tmp_path / "other"
    twin, _ = service_for(other).sessions.open("s")
    for text in ("first", "second from another copy " * 20, "third"):
        twin.append(text)
    head = journal.read_bytes().split(b"\n")[0]
    copy = (other / "sessions" / "s" / "entries.jsonl").read_bytes()
    journal.write_bytes(head + b"\n" + copy.split(b"\n", 1)[1])  # same start, longer
    texts = [e.text for e in service.sessions.get("s").recall(None, 5000).entries]
    assert sorted(texts) == sorted(["first", "second from another copy " * 20, "third"])
