"""Timing and memory helpers shared by the benchmark areas."""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation; NaN for no values."""
    data = sorted(values)
    if not data:
        return float("nan")
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def summary_ms(samples_s: list[float]) -> dict[str, Any]:
    """p50 / p99 / mean / max of samples given in seconds, reported in milliseconds."""
    ms = [s * 1000.0 for s in samples_s]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "mean_ms": round(statistics.fmean(ms), 3) if ms else float("nan"),
        "max_ms": round(max(ms), 3) if ms else float("nan"),
    }


def time_calls(fn: Callable[[Any], object], args: Iterable[Any]) -> list[float]:
    """Seconds taken by ``fn(arg)`` for each argument, one sample per call."""
    samples = []
    clock = time.perf_counter
    for arg in args:
        t0 = clock()
        fn(arg)
        samples.append(clock() - t0)
    return samples


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """``with stopwatch() as t: ...`` then ``t[0]`` holds the elapsed seconds."""
    box: list[float] = []
    t0 = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - t0)


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM, else ru_maxrss) in MiB."""
    kb = _status_kb("VmHWM")
    if kb is None:
        kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return round(kb / 1024.0, 1)


def current_rss_mb() -> float:
    """This process's resident set now (VmRSS) in MiB; NaN where /proc is missing."""
    kb = _status_kb("VmRSS")
    return round(kb / 1024.0, 1) if kb is not None else float("nan")


def disk_mb(path: Path) -> float:
    """Megabytes (10^6 bytes) of the files under ``path``."""
    if not path.exists():
        return 0.0
    total = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return round(total / 1e6, 1)
