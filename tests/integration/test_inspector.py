"""End to end with a third-party client: the MCP Inspector CLI, over stdio and over HTTP.

Uses ``$MCP_INSPECTOR`` (a path to the ``mcp-inspector`` executable), else the copy
that ``.ci/inspector.sh`` installs into ``.ci/inspector``. Skips, saying so, when
neither is there: the tests never download anything themselves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import Running, http_server

from context_window.config import load_settings
from context_window.server.app import build_server
from context_window.service import Service

pytestmark = pytest.mark.inspector

LOCAL_BIN = Path(__file__).resolve().parents[2] / ".ci/inspector/node_modules/.bin/mcp-inspector"
TOKEN = "insp-token-123"


@pytest.fixture(scope="module")
def inspector(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[list[str], dict[str, str]]]:
    """The command that runs the Inspector, and the environment to run it in."""
    env = dict(os.environ)
    explicit = os.environ.get("MCP_INSPECTOR")
    if explicit or LOCAL_BIN.exists():
        command = [explicit or str(LOCAL_BIN)]
        env["HOME"] = str(tmp_path_factory.mktemp("inspector-home"))  # it keeps state in ~
    else:
        pytest.skip("no MCP Inspector: run .ci/inspector.sh (needs npm) or set MCP_INSPECTOR")
    try:
        probe = subprocess.run(
            [*command, "--cli", "--help"], capture_output=True, text=True, env=env, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"MCP Inspector unavailable: {exc}")
    if probe.returncode != 0 or "--method" not in probe.stdout:
        pytest.skip(f"MCP Inspector unavailable: {probe.stderr.strip()[-300:]}")
    yield command, env


def run_cli(
    inspector: tuple[list[str], dict[str, str]], target: Sequence[str], *args: str
) -> subprocess.CompletedProcess[str]:
    """Run ``inspector --cli <target...> <args...>``; the server's log goes to stderr."""
    command, env = inspector
    return subprocess.run(
        [*command, "--cli", *target, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def output(proc: subprocess.CompletedProcess[str]) -> Any:
    """The Inspector's JSON answer, failing with its stderr when it did not succeed."""
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout)


def registered_tools(tmp_path: Path) -> set[str]:
    """The tool names an in-process server registers: the truth to compare with."""
    service = Service(load_settings({"data_dir": tmp_path, "llm_enabled": False}, environ={}))
    tools = anyio.run(build_server(service).list_tools)
    return {t.name for t in tools}


def stdio_target(data_dir: Path) -> list[str]:
    """The server command line, as an MCP host would spawn it."""
    return [sys.executable, "-m", "context_window", "--no-llm", "--data-dir", str(data_dir)]


def test_stdio_tools_list(inspector: tuple[list[str], dict[str, str]], tmp_path: Path) -> None:
    listed = output(run_cli(inspector, stdio_target(tmp_path / "d"), "--method", "tools/list"))
    names = {t["name"] for t in listed["tools"]}
    assert names == registered_tools(tmp_path / "truth")
    assert all(t.get("description") and t.get("inputSchema") for t in listed["tools"])


def test_stdio_schemas_are_portable(
    inspector: tuple[list[str], dict[str, str]], tmp_path: Path
) -> None:
    proc = run_cli(inspector, ["--strict", *stdio_target(tmp_path)], "--method", "tools/list")
    assert proc.returncode == 0, proc.stderr


def test_stdio_tool_calls_persist(
    inspector: tuple[list[str], dict[str, str]], tmp_path: Path
) -> None:
    target = stdio_target(tmp_path / "d")
    call = ("--method", "tools/call", "--tool-name")
    opened = output(run_cli(inspector, target, *call, "context_open", "--tool-arg", "session_id=x"))
    assert opened["isError"] is False
    assert opened["structuredContent"]["session_id"] == "x"
    note = "text=written by the inspector"
    saved = run_cli(inspector, target, *call, "context_append", "--tool-arg", "session_id=x", note)
    assert output(saved)["isError"] is False
    # A new server process on the same data dir: the note is durable.
    recalled = output(
        run_cli(inspector, target, *call, "context_recall", "--tool-arg", "session_id=x")
    )
    assert "written by the inspector" in recalled["content"][0]["text"]


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """An HTTP server that requires a bearer token."""
    with http_server(tmp_path_factory.mktemp("insp-http"), "--http-token", TOKEN) as running:
        yield running


def http_target(server: Running, token: str | None = TOKEN) -> list[str]:
    """The Inspector's arguments for the server's /mcp endpoint."""
    auth = ["--header", f"Authorization: Bearer {token}"] if token else []
    return [server.mcp_url, "--transport", "http", *auth]


def test_http_tools_list(
    inspector: tuple[list[str], dict[str, str]], token_server: Running, tmp_path: Path
) -> None:
    listed = output(run_cli(inspector, http_target(token_server), "--method", "tools/list"))
    assert {t["name"] for t in listed["tools"]} == registered_tools(tmp_path)


def test_http_tool_call(inspector: tuple[list[str], dict[str, str]], token_server: Running) -> None:
    args = ("--method", "tools/call", "--tool-name", "context_open", "--tool-arg", "session_id=x")
    opened = output(run_cli(inspector, http_target(token_server), *args))
    assert opened["isError"] is False
    assert opened["structuredContent"]["session_id"] == "x"


def test_http_tool_error_is_reported(
    inspector: tuple[list[str], dict[str, str]], token_server: Running
) -> None:
    args = (
        "--method",
        "tools/call",
        "--tool-name",
        "context_recall",
        "--tool-arg",
        "session_id=no",
    )
    proc = run_cli(inspector, http_target(token_server), *args)
    assert proc.returncode != 0
    assert "context_open" in proc.stdout


def test_http_without_token_fails(
    inspector: tuple[list[str], dict[str, str]], token_server: Running
) -> None:
    proc = run_cli(inspector, http_target(token_server, token=None), "--method", "tools/list")
    assert proc.returncode != 0
    assert '"tools"' not in proc.stdout
