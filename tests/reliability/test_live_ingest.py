"""A live ingest is never swept, whatever the clocks say.

A real ingest process is stopped with SIGSTOP in the middle of its build (a laptop
asleep), and its work directory is dated two hours back (what a second server whose
clock runs an hour ahead would see). A second process then starts a Service on the
same data dir, which sweeps leftovers. Before, it deleted the live work directory
and the first ingest went on to commit a document without its source or chunks, and
reported success. Liveness is now the owner's lock, which a stopped process keeps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from helpers import run_cli

from benchmarks import corpus

INGEST = """
import json, sys
from pathlib import Path
from context_window.config import Settings
from context_window.service import Service
data, log = Path(sys.argv[1]), Path(sys.argv[2])
roots = (log.parent,)
service = Service(Settings(data_dir=data, llm_enabled=False, audit=False, ingest_roots=roots))
done = service.documents.ingest(file_path=str(log), doc_id="big")
print(json.dumps({"chunks": done.doc.chunks, "chars": done.doc.chars}))
"""
SWEEP = """
import sys
from pathlib import Path
from context_window.config import Settings
from context_window.service import Service
Service(Settings(data_dir=Path(sys.argv[1]), llm_enabled=False, audit=False))
print("swept")
"""


def test_a_stopped_ingest_is_not_swept_by_a_second_server(tmp_path: Path) -> None:
    log = corpus.big_log(20)
    data = tmp_path / "data"
    ingest = subprocess.Popen(
        [sys.executable, "-c", INGEST, str(data), str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    docs = data / "documents"
    deadline = time.monotonic() + 60
    work: list[Path] = []
    while not work:
        assert ingest.poll() is None, ingest.communicate()
        assert time.monotonic() < deadline, "no work directory appeared"
        if docs.is_dir():
            work = [p for p in docs.iterdir() if p.name.startswith(".tmp-") and p.is_dir()]
        time.sleep(0.005)
    os.kill(ingest.pid, signal.SIGSTOP)
    try:
        two_hours_ago = time.time() - 7200
        os.utime(work[0], (two_hours_ago, two_hours_ago))
        swept = subprocess.run(
            [sys.executable, "-c", SWEEP, str(data)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert swept.returncode == 0, swept.stderr[-2000:]
        assert work[0].is_dir(), "the live ingest's work directory was swept"
    finally:
        os.kill(ingest.pid, signal.SIGCONT)
    out, err = ingest.communicate(timeout=300)
    assert ingest.returncode == 0, err[-2000:]
    done = json.loads(out)
    folder = docs / "big"
    assert (folder / "source.txt").stat().st_size == log.stat().st_size
    assert len(np.load(folder / "index" / "spans.npy")) == done["chunks"]
    doctor = run_cli("doctor", data=data)
    assert doctor.returncode == 0, doctor.stdout
