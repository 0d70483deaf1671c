"""A session directory deleted under a running server is never recreated half-made.

The server is a real process over HTTP; the directory is removed from the outside, as
a person cleaning up would. The next append is refused with a clear error and writes
nothing; context_open then starts the session anew, whole (with its meta.json).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio
from helpers import http_client, http_server


def _text(result: object) -> str:
    return "".join(getattr(b, "text", "") for b in getattr(result, "content", []))


def test_an_append_to_a_deleted_session_is_refused_and_open_recreates_it(tmp_path: Path) -> None:
    with http_server(tmp_path) as server:
        data = next(tmp_path.glob("data-*"))
        folder = data / "sessions" / "work"

        async def main() -> None:
            async with http_client(server.mcp_url) as c:
                await c.call_tool("context_open", {"session_id": "work", "title": "The work"})
                first = await c.call_tool("context_append", {"session_id": "work", "text": "one"})
                assert not first.is_error, _text(first)
                shutil.rmtree(folder)
                late = await c.call_tool("context_append", {"session_id": "work", "text": "two"})
                assert late.is_error and "no session 'work'" in _text(late), _text(late)
                assert "context_open" in _text(late)
                assert not folder.exists()  # nothing half-made: no journal without meta.json
                again = await c.call_tool("context_open", {"session_id": "work"})
                assert not again.is_error and _text(again).startswith("Created session 'work'")
                assert json.loads((folder / "meta.json").read_text())["id"] == "work"
                fresh = await c.call_tool("context_append", {"session_id": "work", "text": "three"})
                assert not fresh.is_error, _text(fresh)
                recall = await c.call_tool("context_recall", {"session_id": "work"})
                assert "three" in _text(recall) and "one" not in _text(recall)

        anyio.run(main)
