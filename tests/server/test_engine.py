"""The engine (the Service) is built beside the handshake, not before it: importing the
server loads none of the stores, numpy or the index, and tools/list never waits for
them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import mcp
import pytest

from context_window.config import Settings
from context_window.server import build_server
from context_window.server.engine import Engine

HEAVY = (
    "numpy",
    "filelock",
    "context_window.service",
    "context_window.sessions.store",
    "context_window.documents.store",
    "context_window.retrieval.bm25",
    "context_window.llm.client",
)

# A process that imports the server as ``context-window`` does, serves in memory, and
# prints which heavy modules were loaded after each step.
PROBE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import anyio, mcp
    from context_window.cli.main import main
    from context_window.config import Settings
    from context_window.server import build_server
    from context_window.server.engine import Engine

    HEAVY = {heavy!r}

    def loaded():
        return [m for m in HEAVY if m in sys.modules]

    async def probe():
        steps = {{"imported": loaded()}}
        engine = Engine(Settings(data_dir=Path(sys.argv[1]), llm_enabled=False))
        app = build_server(engine)
        steps["built_server"] = loaded()
        async with mcp.Client(app) as client:
            await client.list_tools()
            with anyio.fail_after(30):  # it warms up with no call
                while engine.built is None:
                    await anyio.sleep(0.01)
            steps["warmed"] = loaded()
            await client.call_tool("context_open", {{"session_id": "s"}})
        print(json.dumps(steps))

    anyio.run(probe)
    """
)


def test_importing_the_server_loads_no_engine_which_warms_up_as_it_serves(
    tmp_path: Path,
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    steps = json.loads(out.stdout)
    assert steps["imported"] == []
    assert steps["built_server"] == []
    assert {"numpy", "context_window.service", "context_window.sessions.store"} <= set(
        steps["warmed"]
    )
    assert (tmp_path / "data" / "sessions" / "s").is_dir()  # the call did its work


@pytest.mark.anyio
async def test_tools_list_is_answered_while_the_engine_cannot_be_built(tmp_path: Path) -> None:
    """The build is held (its lock taken): the handshake and tools/list still answer, a
    call waits for the build, and goes through once it is let go."""
    engine = Engine(Settings(data_dir=tmp_path, llm_enabled=False))
    engine._lock.acquire()
    try:
        async with mcp.Client(build_server(engine)) as client:
            with anyio.fail_after(10):
                names = {t.name for t in (await client.list_tools()).tools}
            assert {"context_open", "doc_search", "context_guide"} <= names
            opened: list[mcp.types.CallToolResult] = []

            async def call() -> None:
                opened.append(await client.call_tool("context_open", {"session_id": "s"}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await anyio.sleep(0.3)
                assert opened == [] and engine.built is None  # waiting for the build
                engine._lock.release()
            assert not opened[0].is_error
    finally:
        if engine._lock.locked():
            engine._lock.release()
    assert engine.built is not None


@pytest.mark.anyio
async def test_concurrent_first_calls_build_one_service(tmp_path: Path) -> None:
    engine = Engine(Settings(data_dir=tmp_path, llm_enabled=False))
    built = []

    async def call() -> None:
        built.append(await engine.ready())

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(call)
    assert len(built) == 8 and all(s is built[0] for s in built)
    assert engine.built is built[0]


@pytest.mark.anyio
async def test_a_stdio_server_answers_first_calls_that_race_its_engine(tmp_path: Path) -> None:
    """Over real stdio: tools/list, then two sessions written by concurrent first calls."""
    args = ["-m", "context_window", "--no-llm", "--data-dir", str(tmp_path / "data")]
    async with mcp.Client(mcp.StdioServerParameters(command=sys.executable, args=args)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"context_open", "doc_search", "context_guide"} <= names
        async with anyio.create_task_group() as tg:
            for sid in ("a", "b"):
                tg.start_soon(client.call_tool, "context_open", {"session_id": sid})
        result = await client.call_tool("context_append", {"session_id": "a", "text": "x y"})
        assert not result.is_error
    assert sorted(p.name for p in (tmp_path / "data" / "sessions").iterdir()) == ["a", "b"]


def test_a_service_given_built_is_used_as_it_is(tmp_path: Path) -> None:
    """Tests hand build_server a Service: it is used as it is, never built again."""
    from context_window.service import Service

    service = Service(Settings(data_dir=tmp_path, llm_enabled=False))

    async def main() -> str:
        async with mcp.Client(build_server(service)) as client:
            result = await client.call_tool("context_guide", {})
            return str(result.content[0].text)  # type: ignore[union-attr]

    assert str(tmp_path) in anyio.run(main)
