"""The Dockerfile: its key lines, and the command it runs, run directly as the image would.

No Docker engine is needed: the image's environment is read from the Dockerfile
and applied to a local run of the same entry point. When an engine answers
``docker info``, the image is also built.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx
import mcp
import pytest
from helpers import free_port, http_server, text_of

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def instructions(stage: str = "final") -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile's final stage, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text(encoding="utf-8"))
    lines = [
        ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")
    ]
    parsed = [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines]
    starts = [i for i, (op, _) in enumerate(parsed) if op == "FROM"]
    return parsed[starts[-1] :] if stage == "final" else parsed


def image_env() -> dict[str, str]:
    """The ENV values the final image sets."""
    env: dict[str, str] = {}
    for op, args in instructions():
        if op == "ENV":
            for key, value in re.findall(r'(\w+)=("[^"]*"|\S+)', args):
                env[key] = os.path.expandvars(value.strip('"'))  # as the builder expands $PATH
    return env


def entrypoint() -> list[str]:
    """The final image's ENTRYPOINT, exec form."""
    [args] = [a for op, a in instructions() if op == "ENTRYPOINT"]
    value = json.loads(args)
    assert isinstance(value, list)
    return value


def test_key_lines() -> None:
    final = instructions()
    ops = {op for op, _ in final}
    assert {"FROM", "ENV", "USER", "VOLUME", "EXPOSE", "ENTRYPOINT"} <= ops
    assert ("VOLUME", "/data") in final
    assert ("EXPOSE", "3001") in final
    env = image_env()
    assert env["CTX_DATA_DIR"] == "/data"
    assert env["CTX_LLM_BASE_URL"] == "http://host.docker.internal:1234/v1"
    assert "CTX_TRANSPORT" not in env  # stdio unless --http is given
    assert final[0][1].startswith("python:3.11-slim")


def test_plain_syntax_every_builder_reads() -> None:
    """No "# syntax=" frontend (BuildKit fetches it from a registry) and no BuildKit-only
    flags, so the classic builder, offline BuildKit and podman all build the image."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert not re.search(r"(?im)^#\s*syntax\s*=", text)
    for op, args in instructions(stage="all"):
        if op == "RUN":
            assert not args.startswith("--"), args  # --mount, --network, --security
        if op == "COPY":
            assert all(
                flag.startswith(("--from=", "--chown="))
                for flag in args.split()[:-2]
                if flag.startswith("--")
            ), args


def test_runs_as_non_root() -> None:
    [user] = [a for op, a in instructions() if op == "USER"]
    name = user.split(":")[0]
    assert name not in ("root", "0")
    # One USER line, after the RUN that creates the user: every later RUN (the word
    # scan's compilation), the entry point and the health check run as that user.
    final = instructions()
    at = final.index(("USER", user))
    assert any(op == "RUN" and "useradd" in args for op, args in final[:at])
    assert not any(op == "RUN" and "useradd" in args for op, args in final[at:])


def test_entrypoint_is_the_console_script_under_an_init() -> None:
    """Process 1 is dumb-init, installed in the venv, which passes signals to the server."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint() == ["dumb-init", "--single-child", "--", "context-window"]
    [install] = [a for op, a in instructions("all") if op == "RUN" and "pip install" in a]
    assert "dumb-init" in install
    assert scripts["context-window"] == "context_window:main"
    assert not [a for op, a in instructions() if op == "CMD"]  # stdio by default


def test_the_license_file_the_metadata_names_exists() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    for name in project["license-files"]:
        assert (ROOT / name).is_file()
        assert (ROOT / name).read_text().startswith("MIT License")


def test_dockerignore_keeps_the_build_context_small() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in lines  # ignore everything, then allow what the build copies
    copies = [a.split()[:-1] for op, a in instructions("all") if op == "COPY"]
    sources = {src for args in copies if not args[0].startswith("--") for src in args}
    assert sources == {"pyproject.toml", "README.md", "LICENSE", "context_window"}
    for src in sources:
        assert f"!{src}" in lines or f"!{src}/" in lines


def console_script() -> list[str]:
    """The installed ``context-window`` script next to this Python, else ``python -m``."""
    script = Path(sys.executable).with_name("context-window")
    return [str(script)] if script.exists() else [sys.executable, "-m", "context_window"]


def container_env(data_dir: Path) -> dict[str, str]:
    """The image's environment, with /data moved to a temporary directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTX_")}
    env.update(image_env())
    env["CTX_DATA_DIR"] = str(data_dir)
    return env


def test_image_command_serves_http(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with http_server(tmp_path, command=console_script(), env=container_env(data)) as running:
        health = httpx.get(f"{running.base}/health").json()
        assert health["status"] == "ok"
        log = running.log()
    assert f"data dir {data}" in log
    assert "host.docker.internal" in log  # the image's LLM URL was used
    assert running.stdout.read_bytes() == b""


@pytest.mark.anyio
async def test_image_command_serves_stdio(tmp_path: Path) -> None:
    data = tmp_path / "data"
    [command, *args] = console_script()
    env = {k: v for k, v in container_env(data).items() if k.startswith("CTX_")}
    params = mcp.StdioServerParameters(command=command, args=args, env=env)
    async with mcp.Client(params) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "context_open" in names
        opened = await client.call_tool("context_open", {"session_id": "docker"})
        assert not opened.is_error
    assert (data / "sessions" / "docker").is_dir()


def _engine() -> str | None:
    """Why the engine tests cannot run here, or None when they can: an engine must
    answer and hold the base image (they build offline, as the image promises)."""
    if not shutil.which("docker"):
        return "no Docker engine"
    try:
        if subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode:
            return "no Docker engine"
        base = subprocess.run(
            ["docker", "image", "inspect", "python:3.11-slim"], capture_output=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return "no Docker engine"
    return None if base.returncode == 0 else "the engine has no local python:3.11-slim"


def docker_example(tag: str, volume: str) -> list[str]:
    """examples/docker-mcp.json's command, verbatim but for the image tag and volume."""
    config = json.loads((ROOT / "examples" / "docker-mcp.json").read_text(encoding="utf-8"))
    server = config["mcpServers"]["context-window"]
    args = [a.replace("context-window:/data", f"{volume}:/data") for a in server["args"]]
    return [server["command"], *[tag if a == "context-window" else a for a in args]]


async def remember_and_recall(command: list[str]) -> str:
    """A note saved through one container is recalled through the next (one volume)."""
    params = mcp.StdioServerParameters(command=command[0], args=command[1:])
    with anyio.fail_after(120):
        async with mcp.Client(params) as client:
            assert len((await client.list_tools()).tools) == 16
            assert not (await client.call_tool("context_open", {"session_id": "docker"})).is_error
            note = {"session_id": "docker", "text": "The build cache lives in /var/tmp."}
            assert not (await client.call_tool("context_append", note)).is_error
        async with mcp.Client(params) as client:
            query = {"session_id": "docker", "query": "where is the build cache"}
            recalled = await client.call_tool("context_recall", query)
    assert not recalled.is_error
    return text_of(recalled)


def stop_stdio_container(tag: str, wait: float) -> tuple[float, str]:
    """Seconds ``docker stop`` took on a stdio container ``wait`` s after its start, and
    the container's exit status."""
    run = ["docker", "run", "-d", "-i", "--network", "none", tag, "--no-llm"]
    container = subprocess.run(run, capture_output=True, text=True, check=True).stdout.strip()
    try:
        time.sleep(wait)
        started = time.monotonic()
        subprocess.run(["docker", "stop", container], capture_output=True, check=True, timeout=30)
        seconds = time.monotonic() - started
        inspect = ["docker", "inspect", "--format", "{{.State.ExitCode}}", container]
        status = subprocess.run(inspect, capture_output=True, text=True).stdout.strip()
        return seconds, status
    finally:  # -v: the image's VOLUME gave it an anonymous volume
        subprocess.run(["docker", "rm", "--force", "-v", container], capture_output=True)


@pytest.mark.skipif(_engine() is not None, reason=str(_engine()))
@pytest.mark.parametrize("buildkit", ["0", "1"], ids=["classic", "buildkit"])
def test_the_engine_builds_it_and_stops_it_at_once(buildkit: str) -> None:
    """The classic builder and BuildKit build the Dockerfile with the base image local
    (host network: the package index is all the build reaches); ``docker stop`` ends a
    stdio container at once with status 0, while it starts and once it serves, and an
    HTTP container turns healthy. examples/docker-mcp.json's command serves MCP, and a
    named volume keeps a session across containers (the non-root user writes /data)."""
    tag = f"context-window:test-{buildkit}"
    env = {**os.environ, "DOCKER_BUILDKIT": buildkit}
    built = subprocess.run(
        ["docker", "build", "--pull=false", "--network", "host", "-t", tag, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    if buildkit == "1" and "buildx" in built.stderr and built.returncode != 0:
        pytest.skip(f"BuildKit needs the buildx plugin here: {built.stderr.strip()[-200:]}")
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    try:
        user = subprocess.run(
            ["docker", "run", "--rm", "--entrypoint", "id", tag, "-u"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert user.stdout.strip() == "10001"
        volume = f"context-window-test-{buildkit}"
        try:
            recalled = anyio.run(remember_and_recall, docker_example(tag, volume))
        finally:
            subprocess.run(["docker", "volume", "rm", "--force", volume], capture_output=True)
        assert "/var/tmp" in recalled
        # At once (the interpreter may not have run any of our code yet: the init passes
        # the signal on, and the server dies of it, 143, or stops, 0), while it imports
        # (0.3 s in) and once it serves.
        for wait in (0, 0, 0.3, 2):
            seconds, status = stop_stdio_container(tag, wait)
            assert seconds < 3, wait  # not the 10 s docker waits before it kills
            assert status in (("0", "143") if wait == 0 else ("0",)), wait
        port = str(free_port())
        run = ["docker", "run", "-d", "--network", "host", "--health-interval", "1s", tag]
        http = subprocess.run(
            [*run, "--no-llm", "--http", "--port", port],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        try:
            health = ""
            deadline = time.monotonic() + 60
            while health != "healthy" and time.monotonic() < deadline:
                time.sleep(1)
                health = subprocess.run(
                    ["docker", "inspect", "--format", "{{.State.Health.Status}}", http],
                    capture_output=True,
                    text=True,
                ).stdout.strip()
            assert health == "healthy"
        finally:
            subprocess.run(["docker", "rm", "--force", "-v", http], capture_output=True)
    finally:
        subprocess.run(["docker", "rmi", "--force", tag], capture_output=True)


BUILDAH = ["buildah", "--storage-driver", "vfs"]  # vfs: works inside a container too
BASE = "docker.io/library/python:3.11-slim"


def _local_base() -> str | None:
    """Why the image cannot be built with buildah here, or None when it can."""
    if not shutil.which("buildah"):
        return "no buildah (bash .ci/image.sh installs it)"
    found = subprocess.run([*BUILDAH, "images", "-q", BASE], capture_output=True, text=True)
    if found.returncode != 0 or not found.stdout.strip():
        return f"no local {BASE} (bash .ci/image.sh makes one; builds never pull)"
    return None


@pytest.mark.skipif(_local_base() is not None, reason=str(_local_base()))
def test_the_image_builds_offline_and_serves_mcp_over_stdio() -> None:
    """buildah (no daemon, no BuildKit) builds the Dockerfile as written, never pulling:
    the package index is its only network. The image runs as uid 10001, declares its
    HEALTHCHECK and registry label, and its entry point answers an MCP client."""
    tag = "localhost/context-window:test"
    build = [*BUILDAH, "bud", "--format", "docker", "--isolation", "chroot", "--pull=never"]
    built = subprocess.run(
        [*build, "-t", tag, str(ROOT)], capture_output=True, text=True, timeout=900
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    inspected = subprocess.run(
        [*BUILDAH, "inspect", "--type", "image", tag], capture_output=True, text=True, check=True
    )
    config = json.loads(inspected.stdout)["Docker"]["config"]
    assert config["User"] == "10001:10001" and config["Entrypoint"] == entrypoint()
    assert config["Healthcheck"]["Test"] == ["CMD", "context-window", "health"]
    assert config["Labels"]["io.modelcontextprotocol.server.name"].startswith("io.github.")
    container = subprocess.run(
        [*BUILDAH, "from", tag], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        run = [*BUILDAH, "run", "--isolation", "chroot", container, "--"]
        params = mcp.StdioServerParameters(
            command=run[0], args=[*run[1:], "context-window", "--no-llm"]
        )

        async def session() -> tuple[int, bool]:
            with anyio.fail_after(120):
                async with mcp.Client(params) as client:
                    tools = (await client.list_tools()).tools
                    opened = await client.call_tool("context_open", {"session_id": "image"})
                    return len(tools), opened.is_error

        assert anyio.run(session) == (16, False)
        health = subprocess.run([*run, "context-window", "health"], capture_output=True, text=True)
        assert health.returncode == 0 and "nothing to probe" in health.stdout
        sizes = subprocess.run(
            [*run, "python", "-c", PACKAGES], capture_output=True, text=True, check=True
        ).stdout.split()
        assert "pip" not in sizes and "numpy" in sizes  # the venv holds what runs, no pip
        assert "dumb-init" in sizes  # the entry point's process 1
        # The word scan was compiled into the image: using it compiles nothing again.
        scan = subprocess.run(
            [*run, "python", "-c", SCAN_CACHE], capture_output=True, text=True, check=True
        )
        before, after = scan.stdout.strip().splitlines()
        assert ".nbi" in before and after == before
    finally:
        subprocess.run([*BUILDAH, "rm", container], capture_output=True)
        subprocess.run([*BUILDAH, "rmi", "--force", tag], capture_output=True)


SCAN_CACHE = """
import os
from pathlib import Path
cache = Path.home() / ".cache" / "context-window" / "numba"
def files():
    return sorted(f"{p.name}:{p.stat().st_mtime_ns}" for p in cache.rglob("*") if p.is_file())
print(*files())
from context_window.cli.main import tune_process
tune_process()  # what the server's entry point does first
from context_window.retrieval import wordscan
assert wordscan.available() and os.environ["NUMBA_CACHE_DIR"] == str(cache)
print(*files())
"""
PACKAGES = "import importlib.metadata as m; print(*sorted(d.name for d in m.distributions()))"
