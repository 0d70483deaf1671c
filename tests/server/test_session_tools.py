"""Every session tool through a real in-memory mcp.Client: text, structured content, errors."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import SettingsFactory, client
from mcp import Client
from mcp.types import CallToolResult, TextContent
from reliability.support import FixedClock as Clock

from context_window.config import Settings
from context_window.models import MAX_LIST_LIMIT
from context_window.server.app import build_server
from context_window.service import Service
from context_window.sessions.session import FOLD_TOKENS
from context_window.tokens import TokenCounter, estimate

pytestmark = pytest.mark.anyio

SESSION_TOOLS = {
    "context_open",
    "context_append",
    "context_recall",
    "context_compact",
    "context_status",
    "context_update",
    "context_list_sessions",
    "context_guide",
}
READ_ONLY = {"context_recall", "context_status", "context_list_sessions", "context_guide"}

LONG = [
    f"Step {i}: we investigated module_{i}.py and found that limit_{i} should be {i * 10}. "
    f"The fix for ticket CW-{100 + i} touches path /srv/app/{i}/config.yaml. "
    f"Open question {i}: is the cache in worker {i} still needed after the migration?"
    for i in range(12)
]


def text_of(r: CallToolResult) -> str:
    (block,) = r.content
    assert isinstance(block, TextContent)
    return block.text


async def ok(c: Client, tool: str, **args: Any) -> tuple[str, dict[str, Any]]:
    r = await c.call_tool(tool, args)
    assert not r.is_error, text_of(r)
    assert r.structured_content is not None
    return text_of(r), r.structured_content


async def error(c: Client, tool: str, **args: Any) -> str:
    r = await c.call_tool(tool, args)
    assert r.is_error
    return text_of(r)


async def test_every_session_tool_is_registered_with_the_right_annotations(
    settings: SettingsFactory,
) -> None:
    async with client(settings()) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) >= SESSION_TOOLS
    for name in SESSION_TOOLS:
        tool = tools[name]
        assert tool.description
        assert tool.annotations is not None
        assert bool(tool.annotations.read_only_hint) is (name in READ_ONLY), name
    assert tools["context_update"].annotations.destructive_hint is True  # type: ignore[union-attr]
    for name in SESSION_TOOLS - READ_ONLY - {"context_update"}:
        assert tools[name].annotations.destructive_hint is False  # type: ignore[union-attr]
    schema = tools["context_append"].input_schema
    assert set(schema["required"]) == {"session_id", "text"}


async def test_guide_names_this_instance(settings: SettingsFactory, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    s = settings(budget=1234, ingest_roots=[root])
    async with client(s) as c:
        text, data = await ok(c, "context_guide")
    assert str(s.data_dir) in text
    assert "1234" in text
    assert str(root) in text
    assert "context_open" in text and "context_compact" in text
    assert data["data_dir"] == str(s.data_dir)
    assert data["budget"] == 1234
    assert data["ingest_roots"] == [str(root)]
    assert data["token_counts"] == "estimated"
    assert "extractive" in data["summarizer"]


async def test_open_creates_resumes_and_shows_pinned_and_latest(settings: SettingsFactory) -> None:
    async with client(settings()) as c:
        text, data = await ok(c, "context_open", session_id="task", title="The task")
        assert text.startswith("Created session 'task' (The task)")
        assert data["created"] is True and data["session_id"] == "task"
        assert (data["live"], data["total"], data["tokens"], data["budget"]) == (0, 0, 0, 4000)
        await ok(c, "context_append", session_id="task", text="Goal: ship v2", pinned=True)
        text, _ = await ok(c, "context_open", session_id="task")
        assert text.startswith("Resumed session 'task' (The task): 1 live of 1 entry, 1 pinned")
        await ok(c, "context_append", session_id="task", text="Found the flaky test")
        text, data = await ok(c, "context_open", session_id="task")
    assert text.startswith("Resumed session 'task' (The task): 2 live of 2 entries, 1 pinned")
    assert "/4,000 tokens" in text
    pinned_at, latest_at = text.index("Pinned:"), text.index("Latest:")
    assert pinned_at < text.index("Goal: ship v2") < latest_at < text.index("Found the flaky")
    assert data["created"] is False
    assert [e["text"] for e in data["pinned"]] == ["Goal: ship v2"]


async def test_open_shows_a_repeated_note_once_naming_its_copies(
    settings: SettingsFactory,
) -> None:
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="loop")
        for text in ["Tried the cache fix", "Tried  the cache\nfix", "Build is green"] * 2:
            await ok(c, "context_append", session_id="loop", text=text)
        text, _ = await ok(c, "context_open", session_id="loop")
    latest = text.split("Latest:\n")[1].splitlines()[:-1]
    assert len(latest) == 2, text  # e4, e5, e6 and e2, e3 (e1 is not among the latest 5)
    assert latest[0].endswith("Tried the cache fix (+2 older copies: e2, e4)"), latest
    assert latest[1].startswith("  [e6]") and latest[1].endswith("green (+1 older copy: e3)")


async def test_open_without_id_generates_one(settings: SettingsFactory) -> None:
    async with client(settings()) as c:
        _, data = await ok(c, "context_open")
        _, listed = await ok(c, "context_list_sessions")
    assert [s["id"] for s in listed["sessions"]] == [data["session_id"]]


async def test_append_reports_tokens_and_advises_compaction(settings: SettingsFactory) -> None:
    async with client(settings(budget=100)) as c:
        await ok(c, "context_open", session_id="s")
        text, data = await ok(c, "context_append", session_id="s", text="short note")
        assert text.startswith(f"Saved {data['ref']} ({data['tokens']} tokens).")
        assert data["advice"] == "" and "compact" not in text
        text, data = await ok(c, "context_append", session_id="s", text="word " * 55)
        assert 75 < data["session_tokens"] <= 100
        assert "Nearing the budget" in text and "context_compact" in data["advice"]
        text, data = await ok(c, "context_append", session_id="s", text="more " * 20)
        assert data["session_tokens"] > 100
        assert "Over budget" in text and "context_compact now" in text


async def test_recall_header_order_and_structured_entries(settings: SettingsFactory) -> None:
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="s")
        ids = []
        texts = ["cache " * 300, "cache miss in api", "cache warmup script"]
        texts += [f"filler note {i} on the weather" for i in range(6)]
        for t in texts:
            ids.append((await ok(c, "context_append", session_id="s", text=t))[1]["entry_id"])
        text, data = await ok(c, "context_recall", session_id="s", query="cache", budget_tokens=110)
    shown = [e["id"] for e in data["entries"]]
    assert set(shown[:2]) == {ids[1], ids[2]}  # the matches that fit, best first
    assert ids[0] not in shown  # too big for the budget
    scores = [e["score"] for e in data["entries"]]
    assert scores == sorted(scores, reverse=True) and min(scores) >= 0
    assert data["budget"] == 110 and data["searchable"] is True
    # The structured content fits the budget on its own, so it may hold fewer entries
    # than the text (then it says "cut"); it never holds an entry the text lacks.
    assert data["omitted"] >= 1 and data["omitted"] + len(shown) <= data["candidates"]
    refs = [e["ref"] for e in data["entries"]]  # the labels name entries by short name
    assert all(f"[{r} " in text or f"[{r}]" in text for r in refs)
    assert data["used_tokens"] <= 110
    header = text.splitlines()[0]
    shown_in_text = data["candidates"] - data["omitted"]
    assert header.startswith(f"{shown_in_text} of {data['candidates']} entries, best first")
    assert f"{data['used_tokens']}/110 tokens" in header
    assert f"{data['omitted']} did not fit" in header
    assert text.index("[" + refs[0]) < text.index("[" + refs[1])
    assert len(text) <= 4 * 110  # the whole answer, headers included, within the budget


@pytest.mark.parametrize("budget", [64, 100, 1000])
async def test_recall_answer_fits_its_budget_whole(settings: SettingsFactory, budget: int) -> None:
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="s")
        for i in range(30):
            note = f"note {i}: the cache {'warmup ' * (i % 7)}ran on worker-{i}"
            await ok(c, "context_append", session_id="s", text=note, tags=[f"t{i % 3}"])
        for query in (None, "cache warmup", "the of", "zebra"):
            args = {"session_id": "s", "budget_tokens": budget}
            if query is not None:
                args["query"] = query
            text, data = await ok(c, "context_recall", **args)
            assert TokenCounter(0.27).count(text) <= budget, (query, text)
            assert TokenCounter(0.27).count(text) <= data["used_tokens"] <= budget


@pytest.mark.parametrize("budget", [64, 300, 2000])
async def test_an_entry_over_the_budget_is_shown_by_its_best_lines(
    settings: SettingsFactory, budget: int
) -> None:
    trace = "\n".join(f"  at app.Module{i}.run(Module{i}.java:{i})" for i in range(3000))
    count = TokenCounter(0.27).count
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="s")
        await ok(c, "context_append", session_id="s", text="Stack trace of the crash:\n" + trace)
        await ok(c, "context_append", session_id="s", text="A short note on the build", pinned=True)
        for query in ("Module1234 crash", None):
            args = {"session_id": "s", "budget_tokens": budget, "query": query}
            text, data = await ok(c, "context_recall", **{k: v for k, v in args.items() if v})
            assert count(text) <= data["used_tokens"] <= budget
            assert "Nothing matched" not in text
            assert text.index("\n[e2 (pinned)]\n") < text.index("\n[e1]\n")  # pinned first
            lines = text.split("\n[e1]\n")[1].split("\n")  # structured content may drop it
            assert lines[-1] == "…" and len(lines) >= 2, text  # cut, and says so
            if query:  # the matching line, among its neighbours
                assert lines[0] == "…" and "  at app.Module1234.run(Module1234.java:1234)" in lines
                assert "\n".join(lines[1:-1]) in trace
            else:  # the newest first: from its start
                assert lines[0] == "Stack trace of the crash:"
        _, data = await ok(c, "context_update", session_id="s", entry_id="e2", pinned=False)
        text, data = await ok(
            c, "context_recall", session_id="s", query="Module1234", budget_tokens=64
        )
        assert [e["ref"] for e in data["entries"]] == ["e1"]
        assert text.startswith("1 of 1 entry") and count(text) <= 64
        assert "\n[e1]\n…\n  at app.Module1234.run(Module1234.java:1234)\n" in text


async def test_recall_shows_a_repeated_entry_once(settings: SettingsFactory) -> None:
    """A model caught in a loop saves one note again and again: recall shows it once."""
    decision = "Decision: Postgres 16 for billing, since the ledger needs serializable writes."
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="s")
        await ok(c, "context_append", session_id="s", text=decision, pinned=True)
        for i in range(30):
            await ok(c, "context_append", session_id="s", text=f"Looked at module {i}: nothing.")
            if i % 10 == 9:
                await ok(
                    c, "context_append", session_id="s", text=f"  {decision}\n", role="decision"
                )
        await ok(c, "context_append", session_id="s", text="Postgres pool: 20 connections a pod.")
        for query in ("postgres", None):
            args = {"session_id": "s", "budget_tokens": 2000, "query": query}
            text, data = await ok(c, "context_recall", **{k: v for k, v in args.items() if v})
            texts = [e["text"].strip() for e in data["entries"]]
            assert texts.count(decision) == 1 and text.count("Postgres 16") == 1, text
            assert data["entries"][0]["pinned"] and "Postgres pool: 20 connections a pod." in texts
            # The repeats count as one with the entry shown: none "did not fit".
            assert data["omitted"] == 0 and text.startswith(f"{len(texts)} of {len(texts)} ")
        for budget in range(64, 130, 6):  # room for the pinned one and little more
            args = {"session_id": "s", "budget_tokens": budget, "query": "serializable"}
            text, data = await ok(c, "context_recall", **args)
            assert text.count("Postgres 16") == 1, text  # no excerpt of a repeat either


async def test_recall_of_a_query_without_searchable_words_is_not_an_error(
    settings: SettingsFactory,
) -> None:
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="s")
        first = (await ok(c, "context_append", session_id="s", text="older note"))[1]
        last = (await ok(c, "context_append", session_id="s", text="newer note"))[1]
        text, data = await ok(c, "context_recall", session_id="s", query="the of and ?")
    assert "No searchable words in the query" in text
    assert data["searchable"] is False
    assert [e["id"] for e in data["entries"]] == [last["entry_id"], first["entry_id"]]


async def test_recall_nothing_matched_and_tags_and_limit(settings: SettingsFactory) -> None:
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="s")
        await ok(c, "context_append", session_id="s", text="alpha one", tags=["x"])
        await ok(c, "context_append", session_id="s", text="alpha two", tags=["y"])
        await ok(c, "context_open", session_id="empty")
        empty, _ = await ok(c, "context_recall", session_id="empty")
        assert empty.endswith("\nNo live entries: context_append saves one.")
        text, data = await ok(c, "context_recall", session_id="s", query="zebra")
        assert "Nothing matched" in text and data["entries"] == []
        text, data = await ok(c, "context_recall", session_id="s", tags=["zebra"])
        assert text.endswith("\nNo live entry has those tags: try without tags.")
        assert data["entries"] == []
        text, data = await ok(c, "context_recall", session_id="s", tags=["y"])
        assert [e["text"] for e in data["entries"]] == ["alpha two"]
        assert text.startswith("1 of 1 entry, best first")  # not "1 of 1 entries"
        _, data = await ok(c, "context_recall", session_id="s", limit=1)
        assert [e["text"] for e in data["entries"]] == ["alpha two"]


async def test_compact_dry_run_then_real_then_recall_originals(settings: SettingsFactory) -> None:
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="s")
        for t in LONG[:8]:
            await ok(c, "context_append", session_id="s", text=t)
        text, data = await ok(
            c, "context_compact", session_id="s", keep_recent=3, target_tokens=60, dry_run=True
        )
        assert text.startswith("Dry run: would fold 5 entries")
        assert data["dry_run"] is True and data["summary_id"] is None and data["folded"] == 5
        _, status = await ok(c, "context_status", session_id="s")
        assert status["live"] == 8

        text, data = await ok(c, "context_compact", session_id="s", keep_recent=3, target_tokens=60)
        assert data["method"] == "extractive"
        assert "disabled" in data["reason"]
        assert data["folded"] == 5 and data["summary_id"]
        assert data["tokens_freed"] == data["folded_tokens"] - data["summary_tokens"] > 0
        assert re.search(r"into summary s\d+ \(", text) and data["summary_id"] not in text
        assert "by extractive (LLM disabled" in text
        assert "include_superseded=true" in text

        _, status = await ok(c, "context_status", session_id="s")
        assert (status["live"], status["superseded"]) == (4, 5)
        _, live = await ok(c, "context_recall", session_id="s", budget_tokens=100_000)
        assert len(live["entries"]) == 4
        _, every = await ok(
            c, "context_recall", session_id="s", budget_tokens=100_000, include_superseded=True
        )
        assert len(every["entries"]) == 9
        assert sum(e.get("superseded", False) for e in every["entries"]) == 5

        text, data = await ok(c, "context_compact", session_id="s", keep_recent=10)
        assert text.startswith("Nothing to compact") and data["summary_id"] is None


async def test_status_reports_counts_counting_and_storage_problems(
    settings: SettingsFactory,
) -> None:
    s = settings(budget=64)
    async with client(s) as c:
        await ok(c, "context_open", session_id="s")
        _, a = await ok(c, "context_append", session_id="s", text="first", pinned=True)
        _, b = await ok(c, "context_append", session_id="s", text="second")
        await ok(c, "context_update", session_id="s", entry_id=b["entry_id"], delete=True)
        text, data = await ok(c, "context_status", session_id="s")
        assert "1 live, 0 superseded, 0 expired, 1 deleted, 1 pinned" in text
        assert "Token counts: estimated" in text
        assert "Summaries: extractive (LLM disabled)" in text
        assert "Within budget." in text and "Storage:" not in text
        assert data["token_counts"] == "estimated" and data["skipped_lines"] == 0
        with (s.data_dir / "sessions" / "s" / "entries.jsonl").open("ab") as f:
            f.write(b"garbage line\n")
        text, data = await ok(c, "context_status", session_id="s")
    assert data["skipped_lines"] == 1
    assert "Storage: skipped 1 unreadable line, 0 patches for unknown entries" in text
    assert data["live"] == 1 and data["pinned"] == 1 and a["entry_id"]


async def test_update_pin_unpin_delete_undelete(settings: SettingsFactory) -> None:
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="s")
        _, a = await ok(c, "context_append", session_id="s", text="keep me")
        eid, ref = a["entry_id"], a["ref"]
        text, data = await ok(c, "context_update", session_id="s", entry_id=ref, pinned=True)
        assert text.startswith(f"Entry {ref} is now pinned.") and data["pinned"] is True
        assert data["id"] == eid and data["ref"] == ref == "e1"
        text, data = await ok(c, "context_update", session_id="s", entry_id=eid, pinned=False)
        assert "now unpinned" in text and data["pinned"] is False
        text, data = await ok(c, "context_update", session_id="s", entry_id=eid, delete=True)
        assert "now deleted" in text and data["deleted"] is True
        _, rec = await ok(c, "context_recall", session_id="s")
        assert rec["entries"] == []
        _, data = await ok(c, "context_update", session_id="s", entry_id=eid, delete=False)
        assert data["deleted"] is False
        _, rec = await ok(c, "context_recall", session_id="s")
        assert [e["id"] for e in rec["entries"]] == [eid]


async def test_list_sessions_newest_first(settings: SettingsFactory) -> None:
    s = settings()
    async with client(s) as c:
        text, data = await ok(c, "context_list_sessions")
        assert "No sessions yet" in text and data["sessions"] == []
        for sid in ("a", "b", "c"):
            await ok(c, "context_open", session_id=sid)
            await ok(c, "context_append", session_id=sid, text=f"in {sid}")
        for sid, stamp in (("a", 2_000_000_100), ("b", 2_000_000_000), ("c", 2_000_000_200)):
            os.utime(s.data_dir / "sessions" / sid / "entries.jsonl", (stamp, stamp))
        text, data = await ok(c, "context_list_sessions")
    assert [x["id"] for x in data["sessions"]] == ["c", "a", "b"]
    assert text.splitlines()[0] == "Sessions 1-3 of 3, newest first:"
    assert text.index("  c:") < text.index("  a:") < text.index("  b:")
    assert (data["total"], data["matched"], data["offset"]) == (3, 3, 0)


async def test_list_sessions_pages_filters_and_fits_the_budget(settings: SettingsFactory) -> None:
    s = settings(budget=300)
    async with client(s) as c:
        for i in range(120):
            title = f"{'parser' if i % 3 == 0 else 'deploy'} work {i:03d}"
            await ok(c, "context_open", session_id=f"s{i:03d}", title=title)  # s119 newest
        text, data = await ok(c, "context_list_sessions")
        assert text.splitlines()[0] == "Sessions 1-20 of 120, newest first:"
        assert [x["id"] for x in data["sessions"]][:2] == ["s119", "s118"]
        assert text.splitlines()[-1] == "Next: offset=20"
        text, data = await ok(c, "context_list_sessions", offset=20, limit=5)
        assert [x["id"] for x in data["sessions"]] == ["s099", "s098", "s097", "s096", "s095"]
        text, data = await ok(c, "context_list_sessions", filter="PARSER", limit=200)
        assert (data["total"], data["matched"]) == (120, 40)
        assert text.startswith("Sessions 1-")
        assert "of 40 holding 'PARSER' (120 in all)" in text.splitlines()[0]
        # 40 lines do not fit 300 tokens: the answer says how many did not, and where to go on.
        assert estimate(text, 0.27) <= 300
        shown = [line for line in text.splitlines() if line.startswith("  s")]
        assert all("parser" in line for line in shown) and 5 < len(shown) < 40
        assert text.splitlines()[-1] == (
            f"{40 - len(shown)} more did not fit. Next: offset={len(shown)}"
        )
        text, data = await ok(c, "context_list_sessions", filter="nothing like it")
        assert data["sessions"] == [] and "No sessions from offset 0: 0 holding" in text
        text, data = await ok(c, "context_list_sessions", offset=500)
        assert data["sessions"] == [] and text == "No sessions from offset 500: 120."
        msg = await error(c, "context_list_sessions", limit=0)
        assert "limit" in msg
        assert "limit" in await error(c, "context_list_sessions", limit=MAX_LIST_LIMIT + 1)
        _, data = await ok(c, "context_list_sessions", limit=MAX_LIST_LIMIT)
        assert data["sessions"]  # accepted: the tool's bound is the Service's
        # The schema writes the bound as a number (importing models would slow start-up).
        tools = {t.name: t for t in (await c.list_tools()).tools}
        limit = tools["context_list_sessions"].input_schema["properties"]["limit"]
        assert limit["maximum"] == MAX_LIST_LIMIT


@pytest.mark.parametrize(
    ("tool", "args", "needle"),
    [
        ("context_append", {"session_id": "ghost", "text": "x"}, "context_open"),
        ("context_recall", {"session_id": "ghost"}, "context_open"),
        ("context_status", {"session_id": "ghost"}, "context_open"),
        ("context_compact", {"session_id": "ghost"}, "context_open"),
        ("context_update", {"session_id": "ghost", "entry_id": "e1", "pinned": True}, "open"),
        ("context_open", {"session_id": "../etc"}, "invalid session_id"),
        ("context_recall", {"session_id": "a/b"}, "invalid session_id"),
        ("context_append", {"session_id": "s", "text": "  "}, "non-empty"),
        ("context_append", {"session_id": "s", "text": "x", "role": "boss"}, "role must be one of"),
        (
            "context_append",
            {"session_id": "s", "text": "x", "role": "Dead_End"},
            "tags=['dead_end']",
        ),
        ("context_append", {"session_id": "s", "text": "x", "tags": list("abcdefghijk")}, "10"),
        ("context_recall", {"session_id": "s", "budget_tokens": 3}, "budget_tokens"),
        ("context_update", {"session_id": "s", "entry_id": "e-none", "pinned": True}, "no entry"),
        ("context_update", {"session_id": "s", "entry_id": "e-none"}, "pinned and/or delete"),
        ("context_compact", {"session_id": "s", "target_tokens": 5}, "target_tokens"),
        ("context_compact", {"session_id": "s", "keep_recent": -1}, "keep_recent"),
        ("context_open", {"session_id": "s", "title": "x" * 500}, "title"),
    ],
)
async def test_bad_input_is_an_error_result_with_actionable_text(
    settings: SettingsFactory, tool: str, args: dict[str, Any], needle: str
) -> None:
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="s")
        message = await error(c, tool, **args)
    assert needle in message
    assert "internal error" not in message


async def test_unknown_session_error_lists_known_sessions(settings: SettingsFactory) -> None:
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="alpha")
        message = await error(c, "context_recall", session_id="beta")
    assert "no session 'beta'" in message
    assert "alpha" in message
    assert "Call context_open" in message


async def test_among_many_sessions_the_error_names_the_nearest_first(
    settings: SettingsFactory,
) -> None:
    async with client(settings()) as c:
        for name in [*(f"task{i:02}" for i in range(30)), "Release-Notes", "release_plan"]:
            await ok(c, "context_open", session_id=name)
        message = await error(c, "context_recall", session_id="RELEASE-NOTE")
        typo = await error(c, "context_status", session_id="tsk07")
    known = message.split("known sessions: ")[1].split(")")[0].split(", ")
    assert known[:2] == ["Release-Notes", "release_plan"], known  # any case, then spelling
    assert len(known) == 10 and known[-1] == "task07 and 22 more"
    assert typo.split("known sessions: ")[1].startswith("task07, ")


async def test_an_id_in_another_case_names_the_same_session(settings: SettingsFactory) -> None:
    s = settings()
    async with client(s) as c:
        await ok(c, "context_open", session_id="Task1", title="the task")
        await ok(c, "context_append", session_id="task1", text="the build uses gcc 13")
        resumed, data = await ok(c, "context_open", session_id="TASK1")
        recalled, _ = await ok(c, "context_recall", session_id="tAsK1", query="gcc")
        listed, _ = await ok(c, "context_list_sessions")
        await ok(c, "context_open", session_id="b")
        await ok(c, "context_append", session_id="b", text="lower-case b")
    assert resumed.startswith("Resumed session 'Task1' (the task): 1 live of 1 entry")
    assert data["session_id"] == "Task1" and "gcc 13" in recalled
    assert "Sessions 1-1 of 1" in listed
    # An older data dir may hold two ids that differ only in case: each names its own.
    sessions = s.data_dir / "sessions"
    shutil.copytree(sessions / "b", sessions / "B")
    async with client(s) as c:
        await ok(c, "context_append", session_id="B", text="upper-case B")
        lower, _ = await ok(c, "context_recall", session_id="b")
        upper, _ = await ok(c, "context_recall", session_id="B")
    assert "upper-case B" not in lower and "upper-case B" in upper
    assert sorted(p.name for p in sessions.iterdir()) == ["B", "Task1", "b"]


async def test_a_title_given_as_a_session_id_is_answered_with_the_id(
    settings: SettingsFactory,
) -> None:
    async with client(settings()) as c:
        _, made = await ok(c, "context_open", title="Fix the linker")
        _, twin1 = await ok(c, "context_open", title="Twin")
        again, twin2 = await ok(c, "context_open", title="twin")  # a second one, told so
        _, twin3 = await ok(c, "context_open", title="Twin")
        spaced = await error(c, "context_recall", session_id="fix the LINKER")
        reopened = await error(c, "context_open", session_id="Fix the linker")
        twins = await error(c, "context_append", session_id="twin", text="x")
        _, new = await ok(c, "context_open", session_id="twin")  # a valid id: a new session
        for _ in range(5):
            many, more = await ok(c, "context_open", title="Twin")
    sid = made["session_id"]
    assert spaced == (
        f"no session 'fix the LINKER': that is the title of {sid}. "
        f"Call again with session_id={sid!r}"
    )
    assert reopened.endswith(f"session_id={sid!r}")
    assert twins.startswith("no session 'twin': that is the title of s") and twins.count(",") == 2
    assert new["created"] is True and new["session_id"] == "twin"
    first = twin1["session_id"]
    assert "namesakes" not in twin1 and twin2["namesakes"] == [first]
    assert f"Another session has this title: {first}. To resume it instead: " in again
    assert twin3["namesakes"] == [twin2["session_id"], first]  # newest first
    # Three Twins, the session "twin" (titled by its id), four more: the text counts all 8.
    assert "8 other sessions have this title: " in many and len(more["namesakes"]) == 5


async def test_audit_lines_name_the_tool_and_outcome_but_no_content(
    settings: SettingsFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="context_window.audit")
    async with client(settings()) as c:
        await ok(c, "context_open", session_id="s")
        await ok(c, "context_append", session_id="s", text="SECRET-CONTENT-123")
        await error(c, "context_recall", session_id="nope")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name.endswith("audit")]
    assert [(x["tool"], x["outcome"]) for x in lines] == [
        ("context_open", "ok"),
        ("context_append", "ok"),
        ("context_recall", "NotFound"),
    ]
    assert all(set(x) == {"tool", "outcome", "ms"} for x in lines)
    assert "SECRET" not in caplog.text


async def test_no_audit_lines_when_disabled(
    settings: SettingsFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="context_window.audit")
    async with client(settings(audit=False)) as c:
        await ok(c, "context_open", session_id="s")
    assert not [r for r in caplog.records if r.name.endswith("audit")]


@pytest.mark.anyio
async def test_counts_in_the_answers_have_thousands_separators(settings: SettingsFactory) -> None:
    """Every count a model reads is written one way: ``2,995 tokens``, ``2,995/4,000``,
    ``1,234 more``; an argument to pass back (``offset=1200``) stays bare."""
    words = " ".join(f"word{i} finding" for i in range(1_500))  # ~6,400 tokens
    async with client(settings(llm_enabled=False)) as c:
        await ok(c, "context_open", session_id="s")
        texts = [(await ok(c, "context_append", session_id="s", text=words))[0]]
        for _ in range(4):
            await ok(c, "context_append", session_id="s", text=words)
        for dry in (True, False):
            texts.append(
                (await ok(c, "context_compact", session_id="s", keep_recent=1, dry_run=dry))[0]
            )
        await ok(c, "doc_ingest", text=f"{words}\n\n{words}", doc_id="d")
        for tool, args in [
            ("doc_outline", {}),
            ("doc_search", {"query": "word5 finding", "budget_tokens": 20_000}),
            ("doc_window", {"budget_tokens": 20_000}),
        ]:
            texts.append((await ok(c, tool, doc_id="d", **args))[0])
        texts.append(await error(c, "context_append", session_id="s", text="x" * 200_001))
    found = re.findall(
        r"(?<![\d,])([\d,]+)(?:/([\d,]+))? (?:tokens|more|facts|characters)", "\n".join(texts)
    )
    counts = [n for pair in found for n in pair if n]
    assert sum(int(n.replace(",", "")) >= 1000 for n in counts) >= 14, counts
    assert all(re.fullmatch(r"\d{1,3}(,\d{3})*", n) for n in counts), counts


# ----------------------------------------------------------------------
# ttl_days through a real mcp.Client on a fixed clock: expired entries leave recall, not log.

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


# ----------------------------------------------------------------------
# Compactions through a real mcp.Client: ids, kept facts, include_superseded, undo and redo.


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
