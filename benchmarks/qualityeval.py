"""Retrieval quality through the tools, as a model sees it: one version of context-window.

Run as a script by ``benchmarks.quality`` with the version under test first on
``PYTHONPATH`` (the working tree, or a git worktree of a baseline commit), so the
same checks run against both in one benchmark run. It talks to a real server
through a real ``mcp.Client`` (in memory) with default settings and the LLM off,
and cuts every answer at 4 characters per token of budget before looking for
the evidence, as a client that holds the budget would.

Checks (data in ``../shared/data``):

- ``loghub``: ingest each system's 2k-line log; for every event template,
  ``doc_search(query=template, limit=3, budget_tokens=1500)``; a hit when the
  line where the event first occurs is shown whole.
- ``qmsum_doc``: each meeting as ``Speaker: text`` paragraphs;
  ``doc_search(query, limit=3, budget_tokens=1500)``; a hit when a gold turn of
  40+ characters is shown whole.
- ``qmsum_session``: each meeting as a session, one turn per entry;
  ``context_recall(query, budget_tokens=1000)``; the share of gold turns (40+
  characters) shown, and recall@5/10 over the order the entries are returned in.

Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHARS_PER_TOKEN = 4
MIN_GOLD_CHARS = 40


def _server(data_dir: Path, roots: tuple[Path, ...] = ()) -> tuple[Any, Any]:
    """A Service and its MCP server on ``data_dir`` (defaults, LLM off), whatever the layout."""
    # 0.1.0 has a module context_window.server; now it is a package re-exporting it.
    from context_window.config import load_settings
    from context_window.server import build_server
    from context_window.service import Service

    _log_as_served()
    flags: dict[str, Any] = {"data_dir": data_dir, "llm_enabled": False}
    if roots:
        flags["ingest_roots"] = list(roots)
    settings = load_settings(flags, environ={})
    service = Service(settings)
    return service, build_server(service)


def _log_as_served() -> None:
    """Plain lines on stderr at INFO, as ``context-window serve`` logs, for either version.

    Without a handler of its own, the MCP SDK installs its rich console handler, which
    costs about a millisecond a log line: that would be timed as retrieval.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for noisy in ("httpx", "httpcore", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def _cut(text: str, budget: int) -> str:
    return text[: CHARS_PER_TOKEN * budget]


def _turn(t: dict[str, str]) -> str:
    return f"{t['speaker']}: {t['content']}"


def _gold(meeting: dict[str, Any], q: dict[str, Any]) -> list[str]:
    turns = meeting["meeting_transcripts"]
    out = []
    for a, b in q["relevant_text_span"]:
        for i in range(int(a), int(b) + 1):
            if i < len(turns) and len(turns[i]["content"]) >= MIN_GOLD_CHARS:
                out.append(turns[i]["content"])
    return out


def _templates(folder: Path, system: str) -> list[tuple[str, int]]:
    """(query, first LineId) per event template."""
    first: dict[str, tuple[str, int]] = {}
    with (folder / f"{system}_2k.log_structured.csv").open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            first.setdefault(row["EventId"], (row["EventTemplate"], int(row["LineId"])))
    return [(" ".join(t.replace("<*>", " ").split()), line) for t, line in first.values()]


async def _loghub(client: Any, root: Path, systems: list[str] | None) -> dict[str, Any]:
    budget = 1500
    names = sorted(p.name for p in root.iterdir() if p.is_dir())
    if systems:
        names = [n for n in names if n in systems]
    per: dict[str, Any] = {}
    hits = total = tokens = 0
    for system in names:
        raw = (root / system / f"{system}_2k.log").read_text(encoding="utf-8", errors="replace")
        lines = raw.split("\n")
        await client.call_tool("doc_ingest", {"text": raw, "doc_id": system.lower()})
        h = n = 0
        for query, line_id in _templates(root / system, system):
            res = await client.call_tool(
                "doc_search",
                {"query": query, "doc_id": system.lower(), "limit": 3, "budget_tokens": budget},
            )
            answer = _cut(_text(res), budget)
            tokens += len(_text(res)) // CHARS_PER_TOKEN
            target = lines[line_id - 1].strip()
            n += 1
            h += bool(target) and target in answer
        per[system] = round(h / n, 3) if n else None
        hits += h
        total += n
    return {
        "hit_rate": round(hits / total, 3),
        "queries": total,
        "per_system": per,
        "mean_tokens": round(tokens / max(1, total)),
    }


def _meetings(root: Path, limit: int | None) -> list[tuple[str, dict[str, Any]]]:
    files = sorted(root.glob("*.json"))[:limit]
    return [(f.stem, json.loads(f.read_text(encoding="utf-8"))) for f in files]


async def _qmsum_doc(client: Any, meetings: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    budget = 1500
    hits = total = tokens = 0
    for name, m in meetings:
        text = "\n\n".join(_turn(t) for t in m["meeting_transcripts"])
        doc_id = "m-" + name.lower()
        await client.call_tool("doc_ingest", {"text": text, "doc_id": doc_id, "title": name})
        for q in m["specific_query_list"]:
            gold = _gold(m, q)
            if not gold:
                continue
            res = await client.call_tool(
                "doc_search",
                {"query": q["query"], "doc_id": doc_id, "limit": 3, "budget_tokens": budget},
            )
            full = _text(res)
            answer = _cut(full, budget)
            tokens += len(full) // CHARS_PER_TOKEN
            total += 1
            hits += any(g in answer for g in gold)
    return {
        "hit_rate": round(hits / total, 3),
        "queries": total,
        "mean_tokens": round(tokens / max(1, total)),
    }


async def _qmsum_session(client: Any, meetings: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    budget = 1000
    share = any_hit = at5 = at10 = 0.0
    total = tokens = 0
    for name, m in meetings:
        sid = "s-" + name.lower()
        await client.call_tool("context_open", {"session_id": sid, "title": name})
        for t in m["meeting_transcripts"]:
            await client.call_tool("context_append", {"session_id": sid, "text": _turn(t)})
        for q in m["specific_query_list"]:
            gold = _gold(m, q)
            if not gold:
                continue
            res = await client.call_tool(
                "context_recall", {"session_id": sid, "query": q["query"], "budget_tokens": budget}
            )
            full = _text(res)
            answer = _cut(full, budget)
            tokens += len(full) // CHARS_PER_TOKEN
            found = [g for g in gold if g in answer]
            share += len(found) / len(gold)
            any_hit += bool(found)
            entries = (res.structured_content or {}).get("entries", [])
            order = [str(e.get("text", "")) for e in entries]
            for k, acc in ((5, "at5"), (10, "at10")):
                top = " ".join(order[:k])
                value = sum(g in top for g in gold) / len(gold)
                if acc == "at5":
                    at5 += value
                else:
                    at10 += value
            total += 1
    return {
        "gold_share": round(share / total, 3),
        "any_gold": round(any_hit / total, 3),
        "recall_at_5": round(at5 / total, 3),
        "recall_at_10": round(at10 / total, 3),
        "queries": total,
        "mean_tokens": round(tokens / max(1, total)),
    }


async def evaluate(shared: Path, quick: bool) -> dict[str, Any]:
    """Every check, on a fresh temporary data dir."""
    from mcp import Client

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cw-quality-") as tmp:
        service, server = _server(Path(tmp))
        try:
            async with Client(server) as client:
                systems = ["HDFS", "OpenSSH"] if quick else None
                meetings = _meetings(shared / "qmsum" / "val", 3 if quick else None)
                for name, job in (
                    ("loghub", _loghub(client, shared / "loghub", systems)),
                    ("qmsum_doc", _qmsum_doc(client, meetings)),
                    ("qmsum_session", _qmsum_session(client, meetings)),
                ):
                    started = time.perf_counter()
                    out[name] = await job
                    out[name]["seconds"] = round(time.perf_counter() - started, 1)
        finally:
            await service.aclose()
    return out


def _p50_ms(samples: list[float]) -> float:
    ordered = sorted(samples)
    return round(1000 * ordered[len(ordered) // 2], 3) if ordered else float("nan")


async def latency(spec: dict[str, Any], data_dir: Path) -> dict[str, Any]:
    """p50 of context_recall on a session of many entries and of doc_search on a large log.

    Through the in-memory client (the server's own cost, rendering included), then
    through a real client over stdio to a server process of the same code (what a
    model's client waits for). The session and the document are built in
    ``data_dir`` on the first call and reused, so calls can alternate with another
    version's.
    """
    from mcp import Client, StdioServerParameters

    log = Path(spec["log"])
    out: dict[str, Any] = {}
    service, server = _server(data_dir, (log.parent,))
    try:
        session, created = service.sessions.open("lat")
        if created:
            for text in spec["entries"]:
                session.append(text)
        async with Client(server) as client:
            listed = await client.call_tool("doc_list", {})
            if "big" not in _text(listed):
                t0 = time.perf_counter()
                res = await client.call_tool("doc_ingest", {"file_path": str(log), "doc_id": "big"})
                out["ingest_s"] = round(time.perf_counter() - t0, 2)
                assert not res.is_error, _text(res)
            out.update(await _timed_calls(client, spec, ""))
    finally:
        await service.aclose()
    # The child imports whatever this process imports (PYTHONPATH is passed on).
    args = ["-m", "context_window", "--no-llm", "--data-dir", str(data_dir)]
    with tempfile.TemporaryDirectory(prefix="cw-latency-cwd-") as cwd:
        env = dict(os.environ)  # the SDK passes on only a few variables by default
        params = StdioServerParameters(command=sys.executable, args=args, cwd=cwd, env=env)
        async with Client(params) as client:
            out.update(await _timed_calls(client, spec, "stdio_"))
    out["recall_entries"] = len(spec["entries"])
    out["log_bytes"] = log.stat().st_size
    return out


async def _timed_calls(client: Any, spec: dict[str, Any], prefix: str) -> dict[str, float]:
    """p50 of recall and of search over the spec's queries (the first three warm up)."""
    out: dict[str, float] = {}
    for tool, key, queries in (
        ("context_recall", "recall_p50_ms", spec["session_queries"]),
        ("doc_search", "search_p50_ms", spec["doc_queries"]),
    ):
        samples = []
        for k, q in enumerate(queries):
            args = (
                {"session_id": "lat", "query": q}
                if tool == "context_recall"
                else {"query": q, "doc_id": "big"}
            )
            t0 = time.perf_counter()
            res = await client.call_tool(tool, args)
            if k >= 3:  # the first calls warm caches, as in a running server
                samples.append(time.perf_counter() - t0)
            assert not res.is_error, _text(res)
        out[prefix + key] = _p50_ms(samples)
    return out


def main() -> None:
    """Evaluate the importable context-window and print JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--shared", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--latency", type=Path, help="JSON: entries, queries and a log path")
    parser.add_argument("--latency-data", type=Path, help="data dir for --latency (reused)")
    parser.add_argument("--latency-only", action="store_true", help="skip the quality checks")
    args = parser.parse_args()
    result = {} if args.latency_only else asyncio.run(evaluate(args.shared, args.quick))
    if args.latency:
        spec = json.loads(args.latency.read_text(encoding="utf-8"))
        data = args.latency_data or Path(tempfile.mkdtemp(prefix="cw-latency-"))
        result["latency"] = asyncio.run(latency(spec, data))
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
