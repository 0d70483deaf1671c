"""A data dir written by release 0.1.0 opens, and is re-indexed on first use, losing nothing.

``tests/data/datadir-0.1.0`` was written by 0.1.0 itself (index format 1: unstemmed
terms, no line numbers, each chunk's text in chunks.jsonl as well as in source.txt):
a session with a pinned entry and tags, and a document whose shared cursor had moved
to chunk 2.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import SettingsFactory, client
from helpers import text_of

from context_window.cli.doctor import audit
from context_window.documents.index import INDEX_VERSION

FIXTURE = Path(__file__).parents[1] / "data" / "datadir-0.1.0"

pytestmark = pytest.mark.anyio


@pytest.fixture
def old_data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    shutil.copytree(FIXTURE, data)
    return data


async def test_an_old_document_is_reindexed_on_first_use(
    old_data: Path, settings: SettingsFactory
) -> None:
    doc = old_data / "documents" / "ops-guide"
    before_meta = json.loads((doc / "meta.json").read_text())
    before_source = (doc / "source.txt").read_bytes()
    before_chunks = [json.loads(x) for x in (doc / "chunks.jsonl").read_text().splitlines()]
    assert json.loads((doc / "index" / "stats.json").read_text())["version"] == 1
    async with client(settings()) as c:
        res = await c.call_tool(
            "doc_search", {"query": "restarting workers", "doc_id": "ops-guide"}
        )
        assert not res.is_error, text_of(res)
        assert "restarts the worker pool" in text_of(res)  # stemmed: restarting ~ restarts
        listed = await c.call_tool("doc_list", {})
        assert "ops-guide" in text_of(listed)
        window = await c.call_tool("doc_window", {"doc_id": "ops-guide", "budget_tokens": 200})
        assert not window.is_error
        assert window.structured_content["chunks"][0]["index"] == 2  # the old cursor
        at_line = await c.call_tool("doc_window", {"doc_id": "ops-guide", "line": 40})
        assert "worker-" in text_of(at_line)
    assert json.loads((doc / "index" / "stats.json").read_text())["version"] == INDEX_VERSION
    after_meta = json.loads((doc / "meta.json").read_text())
    for key in ("id", "title", "sha256", "chars", "chunks", "created_at", "ratio"):
        assert after_meta[key] == before_meta[key], key
    assert (doc / "source.txt").read_bytes() == before_source
    # The chunks are the same, their texts now kept once, in source.txt.
    assert not (doc / "chunks.jsonl").exists()
    table = np.load(doc / "index" / "chunks.npy")
    spans = np.load(doc / "index" / "spans.npy")
    after = [
        (start, end, before_source[a:b].decode())
        for (start, end, _, _), (a, b) in zip(table.tolist(), spans.tolist(), strict=True)
    ]
    assert after == [(c["start"], c["end"], c["text"]) for c in before_chunks]
    source = before_source.decode()
    assert [line for *_, line in table.tolist()] == [
        source.count("\n", 0, c["start"]) + 1 for c in before_chunks
    ]
    assert not [p.name for p in (old_data / "documents").iterdir() if p.name.startswith(".")]


async def test_an_old_session_recalls_with_the_new_ranking(
    old_data: Path, settings: SettingsFactory
) -> None:
    async with client(settings()) as c:
        opened = await c.call_tool("context_open", {"session_id": "release-010"})
        assert "5 live of 5 entries, 1 pinned" in text_of(opened)
        res = await c.call_tool(
            "context_recall", {"session_id": "release-010", "query": "retry webhook"}
        )
        entries = res.structured_content["entries"]
        assert entries[0]["pinned"]  # pinned first, whatever the query
        texts = [e["text"] for e in entries[1:3]]
        assert "Retries use exponential backoff capped at 5 minutes." in texts  # stemmed
        assert "User asked about retry policies for failed webhooks." in texts
        tagged = await c.call_tool("context_recall", {"session_id": "release-010", "tags": ["db"]})
        assert [e["text"][:7] for e in tagged.structured_content["entries"]] == ["Decided"]


def test_doctor_finds_a_data_dir_of_the_old_layout_clean(old_data: Path) -> None:
    # Before its first use, a document still has chunks.jsonl and line offsets: the
    # layout doctor checked then, and checks still.
    assert (old_data / "documents" / "ops-guide" / "chunks.jsonl").exists()
    report = audit(old_data)
    assert not report.problems, report.problems
    assert report.documents == 1 and report.chunks > 0


async def test_a_version_3_document_is_reindexed_with_its_numbers_apart(
    tmp_path: Path, settings: SettingsFactory
) -> None:
    # Index version 3 kept number terms in terms.bin and had no numbers.npy. Such a
    # document is clean to doctor until its first use, which re-indexes it from its
    # source.txt (streamed, as an ingest is) and finds its numbers by key.
    log = tmp_path / "in" / "app.log"
    log.parent.mkdir()
    log.write_text("".join(f"req {i:05d} took {i * 37} ms on port 8080\n" for i in range(3000)))
    async with client(settings(ingest_roots=(log.parent,), chunk_tokens=200)) as c:
        res = await c.call_tool("doc_ingest", {"file_path": "app.log", "doc_id": "app"})
        assert not res.is_error, text_of(res)
        await c.call_tool("doc_window", {"doc_id": "app", "budget_tokens": 300})  # cursor moves
    doc = tmp_path / "data" / "documents" / "app"
    stats = json.loads((doc / "index" / "stats.json").read_text())
    (doc / "index" / "stats.json").write_text(json.dumps({**stats, "version": 3}))
    (doc / "index" / "numbers.npy").unlink()
    before_meta = json.loads((doc / "meta.json").read_text())
    before_source = (doc / "source.txt").read_bytes()
    assert not audit(tmp_path / "data").problems
    async with client(settings(ingest_roots=(log.parent,), chunk_tokens=200)) as c:
        res = await c.call_tool("doc_search", {"query": "req 02345", "doc_id": "app"})
        assert not res.is_error, text_of(res)
        assert "req 02345 took 86765 ms" in text_of(res)
        window = await c.call_tool("doc_window", {"doc_id": "app", "budget_tokens": 300})
        assert window.structured_content["chunks"][0]["index"] == before_meta["cursor"] > 0
    assert json.loads((doc / "index" / "stats.json").read_text())["version"] == INDEX_VERSION
    assert np.load(doc / "index" / "numbers.npy").size > 3000
    assert (doc / "source.txt").read_bytes() == before_source
    after_meta = json.loads((doc / "meta.json").read_text())
    for key in ("id", "title", "sha256", "chars", "chunks", "created_at"):
        assert after_meta[key] == before_meta[key], key
    assert not audit(tmp_path / "data").problems
