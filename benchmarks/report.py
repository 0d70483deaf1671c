"""The flat metric set, the targets, and the printed table."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Every key the JSON's "metrics" object carries, in table order.
METRIC_KEYS: tuple[str, ...] = (
    "session.append.p50_ms",
    "session.append.p99_ms",
    "session.append_mcp.p50_ms",
    "session.append_mcp.p99_ms",
    "session.recall_small.p50_ms",
    "session.recall_small.p99_ms",
    "session.recall_medium.p50_ms",
    "session.recall_medium.p99_ms",
    "session.recall_large.p50_ms",
    "session.recall_large.p99_ms",
    "session.recall_large.after_append_p50_ms",
    "session.recall_large.tagged_p50_ms",
    "session.recall_large.tagged_restarted_p50_ms",
    "session.recall_medium.worst_over_median",
    "session.recall_large.worst_over_median",
    "session.cold_load_s",
    "documents.ingest_mb_s",
    "documents.search.p50_ms",
    "documents.search.p99_ms",
    "documents.restart.first_search_ms",
    "documents.restart.search.p50_ms",
    "documents.restart.search.p99_ms",
    "documents.window.p50_ms",
    "documents.window.p99_ms",
    "documents.peak_rss_mb",
    "documents.chunker_peak_rss_mb",
    "documents.peak_rss_with_chunker_mb",
    "documents.disk_over_source",
    "documents.numpy.ingest_mb_s",
    "documents.numpy.peak_rss_with_chunker_mb",
    "documents.fast_over_numpy",
    "documents.restart.peak_rss_mb",
    "server.start_to_tools_list_s",
    "server.over_one_tool_server",
    "server.stdin_closed_to_exit_s",
    "server.one_tool_stdin_closed_to_exit_s",
    "engines.rebuild.p50_ms",
    "engines.fts5.first_query_ms",
    "engines.fts5.p50_ms",
    "engines.fts5.p99_ms",
    "engines.rebuild_over_ours",
    "engines.fts5_over_ours",
    "engines.ours.overlap_at_10",
    "engines.ours.overlap_at_10_tie_aware",
    "engines.fts5.overlap_at_10",
    "engines.fts5.overlap_at_10_tie_aware",
    "engines.fts5_plain.p50_ms",
    "engines.fts5_plain_over_ours",
    "engines.grep.p50_ms",
    "engines.grep_over_ours",
    "scale.list_sessions.first_ms",
    "scale.list_sessions.warm_ms",
    "scale.list_sessions.tokens",
    "scale.touch_sessions_rss_mb",
    "scale.touch_sessions_gc_ms",
    "scale.append_over_1k",
    "scale.status_over_1k",
    "scale.open_ms",
    "scale.open_over_1k",
    "scale.recall_worst_ms",
    "scale.recall_worst_over_median",
    "scale.compact_ms",
    "scale.restart_replay_s",
    "scale.restart_snapshot_s",
    "scale.restart_killed_s",
    "scale.restart_replay_rss_mb",
    "scale.restart_snapshot_rss_mb",
    "scale.docs_search_warm_ms",
    "quality.loghub_first_line",
    "quality.meetings_doc_hit",
    "quality.meetings_session_gold",
    "lifecycle.schema_tokens",
    "lifecycle.schema_tokens_unslimmed",
    "lifecycle.schema_tokens_sessions",
    "lifecycle.schema_tokens_docs",
    "lifecycle.compact_ms",
    "lifecycle.compact_facts_ms",
    "lifecycle.purge_s",
    "lifecycle.purge_over_cold_load",
    "lifecycle.reingest_unchanged_share",
    "lifecycle.reingest_over_first",
    "meaning.fill_ms_per_entry",
    "meaning.vector_bytes_per_entry",
    "meaning.append_p50_ms",
    "meaning.append_over_words",
    "meaning.recall_p50_ms",
    "meaning.recall_over_words",
    "meaning.ingest_over_words",
    "meaning.doc_fill_ms_per_passage",
    "meaning.search_p50_ms",
    "meaning.search_over_words",
    "hostile.worst_ms",
    "hostile.worst_doubling",
)

FULL_CORPUS_MB = 100


@dataclass(frozen=True)
class Target:
    """A goal for one metric, judged only when the run is at the scale it names."""

    metric: str
    op: str  # "<=" or ">="
    bound: float
    unit: str
    applies: Callable[[dict[str, Any]], bool]

    def status(self, value: float, details: dict[str, Any]) -> str:
        """PASS / MISS, or n/a when this run is not at the target's scale."""
        if not self.applies(details) or value is None or math.isnan(value):
            return "n/a"
        ok = value <= self.bound if self.op == "<=" else value >= self.bound
        return "PASS" if ok else "MISS"


def _entries(tier: str, n: int) -> Callable[[dict[str, Any]], bool]:
    return lambda d: d["session"][f"recall_{tier}"]["entries"] == n


def _full_corpus(d: dict[str, Any]) -> bool:
    return bool(d["documents"]["ingest"]["bytes"] >= FULL_CORPUS_MB * 1_000_000)


def _big_session(d: dict[str, Any]) -> bool:
    return bool(d["scale"]["big"]["entries"] >= 100_000)


def _restart(low: int, high: int) -> Callable[[dict[str, Any]], bool]:
    return lambda d: low <= d["scale"]["restart"]["entries"] <= high


def _always(_d: dict[str, Any]) -> bool:
    return True


TARGETS: tuple[Target, ...] = (
    Target("session.append.p50_ms", "<=", 2.0, "ms", _always),
    Target("session.recall_medium.p50_ms", "<=", 20.0, "ms", _entries("medium", 10_000)),
    Target("session.recall_large.p50_ms", "<=", 200.0, "ms", _entries("large", 100_000)),
    Target(
        "session.recall_large.tagged_restarted_p50_ms",
        "<=",
        200.0,
        "ms",
        _entries("large", 100_000),
    ),
    Target("session.recall_large.worst_over_median", "<=", 2.0, "x", _entries("large", 100_000)),
    Target("scale.recall_worst_over_median", "<=", 2.0, "x", _big_session),
    Target("documents.restart.search.p50_ms", "<=", 50.0, "ms", _full_corpus),
    Target("scale.restart_snapshot_s", "<=", 0.1, "s", _restart(0, 50_000)),
    Target("scale.restart_killed_s", "<=", 0.1, "s", _restart(0, 50_000)),
    Target("scale.restart_snapshot_s", "<=", 0.5, "s", _restart(1_000_000, 1_000_000)),
    Target("scale.restart_killed_s", "<=", 0.5, "s", _restart(1_000_000, 1_000_000)),
    Target("engines.rebuild_over_ours", ">=", 20.0, "x", _full_corpus),
    Target("documents.ingest_mb_s", ">=", 40.0, "MB/s", _full_corpus),
    Target("server.start_to_tools_list_s", "<=", 1.0, "s", _always),
    Target("server.over_one_tool_server", "<=", 1.1, "x", _always),
    Target("documents.peak_rss_mb", "<=", 400.0, "MB", _full_corpus),
    Target("documents.peak_rss_with_chunker_mb", "<=", 400.0, "MB", _full_corpus),
    Target("documents.disk_over_source", "<=", 1.5, "x", _always),
    Target("scale.open_ms", "<=", 20.0, "ms", _always),
    Target("lifecycle.schema_tokens", "<=", 2500.0, "tokens", _always),
    Target("hostile.worst_doubling", "<=", 3.0, "x", _always),
)


def flatten(d: dict[str, Any]) -> dict[str, float]:
    """The flat metrics from the nested results."""
    s, docs, eng, q = d["session"], d["documents"], d["engines"], d["quality"]
    life, sc = d["lifecycle"], d["scale"]
    ours = docs["restart"]["search"]["p50_ms"]
    grep = eng["grep"]["search"]["p50_ms"] if eng.get("grep") else float("nan")
    m = {
        "session.append.p50_ms": s["append"]["p50_ms"],
        "session.append.p99_ms": s["append"]["p99_ms"],
        "session.append_mcp.p50_ms": s["append_mcp"]["p50_ms"],
        "session.append_mcp.p99_ms": s["append_mcp"]["p99_ms"],
        "session.recall_large.after_append_p50_ms": s["recall_large"]["after_append"]["p50_ms"],
        "session.recall_large.tagged_p50_ms": s["recall_large"]["tagged_p50_ms"],
        "session.recall_large.tagged_restarted_p50_ms": s["recall_large"][
            "tagged_restarted_p50_ms"
        ],
        "session.cold_load_s": s["cold_load"]["median_s"],
        "documents.ingest_mb_s": docs["ingest"]["ingest_mb_s"],
        "documents.search.p50_ms": docs["ingest"]["search"]["p50_ms"],
        "documents.search.p99_ms": docs["ingest"]["search"]["p99_ms"],
        "documents.restart.first_search_ms": docs["restart"]["first_search_ms"],
        "documents.restart.search.p50_ms": ours,
        "documents.restart.search.p99_ms": docs["restart"]["search"]["p99_ms"],
        "documents.window.p50_ms": docs["ingest"]["window"]["p50_ms"],
        "documents.window.p99_ms": docs["ingest"]["window"]["p99_ms"],
        "documents.peak_rss_mb": docs["ingest"]["peak_rss_mb"],
        "documents.chunker_peak_rss_mb": docs["ingest"]["chunker_peak_rss_mb"],
        "documents.peak_rss_with_chunker_mb": docs["ingest"]["peak_rss_with_chunker_mb"],
        "documents.disk_over_source": docs["ingest"]["disk_over_source"],
        **_numpy_rows(docs),
        "documents.restart.peak_rss_mb": docs["restart"]["peak_rss_mb"],
        "server.start_to_tools_list_s": d["server"]["median_s"],
        "server.over_one_tool_server": d["server"]["over_one_tool"],
        "server.stdin_closed_to_exit_s": d["server"]["stdin_closed_to_exit_s"],
        "server.one_tool_stdin_closed_to_exit_s": d["server"]["one_tool_stdin_closed_to_exit_s"],
        "engines.rebuild.p50_ms": eng["rebuild"]["search"]["p50_ms"],
        "engines.fts5.first_query_ms": eng["fts5"]["first_query_ms"],
        "engines.fts5.p50_ms": eng["fts5"]["search"]["p50_ms"],
        "engines.fts5.p99_ms": eng["fts5"]["search"]["p99_ms"],
        "engines.rebuild_over_ours": round(eng["rebuild"]["search"]["p50_ms"] / ours, 1),
        "engines.fts5_over_ours": round(eng["fts5"]["search"]["p50_ms"] / ours, 2),
        "engines.ours.overlap_at_10": eng["ours_agreement"]["overlap_at_10"],
        "engines.ours.overlap_at_10_tie_aware": eng["ours_agreement"]["tie_aware"],
        "engines.fts5.overlap_at_10": eng["fts5"]["agreement"]["overlap_at_10"],
        "engines.fts5.overlap_at_10_tie_aware": eng["fts5"]["agreement"]["tie_aware"],
        "engines.fts5_plain.p50_ms": eng["fts5_plain"]["search"]["p50_ms"],
        "engines.fts5_plain_over_ours": round(eng["fts5_plain"]["search"]["p50_ms"] / ours, 2),
        "engines.grep.p50_ms": grep,
        "engines.grep_over_ours": round(grep / ours, 1),
        "scale.list_sessions.first_ms": sc["many"]["list"]["first_ms"],
        "scale.list_sessions.warm_ms": sc["many"]["list"]["warm_ms"],
        "scale.list_sessions.tokens": sc["many"]["list"]["tokens"],
        "scale.touch_sessions_rss_mb": sc["many"]["touch_all_rss_mb"],
        "scale.touch_sessions_gc_ms": sc["many"]["full_gc_ms"],
        "scale.append_over_1k": sc["big"]["append_ratio"],
        "scale.status_over_1k": sc["big"]["status_ratio"],
        "scale.open_ms": sc["big"].get("open_ms", float("nan")),
        "scale.open_over_1k": sc["big"].get("open_ratio", float("nan")),
        "scale.recall_worst_ms": sc["big"]["recall_varied"]["worst_ms"],
        "scale.recall_worst_over_median": sc["big"]["recall_varied"]["worst_over_median"],
        "scale.compact_ms": sc["compact"]["compact_ms"],
        "scale.restart_replay_s": sc["restart"]["replay"]["open_s"],
        "scale.restart_snapshot_s": sc["restart"]["snapshot"]["open_s"],
        "scale.restart_killed_s": sc["restart"]["killed"]["open_s"],
        "scale.restart_replay_rss_mb": sc["restart"]["replay"]["rss_mb"],
        "scale.restart_snapshot_rss_mb": sc["restart"]["snapshot"]["rss_mb"],
        "scale.docs_search_warm_ms": sc["docs"]["warm_ms"],
        "quality.loghub_first_line": q["loghub"]["hit_rate"],
        "quality.meetings_doc_hit": q["qmsum_doc"]["hit_rate"],
        "quality.meetings_session_gold": q["qmsum_session"]["gold_share"],
        "lifecycle.schema_tokens": life["schema"]["all"],
        "lifecycle.schema_tokens_unslimmed": life["schema"]["unslimmed"],
        "lifecycle.schema_tokens_sessions": life["schema"]["sessions"],
        "lifecycle.schema_tokens_docs": life["schema"]["docs"],
        "lifecycle.compact_ms": life["compaction"]["compact_ms"],
        "lifecycle.compact_facts_ms": life["compaction"]["facts_ms"],
        "lifecycle.purge_s": life["purge"]["purge_s"],
        "lifecycle.purge_over_cold_load": life["purge"]["purge_over_cold_load"],
        "lifecycle.reingest_unchanged_share": life["reingest"]["unchanged_share"],
        "lifecycle.reingest_over_first": life["reingest"]["again_over_first"],
        "hostile.worst_ms": d["hostile"]["worst_ms"],
        "hostile.worst_doubling": d["hostile"]["worst_doubling"],
    }
    for tier in ("small", "medium", "large"):
        m[f"session.recall_{tier}.p50_ms"] = s[f"recall_{tier}"]["p50_ms"]
        m[f"session.recall_{tier}.p99_ms"] = s[f"recall_{tier}"]["p99_ms"]
        m[f"session.recall_{tier}.worst_over_median"] = s[f"recall_{tier}"]["varied"][
            "worst_over_median"
        ]
    if "meaning" in d:  # only where the MiniLM test model is installed
        mean = d["meaning"]
        m |= {
            "meaning.fill_ms_per_entry": mean["meaning"]["fill_ms_per_entry"],
            "meaning.vector_bytes_per_entry": mean["meaning"]["vector_bytes_per_entry"],
            "meaning.append_p50_ms": mean["meaning"]["append"]["p50_ms"],
            "meaning.recall_p50_ms": mean["meaning"]["recall"]["p50_ms"],
            "meaning.doc_fill_ms_per_passage": mean["meaning"]["doc_fill_ms_per_passage"],
            "meaning.search_p50_ms": mean["meaning"]["search"]["p50_ms"],
            **{f"meaning.{k}": v for k, v in mean.items() if k.endswith("_over_words")},
        }
    return {k: m[k] for k in METRIC_KEYS if k in m}  # numpy rows: only beside numba


def checks(metrics: dict[str, float], details: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with the measured value and its status."""
    return [
        {
            "metric": t.metric,
            "value": metrics[t.metric],
            "target": f"{t.op} {t.bound:g} {t.unit}",
            "status": t.status(metrics[t.metric], details),
        }
        for t in TARGETS
    ]


def _numpy_rows(docs: dict[str, Any]) -> dict[str, float]:
    """The same ingest without numba (the base install), run beside the fast one."""
    base = docs.get("ingest_numpy")
    if base is None:
        return {}
    return {
        "documents.numpy.ingest_mb_s": base["ingest_mb_s"],
        "documents.numpy.peak_rss_with_chunker_mb": base["peak_rss_with_chunker_mb"],
        "documents.fast_over_numpy": round(docs["ingest"]["ingest_mb_s"] / base["ingest_mb_s"], 2),
    }


def _labels(d: dict[str, Any]) -> dict[str, str]:
    s, docs, life, sc = d["session"], d["documents"], d["lifecycle"], d["scale"]
    mb = docs["ingest"]["bytes"] / 1e6
    chunks = docs["ingest"]["chunks"]
    out = {
        "session.append.p50_ms": "context_append p50 (Session API)",
        "session.append.p99_ms": "context_append p99 (Session API)",
        "session.append_mcp.p50_ms": "context_append p50 (in-memory mcp.Client)",
        "session.append_mcp.p99_ms": "context_append p99 (in-memory mcp.Client)",
        "session.cold_load_s": f"cold load + first recall, {s['cold_load']['entries']:,} entries",
        "documents.ingest_mb_s": f"doc_ingest throughput, {mb:.0f} MB log",
        "documents.search.p50_ms": f"doc_search p50 after ingest ({chunks:,} chunks)",
        "documents.search.p99_ms": "doc_search p99 after ingest",
        "documents.restart.first_search_ms": "doc_search first query after restart",
        "documents.restart.search.p50_ms": "doc_search p50 after restart",
        "documents.restart.search.p99_ms": "doc_search p99 after restart",
        "documents.window.p50_ms": "doc_window p50 (cursor paging)",
        "documents.window.p99_ms": "doc_window p99",
        "documents.peak_rss_mb": "peak RSS, ingest + search process",
        "documents.chunker_peak_rss_mb": "peak RSS, the child process chunking the log",
        "documents.peak_rss_with_chunker_mb": "ingest: its peak RSS and the chunker's, added",
        "documents.disk_over_source": "a document on disk / its source (source + index)",
        "documents.numpy.ingest_mb_s": "doc_ingest throughput without numba (base install)",
        "documents.numpy.peak_rss_with_chunker_mb": "that ingest's peak RSS, with the chunker's",
        "documents.fast_over_numpy": "ingest speed with the fast extra / without",
        "documents.restart.peak_rss_mb": "peak RSS, restarted process + search",
        "server.start_to_tools_list_s": "spawn to first tools/list answer (stdio)",
        "server.over_one_tool_server": "that, over a one-tool MCPServer started the same way",
        "server.stdin_closed_to_exit_s": "stdin closed (no call at work) to the exit",
        "server.one_tool_stdin_closed_to_exit_s": "the same for the one-tool MCPServer",
        "engines.rebuild.p50_ms": "baseline: rank_bm25 rebuilt per search p50",
        "engines.fts5.first_query_ms": "baseline: SQLite FTS5 first query (reopened)",
        "engines.fts5.p50_ms": "baseline: SQLite FTS5 p50",
        "engines.fts5.p99_ms": "baseline: SQLite FTS5 p99",
        "engines.rebuild_over_ours": "rebuild / ours (p50 latency ratio)",
        "engines.fts5_over_ours": "fts5 / ours (p50 latency ratio)",
        "engines.ours.overlap_at_10": "ours vs rank_bm25 reference overlap@10",
        "engines.ours.overlap_at_10_tie_aware": "ours vs reference, tie-aware",
        "engines.fts5.overlap_at_10": "fts5 vs rank_bm25 reference overlap@10",
        "engines.fts5.overlap_at_10_tie_aware": "fts5 vs reference, tie-aware",
        "engines.fts5_plain.p50_ms": "baseline: SQLite FTS5, own tokenizer, words OR'd, p50",
        "engines.fts5_plain_over_ours": "fts5 plain / ours (p50 latency ratio)",
        "engines.grep.p50_ms": "baseline: grep -c -i -F the query's words, p50",
        "engines.grep_over_ours": "grep -c / ours (p50 latency ratio)",
        "scale.list_sessions.first_ms": f"context_list_sessions, {sc['many']['sessions']:,} "
        "sessions, first call",
        "scale.list_sessions.warm_ms": "... a second call",
        "scale.list_sessions.tokens": "... its answer (est. tokens)",
        "scale.touch_sessions_rss_mb": f"memory after touching {sc['many']['sessions']:,} "
        "sessions once",
        "scale.touch_sessions_gc_ms": "... a full GC pass then",
        "scale.append_over_1k": f"context_append p50 at {sc['big']['entries']:,} entries / at 1k",
        "scale.status_over_1k": f"context_status p50 at {sc['big']['entries']:,} entries / at 1k",
        "scale.open_ms": f"context_open p50 at {sc['big']['entries']:,} entries (core)",
        "scale.open_over_1k": f"context_open p50 at {sc['big']['entries']:,} entries / at 1k",
        "scale.recall_worst_ms": f"slowest warm context_recall of varied queries, "
        f"{sc['big']['entries']:,} entries",
        "scale.recall_worst_over_median": "... over the median query",
        "scale.compact_ms": f"one context_compact call at {sc['compact']['entries']:,} entries",
        "scale.restart_replay_s": f"first call after a restart, {sc['restart']['entries']:,} "
        "entries, no snapshot (replay, then save one)",
        "scale.restart_snapshot_s": "... the next restart (read from the snapshot)",
        "scale.restart_killed_s": "... after the longest tail a SIGKILL leaves "
        f"({sc['restart']['killed_tail']:,} records past the snapshot)",
        "scale.restart_replay_rss_mb": "... memory with it open, after the replay",
        "scale.restart_snapshot_rss_mb": "... memory with it open, from the snapshot",
        "scale.docs_search_warm_ms": f"doc_search over {sc['docs']['documents']} small "
        "documents, warm (mcp.Client)",
        "quality.loghub_first_line": "loghub first line shown (limit 3, 1500 tokens)",
        "quality.meetings_doc_hit": "meetings: gold turn shown by doc_search",
        "quality.meetings_session_gold": "meetings: gold turns in context_recall (1000)",
        "lifecycle.schema_tokens": f"tools/list, {life['schema']['tools']} tools (est. tokens)",
        "lifecycle.schema_tokens_unslimmed": "tools/list as the SDK generates it",
        "lifecycle.schema_tokens_sessions": "tools/list with --tools sessions",
        "lifecycle.schema_tokens_docs": "tools/list with --tools docs",
        "lifecycle.compact_ms": f"context_compact of {life['compaction']['entries']:,} entries",
        "lifecycle.compact_facts_ms": "... of which finding the facts it lost",
        "lifecycle.purge_s": f"purge, {life['purge']['entries']:,} entries, 10 % deleted",
        "lifecycle.purge_over_cold_load": "purge / cold load of the same session",
        "lifecycle.reingest_unchanged_share": "re-ingest after +1 % lines: chunks unchanged",
        "lifecycle.reingest_over_first": "re-ingest time / first ingest time",
        **_meaning_labels(d.get("meaning")),
        "hostile.worst_ms": "slowest crafted 200k note (facts, split, compact)",
        "hostile.worst_doubling": "... its time at 200k / at 100k (linear: ~2)",
    }
    for tier in ("small", "medium", "large"):
        n = s[f"recall_{tier}"]["entries"]
        out[f"session.recall_{tier}.p50_ms"] = f"context_recall p50, {n:,} entries"
        out[f"session.recall_{tier}.p99_ms"] = f"context_recall p99, {n:,} entries"
        out[f"session.recall_{tier}.worst_over_median"] = (
            f"slowest of varied queries / their median, {n:,}"
        )
    n = s["recall_large"]["entries"]
    out["session.recall_large.after_append_p50_ms"] = (
        f"context_recall p50 right after an append, {n:,}"
    )
    out["session.recall_large.tagged_p50_ms"] = f"context_recall by a tag (10% have it), {n:,}"
    out["session.recall_large.tagged_restarted_p50_ms"] = "... after a restart from the snapshot"
    return out


def _meaning_labels(d: dict[str, Any] | None) -> dict[str, str]:
    n = d["meaning"]["entries"] if d else 0
    return {
        "meaning.fill_ms_per_entry": f"meaning: filling the vectors of {n:,} entries, per entry",
        "meaning.vector_bytes_per_entry": "... vector file bytes per entry (float16)",
        "meaning.append_p50_ms": f"... context_append p50 with meaning on, {n:,} entries",
        "meaning.append_over_words": "... / with words alone",
        "meaning.recall_p50_ms": f"... context_recall p50 with meaning, {n:,} entries",
        "meaning.recall_over_words": "... / with words alone",
        "meaning.ingest_over_words": "... doc_ingest time / with words alone",
        "meaning.doc_fill_ms_per_passage": "... embedding an ingested log's passages, per passage",
        "meaning.search_p50_ms": "... doc_search p50 with meaning (its passages stored)",
        "meaning.search_over_words": "... / with words alone",
    }


def _fmt(key: str, value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if key.endswith("_ms"):
        return f"{value:,.2f} ms" if value < 100 else f"{value:,.0f} ms"
    if key.endswith("mb_s"):
        return f"{value:,.1f} MB/s"
    if key.endswith("_s"):
        return f"{value:,.2f} s"
    if key.endswith("_mb"):
        return f"{value:,.0f} MB"
    if (
        "over_ours" in key
        or key.endswith("_over_cold_load")
        or key.endswith("_over_first")
        or key.endswith("_doubling")
        or key.endswith("_over_1k")
        or key.endswith("_over_words")
    ):
        return f"{value:,.2f}x"
    if key.endswith(("_ms_per_entry", "_ms_per_passage")):
        return f"{value:,.1f} ms"
    if key.startswith("lifecycle.schema_tokens") or key.endswith((".tokens", "_per_entry")):
        return f"{value:,.0f}"
    return f"{value:.3f}"


def _judged(check: dict[str, Any]) -> bool:
    return bool(check["status"] != "n/a")


def table(metrics: dict[str, float], details: dict[str, Any], meta: dict[str, Any]) -> str:
    """The results as an aligned text table, each target next to its figure."""
    labels = _labels(details)
    # A metric with targets at two scales shows the one this run is judged by.
    by_metric = {c["metric"]: c for c in sorted(checks(metrics, details), key=_judged)}
    rows = [("metric", "value", "target", "status")]
    for key in (k for k in METRIC_KEYS if k in metrics):
        c = by_metric.get(key)
        rows.append(
            (
                labels[key],
                _fmt(key, metrics[key]),
                c["target"] if c else "",
                c["status"] if c else "",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        f"context-window benchmarks ({meta['mode']}) - commit {meta['commit']}, "
        f"{meta['cpus']} CPUs, load avg {meta['load_start']} -> {meta['load_end']}, "
        f"{meta['duration_s']:.0f} s"
    ]
    for i, r in enumerate(rows):
        lines.append(
            f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip()
        )
        if i == 0:
            lines.append("-" * (sum(widths) + 8))
    return "\n".join(lines)
