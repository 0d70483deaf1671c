"""examples/: the host configs parse and start the server; the scripted session runs clean."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest
from helpers import http_client, http_server

from context_window.config import load_settings
from context_window.server.app import build_server
from context_window.service import Service

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CONFIGS = [*sorted(EXAMPLES.glob("*.json")), EXAMPLES / ".vscode" / "mcp.json"]


def entry(path: Path) -> dict[str, Any]:
    """The context-window entry of a host config (VS Code says "servers", others
    "mcpServers")."""
    config = json.loads(path.read_text(encoding="utf-8"))
    [(name, server)] = (config.get("mcpServers") or config["servers"]).items()
    assert name == "context-window"
    return dict(server)


def registered_tools(tmp_path: Path) -> set[str]:
    """Tool names this checkout's server registers."""
    service = Service(load_settings({"data_dir": tmp_path, "llm_enabled": False}, environ={}))
    return {t.name for t in anyio.run(build_server(service).list_tools)}


def test_there_are_host_configs() -> None:
    names = {str(p.relative_to(EXAMPLES)) for p in CONFIGS}
    assert {
        "lmstudio-mcp.json",
        "claude_desktop_config.json",
        ".vscode/mcp.json",
        "cursor-mcp.json",
        "docker-mcp.json",
    } <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_parses_and_names_context_window(path: Path) -> None:
    server = entry(path)
    if "url" in server:  # Streamable HTTP: a running server's /mcp endpoint
        assert server["url"].startswith("http://127.0.0.1:3001/mcp")
        assert server["headers"]["Authorization"].startswith("Bearer ")
        return
    launched = " ".join([server["command"], *server.get("args", [])])
    assert "context-window" in launched or "context_window" in launched
    assert all(isinstance(a, str) for a in server.get("args", []))
    assert all(isinstance(v, str) for v in server.get("env", {}).values())
    if server["command"] == "docker":
        return  # its arguments are docker's (see test_config_starts_the_server)
    for path_like in [server["command"], *server.get("args", [])]:
        if "/" in path_like or "\\" in path_like:  # paths must be absolute: the cwd is unknown
            absolute = path_like.startswith(("/", "${workspaceFolder}/"))  # VS Code fills it in
            assert absolute or re.match(r"^[A-Za-z]:\\", path_like), path_like


def as_a_host_runs_it(server: dict[str, Any], tmp: Path) -> tuple[list[str], dict[str, str]]:
    """The command line and environment a config gives, as its host would start it on a
    new machine: only the command is replaced by the installed executable. The
    environment is the config's with PATH and an empty HOME (no CTX_* of this machine);
    ``${workspaceFolder}`` is a fresh folder, as VS Code fills it in. A docker entry
    runs as the image's entry point (no container engine is assumed here)."""
    command, args = server["command"], list(server.get("args", []))
    home = tmp / "home"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(home), **server.get("env", {})}
    if command == "docker":
        assert args[:2] == ["run", "-i"] and "--rm" in args and "-t" not in args
        image = args.index("context-window")
        volumes = [args[i + 1] for i, a in enumerate(args[:image]) if a == "-v"]
        assert any(v.endswith(":/data") for v in volumes), volumes  # the image's CTX_DATA_DIR
        command, args = "context-window", args[image + 1 :]
        env["CTX_DATA_DIR"] = str(tmp / "volume")
    assert Path(command).name == "context-window", command
    workspace = tmp / "workspace"
    workspace.mkdir()
    args = [a.replace("${workspaceFolder}", str(workspace)) for a in args]
    return [str(Path(sys.executable).with_name("context-window")), *args], env


STARTABLE = [p for p in CONFIGS if "command" in entry(p) and "\\" not in entry(p)["command"]]


@pytest.mark.parametrize("path", STARTABLE, ids=lambda p: p.name)
def test_config_starts_as_given_and_lists_the_tools(path: Path, tmp_path: Path) -> None:
    # From cwd / with an empty HOME: the ingest roots the example names (someone else's
    # folders) do not exist here, and the server must start all the same.
    command, env = as_a_host_runs_it(entry(path), tmp_path)

    async def listed() -> set[str]:
        params = mcp.StdioServerParameters(command=command[0], args=command[1:], env=env, cwd="/")
        with anyio.fail_after(60):
            async with mcp.Client(params) as client:
                return {t.name for t in (await client.list_tools()).tools}

    assert anyio.run(listed) == registered_tools(tmp_path / "truth")
    # Started again with stdin closed at once: it says once which root is missing.
    done = subprocess.run(
        command, input="", env=env, cwd="/", capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    for root in ingest_roots(command):
        said = done.stderr.count(f"ingest root {root} does not exist on this machine")
        assert said == (0 if Path(root).is_dir() else 1), done.stderr


def ingest_roots(command: list[str]) -> list[str]:
    """The ``--ingest-root`` values of a command line."""
    return [value for flag, value in itertools.pairwise(command) if flag == "--ingest-root"]


def test_windows_config_uses_escaped_backslashes() -> None:
    raw = (EXAMPLES / "claude_desktop_config.windows.json").read_text(encoding="utf-8")
    assert "C:\\\\Users\\\\" in raw  # as written in the file: doubled
    command = json.loads(raw)["mcpServers"]["context-window"]["command"]
    assert command.startswith("C:\\Users\\") and command.endswith(".exe")


def test_config_flags_are_real_flags(tmp_path: Path) -> None:
    from context_window.cli.main import build_parser

    for path in CONFIGS:
        server = entry(path)
        args = server.get("args", [])
        if server.get("command", "").endswith(("context-window", "context-window.exe")):
            build_parser().parse_args(args)  # exits (fails the test) on an unknown flag


def test_docker_doc_has_stdio_and_http_lines() -> None:
    text = (EXAMPLES / "docker.md").read_text(encoding="utf-8")
    assert "docker run -i --rm -v ctx:/data context-window" in text
    assert re.search(r"-p 127\.0\.0\.1:3001:3001 .*-v ctx:/data", text)
    assert "--http --host 0.0.0.0" in text
    assert "CTX_HTTP_TOKEN" in text
    # Podman's default OCI format drops HEALTHCHECK: every build line names Docker's format.
    for doc in (text, (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")):
        assert "docker build -t context-window ." in doc
        assert "podman build --format docker -t context-window ." in doc
    blocks = re.findall(r"```json\n(.*?)```", text, flags=re.S)
    assert blocks
    for block in blocks:
        json.loads(block)


def test_scripted_session(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "scripted_session.py")],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,  # like a host: the working directory is not the repository
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    out = proc.stdout
    assert out.rstrip().endswith("OK")
    for tool in ("context_open", "context_append", "context_recall"):
        assert f"> {tool} " in out
    assert "< Created session 'demo'" in out
    if {"doc_ingest", "doc_window"} <= registered_tools(tmp_path / "truth"):
        assert "> doc_ingest " in out
        assert out.count("> doc_window ") >= 2  # the cursor moved at least once
        assert "paged the whole document" in out
    else:
        assert "documents skipped" in out
    assert "serving on stdio" in proc.stderr  # the server's log reaches stderr, not stdout


@pytest.mark.anyio
async def test_http_config_connects(tmp_path: Path) -> None:
    server = json.loads((EXAMPLES / "lmstudio-mcp-http.json").read_text(encoding="utf-8"))
    entry = server["mcpServers"]["context-window"]
    with http_server(tmp_path, "--http-token", "tok-from-config") as running:
        url = entry["url"].replace("127.0.0.1:3001", running.base.removeprefix("http://"))
        async with http_client(url, "tok-from-config") as client:
            assert "context_open" in {t.name for t in (await client.list_tools()).tools}
