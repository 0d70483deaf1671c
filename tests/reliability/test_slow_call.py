"""A slow call (the first open of a big session, replayed from its journal) runs off the
event loop: meanwhile /health and the calls of other clients on other sessions answer.

A real HTTP server process, a real journal of many entries written beside it, and
clients that time each answer while the slow one is still in flight.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp

from .support import Server

ENTRIES = 150_000


def write_journal(data: Path, sid: str, n: int) -> None:
    folder = data / "sessions" / sid
    folder.mkdir(parents=True)
    words = "parser socket timeout retry cache index token budget window chunk".split()
    with (folder / "entries.jsonl").open("w", encoding="utf-8") as f:
        for i in range(n):
            text = f"note {i}: " + " ".join(words[(i * k) % len(words)] for k in range(1, 12))
            rec = {"kind": "entry", "id": f"e{i:07d}", "seq": i + 1, "created_at": 1.7e9 + i}
            f.write(json.dumps({**rec, "role": "note", "text": text}) + "\n")
    meta = {"id": sid, "title": sid, "created_at": 1.7e9, "updated_at": 1.7e9}
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")


def _text(res: Any) -> str:
    return "".join(getattr(b, "text", "") for b in res.content)


def test_a_slow_open_does_not_stall_health_or_other_clients(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_journal(data, "big", ENTRIES)
    server = Server(data, None)
    url = server.url + "/mcp"
    waits: dict[str, list[float]] = {"health": [], "append": []}
    done: dict[str, float] = {}
    try:

        async def slow() -> None:
            t0 = time.monotonic()
            async with mcp.Client(url) as c:
                res = await c.call_tool("context_open", {"session_id": "big"})
                assert not res.is_error, _text(res)
                assert f"{ENTRIES:,}" in _text(res) or str(ENTRIES) in _text(res)
            done["slow"] = time.monotonic() - t0

        async def others() -> None:
            async with mcp.Client(url) as c, httpx.AsyncClient(timeout=30) as http:
                await c.call_tool("context_open", {"session_id": "free"})
                while "slow" not in done:
                    t0 = time.monotonic()
                    assert (await http.get(server.url + "/health")).status_code == 200
                    waits["health"].append(time.monotonic() - t0)
                    t0 = time.monotonic()
                    res = await c.call_tool("context_append", {"session_id": "free", "text": "x"})
                    assert not res.is_error, _text(res)
                    waits["append"].append(time.monotonic() - t0)
                    await anyio.sleep(0.05)

        async def race() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(slow)
                tg.start_soon(others)

        anyio.run(race)
    finally:
        server.stop()
    assert done["slow"] > 1.0, done  # a call slow enough for the others to be timed
    assert len(waits["health"]) >= 5, waits
    # The replay holds Python's lock between its steps only: the loop gets its turns.
    assert max(waits["health"]) < 0.25, waits["health"]
    assert sorted(waits["append"])[len(waits["append"]) // 2] < 0.25, waits["append"]
