"""The ingest sandbox holds without /proc, as on macOS and in hardened containers.

A child process runs in its own mount namespace with /proc covered by an empty tmpfs,
so the descriptor-path check (which reads /proc/self/fd) has nothing to read. A thread
keeps swapping an intermediate directory for a symlink to a directory outside the root
while the child ingests through it. Before, 18 of 400 ingests read the outside file;
each path component is now opened relative to the one before with O_NOFOLLOW. Needs
``unshare`` and mount (root); skipped with the reason where they are not allowed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import json, sys, threading, time
from pathlib import Path
assert not Path("/proc/self/fd").exists(), "/proc is still there"
from context_window.documents.store import DocumentStore
from context_window.errors import ContextWindowError
from context_window.tokens import TokenCounter
base = Path(sys.argv[1])
root, outside, data = base / "root", base / "outside", base / "data"
(outside / "flip.txt").write_text("OUTSIDE SECRET")
(root / "d").mkdir()
(root / "d" / "flip.txt").write_text("inside text")
store = DocumentStore(data, TokenCounter(0.27), ingest_roots=[root])
stop = threading.Event()
def run():
    while not stop.is_set():
        (root / "d").rename(root / "d.old")
        (root / "d").symlink_to(outside)
        (root / "d").unlink()
        (root / "d.old").rename(root / "d")
        time.sleep(0.0002)  # the good side stays a little longer, so ingests succeed too
thread = threading.Thread(target=run, daemon=True)
thread.start()
out = {"ingested": 0, "refused": 0, "leaked": 0}
try:
    for i in range(1500):
        try:
            doc = store.ingest(file_path="d/flip.txt", doc_id=f"race{i % 4}").doc
        except ContextWindowError:
            out["refused"] += 1
            continue
        text = (data / "documents" / doc.id / "source.txt").read_text()
        out["leaked" if "SECRET" in text else "ingested"] += 1
finally:
    stop.set()
    thread.join()
print(json.dumps(out))
"""


def test_a_directory_swapped_for_a_symlink_never_leaks_without_proc(tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    (tmp_path / "root").mkdir()
    (tmp_path / "outside").mkdir()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            'mount -t tmpfs none /proc && exec "$0" "$@"',
            sys.executable,
            str(script),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0 and (
        "Operation not permitted" in proc.stderr or "mount" in proc.stderr
    ):
        pytest.skip(f"cannot hide /proc here: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["leaked"] == 0, out
    assert out["ingested"] and out["refused"], out  # both sides of the swap were hit
