"""One session directory nobody may read never breaks the others.

A real permission error: the directory is ``chmod 000`` and every process runs as a user
the bits apply to (as root, with the power to override them dropped). The server answers
the listing without it, with one stderr line naming it; a call on it is one clear error;
the command line's ``sessions``, ``search`` and ``doctor`` skip it with one stderr line
each, and ``doctor`` names it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from helpers import http_client, http_server, server_command

from tests.reliability.test_disk_faults import _as_an_ordinary_user


def _text(result: object) -> str:
    return "".join(getattr(b, "text", "") for b in getattr(result, "content", []))


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Path]:
    """A data dir with sessions 'alpha' and 'beta', 'beta' made unreadable."""
    data = tmp_path / "data"
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from context_window.config import Settings\n"
        "from context_window.service import Service\n"
        "service = Service(Settings(data_dir=Path(sys.argv[1]), llm_enabled=False))\n"
        "for sid in ('alpha', 'beta'):\n"
        "    service.sessions.open(sid)[0].append(f'the users table migration in {sid}')\n"
    )
    subprocess.run([sys.executable, "-c", script, str(data)], check=True, timeout=60)
    # Everyone may pass through the temporary directories; only beta is closed.
    for p in (tmp_path, data, data / "sessions", data / "sessions" / "alpha"):
        p.chmod(0o777)
    for f in (data / "sessions" / "alpha").iterdir():
        f.chmod(0o666)
    (data / "sessions" / "beta").chmod(0o000)
    yield data
    (data / "sessions" / "beta").chmod(0o755)


def _cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTX_")}
    return subprocess.run(
        [*_as_an_ordinary_user(), *server_command(*args, "--data-dir", str(data), "--no-llm")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_the_cli_skips_an_unreadable_session_with_one_line(data: Path) -> None:
    listed = _cli(data, "sessions")
    assert listed.returncode == 0, listed.stderr
    assert "alpha" in listed.stdout and "beta" not in listed.stdout
    (line,) = listed.stderr.splitlines()
    assert "skipped session 'beta'" in line and "permission denied" in line

    found = _cli(data, "search", "migration")
    assert found.returncode == 0, found.stderr
    assert "in alpha" in found.stdout and "in beta" not in found.stdout
    (line,) = found.stderr.splitlines()
    assert "skipped session 'beta'" in line

    shown = _cli(data, "show", "beta")
    assert shown.returncode != 0 and "Traceback" not in shown.stderr
    assert "permission denied" in shown.stderr

    doctor = _cli(data, "doctor")
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr, doctor.stderr
    named = [ln for ln in doctor.stdout.splitlines() if "beta" in ln]
    assert named and "permission denied" in named[0], doctor.stdout


def test_the_server_lists_and_serves_the_readable_sessions(data: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTX_")}
    command = [*_as_an_ordinary_user(), *server_command("--no-llm", "--data-dir", str(data))]
    with http_server(tmp_path, command=command, env=env) as server:

        async def main() -> None:
            async with http_client(server.mcp_url) as c:
                for _ in range(2):  # asked twice, told once
                    listed = await c.call_tool("context_list_sessions", {})
                    assert not listed.is_error, _text(listed)
                    assert "alpha" in _text(listed) and "beta" not in _text(listed)
                recall = await c.call_tool(
                    "context_recall", {"session_id": "alpha", "query": "migration"}
                )
                assert "in alpha" in _text(recall)
                closed = await c.call_tool(
                    "context_recall", {"session_id": "beta", "query": "migration"}
                )
                assert closed.is_error and "internal error" not in _text(closed)
                assert "permission denied" in _text(closed), _text(closed)

        anyio.run(main)
        named = [ln for ln in server.log().splitlines() if "'beta'" in ln and "skipped" in ln]
        assert len(named) == 1, server.log()
