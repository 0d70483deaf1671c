"""Progress of a long command on stderr: a bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

DELAY = 0.5  # seconds of work before anything is shown: quick commands stay quiet
REDRAW = 0.1  # the least time between two redraws of the bar
WIDTH = 24


class Meter:
    """A ``meter(fraction, message)``: redrawn every ``REDRAW`` s on a terminal, else tenths."""

    def __init__(
        self,
        label: str,
        stream: TextIO | None = None,
        *,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock = clock
        self.started = clock()
        self.drawn_at: float | None = None
        self.tenth = -1

    def __call__(self, fraction: float, message: str) -> None:
        now = self.clock()
        if now - self.started < DELAY:
            return
        fraction = min(max(fraction, 0.0), 1.0)
        if self.tty:
            if self.drawn_at is not None and now - self.drawn_at < REDRAW and fraction < 1:
                return
            filled = round(fraction * WIDTH)
            bar = "#" * filled + "-" * (WIDTH - filled)
            self.stream.write(f"\r{self.label} [{bar}] {fraction:4.0%} {message[:60]}\x1b[K")
            self.drawn_at = now
        else:
            tenth = int(fraction * 10)
            if tenth <= self.tenth:
                return
            self.tenth = tenth
            self.stream.write(f"{self.label}: {tenth * 10}% {message}\n")
        self.stream.flush()

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.tty and self.drawn_at is not None:
            self.stream.write("\n")  # what is printed next starts on a line of its own
            self.stream.flush()
