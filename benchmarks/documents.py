"""Document benchmarks, each phase in its own process so peak RSS is the server's own.

``python -m benchmarks.documents ingest|restart --data-dir D --corpus F --queries Q``
prints one JSON object. ``ingest`` ingests the corpus into a fresh data dir, then
searches and pages it; ``restart`` opens a new Service on the same data dir (the
server restarted; the OS page cache stays warm) and times the first and later
searches. :func:`bench_documents` runs both phases and merges their output.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.measure import current_rss_mb, disk_mb, peak_rss_mb, summary_ms
from context_window.cli.main import tune_process
from context_window.config import Settings
from context_window.retrieval import wordscan
from context_window.service import Service

ROOT = Path(__file__).resolve().parent.parent
WINDOW_CALLS = 60
SEARCH_LIMIT = 10


def open_store(data_dir: Path, roots: list[Path]) -> tuple[Service, Any]:
    """A Service with default settings on ``data_dir``, and its document store; the file
    limit is raised only as far as the largest file in ``roots`` (``--large``: 1 GB)."""
    largest = max((p.stat().st_size for r in roots for p in r.glob("*") if p.is_file()), default=0)
    settings = Settings(
        data_dir=data_dir,
        ingest_roots=tuple(roots),
        llm_enabled=False,
        audit=False,
        max_file_mb=max(Settings.max_file_mb, -(-largest // (1 << 20))),
    )
    service = Service(settings)
    return service, service.documents


def _search_samples(store: Any, queries: list[str]) -> tuple[list[float], list[list[int]]]:
    samples, tops = [], []
    for q in queries:
        t0 = time.perf_counter()
        hits = store.search(q, limit=SEARCH_LIMIT)
        samples.append(time.perf_counter() - t0)
        tops.append([h.chunk.index for h in hits])
    return samples, tops


class _ChunkerPeak(logging.Handler):
    """Keeps the peak RSS (kB) that the chunking child process reports as it ends."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.kb: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        if hasattr(record, "peak_kb"):
            self.kb.append(int(record.peak_kb))


def phase_ingest(data_dir: Path, corpus: Path, queries: list[str]) -> dict[str, Any]:
    """Ingest the corpus, then time searches and doc_window paging; report peak RSS,
    this process's and that of the child process that chunks a large text."""
    size = corpus.stat().st_size
    _, store = open_store(data_dir, [corpus.parent])
    base_rss = peak_rss_mb()
    chunker = _ChunkerPeak()
    segments_log = logging.getLogger("context_window.documents.segments")
    segments_log.addHandler(chunker)
    segments_log.setLevel(logging.INFO)
    t0, c0 = time.perf_counter(), time.process_time()
    result = store.ingest(file_path=str(corpus), doc_id="bigdoc")
    ingest_s = time.perf_counter() - t0
    ingest_cpu = time.process_time() - c0
    rss_ingest = peak_rss_mb()
    segments_log.removeHandler(chunker)
    chunker_mb = round(max(chunker.kb, default=0) / 1024, 1)
    doc = result.doc
    samples, _ = _search_samples(store, queries)
    store.window(doc.id, first=0)
    windows = []
    for _ in range(min(WINDOW_CALLS, doc.chunks)):
        t0 = time.perf_counter()
        store.window(doc.id)
        windows.append(time.perf_counter() - t0)
    return {
        "bytes": size,
        "chars": doc.chars,
        "chunks": doc.chunks,
        "tokens": doc.tokens,
        "ingest_s": round(ingest_s, 2),
        "ingest_mb_s": round(size / 1e6 / ingest_s, 2),
        "ingest_cpu_s": round(ingest_cpu, 2),
        "ingest_mb_per_cpu_s": round(size / 1e6 / ingest_cpu, 2),
        "search": summary_ms(samples),
        "window": summary_ms(windows),
        "rss_before_ingest_mb": base_rss,
        "peak_rss_ingest_mb": rss_ingest,
        "peak_rss_mb": peak_rss_mb(),
        "chunker_peak_rss_mb": chunker_mb,  # 0: the text was chunked in this process
        # Both peaks of the ingest added: at most what the two processes held at once.
        "peak_rss_with_chunker_mb": round(rss_ingest + chunker_mb, 1),
        "rss_end_mb": current_rss_mb(),
        "disk_mb": disk_mb(data_dir / "documents" / doc.id),
        "index_disk_mb": disk_mb(data_dir / "documents" / doc.id / "index"),
        "disk_over_source": round(_bytes_under(data_dir / "documents" / doc.id) / size, 3),
        "compiled_scan": wordscan.available(),
    }


def _bytes_under(path: Path) -> int:
    """Bytes of the files under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def phase_restart(data_dir: Path, corpus: Path, queries: list[str]) -> dict[str, Any]:
    """A new Service on the same data: first search (opens the index), then the rest."""
    t0 = time.perf_counter()
    _, store = open_store(data_dir, [corpus.parent])
    open_s = time.perf_counter() - t0
    samples, tops = _search_samples(store, queries)
    t0 = time.perf_counter()
    store.window("bigdoc", first=0)
    first_window = time.perf_counter() - t0
    return {
        "open_s": round(open_s, 4),
        "first_search_ms": round(samples[0] * 1000, 3),
        "search": summary_ms(samples[1:]),
        "first_window_ms": round(first_window * 1000, 3),
        "peak_rss_mb": peak_rss_mb(),
        "top10": tops,
    }


def child_env() -> dict[str, str]:
    """The environment for benchmark subprocesses: this repository first on the path."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


def _run_phase(
    phase: str, data_dir: Path, corpus: Path, queries_file: Path, *extra: str
) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.documents", phase, *extra]
    cmd += ["--data-dir", str(data_dir), "--corpus", str(corpus), "--queries", str(queries_file)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=child_env())
    if proc.returncode != 0:
        raise RuntimeError(f"documents {phase} phase failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def bench_documents(workdir: Path, corpus: Path, queries: list[str]) -> dict[str, Any]:
    """Ingest, search and page the corpus, then restart and search again (two processes)."""
    data_dir = workdir / "docs-data"
    queries_file = workdir / "doc-queries.json"
    queries_file.write_text(json.dumps(queries), encoding="utf-8")
    ingest = _run_phase("ingest", data_dir, corpus, queries_file)
    restart = _run_phase("restart", data_dir, corpus, queries_file)
    out = {"data_dir": str(data_dir), "ingest": ingest, "restart": restart}
    if ingest.get("compiled_scan"):  # the fast extra is installed: the base path beside it
        shutil.rmtree(data_dir)
        out["ingest_numpy"] = _run_phase("ingest", data_dir, corpus, queries_file, "--no-numba")
    return out


def main(argv: list[str] | None = None) -> int:
    """Run one phase and print its JSON on stdout."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.documents")
    p.add_argument("phase", choices=["ingest", "restart"])
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--queries", type=Path, required=True)
    p.add_argument("--no-numba", action="store_true", help="as a base install: numba unimportable")
    ns = p.parse_args(argv)
    if ns.no_numba:
        sys.modules["numba"] = None  # type: ignore[assignment]
    tune_process()
    queries = json.loads(ns.queries.read_text(encoding="utf-8"))
    fn = phase_ingest if ns.phase == "ingest" else phase_restart
    out = fn(ns.data_dir, ns.corpus.resolve(), queries)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
