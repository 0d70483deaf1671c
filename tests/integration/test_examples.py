"""examples/: the host configs parse and start the server; the scripted session runs clean."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from helpers import http_client, http_server

from context_window.config import load_settings
from context_window.server.app import build_server
from context_window.service import Service

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CONFIGS = sorted(EXAMPLES.glob("*.json"))


def registered_tools(tmp_path: Path) -> set[str]:
    """Tool names this checkout's server registers."""
    service = Service(load_settings({"data_dir": tmp_path, "llm_enabled": False}, environ={}))
    return {t.name for t in anyio.run(build_server(service).list_tools)}


def test_there_are_host_configs() -> None:
    names = {p.name for p in CONFIGS}
    assert {"lmstudio-mcp.json", "claude_desktop_config.json"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_parses_and_starts_context_window(path: Path) -> None:
    config = json.loads(path.read_text(encoding="utf-8"))
    [(name, server)] = config["mcpServers"].items()
    assert name == "context-window"
    if "url" in server:  # Streamable HTTP: a running server's /mcp endpoint
        assert server["url"].startswith("http://127.0.0.1:3001/mcp")
        assert server["headers"]["Authorization"].startswith("Bearer ")
        return
    launched = " ".join([server["command"], *server.get("args", [])])
    assert "context-window" in launched or "context_window" in launched
    assert all(isinstance(a, str) for a in server.get("args", []))
    assert all(isinstance(v, str) for v in server.get("env", {}).values())
    for path_like in [server["command"], *server.get("args", [])]:
        if "/" in path_like or "\\" in path_like:  # paths must be absolute: the cwd is unknown
            assert path_like.startswith("/") or re.match(r"^[A-Za-z]:\\", path_like), path_like


def test_windows_config_uses_escaped_backslashes() -> None:
    raw = (EXAMPLES / "claude_desktop_config.windows.json").read_text(encoding="utf-8")
    assert "C:\\\\Users\\\\" in raw  # as written in the file: doubled
    command = json.loads(raw)["mcpServers"]["context-window"]["command"]
    assert command.startswith("C:\\Users\\") and command.endswith(".exe")


def test_config_flags_are_real_flags(tmp_path: Path) -> None:
    from context_window.cli.main import build_parser

    for path in CONFIGS:
        server = json.loads(path.read_text(encoding="utf-8"))["mcpServers"]["context-window"]
        args = server.get("args", [])
        if server.get("command", "").endswith(("context-window", "context-window.exe")):
            build_parser().parse_args(args)  # exits (fails the test) on an unknown flag


def test_docker_doc_has_stdio_and_http_lines() -> None:
    text = (EXAMPLES / "docker.md").read_text(encoding="utf-8")
    assert "docker run -i --rm -v ctx:/data context-window" in text
    assert re.search(r"-p 127\.0\.0\.1:3001:3001 .*-v ctx:/data", text)
    assert "--http --host 0.0.0.0" in text
    assert "CTX_HTTP_TOKEN" in text
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
