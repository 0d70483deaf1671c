"""Scale benchmarks: many sessions, a big session, many documents.

Rows: ``context_list_sessions`` over N sessions (time and tokens of the answer, first
call and warm); the memory a fresh process holds after touching each of N sessions
once; ``context_append`` / ``context_status`` on a session of many entries against one
of 1,000 (a per-call cost that grows with the session shows as a ratio above 1); one
``context_compact`` call on the big session; the first call after a restart on it,
with and without a snapshot (time and memory, in fresh processes); and ``doc_search``
over many small documents through an MCP client.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from benchmarks.corpus import session_texts
from benchmarks.documents import child_env
from benchmarks.measure import summary_ms, time_calls
from benchmarks.sessions import worst_query, write_session
from context_window.cli.main import tune_process
from context_window.config import Settings
from context_window.service import RECENT, Service
from context_window.sessions.session import SNAPSHOT_AFTER, SNAPSHOT_MIN, TAIL_SHARE
from context_window.storage import write_json_atomic
from context_window.tokens import estimate


def _settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, llm_enabled=False, audit=False)


def _rss_mb() -> float:
    """Resident memory of this process (Linux /proc; NaN elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return float("nan")
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 1e6, 1)


def write_many(data_dir: Path, n: int) -> None:
    """``n`` small sessions (three entries each), straight to disk."""
    root = data_dir / "sessions"
    texts = session_texts(3 * n, seed=77)
    for i in range(n):
        sid = f"m{i:05d}"
        write_session(data_dir, sid, texts[3 * i : 3 * i + 3])
        title = f"{'parser' if i % 10 == 0 else 'task'} {i}"
        write_json_atomic(
            root / sid / "meta.json",
            {"id": sid, "title": title, "created_at": 1.7e9 + i, "updated_at": 1.7e9 + i},
        )


async def _list(data_dir: Path) -> dict[str, Any]:
    from mcp import Client

    from context_window.server.app import build_server

    service = Service(_settings(data_dir))
    out: dict[str, Any] = {}
    async with Client(build_server(service)) as client:
        for label in ("first", "warm"):
            t0 = time.perf_counter()
            res = await client.call_tool("context_list_sessions", {})
            out[f"{label}_ms"] = round(1000 * (time.perf_counter() - t0), 1)
            text = "\n".join(getattr(c, "text", "") for c in res.content)
            out["tokens"] = estimate(text, 0.27)
    await service.aclose()
    return out


def touch_all(data_dir: Path, n: int) -> dict[str, Any]:
    """Recall once in each of ``n`` sessions; the memory this process then holds.

    Run in a fresh process (``python -m benchmarks.scale touch``), so the figure is
    what serving those calls left behind, not what earlier benchmarks did.
    """
    gc.collect()
    before = _rss_mb()
    service = Service(_settings(data_dir))
    t0 = time.perf_counter()
    for i in range(n):
        service.sessions.get(f"m{i:05d}").recall("parser", 500)
    out: dict[str, Any] = {"touch_all_s": round(time.perf_counter() - t0, 2)}
    t0 = time.perf_counter()
    gc.collect()
    out["full_gc_ms"] = round(1000 * (time.perf_counter() - t0), 1)
    out["touch_all_rss_mb"] = round(_rss_mb() - before, 1)
    return out


def bench_many_sessions(data_dir: Path, n: int) -> dict[str, Any]:
    """List ``n`` sessions over MCP, then touch each once (in a fresh process)."""
    write_many(data_dir, n)
    out: dict[str, Any] = {"sessions": n, "list": anyio.run(_list, data_dir)}
    cmd = [sys.executable, "-m", "benchmarks.scale", "touch", str(data_dir), str(n)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=child_env())
    if proc.returncode != 0:
        raise RuntimeError(f"touching {n} sessions failed:\n{proc.stderr[-3000:]}")
    out.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def bench_big_session_calls(data_dir: Path, entries: int, calls: int) -> dict[str, Any]:
    """append and stats on a session of ``entries`` entries and on one of 1,000."""
    out: dict[str, Any] = {"entries": entries}
    service = Service(_settings(data_dir))
    for size in (1_000, entries):
        sid = f"big-{size}"
        if not (data_dir / "sessions" / sid).is_dir():
            write_session(data_dir, sid, session_texts(size, seed=size))
        session = service.sessions.get(sid)
        texts = session_texts(calls, seed=size + 3)
        out[f"append_{size}"] = summary_ms(time_calls(lambda t, s=session: s.append(t), texts))
        out[f"status_{size}"] = summary_ms(time_calls(lambda _, s=session: s.stats(), range(calls)))
        out[f"open_{size}"] = summary_ms(  # what context_open does: resume, pins, latest
            time_calls(lambda _, sid=sid: _opened(service, sid), range(calls))
        )
    for call in ("append", "status", "open"):
        small, large = out[f"{call}_1000"]["p50_ms"], out[f"{call}_{entries}"]["p50_ms"]
        out[f"{call}_ratio"] = round(large / small, 2) if small else float("nan")
    out["open_ms"] = out[f"open_{entries}"]["p50_ms"]
    out["recall_varied"] = worst_query(service.sessions.get(f"big-{entries}"))
    return out


def _opened(service: Service, session_id: str) -> None:
    session, _ = service.sessions.open(session_id)
    session.pinned_and_latest(RECENT)
    session.stats()


def bench_compaction(data_dir: Path, entries: int) -> dict[str, Any]:
    """One context_compact call on a session of ``entries`` notes (extractive, LLM off)."""
    write_session(data_dir, "compact-big", session_texts(entries, seed=41))
    service = Service(_settings(data_dir))
    service.sessions.get("compact-big")  # replayed first: the call alone is timed
    t0 = time.perf_counter()
    done = anyio.run(service.compact, "compact-big", 10, 400)
    return {
        "entries": entries,
        "compact_ms": round(1000 * (time.perf_counter() - t0), 1),
        "folded": len(done.plan.entries),
        "left": getattr(done.plan, "left", 0),  # 0.1.x folded everything at once
    }


async def _search_docs(service: Service, queries: list[str]) -> list[float]:
    from mcp import Client

    from context_window.server.app import build_server

    samples = []
    async with Client(build_server(service)) as client:
        for q in queries[:4]:  # warm: tables opened, postings read
            await client.call_tool("doc_search", {"query": q})
        for q in queries:
            t0 = time.perf_counter()
            await client.call_tool("doc_search", {"query": q})
            samples.append(time.perf_counter() - t0)
    return samples


def bench_many_documents(data_dir: Path, n: int, queries: int) -> dict[str, Any]:
    """doc_search over ``n`` small documents (no doc_id), warm, through an mcp.Client."""
    service = Service(_settings(data_dir))
    texts = session_texts(5 * n, seed=91)
    for i in range(n):
        body = "\n\n".join(texts[5 * i : 5 * i + 5])
        service.documents.ingest(text=f"# Notes {i}\n\n{body}", doc_id=f"d{i:04d}")
    qs = [" ".join(t.split()[:3]) for t in session_texts(queries, seed=92)]
    samples = anyio.run(_search_docs, service, qs)
    return {"documents": n, "warm_ms": summary_ms(samples)["p50_ms"]}


def open_once(data_dir: Path, session_id: str) -> dict[str, Any]:
    """A server's first call on a session after a restart: open it and recall once."""
    gc.collect()
    before = _rss_mb()
    service = Service(_settings(data_dir))
    t0 = time.perf_counter()
    session = service.sessions.get(session_id)
    session.recall("parser timeout", 4000)
    seconds = time.perf_counter() - t0
    gc.collect()
    out = {
        "open_s": round(seconds, 2),
        "rss_mb": round(_rss_mb() - before, 1),
        "from_snapshot": getattr(session, "from_snapshot", 0),
    }
    if hasattr(session, "save_snapshot") and not (session.dir / "snapshot.json").exists():
        session.save_snapshot()  # a session under the server's threshold: save one anyway
    return out


def worst_tail(entries: int) -> int:
    """The most records a SIGKILL can leave past the last snapshot: one fewer than make
    a snapshot due (``Session._apply``)."""
    return min(max(SNAPSHOT_MIN, entries // TAIL_SHARE), SNAPSHOT_AFTER) - 1


RESTART_RUNS = 5  # fresh processes per start that writes nothing; the median is shown


def bench_restart(data_dir: Path, entries: int) -> dict[str, Any]:
    """Open a session of ``entries`` entries in fresh processes: first with no snapshot
    (a full replay, which saves one), then again (read from the snapshot), then with the
    longest tail a killed server can leave past that snapshot (whole lines, as its
    appends wrote them: ``worst_tail``). The last two change nothing on disk, so each is
    the median of ``RESTART_RUNS`` starts: one start reads ~1.5x slower now and then."""
    sid = f"restart-{entries}"
    tail = worst_tail(entries)
    texts = session_texts(entries + tail, seed=entries + 5)
    journal = write_session(data_dir, sid, texts[:entries])
    out: dict[str, Any] = {"entries": entries, "killed_tail": tail}
    cmd = [sys.executable, "-m", "benchmarks.scale", "open", str(data_dir), sid]
    for label in ("replay", "snapshot", "killed"):
        if label == "killed":
            appended = write_session(data_dir / "tail", sid, texts[entries:], first_seq=entries + 1)
            with journal.open("ab") as f:
                f.write(appended.read_bytes())
        runs = []
        for _ in range(1 if label == "replay" else RESTART_RUNS):
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=child_env())
            if proc.returncode != 0:
                raise RuntimeError(f"opening {sid} failed:\n{proc.stderr[-3000:]}")
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        runs.sort(key=lambda run: float(run["open_s"]))
        out[label] = {**runs[len(runs) // 2], "runs_s": [run["open_s"] for run in runs]}
    return out


def main(argv: list[str]) -> int:
    """``touch DATA N`` or ``open DATA SESSION``: run it and print its JSON."""
    tune_process()  # as the server's entry point does
    if argv[:1] == ["touch"] and len(argv) == 3:
        result = touch_all(Path(argv[1]), int(argv[2]))
    elif argv[:1] == ["open"] and len(argv) == 3:
        result = open_once(Path(argv[1]), argv[2])
    else:
        sys.stderr.write("usage: python -m benchmarks.scale touch DATA_DIR N | open DATA_DIR ID\n")
        return 2
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
