"""doc_search by meaning as well as words, with a real MiniLM behind a local /v1/embeddings
(``benchmarks.minilm``): the passages a search reads, rescored; the passages of each
document embedded in the background once it is ingested, so that a search ranks deep.
"""

from __future__ import annotations

import anyio
import pytest
from conftest import SettingsFactory, embed_settings
from mcp import Client

from benchmarks.minilm import Endpoint, available
from context_window.documents.meaning import FILLED_AT_MOST, DocumentVectors, digest, passage_texts
from context_window.documents.store import DocumentStore
from context_window.retrieval.vectors import HEADER, record
from context_window.server.app import build_server
from context_window.service import Service
from context_window.tokens import TokenCounter

pytestmark = pytest.mark.anyio
needs_model = pytest.mark.skipif(not available(), reason="no MiniLM test model (see .ci/run)")


# doc_search: lines that share the query's one searchable word; one answers it.
DOC_QUERIES = [
    (
        "Why did the server stop working?",
        "server",
        "The server crashed because its power supply overheated and failed.",
    ),
    (
        "What illness did the manager have?",
        "manager",
        "The manager was off sick for a week with a bad case of influenza.",
    ),
    (
        "What was the price of the contract?",
        "contract",
        "The contract was signed in March for a total of forty thousand euros.",
    ),
]
DOC_FILLERS = [
    "The {w} was mentioned twice in the minutes of the meeting on Tuesday afternoon.",
    "A framed photograph of the {w} hangs in the hallway next to the coat rack.",
    "Someone in the design team wrote a short poem about the {w} for the newsletter.",
    "The {w} also appears on page four of last year's glossy printed brochure.",
    "Visitors on the guided tour often stop to ask questions about the {w}.",
]


def doc_text() -> str:
    lines = []
    for _, word, answer in DOC_QUERIES:
        lines += [f.format(w=word) for f in DOC_FILLERS] + [answer]
    return "\n".join(lines) + "\n"


async def best_lines(c: Client, doc_id: str) -> list[str]:
    """The text doc_search shows at a budget that fits one line, per question."""
    shown = []
    for question, _, _ in DOC_QUERIES:
        result = await c.call_tool(
            "doc_search",
            {"query": question, "doc_id": doc_id, "budget_tokens": 64, "limit": 1},
        )
        shown.append(result.content[0].text)  # type: ignore[union-attr]
    return shown


@needs_model
async def test_doc_search_ranks_the_lines_it_reads_by_meaning(
    settings: SettingsFactory, endpoint: Endpoint
) -> None:
    for embed in (False, True):
        made = embed_settings(settings, endpoint) if embed else settings()
        service = Service(made)  # type: ignore[arg-type]
        try:
            async with Client(build_server(service)) as c:
                await c.call_tool("doc_ingest", {"text": doc_text(), "doc_id": f"d{embed:d}"})
                shown = await best_lines(c, f"d{embed:d}")
        finally:
            await service.aclose()
        right = [answer in text for text, (_, _, answer) in zip(shown, DOC_QUERIES, strict=True)]
        # By meaning, each answer is among the one to three lines that fit; by words,
        # which share one word with every line, not all of them are.
        assert all(right) if embed else not all(right), shown
    endpoint.mode = "down"
    service = Service(embed_settings(settings, endpoint))  # type: ignore[arg-type]
    try:
        async with Client(build_server(service)) as c:
            shown = await best_lines(c, "d1")
    finally:
        await service.aclose()
    assert all("words only" in text.splitlines()[0] for text in shown), shown


@needs_model
async def test_passages_too_slow_for_one_search_are_ready_for_the_next(
    settings: SettingsFactory, endpoint: Endpoint
) -> None:
    endpoint.mode = "slow-batches"  # a query is embedded at once, 64 passages take 3 s
    service = Service(embed_settings(settings, endpoint, embed_timeout=0.5))  # type: ignore[arg-type]
    try:
        async with Client(build_server(service)) as c:
            await c.call_tool("doc_ingest", {"text": doc_text(), "doc_id": "d"})
            first = await best_lines(c, "d")
            assert all("words only" in text.splitlines()[0] for text in first), first
            assert service.embedder is not None and service.passage_vectors is not None
            await service.embedder.settled()  # the passages were embedded all the same
            await service.passage_vectors.settled()
            asked = len(endpoint.inputs)
            again = await best_lines(c, "d")
            assert not any("words only" in text.splitlines()[0] for text in again), again
            assert len(endpoint.inputs) == asked + len(DOC_QUERIES)  # only the queries
            right = [a in t for t, (_, _, a) in zip(again, DOC_QUERIES, strict=True)]
            assert all(right), again
    finally:
        await service.aclose()


# One question; many short lines share its one searchable word, and the answer, longer,
# shares only that word too: by words it ranks below every one of them (past the 64
# passages a search can embed at once), by meaning it comes first.
DEEP_QUESTION = "What illness did the manager have?"
DEEP_ANSWER = (
    "By the way, the manager was off sick at home for a whole week with a bad case of "
    "influenza and a high fever, so the review had to wait."
)
PEOPLE = ["Ana", "Ben", "Chloe", "Dev", "Eva", "Finn", "Gus", "Hana", "Ivo", "Jo",
          "Kai", "Lena", "Max", "Nia", "Omar", "Pia", "Quinn", "Rosa", "Sam", "Tom"]  # fmt: skip


def deep_text() -> str:
    lines = [f.format(w="manager") + f" Noted by {p}." for p in PEOPLE for f in DOC_FILLERS]
    lines.insert(len(lines) // 2, DEEP_ANSWER)
    return "\n".join(lines) + "\n"


async def deep_search(c: Client) -> str:
    result = await c.call_tool(
        "doc_search", {"query": DEEP_QUESTION, "doc_id": "deep", "budget_tokens": 80, "limit": 1}
    )
    return result.content[0].text  # type: ignore[union-attr]


@needs_model
async def test_a_document_embedded_in_the_background_is_searched_deep(
    settings: SettingsFactory, endpoint: Endpoint
) -> None:
    words = Service(settings())
    try:
        async with Client(build_server(words)) as c:
            await c.call_tool("doc_ingest", {"text": deep_text(), "doc_id": "deep"})
            assert DEEP_ANSWER not in await deep_search(c)  # by words it ranks last
    finally:
        await words.aclose()
    # The same data dir with meaning on: nothing was embedded at that ingest.
    service = Service(embed_settings(settings, endpoint, embed_timeout=30.0))
    vectors = service.passage_vectors
    assert vectors is not None
    try:
        async with Client(build_server(service)) as c:
            first = await deep_search(c)
            # Only the 64 best passages by words could be embedded for that search.
            assert "words only" not in first.splitlines()[0] and DEEP_ANSWER not in first
            await vectors.settled()  # the search had the document's passages embedded
            asked = len(endpoint.inputs)
            again = await deep_search(c)
            assert DEEP_ANSWER in again, again
            assert len(endpoint.inputs) == asked + 1  # only the query: the rest were stored
    finally:
        await service.aclose()
    lines = deep_text().splitlines()
    path = next((settings().data_dir / "documents" / "deep" / "vectors").glob("*.f16"))
    assert (path.stat().st_size - HEADER) // record(384).itemsize == len(set(lines))
    assert set(vectors.of("deep").lookup([digest(t) for t in lines])) == {digest(t) for t in lines}


@needs_model
async def test_an_ingest_fills_the_vectors_and_a_restart_keeps_them(
    settings: SettingsFactory, endpoint: Endpoint
) -> None:
    service = Service(embed_settings(settings, endpoint))
    try:
        async with Client(build_server(service)) as c:
            await c.call_tool("doc_ingest", {"text": deep_text(), "doc_id": "deep"})
            assert service.passage_vectors is not None
            await service.passage_vectors.settled()
    finally:
        await service.aclose()
    embedded = len(endpoint.inputs)
    assert embedded == len(set(deep_text().splitlines()))  # each passage once
    service = Service(embed_settings(settings, endpoint))
    try:
        async with Client(build_server(service)) as c:
            assert DEEP_ANSWER in await deep_search(c)
            assert service.passage_vectors is not None
            await service.passage_vectors.settled()  # the search woke a fill: nothing lacked
    finally:
        await service.aclose()
    assert len(endpoint.inputs) == embedded + 1  # the query alone
    endpoint.mode = "wrong-dimension"  # another model loaded under the same name
    service = Service(embed_settings(settings, endpoint))
    try:
        async with Client(build_server(service)) as c:
            result = await c.call_tool(
                "doc_search", {"query": DEEP_QUESTION, "doc_id": "deep", "limit": 1}
            )
            text = result.content[0].text  # type: ignore[union-attr]
            # The stored vectors are set aside; the best passages are embedded anew.
            assert not result.is_error and "words only" not in text.splitlines()[0], text
    finally:
        await service.aclose()


@needs_model
async def test_a_fill_the_endpoint_refuses_resumes_once_it_answers(
    settings: SettingsFactory, endpoint: Endpoint
) -> None:
    endpoint.mode = "down"
    service = Service(embed_settings(settings, endpoint))
    try:
        async with Client(build_server(service)) as c:
            await c.call_tool("doc_ingest", {"text": deep_text(), "doc_id": "deep"})
            assert "words only" in (await deep_search(c)).splitlines()[0]
            assert service.passage_vectors is not None
            await anyio.sleep(0.5)
            endpoint.mode = "model"
            with anyio.fail_after(60):
                await service.passage_vectors.settled()
            assert DEEP_ANSWER in await deep_search(c)
    finally:
        await service.aclose()


def test_a_document_over_the_fill_limit_is_left_to_searches(settings: SettingsFactory) -> None:
    made = settings()
    store = DocumentStore(made.data_dir, TokenCounter(made.token_ratio))
    lines = [f"Line {i} of many." for i in range(FILLED_AT_MOST + 1)]
    store.ingest(text="\n".join(lines), doc_id="big")
    store.ingest(text="\n".join(lines[:-1]), doc_id="full")
    store.ingest(text=deep_text(), doc_id="small")
    count = store.counter.count
    assert passage_texts(store, "big", count, 500) is None
    # At the limit: the lines chunks share in their overlap count once.
    assert passage_texts(store, "full", count, 500) == lines[:-1]
    assert passage_texts(store, "gone", count, 500) is None
    found = passage_texts(store, "small", count, 500)
    assert found is not None and set(found) == set(deep_text().splitlines())  # chunks overlap


async def test_without_an_embedder_nothing_is_filled(settings: SettingsFactory) -> None:
    service = Service(settings())
    assert service.passage_vectors is None
    assert DocumentVectors.configured(None, service.documents, 500, len, service.run) is None
