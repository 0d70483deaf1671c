"""``import --replace`` killed between its two renames loses no session.

The child process is killed by SIGKILL right after the live session directory was
moved aside, before the import took its place. Before, the session sat in a hidden
``.old-`` directory that nothing restored (only documents had a start-up sweep), doctor
called it deletable, and ``context_open`` created an empty session under the same id.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import anyio
from helpers import run_cli
from mcp import Client

from context_window.cli.archive import export_session
from context_window.cli.catalog import Catalog
from context_window.server.app import build_server
from context_window.tokens import TokenCounter

from .support import WRITER, service_for


def _doctor(data: Path) -> tuple[int, str]:
    proc = run_cli("doctor", data=data)
    return proc.returncode, proc.stdout


def test_a_replace_killed_between_its_renames_is_put_back(tmp_path: Path) -> None:
    data = tmp_path / "data"
    session, _ = service_for(data).sessions.open("work")
    for i in range(5):
        session.append(f"original note {i}")
    export = tmp_path / "work.jsonl"
    with export.open("w", encoding="utf-8") as out:
        export_session(Catalog(data, TokenCounter(0.27)), "work", "jsonl", out)
    session.append("written after the export")  # the live version differs from the import

    proc = subprocess.run(
        [sys.executable, str(WRITER), "import-die", str(data), "work", str(export)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    root = data / "sessions"
    assert not (root / "work").exists()  # the crash left the session aside
    (aside,) = [p for p in root.iterdir() if p.name.startswith(".old-work-")]

    code, report = _doctor(data)
    assert code == 1 and "interrupted" in report and "do not delete" in report
    assert aside.is_dir()  # doctor reads; it does not tidy

    async def reopen() -> list[str]:
        async with Client(build_server(service_for(data))) as c:  # a server start recovers
            res = await c.call_tool("context_open", {"session_id": "work"})
            assert not res.is_error
            assert (res.structured_content or {}).get("created") is False
            rec = await c.call_tool("context_recall", {"session_id": "work", "limit": 100})
            return [e["text"] for e in (rec.structured_content or {})["entries"]]

    texts = anyio.run(reopen)
    assert sorted(texts) == sorted(
        [f"original note {i}" for i in range(5)] + ["written after the export"]
    )
    assert not any(p.name.startswith(".old-") for p in root.iterdir())
    code, report = _doctor(data)
    assert code == 0, report
