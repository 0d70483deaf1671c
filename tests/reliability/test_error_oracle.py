"""doc_ingest errors are not an oracle: for a path outside the ingest roots, "missing"
and "outside" read the same, and no error names where a path really leads."""

from __future__ import annotations

from pathlib import Path

import anyio
from mcp import Client

from context_window.server.app import build_server

from .support import service_for


async def _ingest_error(c: Client, path: str) -> str:
    res = await c.call_tool("doc_ingest", {"file_path": path})
    assert res.is_error
    return "".join(getattr(b, "text", "") for b in res.content)


def test_missing_and_outside_look_the_same_and_nothing_outside_is_named(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("outside secret")
    (root / "to-secret").symlink_to(outside / "secret.txt")
    (root / "to-nothing").symlink_to(outside / "nothing.txt")
    (root / "to-dir").symlink_to(outside, target_is_directory=True)
    svc = service_for(tmp_path / "data", ingest_roots=[root])

    paths = _paths(outside)

    async def main() -> dict[str, str]:
        async with Client(build_server(svc)) as c:
            return {k: await _ingest_error(c, p) for k, p in paths.items()}

    errors = anyio.run(main)
    shapes = {msg.replace(repr(paths[k]), "<path>") for k, msg in errors.items()}
    assert len(shapes) == 1, shapes  # one answer, whatever lies behind the path
    for k, msg in errors.items():
        assert str(outside) not in msg.replace(repr(paths[k]), "")  # only the caller's own text
        assert str(Path.cwd()) not in msg  # /proc/self/cwd does not reveal the working directory
        assert "\n" not in msg.strip()


def _paths(outside: Path) -> dict[str, str]:
    return {
        "outside, exists": str(outside / "secret.txt"),
        "outside, missing": str(outside / "nothing.txt"),
        "link to an outside file": "to-secret",
        "link to nothing": "to-nothing",
        "through a linked dir": "to-dir/secret.txt",
        "missing inside": "nothing.txt",
        "cwd": "/proc/self/cwd",
        "a file through cwd": "/proc/self/cwd/pyproject.toml",
        "root": "/",
    }
