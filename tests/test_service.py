"""The façade both edges call: work runs off the event loop, one call at a time per key."""

from __future__ import annotations

import threading
import time

import anyio
import pytest
from conftest import SettingsFactory

from context_window.documents.tables import DocInfo
from context_window.errors import InvalidInput, NotFound
from context_window.service import DOCUMENTS, Service, session_key


@pytest.mark.anyio
async def test_work_runs_in_a_worker_thread(settings: SettingsFactory) -> None:
    service = Service(settings())
    loop_thread = threading.get_ident()
    assert await service.run(session_key("a"), threading.get_ident) != loop_thread


@pytest.mark.anyio
async def test_calls_on_one_key_never_overlap_and_other_keys_do(settings: SettingsFactory) -> None:
    service = Service(settings())
    active: dict[str, int] = {"a": 0, "most": 0}
    guard = threading.Lock()

    def one_at_a_time() -> None:
        with guard:
            active["a"] += 1
            active["most"] = max(active["most"], active["a"])
        time.sleep(0.02)
        with guard:
            active["a"] -= 1

    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(service.run, session_key("a"), one_at_a_time)
    assert active["most"] == 1

    # Two different keys must be able to run at once: each waits for the other.
    meet = threading.Barrier(2, timeout=10)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run, session_key("a"), meet.wait)
        tg.start_soon(service.run, DOCUMENTS, meet.wait)


@pytest.mark.anyio
async def test_errors_in_work_reach_the_caller(settings: SettingsFactory) -> None:
    service = Service(settings())
    with pytest.raises(NotFound, match="no session 'ghost'"):
        await service.run(session_key("ghost"), lambda: service.sessions.get("ghost"))


@pytest.mark.anyio
async def test_compaction_goes_through_the_facade(settings: SettingsFactory) -> None:
    service = Service(settings())
    session, _ = service.sessions.open("work")
    for i in range(8):
        session.append(f"note {i}: the cache key for tenant {i} is cache-{i}")
    dry = await service.compact("work", keep_recent=2, dry_run=True)
    assert dry.dry_run and dry.entry is None and len(dry.plan.entries) == 6
    done = await service.compact("work", keep_recent=2)
    assert done.entry is not None and done.entry.role == "summary"
    assert len(session.entries()) == 3  # the summary and the two kept


@pytest.mark.anyio
async def test_a_value_out_of_range_is_refused_with_its_range(settings: SettingsFactory) -> None:
    service = Service(settings())
    service.sessions.open("work")[0].append("one note")
    calls = {
        "target_tokens must be between 16 and 20,000, not 50000": service.compact(
            "work", target_tokens=50_000
        ),
        "keep_recent must be between 0 and 10,000, not 20000": service.compact(
            "work", keep_recent=20_000
        ),
        "limit must be between 1 and 200, not 0": service.list_sessions(limit=0),
    }
    for message, call in calls.items():
        with pytest.raises(InvalidInput) as caught:
            await call
        assert str(caught.value) == message
    assert len(service.sessions.get("work").entries()) == 1  # nothing was changed


class Plain:
    """A layout in plain words, as a third edge might write one: the Service fits the
    answer around it, whatever its words are."""

    def label(self, item: object, *_: object) -> str:
        return "--"

    def header(self, doc: DocInfo, shown: int, headless: bool) -> str:
        return f"{doc.id}: {shown} chunks" + (" (no headings)" if headless else "")

    def run(self, first: int, last: int, trail: str, tokens: int | None) -> str:
        return f"{first}-{last} {trail} {tokens or ''}".rstrip()

    def summarized(self, index: int, trail: str, tokens: int, summary: str) -> str:
        return f"{index} {trail}: {summary}"

    def omitted(self, lines: int, budget: int) -> str:
        return f"({lines} more lines)"

    def overview(self, doc: DocInfo | None) -> str:
        return f"overview of {doc.id if doc else 'all'}"

    def listed(self, doc: DocInfo) -> str:
        return f"doc {doc.id}"

    def no_match(self, doc_id: str | None) -> str:
        return "no match " * 50

    def reserve(self, *args: object) -> tuple[int, bool]:
        return 10, False


SPEC = "\n\n".join(
    f"# Part {p}\n\n" + "\n\n".join(f"Paragraph {p}.{i} about topic {p * i}." for i in range(12))
    for p in range(30)
)


@pytest.mark.anyio
async def test_outlines_and_overviews_are_fitted_behind_the_facade(
    settings: SettingsFactory,
) -> None:
    service = Service(settings(budget=120, chunk_tokens=64, chunk_overlap=0))
    await service.ingest(None, text=SPEC, doc_id="spec")
    count = service.counter.count
    outline = await service.outline("spec", False, None, Plain())
    assert count(outline.text) <= 120
    assert outline.text.startswith("spec: ") and outline.text.endswith("more lines)")
    shown = outline.text.splitlines()[1:-1]
    assert shown and shown[0].startswith("0-") and "Part 0" in shown[0]
    searched = await service.search("the of and", "spec", 5, None, Plain())
    assert searched.answer is None and count(searched.instead) <= 120
    assert searched.instead.startswith("overview of spec")
    nothing = await service.search("zebra", None, 5, None, Plain())
    assert nothing.answer is not None and not nothing.answer.hits
    assert nothing.instead.startswith("no match") and count(nothing.instead) <= 120


@pytest.mark.anyio
async def test_each_tool_is_one_call(settings: SettingsFactory) -> None:
    service = Service(settings(budget=300))
    opened = await service.open_session("work", "Work")
    assert opened.created and opened.budget == 300
    for i in range(8):
        await service.append("work", f"note {i} about the deploy", pinned=i == 0)
    again = await service.open_session("work", None)
    assert not again.created and [e.text for e in again.pinned] == ["note 0 about the deploy"]
    assert [e.text for e in again.recent] == [f"note {i} about the deploy" for i in range(3, 8)]
    recalled = await service.recall("work", "deploy", 100, Plain())
    assert recalled.budget == 100 and recalled.recall.packed.used_tokens <= 100 - 10
    assert all(label == "--" for label in recalled.recall.labels.values())
    entry = await service.update("work", again.pinned[0].id, False, None)
    assert not entry.pinned
    assert (await service.status("work")).stats.pinned == 0
    assert [i.id for i in (await service.list_sessions()).sessions] == ["work"]
    await service.ingest(None, text=SPEC, doc_id="spec")
    paged = await service.window("spec", Plain(), budget_tokens=200)
    assert paged.window.chunks and paged.window.used_tokens <= 200
    assert [x.doc.id for x in await service.list_documents()] == ["spec"]
    assert (await service.forget("spec")).id == "spec"
    with pytest.raises(NotFound):
        await service.window("spec", Plain())
