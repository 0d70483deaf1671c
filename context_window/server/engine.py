"""The Service behind the tools, built by the first call that needs it.

The handshake and tools/list need none of it: the stores (and their crash recovery),
numpy, the index and the LLM clients load in a worker thread a moment after the tools
are listed, or with the first tool call if that comes first, so a client sees the
server's first reply as early as the SDK's own servers give it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import anyio

from context_window.config import Settings

if TYPE_CHECKING:
    from context_window.service import Service

WARM_AFTER = 0.1  # seconds from the tools being listed to building the Service
SAVE_SECONDS = 0.6  # of a clean stop's second, the time snapshots may take (save_on_stop)


class Engine:
    """A Service built once, on first use (``ready``), or given already built (tests)."""

    def __init__(self, settings: Settings, service: Service | None = None) -> None:
        self.settings = settings
        self._service = service
        self._lock = threading.Lock()
        self._wanted: anyio.Event | None = None  # made on the loop by warm_in_background

    @property
    def built(self) -> Service | None:
        """The Service if a call has built it, else None (nothing to save at a stop)."""
        return self._service

    @property
    def service(self) -> Service:
        """The Service, built here if no call has built it yet (blocking)."""
        if self._service is not None:
            return self._service
        with self._lock:
            if self._service is None:
                from context_window.server import views  # noqa: F401 (off the loop, too)
                from context_window.service import Service

                self._service = Service(self.settings)
        return self._service

    async def ready(self) -> Service:
        """The Service, built in a worker thread the first time, so the loop never waits."""
        self.want()
        if self._service is None:
            await anyio.to_thread.run_sync(lambda: self.service)
        return self.service

    def want(self) -> None:
        """Ask for the Service soon: the tools were listed, so calls will follow."""
        if self._wanted is not None:
            self._wanted.set()

    def save_on_stop(self, until: float) -> None:
        """Save the snapshots the open sessions lack, if a call has built the Service."""
        if self._service is not None:
            self._service.save_on_stop(until)

    async def warm_in_background(self) -> None:
        """Build the Service a moment after the tools are listed (or at the first call,
        whichever comes first), so a client's first call seldom waits for it; then
        measure the model's tokens per character (calibration)."""
        self._wanted = anyio.Event()
        if self._service is None:
            await self._wanted.wait()
            await anyio.sleep(WARM_AFTER)  # the tools/list answer goes out first
        service = await self.ready()
        await service.calibrate_in_background()
