"""A read-only data dir still reads; a full disk fails cleanly and leaves nothing half-made.

Real file systems: a read-only bind mount of a data dir, and a tiny tmpfs filled to the
last byte. Both need mount (root, as in CI's container); the tests are skipped, with the
reason printed, where mounting is not allowed. The server and the CLI run as processes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import run_cli

from .support import service_for

PROBE = """
import anyio, json, sys
from pathlib import Path
from context_window.config import Settings
from context_window.errors import ContextWindowError
from context_window.service import Service
service = Service(Settings(data_dir=Path(sys.argv[1]), llm_enabled=False, audit=False))
out = {}
def attempt(name, fn):
    try:
        out[name] = ["ok", fn()]
    except ContextWindowError as exc:
        out[name] = ["error", str(exc)]
attempt("recall", lambda: [e.text for e in service.sessions.get("s").recall("alpha", 500).entries])
attempt("search", lambda: [h.chunk.text for h in service.documents.search("hello", "d", 3)])
attempt("window", lambda: [service.documents.window("d", first=0, budget=500).moved,
                           service.documents.get("d").cursor])
attempt("summary", lambda: anyio.run(lambda: service.summarize("d", None, None, 64)).cached)
attempt("append", lambda: service.sessions.get("s").append("one more").id)
attempt("open_new", lambda: service.sessions.open("fresh")[0].id)
big = "# New\\n\\n" + "words " * 20000
attempt("ingest", lambda: service.documents.ingest(text=big, doc_id="n").doc.id)
if sys.argv[2:] == ["--erase"]:  # writes that free space: only where none can be made
    attempt("forget", lambda: service.documents.forget("d").id)
    attempt("purge", lambda: service.sessions.get("s").purge().kept)
print(json.dumps(out))
"""


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True, check=False).returncode == 0


@contextmanager
def mounted(target: Path, *first: str, then: tuple[str, ...] = ()) -> Iterator[None]:
    target.mkdir(parents=True, exist_ok=True)
    if not _mount(*first, str(target)):
        pytest.skip("mount is not allowed here (needs root)")
    try:
        if then and not _mount(*then, str(target)):
            pytest.skip("remount is not allowed here")
        yield
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


def _probe(data: Path, *flags: str) -> dict[str, list[object]]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(data), *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(json.loads(proc.stdout))


def _cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, data=data)


def _seed(data: Path) -> None:
    svc = service_for(data)
    session, _ = svc.sessions.open("s")
    session.append("alpha note")
    svc.documents.ingest(text="# T\n\nhello world line", doc_id="d")


def test_a_read_only_data_dir_reads_and_refuses_writes_clearly(tmp_path: Path) -> None:
    src, ro = tmp_path / "src", tmp_path / "ro"
    _seed(src)
    before = sorted(p.relative_to(src) for p in src.rglob("*"))
    with mounted(ro, "--bind", str(src), then=("-o", "remount,bind,ro")):
        for args in (("sessions",), ("show", "s"), ("search", "alpha"), ("docs",), ("doctor",)):
            done = _cli(ro, *args)
            assert done.returncode == 0, (args, done.stdout, done.stderr)
            assert "Traceback" not in done.stderr
        out = _probe(ro, "--erase")
        purged = _cli(ro, "purge", "s")
    assert purged.returncode == 1 and "Traceback" not in purged.stderr, purged.stderr
    assert "read-only file system" in purged.stderr
    assert out["recall"] == ["ok", ["alpha note"]]
    assert out["search"][0] == "ok" and "hello world" in str(out["search"][1])
    # Paging and summaries work without writing: the cursor stays at 0, nothing cached.
    assert out["window"] == ["ok", [False, 0]], out["window"]
    assert out["summary"] == ["ok", False], out["summary"]
    for write in ("append", "open_new", "ingest", "forget", "purge"):
        assert out[write][0] == "error", out[write]
        assert "read-only" in str(out[write][1]), out[write]
        assert "Errno" not in str(out[write][1]), out[write]  # plain words, no temp names
    assert sorted(p.relative_to(src) for p in src.rglob("*")) == before


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill ``disk`` to the last byte, less about ``leave`` bytes; returns the filler file."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (65536, 4096, 512, 1):
            while True:
                try:
                    if os.write(fd, b"\0" * size) < size:
                        break
                except OSError:
                    break
        if leave:
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_fails_cleanly_and_leaves_nothing_half_made(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    with mounted(disk, "-t", "tmpfs", "-o", "size=1m", "tmpfs"):
        data = disk / "data"
        _seed(data)
        filler = fill(disk)
        before = sorted(str(p.relative_to(data)) for p in data.rglob("*"))
        out = _probe(data)
        purged = _cli(data, "purge", "s")
        after = sorted(str(p.relative_to(data)) for p in data.rglob("*"))
        assert purged.returncode == 1 and "Traceback" not in purged.stderr, purged.stderr
        assert "disk is full" in purged.stderr
        assert out["recall"] == ["ok", ["alpha note"]]
        assert out["window"] == ["ok", [False, 0]]  # pages; the cursor cannot be written
        # (an append may still fit in the slack of the journal's last page)
        for write in ("open_new", "ingest"):
            assert out[write][0] == "error", out
            assert "disk is full" in str(out[write][1]), out[write]
        assert after == before  # no half-made session or document directories
        filler.unlink()
        assert _probe(data)["append"][0] == "ok"


def test_an_ingest_that_fills_the_disk_midway_leaves_nothing(tmp_path: Path) -> None:
    """Room for source.txt but not for the chunk table and index written after it."""
    disk = tmp_path / "disk"
    with mounted(disk, "-t", "tmpfs", "-o", "size=2m", "tmpfs"):
        data = disk / "data"
        _seed(data)
        fill(disk, leave=130_000)  # the probe's text is 120,008 bytes: its copy fits
        docs = data / "documents"
        before = sorted(str(p.relative_to(docs)) for p in docs.rglob("*"))
        out = _probe(data)
        assert out["ingest"][0] == "error" and "disk is full" in str(out["ingest"][1]), out
        assert sorted(str(p.relative_to(docs)) for p in docs.rglob("*")) == before


def test_an_import_onto_a_full_disk_leaves_no_session(tmp_path: Path) -> None:
    src, disk = tmp_path / "src", tmp_path / "disk"
    svc = service_for(src)
    session, _ = svc.sessions.open("work")
    for i in range(200):
        session.append(f"note {i}: the deploy key lives in vault path secret/deploy/{i}")
    export = tmp_path / "work.jsonl"
    done = _cli(src, "export", "session", "work", "-o", str(export))
    assert done.returncode == 0, done.stderr
    with mounted(disk, "-t", "tmpfs", "-o", "size=1m", "tmpfs"):
        data = disk / "data"
        service_for(data)  # the data dir exists, with its sessions folder
        fill(disk, leave=export.stat().st_size // 2)
        done = _cli(data, "import", str(export))
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert "disk is full" in done.stderr and "Traceback" not in done.stderr
        assert list((data / "sessions").iterdir()) == []


def test_an_unwritable_data_dir_is_one_clear_line_at_start_and_in_doctor(tmp_path: Path) -> None:
    src, ro = tmp_path / "src", tmp_path / "ro"
    _seed(src)
    with mounted(ro, "--bind", str(src), then=("-o", "remount,bind,ro")):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTX_")}
        served = subprocess.run(  # stdin at EOF: the server starts, says its piece, stops
            [sys.executable, "-m", "context_window", "--no-llm", "--data-dir", str(ro)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert served.returncode == 0, served.stderr
        warnings = [line for line in served.stderr.splitlines() if " WARNING " in line]
        assert len(warnings) == 1, served.stderr
        assert str(ro) in warnings[0] and "read-only file system" in warnings[0]
        assert "--data-dir or CTX_DATA_DIR" in warnings[0]
        doctor = _cli(ro, "doctor")
        assert doctor.returncode == 0, doctor.stdout
        assert "is not writable (a read-only file system)" in doctor.stdout
        below = _cli(ro / "sub", "sessions")  # read-only commands never create it
        assert below.returncode == 2 and "does not exist" in below.stderr
        create = subprocess.run(
            [sys.executable, "-m", "context_window", "--data-dir", str(ro / "new"), "calibrate"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert create.returncode == 2
        (line,) = create.stderr.splitlines()
        assert f"cannot create data dir {ro / 'new'}: Read-only file system" in line
        assert "--data-dir or CTX_DATA_DIR chooses another" in line


def _as_an_ordinary_user() -> list[str]:
    """A command prefix under which permission bits apply: as root, root's power to
    override them (CAP_DAC_OVERRIDE) is dropped; an ordinary user needs nothing."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: permission bits cannot be made to apply")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"]


def test_a_write_refused_by_permissions_names_the_path_and_the_fix(tmp_path: Path) -> None:
    # A bind-mounted data dir owned by another uid: a real EACCES, not a stand-in.
    data = tmp_path / "data"
    (data / "sessions").mkdir(parents=True)
    (data / "sessions").chmod(0o555)
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from context_window.config import Settings\n"
        "from context_window.errors import ContextWindowError\n"
        "from context_window.service import Service\n"
        "service = Service(Settings(data_dir=Path(sys.argv[1]), llm_enabled=False))\n"
        "try:\n    service.sessions.open('notes')\nexcept ContextWindowError as exc:\n"
        "    print(exc)\n"
    )
    try:
        done = subprocess.run(
            [*_as_an_ordinary_user(), sys.executable, "-c", script, str(data)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        (data / "sessions").chmod(0o755)
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    assert f"permission denied on {data / 'sessions'}" in said, said
    assert "uid" in said and "docker run --user" in said
    assert not (data / "sessions" / "notes").exists()
