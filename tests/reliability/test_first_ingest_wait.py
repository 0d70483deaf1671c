"""A read of a document whose first ingest is still running waits for it (bounded).

Two real processes on one data dir: the command line ingests a large log under a new
id while a server over HTTP is asked for that id's outline, a window and a search. Each
waits for the ingest and answers from the finished document instead of "no document".
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import anyio
from helpers import http_client, http_server, server_command


def _text(result: object) -> str:
    return "".join(getattr(b, "text", "") for b in getattr(result, "content", []))


def _big_log(path: Path, size: int) -> None:
    """A data node's log, ``size`` bytes of it (each line numbered, so chunks differ)."""
    with path.open("w", encoding="utf-8") as f:
        written, n = 0, 0
        while written < size:
            kind = ("PacketResponder 1 for block", "Receiving block", "Deleting block")[n % 3]
            line = (
                f"081109 {n:08d} INFO dfs.DataNode: {kind} blk_{n * 7919} src /10.0.{n % 250}.7\n"
            )
            f.write(line)
            written, n = written + len(line), n + 1


def test_reads_of_a_new_id_wait_for_its_first_ingest(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    _big_log(log, 40_000_000)
    with http_server(tmp_path) as server:
        data = next(tmp_path.glob("data-*"))
        ingest = subprocess.Popen(
            server_command(
                "ingest", str(log), "--doc-id", "late", "--data-dir", str(data), "--no-llm"
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 60
            while not list((data / "documents").glob(".tmp-late-*")):  # it has begun
                assert ingest.poll() is None, ingest.communicate()
                assert time.monotonic() < deadline
                time.sleep(0.01)

            async def main() -> None:
                async with http_client(server.mcp_url) as c:
                    outline = await c.call_tool("doc_outline", {"doc_id": "late"})
                    assert not outline.is_error, _text(outline)
                    assert ingest.poll() is not None or (data / "documents" / "late").is_dir()
                    window = await c.call_tool("doc_window", {"doc_id": "late"})
                    assert not window.is_error and "DataNode" in _text(window), _text(window)
                    found = await c.call_tool(
                        "doc_search", {"doc_id": "late", "query": "PacketResponder"}
                    )
                    assert not found.is_error and "PacketResponder" in _text(found)

            began = time.monotonic()
            anyio.run(main)
            assert time.monotonic() - began < 60
        finally:
            _, err = ingest.communicate(timeout=120)
        assert ingest.returncode == 0, err
