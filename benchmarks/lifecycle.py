"""Lifecycle benchmarks: what tools/list costs, fact keeping in compaction, purge, re-ingest.

Each figure is measured beside its baseline in the same run: the slimmed schemas
beside the schemas as the SDK generates them, fact extraction beside the whole
compaction it is part of, a purge beside a cold load of the same session, and a
re-ingest of a grown log beside its first ingest.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from benchmarks.corpus import session_texts
from benchmarks.measure import stopwatch
from benchmarks.sessions import write_session
from context_window.config import Settings
from context_window.service import Service
from context_window.sessions.facts import lost_facts
from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter

RATIO = 0.27


def _settings(data_dir: Path, **changes: Any) -> Settings:
    return Settings(data_dir=data_dir, llm_enabled=False, audit=False, **changes)


async def _schema_costs() -> dict[str, Any]:
    from mcp.server.mcpserver import MCPServer

    from context_window.server.app import build_server, tool_set_costs, wire_tokens

    with tempfile.TemporaryDirectory() as tmp:
        settings = _settings(Path(tmp))
        costs = await tool_set_costs(settings)
        generated = await MCPServer.list_tools(
            build_server(Service(settings))
        )  # as the SDK has them
    out: dict[str, Any] = {tools: sum(per_tool.values()) for tools, per_tool in costs.items()}
    out["tools"] = len(costs["all"])
    out["unslimmed"] = sum(wire_tokens(t, RATIO) for t in generated)
    out["slim_saving"] = round(1 - out["all"] / out["unslimmed"], 3)
    return out


def bench_schema() -> dict[str, Any]:
    """Estimated tokens of tools/list: slimmed (per tool set) and as generated."""
    return anyio.run(_schema_costs)


def bench_compaction(data_dir: Path, entries: int) -> dict[str, Any]:
    """One compaction of ``entries`` notes, and the share of it spent finding lost facts."""
    service = Service(_settings(data_dir))
    session, _ = service.sessions.open("compact-bench")
    texts = session_texts(entries, seed=31)
    for text in texts:
        session.append(text)
    with stopwatch() as whole:
        done = anyio.run(service.compact, "compact-bench", 0, 400)
    assert done.summary is not None
    prose = done.summary.text.partition("\nKept facts: ")[0]
    originals = "\n".join(e.text for e in done.plan.entries)
    with stopwatch() as facts:
        lost = lost_facts(originals, prose)
    return {
        "entries": entries,
        "folded": len(done.plan.entries),
        "left": done.plan.left,
        "compact_ms": round(whole[0] * 1000, 1),
        "facts_ms": round(facts[0] * 1000, 1),
        "facts_share": round(facts[0] / whole[0], 3),
        "kept_facts": len(done.kept_facts),
        "lost_facts": len(lost),
    }


def bench_purge(data_dir: Path, entries: int) -> dict[str, Any]:
    """Purge a session whose tenth part is deleted, beside a cold load of the same session."""
    sid = "purge-bench"
    log = write_session(data_dir, sid, session_texts(entries, seed=41))
    rng = random.Random(3)
    doomed = rng.sample(range(1, entries + 1), entries // 10)
    with log.open("a", encoding="utf-8") as f:
        for seq in doomed:
            f.write(json.dumps({"kind": "patch", "id": f"e{seq:07d}", "deleted": True}) + "\n")
    before = log.stat().st_size
    with stopwatch() as cold:
        session = SessionStore(data_dir, TokenCounter(RATIO)).open(sid)[0]
    with stopwatch() as took:
        done = session.purge()
    return {
        "entries": entries,
        "erased": len(done.entries),
        "purge_s": round(took[0], 3),
        "cold_load_s": round(cold[0], 3),
        "purge_over_cold_load": round(took[0] / cold[0], 2),
        "mb_before": round(before / 1e6, 2),
        "mb_after": round(log.stat().st_size / 1e6, 2),
    }


def bench_reingest(data_dir: Path, log: Path) -> dict[str, Any]:
    """Ingest a log, append 1 % more lines, re-ingest it under the same id."""
    root = data_dir / "root"
    root.mkdir(parents=True, exist_ok=True)
    target = root / "grown.log"
    shutil.copyfile(log, target)
    room = -(-2 * target.stat().st_size // (1 << 20))  # --large: 1 GB, grown by 1 %
    limit = max(Settings.max_file_mb, room)
    service = Service(_settings(data_dir, ingest_roots=(root,), max_file_mb=limit))
    docs = service.documents
    with stopwatch() as first:
        docs.ingest(file_path=str(target), doc_id="grown")
    lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
    with target.open("a", encoding="utf-8") as f:
        f.writelines(lines[: max(1, len(lines) // 100)])
    t0 = time.perf_counter()
    again = docs.ingest(file_path=str(target), doc_id="grown")
    second = time.perf_counter() - t0
    assert again.kept is not None
    return {
        "mb": round(target.stat().st_size / 1e6, 1),
        "chunks": again.doc.chunks,
        "unchanged": again.kept.unchanged,
        "unchanged_share": round(again.kept.unchanged / max(1, again.kept.old_chunks), 4),
        "first_s": round(first[0], 2),
        "again_s": round(second, 2),
        "again_over_first": round(second / first[0], 2),
    }
