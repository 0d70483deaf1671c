"""Index engines compared on the same chunks and queries: ours, SQLite FTS5, naive rebuild.

Run as ``python -m benchmarks.engines --doc D --queries Q --ours O --workdir W``
(its own process: the baselines hold the whole corpus in memory). The chunks are
those of the ingested document in directory D; every engine sees the same tokens, the
``Analyzer`` terms of ``text + "\\n" + heading`` as our index does:

- rebuild: ``rank_bm25.BM25Okapi`` (with our k1 = 1.2; its default is 1.5) built
  over every chunk's tokens on every search, as the original TypeScript server did
  (tokenizing is not even counted: a lower bound of that approach). Built once
  more, it is also the reference ranking.
- fts5: SQLite FTS5 over the tokens joined by spaces (``unicode61`` with
  ``tokenchars '_$'`` so terms match ours), ranked by ``bm25()``, with the original
  chunk text stored unindexed and returned; persisted to a file, queried after
  reopening it. This one measures the engine on our analysis (stems, id parts).
- fts5_plain: SQLite FTS5 used the plain way: the chunk text itself under its own
  default tokenizer, queried with the query's words joined by OR, ranked by
  ``bm25()``. This is the baseline a user would build.
- grep: ``grep -c -i -F`` with each query word as a pattern, over the document's
  ``source.txt`` (counting matching lines; a scan, no index), process start included.

Agreement with the reference is overlap@10: the share of the reference top 10
(positive scores only) that an engine also returns. ``tie_aware`` also counts a
returned chunk whose reference score equals the reference's 10th best, since
float rounding may order equal scores differently.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rank_bm25 import BM25Okapi

from benchmarks.measure import summary_ms
from context_window.documents.tables import Tables
from context_window.retrieval.analyzer import Analyzer
from context_window.retrieval.bm25 import EPSILON, K1, B

TOP = 10


def load_tokens(doc_dir: Path) -> tuple[list[str], list[list[str]]]:
    """Chunk texts and their index terms, in chunk order."""
    analyzer = Analyzer()
    tables = Tables(doc_dir)
    chunks = tables.read(0, len(tables.table) - 1)
    texts = [c.text for c in chunks]
    tokens = [analyzer.terms(f"{c.text}\n{c.heading}") for c in chunks]
    return texts, tokens


def _top(scores: np.ndarray) -> list[int]:
    positive = np.flatnonzero(scores > 0)
    order = np.lexsort((positive, -scores[positive]))  # best first, then chunk order
    return [int(i) for i in positive[order[:TOP]]]


def build_fts5(path: Path, texts: list[str], tokens: list[list[str]]) -> float:
    """Write the FTS5 database; returns seconds."""
    path.unlink(missing_ok=True)
    t0 = time.perf_counter()
    db = sqlite3.connect(path)
    db.execute(
        "CREATE VIRTUAL TABLE chunks USING fts5(body, text UNINDEXED, "
        "tokenize = \"unicode61 tokenchars '_$'\")"
    )
    db.executemany(
        "INSERT INTO chunks(rowid, body, text) VALUES (?, ?, ?)",
        ((i, " ".join(tok), texts[i]) for i, tok in enumerate(tokens)),
    )
    db.execute("INSERT INTO chunks(chunks) VALUES ('optimize')")
    db.commit()
    db.close()
    return time.perf_counter() - t0


def query_fts5(path: Path, queries: list[list[str]]) -> dict[str, Any]:
    """Reopen the database and run every query; the first one separately."""
    t0 = time.perf_counter()
    db = sqlite3.connect(path)
    sql = "SELECT rowid, text FROM chunks WHERE chunks MATCH ? ORDER BY bm25(chunks) LIMIT ?"
    samples, tops = [], []
    for terms in queries:
        expr = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        t1 = time.perf_counter()
        rows = db.execute(sql, (expr, TOP)).fetchall()
        samples.append(time.perf_counter() - t1)
        tops.append([int(r[0]) for r in rows])
    first = samples[0] + (t1 - t0 if len(samples) == 1 else 0.0)
    db.close()
    return {
        "first_query_ms": round(first * 1000, 3),
        "search": summary_ms(samples[1:] or samples),
        "top10": tops,
    }


def build_fts5_plain(path: Path, texts: list[str]) -> float:
    """FTS5 over the raw chunk texts with its default tokenizer; returns seconds."""
    path.unlink(missing_ok=True)
    t0 = time.perf_counter()
    db = sqlite3.connect(path)
    db.execute("CREATE VIRTUAL TABLE chunks USING fts5(text)")
    db.executemany("INSERT INTO chunks(rowid, text) VALUES (?, ?)", enumerate(texts))
    db.execute("INSERT INTO chunks(chunks) VALUES ('optimize')")
    db.commit()
    db.close()
    return time.perf_counter() - t0


def plain_words(query: str) -> list[str]:
    """A query's words as FTS5's default tokenizer and grep would take them."""
    return list(dict.fromkeys(re.findall(r"\w+", query.lower())))


def query_fts5_plain(path: Path, queries: list[str]) -> dict[str, Any]:
    """Each query's words OR'd, against the plain table after reopening it."""
    db = sqlite3.connect(path)
    sql = "SELECT rowid, text FROM chunks WHERE chunks MATCH ? ORDER BY bm25(chunks) LIMIT ?"
    samples = []
    for q in queries:
        words = plain_words(q)
        if not words:
            continue
        expr = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        t1 = time.perf_counter()
        db.execute(sql, (expr, TOP)).fetchall()
        samples.append(time.perf_counter() - t1)
    db.close()
    return {"search": summary_ms(samples)}


def query_grep(source: Path, queries: list[str]) -> dict[str, Any]:
    """``grep -c -i -F -e w1 -e w2 …`` over the source file, per query."""
    samples = []
    for q in queries:
        words = plain_words(q)
        if not words:
            continue
        cmd = ["grep", "-c", "-i", "-F", *(x for w in words for x in ("-e", w)), str(source)]
        t1 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=False)
        samples.append(time.perf_counter() - t1)
    return {"search": summary_ms(samples)}


def overlap(
    got: list[list[int]], ref: list[list[int]], ref_scores: list[np.ndarray]
) -> dict[str, Any]:
    """Mean overlap@10 of ``got`` with ``ref``, strict and tie-aware."""
    strict, tie = [], []
    for g, r, s in zip(got, ref, ref_scores, strict=True):
        if not r:
            continue
        kth = s[r[-1]]
        strict.append(len(set(g[: len(r)]) & set(r)) / len(r))
        tie.append(min(len(r), sum(1 for i in g[: len(r)] if s[i] >= kth * (1 - 1e-9))) / len(r))
    return {
        "queries": len(strict),
        "overlap_at_10": round(float(np.mean(strict)), 3) if strict else float("nan"),
        "tie_aware": round(float(np.mean(tie)), 3) if tie else float("nan"),
    }


def run(
    doc_dir: Path,
    queries: list[str],
    ours: list[list[int]],
    workdir: Path,
    rebuilds: int,
    source: Path | None = None,
) -> dict[str, Any]:
    """Every engine on the same chunks and queries."""
    t0 = time.perf_counter()
    texts, tokens = load_tokens(doc_dir)
    tokenize_s = time.perf_counter() - t0
    analyzer = Analyzer()
    qterms = [analyzer.terms(q) for q in queries]

    db_path = workdir / "fts5.db"
    fts_build = build_fts5(db_path, texts, tokens)
    fts = query_fts5(db_path, qterms)
    plain_path = workdir / "fts5-plain.db"
    plain_build = build_fts5_plain(plain_path, texts)
    plain = query_fts5_plain(plain_path, queries)
    grep = query_grep(source, queries) if source is not None else None
    del texts
    gc.collect()

    rebuild_samples = []
    bm25 = None
    for terms in qterms[: max(1, rebuilds)]:
        bm25 = None
        gc.collect()
        t1 = time.perf_counter()
        bm25 = BM25Okapi(tokens, k1=K1, b=B, epsilon=EPSILON)
        _top(bm25.get_scores(terms))
        rebuild_samples.append(time.perf_counter() - t1)
    assert bm25 is not None
    ref_scores = [np.asarray(bm25.get_scores(terms)) for terms in qterms]
    ref = [_top(s) for s in ref_scores]
    return {
        "chunks": len(tokens),
        "tokens": sum(len(t) for t in tokens),
        "tokenize_s": round(tokenize_s, 2),
        "fts5": {
            "build_s": round(fts_build, 2),
            "disk_mb": round(db_path.stat().st_size / 1e6, 1),
            "first_query_ms": fts["first_query_ms"],
            "search": fts["search"],
            "agreement": overlap(fts["top10"], ref, ref_scores),
        },
        "fts5_plain": {
            "build_s": round(plain_build, 2),
            "disk_mb": round(plain_path.stat().st_size / 1e6, 1),
            "search": plain["search"],
        },
        "grep": grep,
        "rebuild": {
            "queries_timed": len(rebuild_samples),
            "search": summary_ms(rebuild_samples),
        },
        "ours_agreement": overlap(ours, ref, ref_scores),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print its JSON on stdout."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.engines")
    p.add_argument("--doc", type=Path, required=True, help="an ingested document's directory")
    p.add_argument("--queries", type=Path, required=True)
    p.add_argument("--ours", type=Path, required=True, help="JSON: our top-10 chunk ids per query")
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--rebuilds", type=int, default=3, help="queries timed with a full rebuild")
    p.add_argument("--source", type=Path, help="the document's source.txt, for grep -c")
    ns = p.parse_args(argv)
    queries = json.loads(ns.queries.read_text(encoding="utf-8"))
    ours = json.loads(ns.ours.read_text(encoding="utf-8"))
    out = run(ns.doc, queries, ours, ns.workdir, ns.rebuilds, ns.source)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
