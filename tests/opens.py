"""Watch the files this process opens, through the interpreter's audit hooks (PEP 578).

Nothing is replaced or patched: ``open``, ``io.open`` and ``os.open`` raise an "open"
audit event before they open anything, with the path as given. A hook cannot be
removed once added, so one hook serves the whole test run and hands each event to the
watchers active at the time (none, outside a ``watching_opens`` block).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Watcher = Callable[[str], None]

_watchers: list[Watcher] = []
_inside = threading.local()  # a watcher that opens a file is not told of its own opens
_installed = False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not _watchers or getattr(_inside, "busy", False):
        return
    path = args[0]
    if not isinstance(path, str | bytes | os.PathLike):
        return  # an open of a file descriptor
    _inside.busy = True
    try:
        for watcher in list(_watchers):
            watcher(os.fsdecode(path))
    finally:
        _inside.busy = False


@contextmanager
def watching_opens(watcher: Watcher) -> Iterator[None]:
    """Call ``watcher(path)`` just before each file this process opens, inside the block."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True
    _watchers.append(watcher)
    try:
        yield
    finally:
        _watchers.remove(watcher)
