"""A process stopped while it holds one session's journal lock stalls that session only.

The lock holder is a real process that takes the ``flock`` and stops itself with
SIGSTOP (as Ctrl-Z or a debugger would). The server is a real HTTP process. Before,
the lock wait ran on the event loop and froze every client, /health included.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp
import pytest

from .support import Server

HOLDER = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


def _text(res: Any) -> str:
    return "".join(getattr(b, "text", "") for b in res.content)


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("T")


def stopped_holder(path: Path) -> subprocess.Popen[str]:
    """A real process that takes ``path``'s flock, then stops (SIGSTOP)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    deadline = time.monotonic() + 10
    while not _stopped(holder.pid):
        assert time.monotonic() < deadline, "the holder did not stop"
        time.sleep(0.01)
    return holder


def test_a_stopped_lock_holder_stalls_only_its_session(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", None)
    url = server.url + "/mcp"
    try:

        async def setup() -> None:
            async with mcp.Client(url) as c:
                for sid in ("stuck", "free"):
                    assert not (await c.call_tool("context_open", {"session_id": sid})).is_error
                    await c.call_tool("context_append", {"session_id": sid, "text": "first"})

        anyio.run(setup)
        journal = tmp_path / "data" / "sessions" / "stuck" / "entries.jsonl"
        holder = stopped_holder(journal)

        finished: dict[str, float] = {}
        answers: dict[str, str] = {}

        async def stuck_call() -> None:
            async with mcp.Client(url) as c:
                res = await c.call_tool("context_append", {"session_id": "stuck", "text": "x"})
                assert res.is_error
                answers["stuck"] = _text(res)
            finished["stuck"] = time.monotonic()

        async def others() -> None:
            await anyio.sleep(0.5)  # the stuck call is waiting on the lock by now
            async with mcp.Client(url) as c, httpx.AsyncClient(timeout=5) as http:
                for i in range(5):
                    assert (await http.get(server.url + "/health")).status_code == 200
                    res = await c.call_tool(
                        "context_append", {"session_id": "free", "text": f"meanwhile {i}"}
                    )
                    assert not res.is_error, _text(res)
                    res = await c.call_tool("context_recall", {"session_id": "free"})
                    assert "meanwhile" in _text(res)
            finished["others"] = time.monotonic()

        async def race() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stuck_call)
                tg.start_soon(others)

        anyio.run(race)
        assert finished["others"] < finished["stuck"]  # answered while the stuck call waited
        assert "busy" in answers["stuck"] and "try again" in answers["stuck"]
        assert "\n" not in answers["stuck"].strip()

        os.kill(holder.pid, signal.SIGKILL)  # the lock dies with its holder
        holder.wait()

        async def after() -> None:
            async with mcp.Client(url) as c:
                res = await c.call_tool("context_append", {"session_id": "stuck", "text": "ok"})
                assert not res.is_error, _text(res)
                rec = _text(await c.call_tool("context_recall", {"session_id": "stuck"}))
                assert "ok" in rec and "first" in rec

        anyio.run(after)
        with journal.open("rb") as f:  # nothing half-written by the refused call
            fcntl.flock(f, fcntl.LOCK_SH)
            assert f.read().count(b"\n") == 2  # "first" and "ok"
    finally:
        server.stop()


# A call, the lock it waits for (relative to the data dir), and what its answer holds.
WAITING = {
    # The whole document's summary is cached in meta.json under the documents' lock.
    "summary": ("doc_summarize", {"doc_id": "s"}, "documents", "disk filled up"),
    # One-line chunk summaries are cached in the document's summaries.jsonl.
    "outline": (
        "doc_outline",
        {"doc_id": "s", "summarize": True},
        "documents/s/summaries.jsonl",
        "Spec",
    ),
}


@pytest.mark.parametrize("call", sorted(WAITING))
def test_a_summary_waiting_for_a_document_lock_leaves_the_server_free(
    tmp_path: Path, call: str
) -> None:
    # Those waits ran on the event loop, so every client waited with them.
    tool, args, lock, expect = WAITING[call]
    server = Server(tmp_path / "data", None)
    url = server.url + "/mcp"
    holder = None
    try:

        async def setup() -> None:
            async with mcp.Client(url) as c:
                text = "# Spec\n\nThe disk filled up at noon.\n"
                assert not (await c.call_tool("doc_ingest", {"text": text, "doc_id": "s"})).is_error
                assert not (await c.call_tool("context_open", {"session_id": "free"})).is_error
                first = await c.call_tool("doc_outline", {"doc_id": "s", "summarize": True})
                assert not first.is_error  # summaries.jsonl exists from here on

        anyio.run(setup)
        holder = stopped_holder(tmp_path / "data" / lock)
        finished: dict[str, float] = {}
        answers: dict[str, Any] = {}

        async def waiting_call() -> None:
            async with mcp.Client(url) as c:
                answers[call] = await c.call_tool(tool, args)
            finished[call] = time.monotonic()

        async def others() -> None:
            await anyio.sleep(0.5)  # the call waits on the lock by now
            async with mcp.Client(url) as c, httpx.AsyncClient(timeout=5) as http:
                for i in range(3):
                    assert (await http.get(server.url + "/health")).status_code == 200
                    res = await c.call_tool(
                        "context_append", {"session_id": "free", "text": f"m{i}"}
                    )
                    assert not res.is_error, _text(res)
            finished["others"] = time.monotonic()
            assert holder is not None
            os.kill(holder.pid, signal.SIGKILL)  # the lock dies with its holder

        async def race() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiting_call)
                tg.start_soon(others)

        anyio.run(race)
        assert finished["others"] < finished[call]  # answered while the call waited
        assert not answers[call].is_error and expect in _text(answers[call])
        if call == "summary":  # cached once the lock came free
            meta = json.loads((tmp_path / "data" / "documents" / "s" / "meta.json").read_text())
            assert expect in meta["summary"]["text"]
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        server.stop()
