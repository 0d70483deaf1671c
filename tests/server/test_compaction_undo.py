"""Compactions through a real mcp.Client: ids, kept facts, include_superseded, undo and redo."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import SettingsFactory, client

from context_window.service import Service
from context_window.sessions.session import FOLD_TOKENS

from .test_session_tools import LONG, error, ok

pytestmark = pytest.mark.anyio


async def test_compaction_keeps_lost_facts_and_can_be_undone(settings: SettingsFactory) -> None:
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="s")
        ids = [(await ok(c, "context_append", session_id="s", text=t))[1]["entry_id"] for t in LONG]
        text, data = await ok(
            c, "context_compact", session_id="s", keep_recent=2, target_tokens=300
        )
        cid = data["compaction_id"]
        assert cid and data["folded"] == 10
        # Every path and ticket of the folded notes survives in the live summary.
        kept = data["kept_facts"]
        assert kept and data["facts_not_kept"] == 0
        assert f"appended {len(kept)} to it: {'; '.join(kept[:30])}" in text
        _, rec = await ok(c, "context_recall", session_id="s", budget_tokens=100_000)
        summary = next(e for e in rec["entries"] if e["id"] == cid)
        ref = summary["ref"]  # the short name the text gives, which every tool takes
        assert re.fullmatch(r"s\d+", ref) and f"context_uncompact(compaction_id={ref!r})" in text
        for i in range(10):
            assert f"/srv/app/{i}/config.yaml" in summary["text"]
            assert f"CW-{100 + i}" in summary["text"] and f"limit_{i}" in summary["text"]
        assert summary["replaces"] == ids[:10]
        # Recall finds a fact only the appended list carries, through the summary.
        _, hit = await ok(c, "context_recall", session_id="s", query="limit_7", limit=1)
        assert [e["id"] for e in hit["entries"]] == [cid]
        # include_superseded shows the originals, each naming the summary that folded it.
        text, rec = await ok(
            c, "context_recall", session_id="s", budget_tokens=100_000, include_superseded=True
        )
        originals = {e["id"]: e for e in rec["entries"] if e.get("superseded")}
        assert sorted(originals) == sorted(ids[:10])
        assert all(e["replaced_by"] == [cid] for e in originals.values())
        assert f"(superseded by {cid})" in text

        text, undo = await ok(c, "context_uncompact", session_id="s", compaction_id=ref)
        assert undo["restored"] == ids[:10] and undo["compaction_id"] == ref  # as given
        assert text.startswith(f"Undid compaction {ref}: 10 entries live again")
        _, rec = await ok(c, "context_recall", session_id="s", budget_tokens=100_000)
        # Live again, in their places (newest first, as recall shows them); no summary.
        assert [e["id"] for e in rec["entries"]] == ids[::-1]
        assert not any(e.get("superseded") for e in rec["entries"])
        # Undoing twice is an error that says how to redo instead.
        msg = await error(c, "context_uncompact", session_id="s", compaction_id=cid)
        assert "already undone" in msg and "delete=false" in msg
        # Redo: restoring the retired summary folds the originals again.
        await ok(c, "context_update", session_id="s", entry_id=cid, delete=False)
        _, rec = await ok(c, "context_recall", session_id="s", budget_tokens=100_000)
        assert [e["id"] for e in rec["entries"]] == [cid, *ids[10:]][::-1]


async def test_uncompact_refuses_what_it_cannot_undo(settings: SettingsFactory) -> None:
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="s")
        ids = [(await ok(c, "context_append", session_id="s", text=t))[1]["entry_id"] for t in LONG]
        _, first = await ok(c, "context_compact", session_id="s", keep_recent=6)
        _, second = await ok(c, "context_compact", session_id="s", keep_recent=2)
        inner, outer = first["compaction_id"], second["compaction_id"]
        msg = await error(c, "context_uncompact", session_id="s", compaction_id=inner)
        assert f"folded into {outer}" in msg and f"compaction_id={outer!r}" in msg
        msg = await error(c, "context_uncompact", session_id="s", compaction_id=ids[0])
        assert f"no compaction {ids[0]!r}" in msg
        msg = await error(c, "context_uncompact", session_id="s", compaction_id="nosuch")
        assert "no compaction 'nosuch'" in msg
        # Outer first, then inner: every original is live again.
        await ok(c, "context_uncompact", session_id="s", compaction_id=outer)
        _, undo = await ok(c, "context_uncompact", session_id="s", compaction_id=inner)
        assert undo["restored"] == ids[:6]
        _, rec = await ok(c, "context_recall", session_id="s", budget_tokens=100_000)
        assert [e["id"] for e in rec["entries"]] == ids[::-1]


async def test_an_undo_survives_a_restart(settings: SettingsFactory, tmp_path: Path) -> None:
    s = settings()
    async with client(s) as c:
        await ok(c, "context_open", session_id="s")
        for t in LONG[:6]:
            await ok(c, "context_append", session_id="s", text=t)
        _, data = await ok(c, "context_compact", session_id="s", keep_recent=1)
        await ok(c, "context_uncompact", session_id="s", compaction_id=data["compaction_id"])
    fresh = Service(s).sessions.get("s")
    assert len(fresh.entries()) == 6 and fresh.stats().live == 6
    retired = fresh.get(data["compaction_id"])
    assert retired.deleted and not retired.live


async def test_a_compaction_folds_one_bounded_batch_oldest_first(settings: SettingsFactory) -> None:
    # 60 notes of ~1,000 tokens: more than one compaction may fold. Each call folds the
    # oldest notes up to FOLD_TOKENS and says how many foldable notes wait; the next
    # call takes them (with the first summary, the oldest live entry by then).
    note = "step {i}: " + " ".join(f"word{k} value{k * 7}" for k in range(330))
    async with client(settings(budget=10_000)) as c:
        await ok(c, "context_open", session_id="big")
        ids = []
        for i in range(60):
            ids.append((await ok(c, "context_append", session_id="big", text=note.format(i=i)))[1])
        sizes = [d["tokens"] for d in ids]
        assert min(sizes) > 900
        text, dry = await ok(c, "context_compact", session_id="big", keep_recent=5, dry_run=True)
        batch = dry["folded"]
        assert sum(sizes[:batch]) <= FOLD_TOKENS < sum(sizes[: batch + 1])
        assert dry["left"] == 55 - batch and f"{dry['left']} more foldable entries" in text
        text, first = await ok(c, "context_compact", session_id="big", keep_recent=5)
        assert (first["folded"], first["left"]) == (batch, dry["left"])
        assert "call context_compact again" in text
        _, rec = await ok(
            c, "context_recall", session_id="big", budget_tokens=1_000_000, include_superseded=True
        )
        folded = {e["id"] for e in rec["entries"] if e.get("superseded")}
        assert folded == {d["entry_id"] for d in ids[:batch]}  # the oldest, and only they
        rounds = 1
        while first["left"]:
            _, first = await ok(c, "context_compact", session_id="big", keep_recent=5)
            rounds += 1
        assert rounds >= 2
        _, status = await ok(c, "context_status", session_id="big")
        assert status["live"] == 6 and status["superseded"] == 55 + rounds - 1  # nothing lost
