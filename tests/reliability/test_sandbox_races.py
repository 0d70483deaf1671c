"""Ingest sandbox: nothing outside the ingest roots is ever read, however the path is built
or swapped underneath the check. The final assertion of every test is on disk: the secret
text from outside the root appears in no file under the data dir."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from opens import watching_opens

from context_window.documents.store import DocumentStore
from context_window.errors import AccessDenied, ContextWindowError, InvalidInput, NotFound
from context_window.server.app import build_server
from context_window.tokens import TokenCounter

from .support import add, service_for

SECRET = "OUTSIDE-SECRET-4f1c"
INSIDE = "inside text that may be read"


class Layout:
    """data/, root/ (the ingest root), root2/ (a sibling) and outside/ with a secret."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.data = base / "data"
        self.root = base / "root"
        self.sibling = base / "root2"
        self.outside = base / "outside"
        for d in (self.data, self.root, self.sibling, self.outside):
            d.mkdir()
        (self.outside / "secret.txt").write_text(SECRET)
        (self.sibling / "secret.txt").write_text(SECRET)
        (self.root / "ok.txt").write_text(INSIDE)
        (self.root / "sub").mkdir()
        (self.root / "sub" / "deep.txt").write_text(INSIDE)
        self.store = DocumentStore(self.data, TokenCounter(0.27), ingest_roots=[self.root])

    def leaked(self) -> bool:
        """Whether the secret reached any file under the data dir."""
        for dirpath, _, files in os.walk(self.data):
            for name in files:
                if SECRET.encode() in (Path(dirpath) / name).read_bytes():
                    return True
        return False


@pytest.fixture
def lay(tmp_path: Path) -> Iterator[Layout]:
    layout = Layout(tmp_path)
    yield layout
    assert not layout.leaked(), "content from outside the ingest root was ingested"


def refused(lay: Layout, path: str | Path, *errors: type[Exception]) -> str:
    """Assert ingesting ``path`` fails with one of ``errors``; return the message."""
    with pytest.raises(errors or (AccessDenied, NotFound)) as info:
        lay.store.ingest(file_path=str(path))
    add("sandbox escapes refused", 1)
    return str(info.value)


def test_inside_paths_are_allowed(lay: Layout) -> None:
    (lay.root / "alias.txt").symlink_to(lay.root / "sub" / "deep.txt")
    for p in ("ok.txt", lay.root / "ok.txt", "sub/deep.txt", "sub/../ok.txt", "alias.txt"):
        doc = lay.store.ingest(file_path=str(p), doc_id="x").doc
        assert doc.chars == len(INSIDE)


@pytest.mark.parametrize(
    "path",
    [
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "{root}/../outside/secret.txt",
        "{root}/sub/../../outside/secret.txt",
        "{outside}/secret.txt",
        "../root2/secret.txt",
        "{sibling}/secret.txt",
        "{root}2/secret.txt",
        "/etc/passwd",
        "/etc/../etc/passwd",
        "//etc/passwd",
        "/proc/self/environ",
        "/proc/self/cwd/../outside/secret.txt",
    ],
)
def test_traversal_and_outside_paths(lay: Layout, path: str) -> None:
    p = path.format(root=lay.root, outside=lay.outside, sibling=lay.sibling)
    message = refused(lay, p, AccessDenied, NotFound)
    assert SECRET not in message


def test_sibling_prefix_is_not_inside(lay: Layout) -> None:
    message = refused(lay, lay.sibling / "secret.txt")
    assert "outside the ingest roots" in message


def test_symlink_escapes(lay: Layout) -> None:
    (lay.root / "file-link.txt").symlink_to(lay.outside / "secret.txt")
    (lay.root / "dir-link").symlink_to(lay.outside)
    (lay.root / "rel-link.txt").symlink_to("../outside/secret.txt")
    (lay.root / "sub" / "up").symlink_to("../..")
    (lay.root / "sibling-link").symlink_to(lay.sibling)
    for p in (
        "file-link.txt",
        "dir-link/secret.txt",
        "rel-link.txt",
        "sub/up/outside/secret.txt",
        "sibling-link/secret.txt",
        lay.root / "dir-link" / "secret.txt",
    ):
        refused(lay, p)


def test_symlink_loop_and_dangling(lay: Layout) -> None:
    (lay.root / "a").symlink_to(lay.root / "b")
    (lay.root / "b").symlink_to(lay.root / "a")
    (lay.root / "dangling").symlink_to(lay.root / "nothing-here")
    refused(lay, "a", AccessDenied, NotFound)
    refused(lay, "dangling", AccessDenied, NotFound)


def test_special_files_are_refused_without_blocking(lay: Layout) -> None:
    os.mkfifo(lay.root / "fifo")
    (lay.root / "fifo-link").symlink_to(lay.root / "fifo")
    (lay.root / "null-link").symlink_to("/dev/null")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(lay.root / "sock"))
        paths: list[str] = ["fifo", "fifo-link", "null-link", "sock", "sub", ".", "/dev/zero"]
        try:
            os.mknod(lay.root / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
            paths.append("zero")
        except (PermissionError, OSError):
            pass  # creating device nodes needs privileges; the symlinked device still runs
        for p in paths:
            errors: list[BaseException] = []

            def attempt(p: str = p, errors: list[BaseException] = errors) -> None:
                try:
                    refused(lay, p, AccessDenied, NotFound)
                except BaseException as exc:  # reported in the main thread
                    errors.append(exc)

            thread = threading.Thread(target=attempt, daemon=True)
            thread.start()
            thread.join(timeout=10)  # a FIFO opened for reading would block forever
            assert not thread.is_alive(), f"ingesting {p} blocked"
            assert not errors, f"{p}: {errors[0]!r}"


def test_bad_utf8_and_size_limits(lay: Layout) -> None:
    (lay.root / "latin1.txt").write_bytes(b"caf\xe9")
    message = refused(lay, "latin1.txt", InvalidInput)
    assert "UTF-8" in message and "byte offset 3" in message
    small = DocumentStore(lay.data, TokenCounter(0.27), ingest_roots=[lay.root], max_file_bytes=10)
    (lay.root / "big.txt").write_text("x" * 100)
    with pytest.raises(InvalidInput):
        small.ingest(file_path="big.txt")


def flipper(path: Path, make_good: Any, make_bad: Any, stop: threading.Event) -> threading.Thread:
    """A thread swapping ``path`` between a good and a bad object until ``stop``."""

    def run() -> None:
        tmp_good = path.with_name(path.name + ".good")
        tmp_bad = path.with_name(path.name + ".bad")
        while not stop.is_set():
            for make, tmp in ((make_bad, tmp_bad), (make_good, tmp_good)):
                make(tmp)
                tmp.replace(path)  # atomic: the path is always one or the other

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def race(lay: Layout, path: str, make_good: Any, make_bad: Any, tries: int) -> dict[str, int]:
    """Ingest ``path`` ``tries`` times while it flips; count outcomes, check what was read."""
    stop = threading.Event()
    make_good(lay.root / path)
    thread = flipper(lay.root / path, make_good, make_bad, stop)
    outcomes = {"ingested": 0, "refused": 0}
    try:
        for i in range(tries):
            try:
                doc = lay.store.ingest(file_path=path, doc_id=f"race{i % 4}").doc
            except ContextWindowError:
                outcomes["refused"] += 1
                continue
            text = (lay.data / "documents" / doc.id / "source.txt").read_text()
            assert text == INSIDE, f"ingested {text!r:.60}"
            outcomes["ingested"] += 1
    finally:
        stop.set()
        thread.join()
    add("sandbox race attempts", tries)
    return outcomes


def _good_file(p: Path) -> None:
    p.write_text(INSIDE)


def test_file_flipping_to_a_symlink(lay: Layout) -> None:
    def bad(p: Path) -> None:
        p.symlink_to(lay.outside / "secret.txt")

    out = race(lay, "flip.txt", _good_file, bad, 300)
    assert out["ingested"] and out["refused"], out  # both sides of the flip were hit


def test_file_flipping_to_a_fifo(lay: Layout) -> None:
    out = race(lay, "flip.txt", _good_file, lambda p: os.mkfifo(p), 200)
    assert out["ingested"] + out["refused"] == 200


def test_directory_flipping_to_a_symlink(lay: Layout) -> None:
    (lay.outside / "flip.txt").write_text(SECRET)

    def good_dir(p: Path) -> None:
        p.mkdir()
        (p / "flip.txt").write_text(INSIDE)

    def bad_dir(p: Path) -> None:
        p.symlink_to(lay.outside)

    stop = threading.Event()
    good_dir(lay.root / "d")

    def run() -> None:  # directories cannot be os.replace'd over symlinks: rename pairs
        while not stop.is_set():
            (lay.root / "d").rename(lay.root / "d.old")
            bad_dir(lay.root / "d")
            time.sleep(0.0002)
            (lay.root / "d").unlink()
            (lay.root / "d.old").rename(lay.root / "d")
            time.sleep(0.0002)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ingested = refusals = 0
    try:
        for i in range(300):
            try:
                doc = lay.store.ingest(file_path="d/flip.txt", doc_id=f"dir{i % 4}").doc
            except ContextWindowError:
                refusals += 1
                continue
            assert (lay.data / "documents" / doc.id / "source.txt").read_text() == INSIDE
            ingested += 1
    finally:
        stop.set()
        thread.join()
    add("sandbox race attempts", 300)
    assert ingested and refusals, (ingested, refusals)  # both sides of the flip were hit


def test_swap_between_check_and_open(lay: Layout) -> None:
    """Deterministic version of the race: the path becomes a symlink at the worst moment,
    after every check and just before the sandbox opens it."""
    target = lay.root / "swap.txt"
    target.write_text(INSIDE)
    swapped: list[bool] = []

    def swap(path: str) -> None:
        if Path(path).name == target.name and not swapped:
            swapped.append(True)
            target.unlink()
            target.symlink_to(lay.outside / "secret.txt")

    with watching_opens(swap):
        refused(lay, "swap.txt")
    assert swapped, "the sandbox never opened swap.txt"


def test_parent_directory_swap_between_check_and_open(lay: Layout) -> None:
    """The last component is a plain file; its parent directory becomes a symlink after
    the checks, just before the sandbox opens it."""
    (lay.root / "dd").mkdir()
    target = lay.root / "dd" / "f.txt"
    target.write_text(INSIDE)
    (lay.outside / "f.txt").write_text(SECRET)
    swapped: list[bool] = []

    def swap(path: str) -> None:
        if Path(path).name == "dd" and not swapped:
            swapped.append(True)
            (lay.root / "dd").rename(lay.base / "dd-away")
            (lay.root / "dd").symlink_to(lay.outside)

    with watching_opens(swap):
        refused(lay, "dd/f.txt")
    assert swapped, "the sandbox never opened the directory dd"


def test_sandbox_errors_through_the_tool(lay: Layout) -> None:
    (lay.root / "link.txt").symlink_to(lay.outside / "secret.txt")
    os.mkfifo(lay.root / "fifo")

    async def go() -> None:
        service = service_for(lay.data, ingest_roots=[lay.root])
        async with Client(build_server(service)) as client:
            for p in ("link.txt", "fifo", "../outside/secret.txt", str(lay.sibling / "secret.txt")):
                with anyio.fail_after(10):
                    r = await client.call_tool("doc_ingest", {"file_path": p})
                text = r.content[0].text  # type: ignore[union-attr]
                assert r.is_error and "internal error" not in text, text
                assert SECRET not in text
            ok = await client.call_tool("doc_ingest", {"file_path": "ok.txt"})
            assert not ok.is_error
        await service.aclose()

    anyio.run(go)
