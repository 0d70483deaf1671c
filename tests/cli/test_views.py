"""The command line answers like the tools: `search` shows the lines doc_search shows the
model, numbered and best first (`--json`: its structured content), and `window --line N`
opens where doc_window(line=N) does."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import SettingsFactory, client
from helpers import run_cli
from mcp.types import CallToolResult, TextContent

from context_window.cli.views import READ_ON
from context_window.documents.answers import TIP_ROOM
from context_window.server.document_text import SEARCH_TIP

LOGHUB = Path(__file__).resolve().parents[3] / "shared" / "data" / "loghub"
if not LOGHUB.is_dir():
    LOGHUB = Path("/work/shared/data/loghub")
NUMBERED = re.compile(r"(?m)^\d+(?:-\d+)?: .*$")
QUERIES = [
    "PacketResponder terminating",
    "Deleting block",
    "addStoredBlock blockMap updated 10.251.73.220",
    "Exception",
    "Receiving block src dest",
]


def text_of(result: CallToolResult) -> str:
    assert not result.is_error, result.content
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


@pytest.mark.parametrize("tip", [SEARCH_TIP, READ_ON])
def test_both_edges_tips_fit_the_room_the_header_keeps(tip: str) -> None:
    assert len(tip) <= len(TIP_ROOM) and len(tip.split()) <= len(TIP_ROOM.split())


@pytest.mark.anyio
async def test_search_shows_the_lines_doc_search_shows(settings: SettingsFactory) -> None:
    if not LOGHUB.is_dir():
        pytest.skip(f"loghub samples not found at {LOGHUB}")
    s = settings(ingest_roots=[LOGHUB / "HDFS"])
    tool_lines, tool_hits, tool_windows = {}, {}, {}
    async with client(s) as c:
        text_of(await c.call_tool("doc_ingest", {"file_path": "HDFS_2k.log", "doc_id": "hdfs"}))
        for query in QUERIES:
            result = await c.call_tool("doc_search", {"query": query, "doc_id": "hdfs"})
            tool_lines[query] = NUMBERED.findall(text_of(result))
            assert result.structured_content is not None
            tool_hits[query] = result.structured_content["hits"]
        for line in (1, 500, 1999):
            shown = text_of(await c.call_tool("doc_window", {"doc_id": "hdfs", "line": line}))
            tool_windows[line] = shown.split("\n[", 1)[1]
    for query in QUERIES:
        done = run_cli("search", query, "--doc", "hdfs", data=s.data_dir)
        assert done.returncode == 0, done.stderr
        assert tool_lines[query], query
        assert NUMBERED.findall(done.stdout) == tool_lines[query], query
        done = run_cli("search", query, "--doc", "hdfs", "--json", data=s.data_dir)
        assert json.loads(done.stdout)["lines"] == tool_hits[query], query  # the same keys too
    for line, shown in tool_windows.items():
        done = run_cli("window", "hdfs", "--line", str(line), data=s.data_dir)
        assert done.returncode == 0, done.stderr
        first_chunk = shown.split("\n\n[", 1)[0]
        first_chunk = first_chunk.replace("\r\n", "\n").replace("\r", "\n")  # as text=True reads
        assert f"\n[{first_chunk}" in done.stdout, line
