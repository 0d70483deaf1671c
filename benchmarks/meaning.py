"""What meaning costs beside words: append, filling the vectors, recall, ingest and search,
with a real MiniLM (int8, one thread) behind a local ``/v1/embeddings``
(``benchmarks.minilm``), against the same calls by words alone, side by side.

Each mode gets its own data dir holding the same session (written straight to disk,
then opened) and the same log. The vectors of the older entries are filled in the
background; ``fill`` times that from the open to the last vector. The appends and
recalls are timed through the Service, as the tools call it. Each ingest has its
document's passages embedded in the background: ``doc_fill`` times that from the first
ingest to the last vector, and the searches then find their passages stored.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import anyio

from benchmarks import minilm
from benchmarks.corpus import doc_queries, log_path, session_queries, session_texts
from benchmarks.measure import summary_ms
from benchmarks.sessions import write_session
from context_window.config import load_settings
from context_window.retrieval.vectors import HEADER, record
from context_window.server.document_text import SearchText
from context_window.server.session_text import RECALL
from context_window.service import Service

APPENDS = 100
LOG_LINES = 2000  # of the HDFS log ingested (fewer in a quick run: one line per entry)
SESSION = "meaning"


async def _mode(data_dir: Path, url: str, entries: int, queries: int) -> dict[str, Any]:
    flags: dict[str, Any] = {"data_dir": data_dir, "llm_enabled": False, "audit": False}
    if url:
        flags |= {"embed_base_url": url, "embed_timeout": 30.0}
    service = Service(load_settings(flags, environ={}))
    texts = session_texts(entries + APPENDS)
    write_session(data_dir, SESSION, texts[:entries])
    out: dict[str, Any] = {"entries": entries, "log_lines": min(LOG_LINES, entries)}
    try:
        started = time.perf_counter()
        await service.open_session(SESSION, None)
        if service.embedder is not None:
            await service.embedder.settled()
            fill = time.perf_counter() - started
            out["fill_s"] = round(fill, 1)
            out["fill_ms_per_entry"] = round(fill * 1000 / entries, 2)
            vectors = next((data_dir / "sessions" / SESSION / "vectors").glob("*.f16"))
            out["vector_bytes_per_entry"] = round(vectors.stat().st_size / entries)
        samples = []
        for text in texts[entries:]:
            began = time.perf_counter()
            await service.append(SESSION, text)
            samples.append(time.perf_counter() - began)
        out["append"] = summary_ms(samples)
        if service.embedder is not None:
            await service.embedder.settled()
        samples = []
        for q in session_queries(queries):
            began = time.perf_counter()
            await service.recall(SESSION, q, 1000, RECALL)
            samples.append(time.perf_counter() - began)
        out["recall"] = summary_ms(samples)
        lines = log_path("HDFS").read_text(encoding="utf-8").splitlines(keepends=True)
        log = "".join(lines[: out["log_lines"]])
        filling = time.perf_counter()
        await service.ingest(None, text=log[: len(log) // 2], doc_id="warm-up")  # first use
        took = []
        for doc_id in ("log", "log-2", "log-3"):
            began = time.perf_counter()
            await service.ingest(None, text=log, doc_id=doc_id)
            took.append(time.perf_counter() - began)
        out["ingest_s"] = round(statistics.median(took), 3)
        if service.passage_vectors is not None:  # each ingest had its passages embedded
            await service.passage_vectors.settled()
            files = (data_dir / "documents").glob("*/vectors/*.f16")
            records = sum((f.stat().st_size - HEADER) // record(384).itemsize for f in files)
            fill = time.perf_counter() - filling
            out["doc_fill_ms_per_passage"] = round(fill * 1000 / max(1, records), 2)
        samples = []
        for q in doc_queries(queries):
            began = time.perf_counter()
            await service.search(q, "log", 3, 1500, SearchText())
            samples.append(time.perf_counter() - began)
        out["search"] = summary_ms(samples)
    finally:
        await service.aclose()
    return out


def bench_meaning(work: Path, entries: int, queries: int) -> dict[str, Any] | None:
    """Words, then words and meaning, at ``entries``; None when the model is not installed."""
    if not minilm.available():
        return None
    with minilm.serve() as endpoint:
        words = anyio.run(_mode, work / "words", "", entries, queries)
        meaning = anyio.run(_mode, work / "meaning", endpoint.base_url, entries, queries)
    ratio = {
        f"{k}_over_words": round(meaning[k]["p50_ms"] / words[k]["p50_ms"], 2)
        for k in ("append", "recall", "search")
    }
    ratio["ingest_over_words"] = round(meaning["ingest_s"] / words["ingest_s"], 2)
    return {"words": words, "meaning": meaning, **ratio}
