"""Crash: document ingests (of inline text and of files) killed with SIGKILL never leave a
half document listed, and the acknowledged version survives; the same id ingests again
afterwards."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest

from context_window.cli.doctor import audit

from .support import acked_lines, add, kill_at_random, service_for, writer

INGEST_ROUNDS = 15


def test_doc_ingest_survives_sigkill(data_dir: Path) -> None:
    """A re-ingest killed midway never lists a half document; the same id ingests again."""
    rng = random.Random(99)
    acked_titles: list[str] = []
    for rnd in range(INGEST_ROUNDS):
        lines = kill_at_random(["ingest", str(data_dir), "crashdoc", str(rnd)], rng, 0.5)
        titles = [ln.split()[2] for ln in lines]
        acked_titles += titles
        service = service_for(data_dir)
        docs = service.documents.all()
        assert [d.id for d in docs] in ([], ["crashdoc"])
        if docs:
            doc = docs[0]
            # The listed version is the last acknowledged one or the one in flight.
            in_flight = f"v{rnd}.{len(titles)}"
            assert doc.title in ({acked_titles[-1]} if acked_titles else set()) | {in_flight}
            window = service.documents.window("crashdoc", 0, doc.chunks - 1, budget=10**9)
            assert [c.index for c in window.chunks] == list(range(doc.chunks))
            assert service.documents.search("lorem works", "crashdoc", limit=3)
        else:
            assert not acked_titles, "an acknowledged document vanished after a kill"
        problems = [p for p in audit(data_dir).problems if "leftover" not in p.message]
        assert not problems, problems
        done = service.documents.ingest(text=f"# After {rnd}\n\nworks", doc_id="crashdoc").doc
        acked_titles.append(done.title)
        assert service_for(data_dir).documents.get("crashdoc").title == done.title
    # Odd versions were ingested from a file (copied in block by block), even ones inline.
    from_files = [t for t in acked_titles if t.startswith("v") and int(t.split(".")[1]) % 2]
    assert from_files, "no file ingest was acknowledged before a kill"
    add("crash rounds survived (doc_ingest, SIGKILL)", INGEST_ROUNDS)


@pytest.mark.parametrize("stage", ["replace-rename", "replace-cleanup", "forget-cleanup"])
def test_kill_inside_a_replace_or_forget(data_dir: Path, stage: str) -> None:
    """Killed at the worst instants of a replace or a forget, the document is either a whole
    old or new version or (for a forget) gone: never missing after a replace, never half."""
    proc = writer("die-at", str(data_dir), "crashdoc", stage)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err.decode()
    assert acked_lines(out) == ["I crashdoc v1 1"]
    service = service_for(data_dir)
    docs = service.documents.all()
    if stage == "forget-cleanup":
        assert [d.title for d in docs] in ([], ["v1"])
    else:
        assert [d.title for d in docs] in (["v1"], ["v2"]), "the acknowledged v1 vanished"
    for doc in docs:
        window = service.documents.window(doc.id, 0, budget=10**6)
        assert window.chunks and window.at_end
    problems = [p for p in audit(data_dir).problems if "leftover" not in p.message]
    assert not problems, problems
    again = service.documents.ingest(text="# Three\n\nthree", doc_id="crashdoc", title="v3")
    assert service_for(data_dir).documents.get("crashdoc").title == again.doc.title == "v3"
    add("kills inside a replace or forget survived", 1)
