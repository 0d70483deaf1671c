"""A damaged index is named, served around, and found by doctor.

Each kind of damage is made in the real files of one document, 'bad', beside a healthy
one, 'good'. Every tool on 'bad' answers one clear error naming it and the remedy
(never an internal error, never an allocation from an unchecked header); a search of
every document serves 'good' and names 'bad'. A read that never touches the damaged
values (a window does not read postings) may still answer. The command line's search and doctor run
as real processes: no traceback, and doctor names the damage.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from helpers import run_cli
from mcp import Client

from context_window.server.app import build_server

from .support import service_for
from .test_corrupt import text_of
from .test_corrupt_documents import seed_documents


def _edit(name: str, change: Callable[[np.ndarray[Any, Any]], Any]) -> Callable[[Path], None]:
    def damage(index: Path) -> None:
        arr = np.load(index / name)
        out = change(arr)
        np.save(index / name, arr if out is None else out)

    return damage


def _set(arr: np.ndarray[Any, Any], at: int, value: int) -> None:
    arr.reshape(-1)[at] = value


def _huge_header(name: str) -> Callable[[Path], None]:
    """The array's header claims 2^40 rows; the file holds a few bytes."""

    def damage(index: Path) -> None:
        arr = np.load(index / name)
        with (index / name).open("wb") as f:
            header = {"descr": arr.dtype.str, "fortran_order": False, "shape": (1 << 40,)}
            np.lib.format.write_array_header_1_0(f, header)
            f.write(b"\x01" * 64)

    return damage


def _stats(**changes: object) -> Callable[[Path], None]:
    def damage(index: Path) -> None:
        stats = json.loads((index / "stats.json").read_text())
        (index / "stats.json").write_text(json.dumps({**stats, **changes}))

    return damage


def _headings(value: object) -> Callable[[Path], None]:
    return lambda index: (index / "headings.json").write_text(json.dumps(value))


def _random_terms(index: Path) -> None:
    blob = index / "terms.bin"
    blob.write_bytes(bytes(range(0x80, 0x80 + blob.stat().st_size)))


DAMAGE: dict[str, Callable[[Path], None]] = {
    "posting past the chunks": _edit("post_chunks.npy", lambda a: _set(a, 3, 10**6)),
    "posting offsets reversed": _edit("post_offsets.npy", lambda a: a[::-1].copy()),
    "posting offset huge": _edit("post_offsets.npy", lambda a: _set(a, 2, 10**9)),
    "term offsets reversed": _edit("term_offsets.npy", lambda a: a[::-1].copy()),
    "term offset huge": _edit("term_offsets.npy", lambda a: _set(a, 1, 10**12)),
    "chunk lengths short": _edit("doc_len.npy", lambda a: a[:-3].copy()),
    "heading id out of range": _edit("heading_ids.npy", lambda a: _set(a, 2, 10**6)),
    "span past the source": _edit("spans.npy", lambda a: _set(a, -1, 10**9)),
    "chunk range reversed": _edit("chunks.npy", lambda a: _set(a, 0, 10**6)),
    "absurd chunk count": _stats(chunks=10**12),
    "chunk count not a number": _stats(chunks="many"),
    "headings not a list": _headings({"trails": 5}),
    "headings not an object": _headings([1, 2]),
    "random bytes in the term table": _random_terms,
    "2^40-row postings header": _huge_header("post_chunks.npy"),
    "2^40-row chunk table header": _huge_header("chunks.npy"),
    "2^40-row lengths header": _huge_header("doc_len.npy"),
}


async def _calls(data: Path) -> dict[str, Any]:
    service = service_for(data, chunk_tokens=64, chunk_overlap=0)
    out: dict[str, Any] = {}
    async with Client(build_server(service)) as client:
        out["all"] = await client.call_tool("doc_search", {"query": "widgets gears"})
        for tool, args in {
            "doc_search": {"query": "widgets gears"},
            "doc_outline": {},
            "doc_window": {},
            "doc_summarize": {},
        }.items():
            out[tool] = await client.call_tool(tool, {"doc_id": "bad", **args})
        out["good"] = await client.call_tool("doc_search", {"query": "gears", "doc_id": "good"})
    await service.aclose()
    return out


@pytest.mark.parametrize("name", list(DAMAGE))
def test_a_damaged_index_is_named_and_served_around(data_dir: Path, name: str) -> None:
    seed_documents(data_dir)
    DAMAGE[name](data_dir / "documents" / "bad" / "index")

    out = anyio.run(_calls, data_dir)
    every = out["all"]
    assert not every.is_error, text_of(every)
    assert "good" in text_of(every) and "widgets" in text_of(every)
    assert "'bad' has a damaged index" in text_of(every), text_of(every)
    assert not out["good"].is_error, text_of(out["good"])
    assert out["doc_search"].is_error, text_of(out["doc_search"])  # it reads the damage
    for tool in ("doc_search", "doc_outline", "doc_window", "doc_summarize"):
        message = text_of(out[tool])
        assert "internal error" not in message, (tool, message)
        if out[tool].is_error:  # a read that never touches the damaged values may answer
            assert "document 'bad' has a damaged index" in message, (tool, message)
            assert "doc_ingest it again" in message, (tool, message)

    found = run_cli("search", "widgets gears", data=data_dir)
    assert found.returncode == 0 and "Traceback" not in found.stderr, found.stderr
    assert "'bad'" in found.stderr and "good" in found.stdout

    doctor = run_cli("doctor", data=data_dir, timeout=60)
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr, doctor.stderr
    problems = [ln for ln in doctor.stdout.splitlines() if ln.startswith("problem: ")]
    assert problems and all("documents/bad" in p for p in problems), doctor.stdout
