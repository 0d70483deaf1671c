"""ttl_days through a real mcp.Client on a fixed clock: expired entries leave recall, not log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from conftest import SettingsFactory
from mcp import Client
from reliability.support import FixedClock as Clock

from context_window.config import Settings
from context_window.server.app import build_server
from context_window.service import Service

from .test_session_tools import error, ok

pytestmark = pytest.mark.anyio
DAY = 86_400.0


@asynccontextmanager
async def clocked(settings: Settings, clock: Clock) -> AsyncIterator[Client]:
    service = Service(settings, clock=clock)
    try:
        async with Client(build_server(service)) as c:
            yield c
    finally:
        await service.aclose()


async def test_expired_entries_leave_recall_and_counts_but_stay_in_the_log(
    settings: SettingsFactory,
) -> None:
    clock, s = Clock(), settings()
    async with clocked(s, clock) as c:
        await ok(c, "context_open", session_id="s")
        _, short = await ok(c, "context_append", session_id="s", text="temp token abc", ttl_days=1)
        _, pin = await ok(
            c, "context_append", session_id="s", text="pinned token abc", ttl_days=1, pinned=True
        )
        _, keep = await ok(c, "context_append", session_id="s", text="lasting token abc")
        _, rec = await ok(c, "context_recall", session_id="s", query="token")
        assert len(rec["entries"]) == 3
        (entry,) = [e for e in rec["entries"] if e["id"] == short["entry_id"]]
        assert entry["expires_at"] == clock.now + DAY and not entry.get("expired")

        clock.now += DAY  # expiry is inclusive: at expires_at the entry is gone
        _, rec = await ok(c, "context_recall", session_id="s", query="token")
        assert [e["id"] for e in rec["entries"]] == [pin["entry_id"], keep["entry_id"]]
        _, rec = await ok(c, "context_recall", session_id="s", include_superseded=True)
        assert short["entry_id"] not in {e["id"] for e in rec["entries"]}
        text, st = await ok(c, "context_status", session_id="s")
        assert (st["live"], st["expired"], st["total"]) == (2, 1, 3)
        assert "1 expired" in text
        # Unpinning an entry whose time is up lets it expire; pinning brings it back.
        await ok(c, "context_update", session_id="s", entry_id=pin["entry_id"], pinned=False)
        _, st = await ok(c, "context_status", session_id="s")
        assert (st["live"], st["expired"]) == (1, 2)
        await ok(c, "context_update", session_id="s", entry_id=short["entry_id"], pinned=True)
        _, rec = await ok(c, "context_recall", session_id="s", query="temp")
        assert [e["id"] for e in rec["entries"]] == [short["entry_id"]]
    log = (s.data_dir / "sessions" / "s" / "entries.jsonl").read_text()
    assert log.count('"expires_at"') == 2 and "temp token abc" in log


async def test_expired_entries_are_not_compacted(settings: SettingsFactory) -> None:
    clock = Clock()
    async with clocked(settings(), clock) as c:
        await ok(c, "context_open", session_id="s")
        for i in range(4):
            await ok(c, "context_append", session_id="s", text=f"old note {i}", ttl_days=0.5)
        for i in range(3):
            await ok(c, "context_append", session_id="s", text=f"new note {i}")
        clock.now += DAY
        _, data = await ok(c, "context_compact", session_id="s", keep_recent=0)
        assert data["folded"] == 3


@pytest.mark.parametrize("ttl", [0, -1, 36_501, "soon"])
async def test_bad_ttl_is_refused_and_nothing_is_written(
    settings: SettingsFactory, ttl: object
) -> None:
    s = settings()
    async with clocked(s, Clock()) as c:
        await ok(c, "context_open", session_id="s")
        msg = await error(c, "context_append", session_id="s", text="x", ttl_days=ttl)
        assert "ttl_days" in msg
    log = s.data_dir / "sessions" / "s" / "entries.jsonl"
    assert not log.exists() or log.read_bytes() == b""


async def test_library_ttl_limits(settings: SettingsFactory) -> None:
    session = Service(settings()).sessions.open("s")[0]
    for bad in (0.0, float("nan"), float("inf"), 40_000.0):
        with pytest.raises(Exception, match="ttl_days"):
            session.append("x", ttl_days=bad)
    assert session.stats().total == 0
