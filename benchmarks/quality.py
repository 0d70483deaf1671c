"""``python -m benchmarks quality``: retrieval quality and latency, before and after, in one run.

Latency is timed in process (the server's own cost) and over stdio (what a client waits
for), 10k-entry recall and search of a 100 MB log, the versions alternating by round.

The checks (``benchmarks/qualityeval.py``) run twice on this machine, one after
the other: against this working tree, and against a git worktree of a baseline
commit (by default ``BASELINE``, the 0.1.0 release), each in its own process with
its own code first on ``PYTHONPATH``. The figures:

- loghub: the first line of each event template shown by
  ``doc_search(query=template, limit=3, budget_tokens=1500)``;
- meetings as documents: a gold turn shown by ``doc_search(query, limit=3,
  budget_tokens=1500)``;
- meetings as sessions: the share of gold turns inside
  ``context_recall(query, budget_tokens=1000)``, and recall@5/10 over the order
  the entries come back in;
- tokens used per answer, and (unless ``--quick``) the p50 of ``context_recall`` at
  10k entries and of ``doc_search`` on a 100 MB log, both through the MCP client:
  each version keeps its own data dir, and the versions alternate over
  ``LATENCY_ROUNDS`` rounds of ``LATENCY_QUERIES`` queries each; the figure is the
  median of the rounds' p50s (one run's p50 swings by 2x on a busy 2-core machine).

Every answer is cut at 4 characters per token of its budget before it is checked.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import corpus

ROOT = Path(__file__).resolve().parent.parent
SHARED = corpus.LOGHUB.parent
BASELINE = "2e15702"  # 0.1.0, the release this is measured against
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "quality.json"
LATENCY_ENTRIES = 10_000
LATENCY_LOG_MB = 100
LATENCY_QUERIES = 100
LATENCY_ROUNDS = 5  # before and after alternate, round by round: the machine's drift hits both

ROWS = [
    ("loghub first line shown (limit 3, 1500 tokens)", ("loghub", "hit_rate")),
    ("loghub tokens per answer", ("loghub", "mean_tokens")),
    ("meetings as documents: gold turn shown", ("qmsum_doc", "hit_rate")),
    ("meetings as documents: tokens per answer", ("qmsum_doc", "mean_tokens")),
    ("meetings as sessions: gold turns shown (1000 tokens)", ("qmsum_session", "gold_share")),
    ("meetings as sessions: any gold turn shown", ("qmsum_session", "any_gold")),
    ("meetings as sessions: recall@5", ("qmsum_session", "recall_at_5")),
    ("meetings as sessions: recall@10", ("qmsum_session", "recall_at_10")),
    ("meetings as sessions: tokens per answer", ("qmsum_session", "mean_tokens")),
    ("context_recall p50 ms, 10k entries", ("latency", "recall_p50_ms")),
    ("doc_search p50 ms, 100 MB log", ("latency", "search_p50_ms")),
    ("context_recall p50 ms over stdio, 10k entries", ("latency", "stdio_recall_p50_ms")),
    ("doc_search p50 ms over stdio, 100 MB log", ("latency", "stdio_search_p50_ms")),
]
TIMED = ("recall_p50_ms", "search_p50_ms", "stdio_recall_p50_ms", "stdio_search_p50_ms")


def _log(message: str) -> None:
    sys.stderr.write(f"[quality {time.strftime('%H:%M:%S')}] {message}\n")
    sys.stderr.flush()


def _evaluate(
    code: Path, quick: bool, latency: Path | None = None, data: Path | None = None
) -> dict[str, Any]:
    """Run the checks (or, with ``data``, only the latency) with ``code`` first on the path."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "qualityeval.py"), "--shared", str(SHARED)]
    if quick:
        cmd.append("--quick")
    if latency is not None and data is not None:
        cmd += ["--latency", str(latency), "--latency-data", str(data), "--latency-only"]
    env = {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=code)
    if proc.returncode != 0:
        raise RuntimeError(f"quality checks failed for {code}:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def evaluate_here(quick: bool) -> dict[str, Any]:
    """The checks on this working tree only (for the full benchmark run)."""
    return _evaluate(ROOT, quick, None)


def _latency(versions: list[tuple[str, Path, dict[str, Any]]], spec: Path, work: Path) -> None:
    """Median over rounds of each version's p50s, the versions alternating within a round."""
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in versions}
    for r in range(LATENCY_ROUNDS):
        for name, code, _ in versions:
            _log(f"latency round {r + 1}/{LATENCY_ROUNDS}: {name}")
            rounds[name].append(_evaluate(code, False, spec, work / f"latency-{name}")["latency"])
    for name, _, result in versions:
        runs = rounds[name]
        merged = dict(runs[0])
        for key in TIMED:
            merged[key] = statistics.median(run[key] for run in runs)
            merged[key.replace("p50", "p50_rounds")] = [run[key] for run in runs]
        result["latency"] = merged


def _worktree(ref: str, where: Path) -> Path | None:
    """A detached git worktree of ``ref`` at ``where``, or None (with the reason logged)."""
    proc = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), ref],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        _log(f"no baseline: cannot check out {ref} ({proc.stderr.strip()[:200]})")
        return None
    return where


def _latency_spec(work: Path) -> Path:
    spec = {
        "entries": corpus.session_texts(LATENCY_ENTRIES, seed=LATENCY_ENTRIES),
        "session_queries": corpus.session_queries(LATENCY_QUERIES + 3, seed=LATENCY_ENTRIES),
        "doc_queries": corpus.doc_queries(LATENCY_QUERIES + 3),
        "log": str(corpus.big_log(LATENCY_LOG_MB)),
    }
    path = work / "latency.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def _value(result: dict[str, Any] | None, key: tuple[str, str]) -> Any:
    if result is None:
        return None
    return result.get(key[0], {}).get(key[1])


def table(after: dict[str, Any], before: dict[str, Any] | None, baseline: str) -> str:
    """The figures, before and after, with the ratio where both exist."""
    head = f"{'figure':<56} {'before (' + baseline + ')':>18} {'after':>10} {'ratio':>7}"
    lines = [head, "-" * len(head)]
    for label, key in ROWS:
        a, b = _value(after, key), _value(before, key)
        if a is None and b is None:
            continue
        ratio = (
            f"{a / b:.2f}"
            if isinstance(a, int | float) and isinstance(b, int | float) and b
            else ""
        )
        lines.append(
            f"{label:<56} {'' if b is None else b:>18} {'' if a is None else a:>10} {ratio:>7}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the checks after (and before, at the baseline), print the table, write JSON."""
    p = argparse.ArgumentParser(prog="python -m benchmarks quality", description=__doc__)
    p.add_argument("--quick", action="store_true", help="two logs and three meetings, no latency")
    p.add_argument("--baseline", default=BASELINE, help=f"git ref to compare with ({BASELINE})")
    p.add_argument("--no-baseline", action="store_true", help="measure this tree only")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output ({DEFAULT_OUT})")
    ns = p.parse_args(argv)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="cw-quality-") as tmp:
        work = Path(tmp)
        spec = None if ns.quick else _latency_spec(work)
        before = None
        base = None if ns.no_baseline else _worktree(ns.baseline, work / "baseline")
        try:
            if base is not None:
                _log(f"before: {ns.baseline}")
                before = _evaluate(base, ns.quick)
            _log("after: this working tree")
            after = _evaluate(ROOT, ns.quick)
            if spec is not None:
                versions = [("after", ROOT, after)]
                if base is not None and before is not None:
                    versions.insert(0, ("before", base, before))
                _latency(versions, spec, work)
        finally:
            if base is not None:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                    capture_output=True,
                    check=False,
                )
    result = {
        "meta": {
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "baseline": None if before is None else ns.baseline,
            "quick": ns.quick,
            "cpus": os.cpu_count(),
            "duration_s": round(time.time() - started, 1),
        },
        "before": before,
        "after": after,
    }
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    sys.stdout.write(table(after, before, ns.baseline) + "\n")
    sys.stdout.write(f"JSON written to {ns.out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
