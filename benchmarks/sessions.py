"""Session benchmarks: append latency (core and over MCP), recall at scale, cold load."""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import anyio

from benchmarks.corpus import session_queries, session_texts
from benchmarks.measure import stopwatch, summary_ms, time_calls
from context_window.config import Settings
from context_window.server.session_text import RECALL
from context_window.service import Service
from context_window.sessions.session import Session
from context_window.sessions.store import SessionStore
from context_window.storage import write_json_atomic
from context_window.tokens import TokenCounter

BUDGET = 4000
AFTER_APPEND = 20
# Queries of every kind, for the slowest recall: broad words, rare words, numbers, none.
VARIED = (
    "the user",
    "info",
    "error connection",
    "block replica exception",
    "session opened for user root",
    "failed password",
    "kernel",
    "PacketResponder terminating",
    "jk2_init found child",
    "workerEnv",
    "blk_38",
    "12345",
    "500",
    "0 1 2",
    "zzz unknownword",
)


def worst_query(session: Session) -> dict[str, Any]:
    """The slowest of ``VARIED`` against their median: each warm, labelled as the server
    labels entries, the median of three calls."""
    per: dict[str, float] = {}
    for q in VARIED:

        def recall(_: object, q: str = q) -> None:
            session.recall(q, BUDGET, label=RECALL.label)

        recall(None)
        per[q] = statistics.median(time_calls(recall, range(3))) * 1000
    worst = max(per, key=lambda q: per[q])
    median = statistics.median(per.values())
    return {
        "worst_ms": round(per[worst], 2),
        "median_ms": round(median, 2),
        "worst_over_median": round(per[worst] / median, 2),
        "worst_query": worst,
    }


def _settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, llm_enabled=False, audit=False)


def write_session(data_dir: Path, session_id: str, texts: list[str], first_seq: int = 1) -> Path:
    """Write a session straight to disk in the documented format (meta.json + entries.jsonl),
    its entries numbered from ``first_seq``."""
    directory = data_dir / "sessions" / session_id
    directory.mkdir(parents=True, exist_ok=True)
    counter = TokenCounter(0.27)
    start = time.time() - len(texts)
    roles = ("note", "user", "assistant", "decision")
    rng = random.Random(5)
    with (directory / "entries.jsonl").open("w", encoding="utf-8") as f:
        for seq, text in enumerate(texts, first_seq):
            record = {
                "kind": "entry",
                "id": f"e{seq:07d}",
                "seq": seq,
                "created_at": start + seq,
                "role": roles[seq % len(roles)],
                "text": text,
                "tokens": counter.count(text),
                "tags": ["bench"] if rng.random() < 0.1 else [],
                "pinned": seq % 5000 == 1,
            }
            f.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
    now = time.time()
    write_json_atomic(
        directory / "meta.json",
        {"id": session_id, "title": session_id, "created_at": start, "updated_at": now},
    )
    return directory / "entries.jsonl"


def bench_append(data_dir: Path, count: int) -> dict[str, Any]:
    """context_append through the core Session API, one call per sample."""
    service = Service(_settings(data_dir))
    session, _ = service.sessions.open("append-core")
    texts = session_texts(count, seed=21)
    session.append("warm-up entry")  # opens the journal, creates the file
    samples = time_calls(lambda t: session.append(t, role="note", tags=["bench"]), texts)
    return summary_ms(samples)


async def _append_mcp(data_dir: Path, count: int) -> list[float]:
    from mcp import Client

    from context_window.server.app import build_server

    service = Service(_settings(data_dir))
    texts = session_texts(count, seed=22)
    samples = []
    async with Client(build_server(service)) as client:
        await client.call_tool("context_open", {"session_id": "append-mcp"})
        await client.call_tool("context_append", {"session_id": "append-mcp", "text": "warm-up"})
        for text in texts:
            t0 = time.perf_counter()
            res = await client.call_tool(
                "context_append", {"session_id": "append-mcp", "text": text, "tags": ["bench"]}
            )
            samples.append(time.perf_counter() - t0)
            if res.is_error:
                raise RuntimeError(f"context_append failed: {res.content}")
    await service.aclose()
    return samples


def bench_append_mcp(data_dir: Path, count: int) -> dict[str, Any]:
    """context_append as a tool call from an in-memory mcp.Client (protocol overhead included)."""
    return summary_ms(anyio.run(_append_mcp, data_dir, count))


def bench_recall(data_dir: Path, entries: int, queries: int) -> dict[str, Any]:
    """context_recall with a query on a session of ``entries`` entries (loaded once)."""
    sid = f"recall-{entries}"
    texts = session_texts(entries, seed=entries)
    with stopwatch() as build:
        write_session(data_dir, sid, texts)
    store = SessionStore(data_dir, TokenCounter(0.27))
    with stopwatch() as load:
        session = store.get(sid)
    qs = session_queries(queries + 3, seed=entries)
    for q in qs[:3]:  # warm caches (posting arrays) as a running server would have
        session.recall(q, BUDGET)
    samples = time_calls(lambda q: session.recall(q, BUDGET), qs[3:])
    no_query = time_calls(lambda _: session.recall(None, BUDGET), range(max(3, queries // 4)))
    hits = [len(session.recall(q, BUDGET).entries) for q in qs[3:8]]
    # The 10% tagged "bench" (no query), replayed and after a restart from the snapshot.
    tagged = time_calls(lambda _: session.recall(None, BUDGET, tags=["bench"]), range(5))
    session.save_snapshot()
    restarted = SessionStore(data_dir, TokenCounter(0.27)).get(sid)
    again = time_calls(lambda _: restarted.recall(None, BUDGET, tags=["bench"]), range(5))
    after_append = []  # the usual loop: note something, then recall
    for q, text in zip(qs[3:], session_texts(AFTER_APPEND, seed=entries + 1), strict=False):
        session.append(text)
        t0 = time.perf_counter()
        session.recall(q, BUDGET)
        after_append.append(time.perf_counter() - t0)
    out = {"entries": entries, **summary_ms(samples)}
    out["after_append"] = summary_ms(after_append)
    out["recent_p50_ms"] = summary_ms(no_query)["p50_ms"]
    out["tagged_p50_ms"] = summary_ms(tagged)["p50_ms"]
    out["tagged_restarted_p50_ms"] = summary_ms(again)["p50_ms"]
    out["varied"] = worst_query(session)
    out["load_s"] = round(load[0], 3)
    out["write_s"] = round(build[0], 3)
    out["entries_returned_sample"] = hits
    return out


def bench_cold_load(data_dir: Path, entries: int, runs: int) -> dict[str, Any]:
    """A new SessionStore on an existing session: replay the journal, then the first recall."""
    sid = f"recall-{entries}"
    if not (data_dir / "sessions" / sid / "entries.jsonl").is_file():
        write_session(data_dir, sid, session_texts(entries, seed=entries))
    query = session_queries(1, seed=99)[0]
    samples, cpu = [], []
    for _ in range(runs):
        store = SessionStore(data_dir, TokenCounter(0.27))
        t0, c0 = time.perf_counter(), time.process_time()
        store.get(sid).recall(query, BUDGET)
        samples.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    journal = data_dir / "sessions" / sid / "entries.jsonl"
    size = journal.stat().st_size
    with journal.open("rb") as f:
        lines = sum(1 for _ in f)
    return {
        "entries": lines,
        "journal_mb": round(size / 1e6, 1),
        "runs": runs,
        "median_s": round(sorted(samples)[len(samples) // 2], 3),
        "min_s": round(min(samples), 3),
        "cpu_median_s": round(sorted(cpu)[len(cpu) // 2], 3),
    }
