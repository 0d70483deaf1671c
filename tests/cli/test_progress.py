"""Progress of long commands: a bar on a terminal (a real pty), plain lines elsewhere,
silence for quick work."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import time
from pathlib import Path

from helpers import server_command

from context_window.cli.progress import DELAY, Meter


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_quick_work_shows_nothing_and_slow_work_a_line_per_tenth() -> None:
    out, clock = io.StringIO(), Clock()
    with Meter("ingest big.log", out, tty=False, clock=clock) as meter:
        meter(0.3, "chunking")  # within DELAY: quiet
        clock.now += DELAY
        for step in range(0, 101, 5):
            meter(step / 100, f"indexed {step}%")
    lines = out.getvalue().splitlines()
    assert lines[0] == "ingest big.log: 0% indexed 0%"
    assert lines[-1] == "ingest big.log: 100% indexed 100%"
    assert len(lines) == 11 and "\r" not in out.getvalue()  # one per tenth, no redraws


def test_a_terminal_gets_one_line_redrawn_in_place() -> None:
    out, clock = io.StringIO(), Clock()
    with Meter("export doc d", out, tty=True, clock=clock) as meter:
        clock.now += DELAY
        meter(0.5, "500 of 1,000 chunks")
        meter(0.6, "too soon: not drawn")
        clock.now += 0.2
        meter(1.0, "1,000 chunks")
    text = out.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and "too soon" not in text
    assert "[############------------]  50% 500 of 1,000 chunks" in text
    assert "[########################] 100% 1,000 chunks" in text


def test_quick_ingest_on_a_real_terminal_stays_quiet(tmp_path: Path) -> None:
    # A real pty on stderr: the command sees a terminal, a quick ingest draws nothing
    # (the bar itself is drawn by the Meter tested above with a clock moved by hand),
    # and the result goes to stdout, apart.
    log = tmp_path / "small.log"
    log.write_text("2026-12-03 10:00:00 INFO worker-7 processed batch 123456 in 42 ms\n" * 200)
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTX_")}
    proc = subprocess.Popen(
        server_command("--data-dir", str(tmp_path / "data"), "ingest", str(log)),
        stdout=subprocess.PIPE,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if select.select([leader], [], [], 0.2)[0]:
            try:
                seen += os.read(leader, 65536)
            except OSError:
                break
    out, _ = proc.communicate(timeout=30)
    os.close(leader)
    assert proc.returncode == 0, seen.decode(errors="replace")
    assert b"[" not in seen and b"%" not in seen, seen
    assert out.decode().startswith("ingested ")


def test_export_to_a_pipe_writes_plain_progress_lines(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTX_")}
    data = tmp_path / "data"
    log = tmp_path / "big.log"
    log.write_text("2026-12-03 10:00:00 INFO worker processed batch 123456\n" * 300_000)
    base = server_command("--data-dir", str(data))
    done = subprocess.run(
        [*base, "ingest", str(log), "--doc-id", "big"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "\r" not in done.stderr
    exported = subprocess.run(
        [*base, "export", "doc", "big", "-o", str(tmp_path / "big.jsonl")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    assert "\r" not in exported.stderr
    assert exported.stderr.rstrip().endswith(f"to {tmp_path / 'big.jsonl'}")
