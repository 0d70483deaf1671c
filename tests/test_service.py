"""The façade both edges call: work runs off the event loop, one call at a time per key."""

from __future__ import annotations

import threading
import time

import anyio
import pytest
from conftest import SettingsFactory

from context_window.errors import NotFound
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
        await service.run(session_key("ghost"), lambda: service.session("ghost"))


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
