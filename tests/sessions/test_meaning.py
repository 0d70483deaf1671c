"""Recall by meaning and words, with a real MiniLM behind a local /v1/embeddings.

The endpoint is a real HTTP server on 127.0.0.1 serving a real model (see
``benchmarks.minilm``); a noise control (random vectors from the same server) shows
the ranking comes from the model, not from the plumbing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import pytest
from conftest import SettingsFactory, embed_settings
from mcp import Client, StdioServerParameters

from benchmarks.minilm import Endpoint, available
from context_window.retrieval.vectors import HEADER, record
from context_window.server.app import build_server
from context_window.service import Service

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not available(), reason="no MiniLM test model (see .ci/run)"),
]

# Each question shares no searchable word with its answer; the fillers are other topics.
PAIRS = [
    ("Which automobile refused to turn over?", "The car would not start: its battery was flat."),
    ("What did the physician prescribe?", "The doctor gave me antibiotics for ten days."),
    ("Where do we keep the canine's food?", "Dog kibble sits in the garage cupboard."),
    ("How much did the apartment cost?", "Rent for the flat is 900 euros a month."),
    ("Which tongue does our neighbour study?", "Maria is learning Japanese at evening classes."),
    ("What ailment kept our colleague home?", "Tom stayed in bed with the flu all week."),
    ("When is the infant's vaccination?", "The baby gets her shots next Tuesday."),
    ("What beverage did the guests prefer?", "Visitors mostly drank green tea."),
    ("Which vessel sank near the coast?", "A fishing boat went down off the harbour."),
    ("What instrument is my nephew practising?", "Leo plays the violin every morning."),
]
FILLERS = [
    "Quarterly report draft is due on Friday.",
    "Server logs rotate at midnight UTC.",
    "The build pipeline caches wheels between runs.",
    "Meeting notes: agreed to postpone the launch.",
    "Remember to renew the TLS certificate.",
    "Budget review moved to the third week.",
]


async def fill(c: Client, service: Service) -> None:
    await c.call_tool("context_open", {"session_id": "s"})
    for text in [answer for _, answer in PAIRS] + FILLERS:
        await c.call_tool("context_append", {"session_id": "s", "text": text})
    assert service.embedder is not None
    await service.embedder.settled()


async def first_hits(c: Client) -> list[str]:
    """The text of the first entry each question recalls ('' when none)."""
    found = []
    for question, _ in PAIRS:
        result = await c.call_tool(
            "context_recall", {"session_id": "s", "query": question, "budget_tokens": 200}
        )
        entries = (result.structured_content or {}).get("entries") or [{}]
        found.append(str(entries[0].get("text", "")))
    return found


async def test_recall_finds_by_meaning_what_shares_no_word(
    settings: SettingsFactory, endpoint: Endpoint
) -> None:
    service = Service(embed_settings(settings, endpoint))  # type: ignore[arg-type]
    try:
        async with Client(build_server(service)) as c:
            await fill(c, service)
            hits = await first_hits(c)
            right = sum(hit == answer for hit, (_, answer) in zip(hits, PAIRS, strict=True))
            assert right >= 8, hits
            # The model, not the plumbing: random vectors from the same server do not.
            endpoint.mode = "noise"
            (Path(service.settings.data_dir) / "sessions" / "s" / "vectors").rename(
                Path(service.settings.data_dir) / "old-vectors"
            )
            await c.call_tool("context_recall", {"session_id": "s", "query": "x y"})
            await service.embedder.settled()  # type: ignore[union-attr]
            noise = await first_hits(c)
            lucky = sum(hit == answer for hit, (_, answer) in zip(noise, PAIRS, strict=True))
            assert lucky <= 4, noise
    finally:
        await service.aclose()


async def test_without_an_endpoint_nothing_matches_these_questions(
    settings: SettingsFactory,
) -> None:
    service = Service(settings())
    try:
        async with Client(build_server(service)) as c:
            await c.call_tool("context_open", {"session_id": "s"})
            for _, answer in PAIRS:
                await c.call_tool("context_append", {"session_id": "s", "text": answer})
            assert await first_hits(c) == [""] * len(PAIRS)  # nothing shares a word
    finally:
        await service.aclose()


async def test_a_slow_endpoint_never_holds_an_append_or_a_recall(
    settings: SettingsFactory, endpoint: Endpoint
) -> None:
    endpoint.mode = "slow"  # 3 s per request; a query waits 0.5 s at most
    service = Service(embed_settings(settings, endpoint, embed_timeout=0.5))  # type: ignore[arg-type]
    vectors = Path(service.settings.data_dir) / "sessions" / "s" / "vectors"
    try:
        async with Client(build_server(service)) as c:
            await c.call_tool("context_open", {"session_id": "s"})
            for _, answer in PAIRS:
                await c.call_tool("context_append", {"session_id": "s", "text": answer})
            assert not vectors.exists()  # acknowledged before any vector came back
            result = await c.call_tool(
                "context_recall", {"session_id": "s", "query": "Maria Japanese classes"}
            )
            text = result.content[0].text  # type: ignore[union-attr]
            assert "words only" in text.splitlines()[0]
            assert "Maria is learning Japanese" in text
            assert service.embedder is not None
            await service.embedder.settled()  # the vectors are filled in later
            (path,) = vectors.glob("*.f16")
            assert path.stat().st_size == HEADER + len(PAIRS) * record(384).itemsize
    finally:
        await service.aclose()


async def test_a_down_endpoint_or_another_dimension_ranks_by_words(
    settings: SettingsFactory, endpoint: Endpoint
) -> None:
    service = Service(embed_settings(settings, endpoint))  # type: ignore[arg-type]
    try:
        async with Client(build_server(service)) as c:
            await fill(c, service)
            endpoint.mode = "wrong-dimension"  # a model swapped under the same name
            result = await c.call_tool(
                "context_recall", {"session_id": "s", "query": "Which vessel sank?"}
            )
            assert "words only" in result.content[0].text.splitlines()[0]  # type: ignore[union-attr]
            endpoint.mode = "down"
            result = await c.call_tool(
                "context_recall", {"session_id": "s", "query": "fishing boat harbour"}
            )
            text = result.content[0].text  # type: ignore[union-attr]
            assert not result.is_error and "words only" in text.splitlines()[0]
            assert "A fishing boat went down" in text
    finally:
        await service.aclose()


# Every entry says "morning" once, between fillers (no credit from neighbours): by
# words the shortest ranks first, not the answer (the last).
MORNING = [
    "The morning standup moved to half past nine on Tuesdays.",
    "Morning report.",
    "Morning yoga class starts at seven in the community hall downstairs.",
    "Fresh bread rolls arrive at the bakery every morning before eight o'clock.",
    "Our car died this morning.",
]
MORNING_QUESTION = "Which vehicle broke down this morning?"


async def test_a_recall_right_after_the_appends_embeds_its_best_word_matches(
    settings: SettingsFactory, endpoint: Endpoint
) -> None:
    # The entries were written by a server without meaning: none has a vector when a
    # server with meaning is first asked. The recall embeds its best word matches
    # (the FILL_NOW best by words, not the fillers, which share no word) before it
    # ranks, so meaning ranks them at once; the background fill does the rest.
    plain = Service(settings())
    try:
        async with Client(build_server(plain)) as c:
            await c.call_tool("context_open", {"session_id": "s"})
            for text in [
                t for pair in zip(FILLERS[:5], MORNING, strict=True) for t in pair
            ] + FILLERS[5:]:
                await c.call_tool("context_append", {"session_id": "s", "text": text})
            ask = {"session_id": "s", "query": MORNING_QUESTION, "budget_tokens": 400}
            result = await c.call_tool("context_recall", ask)
            assert result.structured_content["entries"][0]["text"] == MORNING[1]  # type: ignore[index]
    finally:
        await plain.aclose()
    service = Service(embed_settings(settings, endpoint))  # type: ignore[arg-type]
    vectors = Path(service.settings.data_dir) / "sessions" / "s" / "vectors"
    try:
        async with Client(build_server(service)) as c:
            result = await c.call_tool("context_recall", ask)
            text = result.content[0].text  # type: ignore[union-attr]
            assert "words only" not in text.splitlines()[0]
            assert result.structured_content["entries"][0]["text"] == MORNING[-1]  # type: ignore[index]
            first = endpoint.inputs[: len(MORNING) + 1]  # before the background fill's
            assert sorted(first) == sorted([MORNING_QUESTION, *MORNING])  # no filler
            assert service.embedder is not None
            await service.embedder.settled()
            (path,) = vectors.glob("*.f16")
            assert path.stat().st_size == HEADER + len(MORNING + FILLERS) * record(384).itemsize
    finally:
        await service.aclose()


async def test_vectors_survive_a_restart_and_a_torn_record(
    settings: SettingsFactory, endpoint: Endpoint
) -> None:
    made = embed_settings(settings, endpoint)
    service = Service(made)  # type: ignore[arg-type]
    try:
        async with Client(build_server(service)) as c:
            await fill(c, service)
    finally:
        await service.aclose()
    (path,) = (Path(made.data_dir) / "sessions" / "s" / "vectors").glob("*.f16")  # type: ignore[attr-defined]
    size = path.stat().st_size
    records = len(PAIRS) + len(FILLERS)
    assert (size - HEADER) % records == 0
    with path.open("ab") as f:  # a crash in the middle of a record
        f.write(b"\x01" * 100)
    endpoint.inputs.clear()
    service = Service(made)  # type: ignore[arg-type]
    try:
        async with Client(build_server(service)) as c:
            hits = await first_hits(c)
            assert sum(hit == answer for hit, (_, answer) in zip(hits, PAIRS, strict=True)) >= 8
            await c.call_tool("context_append", {"session_id": "s", "text": "One more note."})
            assert service.embedder is not None
            await service.embedder.settled()
    finally:
        await service.aclose()
    # Only the questions and the new entry were embedded: nothing was embedded again.
    assert len(endpoint.inputs) == len(PAIRS) + 1
    assert path.stat().st_size == size + (size - HEADER) // records  # the torn bytes went


async def test_over_stdio_the_flags_reach_a_real_server_process(
    tmp_path: Path, endpoint: Endpoint
) -> None:
    data = tmp_path / "data"
    args = ["-m", "context_window", "--no-llm", "--data-dir", str(data)]
    args += ["--embed-base-url", endpoint.base_url, "--embed-model", "minilm"]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=tmp_path)
    vectors = data / "sessions" / "s" / "vectors"
    async with Client(params) as c:
        guide = await c.call_tool("context_guide", {})
        assert "by words and meaning" in guide.content[0].text  # type: ignore[union-attr]
        await c.call_tool("context_open", {"session_id": "s"})
        for _, answer in PAIRS:
            await c.call_tool("context_append", {"session_id": "s", "text": answer})
        deadline = time.monotonic() + 60  # the server embeds them in the background
        while sum(f.stat().st_size for f in vectors.glob("*.f16")) < HEADER + len(PAIRS) * (
            record(384).itemsize
        ):
            assert time.monotonic() < deadline, "the entries were never embedded"
            await anyio.sleep(0.05)
        hits = await first_hits(c)
        assert sum(hit == answer for hit, (_, answer) in zip(hits, PAIRS, strict=True)) >= 8
        # A document's passages too, once it is ingested: one record per distinct line.
        lines = [answer for _, answer in PAIRS] + FILLERS
        await c.call_tool("doc_ingest", {"text": "\n".join(lines), "doc_id": "notes"})
        passages = data / "documents" / "notes" / "vectors"
        while sum(f.stat().st_size for f in passages.glob("*.f16")) < HEADER + len(lines) * (
            record(384).itemsize
        ):
            assert time.monotonic() < deadline + 60, "the passages were never embedded"
            await anyio.sleep(0.05)
    assert set(endpoint.seen_models) == {"minilm"}
