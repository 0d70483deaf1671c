"""Helpers shared by the reliability suite: settings, services, byte snapshots of a data
dir, writer subprocesses, and the figures printed at the end of a run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from helpers import free_port

from context_window.config import Settings, load_settings
from context_window.service import Service

HERE = Path(__file__).parent
WRITER = HERE / "child_writer.py"
FIGURES: dict[str, Any] = {}


class FixedClock:
    """A clock the test moves by hand (``clock.now += DAY``)."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def settings_for(data_dir: Path, **changes: Any) -> Settings:
    """Settings for a test instance: no LLM, no audit lines, nothing from the environment."""
    flags: dict[str, Any] = {"data_dir": data_dir, "llm_enabled": False, "audit": False}
    flags.update(changes)
    return load_settings(flags, environ={})


def service_for(data_dir: Path, **changes: Any) -> Service:
    """A fresh Service on ``data_dir`` (a "restart" when the dir already has state)."""
    return Service(settings_for(data_dir, **changes))


def snapshot(root: Path) -> dict[str, Any]:
    """Every path under ``root`` with its bytes (files), target (symlinks) or None (dirs)."""
    out: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("link", str(path.readlink()))
            elif path.is_dir():
                out[rel] = None
            else:
                out[rel] = path.read_bytes()
    return out


def writer(*args: str, stdin: bool = False) -> subprocess.Popen[bytes]:
    """Start child_writer.py with ``args``; stdout is a pipe of acknowledgements."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, str(WRITER), *args],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )


def acked_lines(raw: bytes) -> list[str]:
    """Complete acknowledgement lines (a line cut by the kill was never acknowledged)."""
    text = raw.decode("utf-8", errors="replace")
    lines = text.split("\n")
    return [ln for ln in lines[:-1] if ln]


def record(name: str, value: Any) -> None:
    """Remember a figure for the summary printed at the end of the run."""
    FIGURES[name] = value


def add(name: str, value: int) -> None:
    """Add to a counted figure."""
    FIGURES[name] = FIGURES.get(name, 0) + value


def kill_at_random(args: list[str], rng: random.Random, max_delay: float) -> list[str]:
    """Run a writer, SIGKILL it at a random moment, return its acknowledged lines."""
    proc = writer(*args)
    assert proc.stdout is not None
    early = rng.random() < 0.1  # sometimes kill during start-up and replay
    if early:
        time.sleep(rng.uniform(0, 0.3))
    else:
        first = proc.stdout.readline()
        assert first == b"ready\n", first + (proc.stderr.read() if proc.stderr else b"")
        time.sleep(rng.uniform(0, max_delay))
    proc.send_signal(signal.SIGKILL)
    rest = proc.stdout.read()
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else b""
    if proc.stderr:
        proc.stderr.close()
    proc.stdout.close()
    lines = acked_lines(rest)
    return [ln for ln in lines if ln != "ready"]


def unreadable_lines(path: Path) -> list[bytes]:
    """Lines of a JSONL file that do not parse as a JSON object."""
    bad = []
    for line in path.read_bytes().split(b"\n"):
        if not line.strip():
            continue
        try:
            ok = isinstance(json.loads(line), dict)
        except ValueError:
            ok = False
        if not ok:
            bad.append(line)
    return bad


# A real HTTP server process, for the tests that attack or stall one.


class Server:
    """A server subprocess, its data dir and base URL."""

    def __init__(self, data: Path, token: str | None, *extra: str) -> None:
        self.data = data
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(timeout=30)  # one client: creating one costs ~50 ms
        args = [sys.executable, "-m", "context_window", "--http", "--port", str(self.port)]
        args += ["--data-dir", str(data), "--no-llm"]
        if token:
            args += ["--http-token", token]
        args += extra
        # The log goes to a file: an audit line per call would fill a pipe nobody drains
        # and stall the server.
        self.log = data.parent / f"server-{self.port}.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_tail()
            try:
                if self.http.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError("server did not start")

    def log_tail(self, size: int = 4000) -> str:
        """The end of the server's stderr log."""
        return self.log.read_bytes()[-size:].decode("utf-8", "replace")

    def alive(self) -> bool:
        return self.http.get(self.url + "/health").status_code == 200

    def stop(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
