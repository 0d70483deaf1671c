"""Times as people read them: local date and time; an unusable stored time reads unknown."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import Any

# Times are seconds since 1970: 0 up to the year 9999 (time_t's reach on every platform).
MAX_TIME = 253_402_300_799.0


def time_or_none(value: Any) -> float | None:
    """A usable timestamp, or None (not a number, NaN, infinite, negative, past year 9999)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and 0.0 <= number <= MAX_TIME else None


def local_time(stamp: Any, *, seconds: bool = False, year: bool = True, unknown: str = "-") -> str:
    """``YYYY-MM-DD HH:MM`` local (``seconds``, ``year`` optional), or ``unknown``."""
    usable = time_or_none(stamp)
    if usable is None:
        return unknown
    fmt = ("%Y-%m-%d " if year else "%m-%d ") + ("%H:%M:%S" if seconds else "%H:%M")
    return time.strftime(fmt, time.localtime(usable))


def several_days(stamps: Iterable[Any]) -> bool:
    """Whether ``stamps`` fall on more than one local day (an unusable one is its own)."""
    days = {None if (t := time_or_none(s)) is None else time.localtime(t)[:3] for s in stamps}
    return len(days) > 1
