"""A document's meta.json with a wrong type is named, not hidden.

The damage is made in the real meta.json of 'bad', beside a healthy 'good'. The tools
name 'bad' (its listing and every call on it) instead of hiding it or failing with an
internal error; a cached summary that is not text is made again, never served; doctor,
a real process, reports what the tools skip.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import run_cli
from mcp import Client

from context_window.server.app import build_server

from .support import service_for
from .test_corrupt import text_of
from .test_corrupt_documents import seed_documents


def _edit_meta(data: Path, **changes: Any) -> None:
    path = data / "documents" / "bad" / "meta.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


async def _calls(data: Path, summarize_first: bool = False) -> dict[str, Any]:
    service = service_for(data, chunk_tokens=64, chunk_overlap=0)
    out: dict[str, Any] = {}
    async with Client(build_server(service)) as client:
        if summarize_first:
            out["first"] = await client.call_tool("doc_summarize", {"doc_id": "bad"})
            return out
        out["doc_list"] = await client.call_tool("doc_list", {})
        for tool, args in {
            "doc_outline": {},
            "doc_window": {},
            "doc_search": {"query": "widgets"},
            "doc_summarize": {},
        }.items():
            out[tool] = await client.call_tool(tool, {"doc_id": "bad", **args})
    await service.aclose()
    return out


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"ratio": "x"}, "ratio"),
        ({"chunks": 10**9}, "chunks"),  # a count, but not its index's: found when opened
        ({"chars": -4}, "chars"),
        ({"created_at": [1]}, "created_at"),
        ({"title": {"a": 1}}, "title"),
    ],
)
def test_a_wrong_type_in_meta_is_named_by_every_tool_and_doctor(
    data_dir: Path, change: dict[str, Any], named: str
) -> None:
    seed_documents(data_dir)
    _edit_meta(data_dir, **change)
    out = anyio.run(_calls, data_dir)
    listed = text_of(out["doc_list"])
    assert not out["doc_list"].is_error and "good" in listed
    typed = named != "chunks"  # a listing reads meta.json alone
    assert not typed or ("'bad'" in listed and "damaged" in listed and named in listed), listed
    for tool in ("doc_outline", "doc_window", "doc_search", "doc_summarize"):
        message = text_of(out[tool])
        assert out[tool].is_error, (tool, message)
        assert "document 'bad' has a damaged meta.json" in message, (tool, message)
        assert named in message and "doc_ingest it again" in message, (tool, message)

    doctor = run_cli("doctor", data=data_dir)
    assert doctor.returncode == 1, doctor.stdout
    problems = [ln for ln in doctor.stdout.splitlines() if ln.startswith("problem: ")]
    assert any("documents/bad/" in p and named in p for p in problems), doctor.stdout
    listing = run_cli("docs", data=data_dir)
    assert "good" in listing.stdout and "Traceback" not in listing.stderr
    assert not typed or ("'bad'" in listing.stderr and named in listing.stderr), listing.stderr


def test_a_cached_summary_that_is_not_text_is_made_again(data_dir: Path) -> None:
    seed_documents(data_dir)
    first = anyio.run(lambda: _calls(data_dir, summarize_first=True))["first"]
    assert not first.is_error and first.structured_content["cached"] is False
    meta = json.loads((data_dir / "documents" / "bad" / "meta.json").read_text())
    _edit_meta(data_dir, summary={**meta["summary"], "text": 12345})

    doctor = run_cli("doctor", data=data_dir)
    assert doctor.returncode == 1 and "cached summary" in doctor.stdout, doctor.stdout

    again = anyio.run(lambda: _calls(data_dir, summarize_first=True))["first"]
    assert not again.is_error, text_of(again)
    assert again.structured_content["cached"] is False  # made again, not served
    assert "12345" not in text_of(again) and "widgets" in text_of(again)
    assert run_cli("doctor", data=data_dir).returncode == 0  # and cached anew, whole
