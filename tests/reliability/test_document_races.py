"""Document reads racing re-ingests and forgets in other processes stay consistent.

Real processes on one data dir: one pages through a document with doc_window (which
writes its cursor to meta.json) or summarizes it, while another re-ingests or forgets
the same id in a loop. Before: the new version sometimes got the old meta.json (12 of
635), a forgotten document came back as a zombie holding only meta.json (17 of 552),
a summary of the old text was cached for the new one, and readers saw "no document"
mid-replace. An ingest that another process's forget followed at once reported "no
document" for the text it had just ingested. Every invariant is checked on disk after
the race.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .support import service_for

SECONDS = 4.0
READER = """
import json, sys, time
from pathlib import Path
from context_window.config import Settings
from context_window.errors import ContextWindowError, NotFound
from context_window.service import Service
import anyio
from context_window.documents.summaries import summarize_range
data, mode, seconds = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
service = Service(Settings(data_dir=data, llm_enabled=False, audit=False))
store = service.documents
out = {"ok": 0, "missing": 0, "errors": []}
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        if mode == "window":
            store.window("d", reset=True, budget=300)
            store.window("d", budget=300, session_id="reader")
        elif mode == "ingest":  # its own text, while the other process forgets "d"
            store.ingest(text=f"# Reader\\n\\nreader text {out['ok']}\\n", doc_id="d")
        elif mode == "summary":
            anyio.run(summarize_range, store, service.summarizer, "d", None, None, 64, True)
        else:
            store.outline(store.get("d"))
            store.search("version", "d", 3)
        out["ok"] += 1
    except NotFound:
        out["missing"] += 1
        time.sleep(0.002)  # forgotten for now: let the writer ingest it again
    except ContextWindowError as exc:
        out["errors"].append(str(exc)[:200])
print(json.dumps(out))
"""
WRITER = """
import sys, time
from pathlib import Path
from context_window.config import Settings
from context_window.errors import NotFound
from context_window.service import Service
data, mode, seconds = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
store = Service(Settings(data_dir=data, llm_enabled=False, audit=False)).documents
end, n = time.monotonic() + seconds, 0
while time.monotonic() < end:
    n += 1
    body = (f"version {n} paragraph {i} " + "word " * 40 for i in range(40))
    text = f"# Doc version {n} \\n\\n" + "\\n\\n".join(body)
    if mode == "forget" and n % 2 == 0:
        try:
            store.forget("d")
        except NotFound:
            pass
    else:
        store.ingest(text=text, doc_id="d")
        if mode == "forget":
            time.sleep(0.005)  # else the next forget follows at once: a reader rarely finds it
print(n)
"""


def _run(data: Path, reader: str, writer: str) -> dict[str, object]:
    r = subprocess.Popen(
        [sys.executable, "-c", READER, str(data), reader, str(SECONDS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    w = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(data), writer, str(SECONDS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = r.communicate(timeout=120)
    _, werr = w.communicate(timeout=120)
    assert r.returncode == 0, err[-2000:]
    assert w.returncode == 0, werr[-2000:]
    return dict(json.loads(out))


def _check_disk(data: Path) -> None:
    docs = data / "documents"
    leftovers = [p.name for p in docs.iterdir() if p.name.startswith((".old-", ".tmp-"))]
    assert not leftovers, leftovers
    folder = docs / "d"
    if not folder.exists():
        return
    names = {p.name for p in folder.iterdir()}
    assert {"meta.json", "source.txt", "index"} <= names, names  # never a zombie
    meta = json.loads((folder / "meta.json").read_text())
    source = (folder / "source.txt").read_bytes()
    assert meta["sha256"] == hashlib.sha256(source).hexdigest()  # its own meta.json
    summary = meta.get("summary")
    if summary:  # the cached summary is of this very text
        version = source.split(b"version ", 1)[1].split(b" ", 1)[0].decode()
        named = set(re.findall(r"version (\d+) ", summary["text"]))
        assert named <= {version}, f"a summary of version {named}, cached for {version}"


@pytest.mark.parametrize(
    ("reader", "writer"),
    [
        ("window", "ingest"),
        ("window", "forget"),
        ("summary", "ingest"),
        ("reads", "ingest"),
        ("ingest", "forget"),
    ],
)
def test_reads_racing_replaces_and_forgets_in_another_process(
    tmp_path: Path, reader: str, writer: str
) -> None:
    data = tmp_path / "data"
    service_for(data).documents.ingest(text="# Doc\n\nversion 0 first " + "word " * 50, doc_id="d")
    out = _run(data, reader, writer)
    assert out["ok"], out
    assert not out["errors"], out["errors"][:5]  # no "damaged", no internal errors
    if "ingest" in (reader, writer):
        # A replace never makes the document vanish, and an ingest that a forget
        # follows at once still answers with what it ingested.
        assert not out["missing"], out
    time.sleep(0.1)
    _check_disk(data)
