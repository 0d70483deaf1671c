"""The Service behind the tools, built in a worker thread beside the handshake."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import anyio

from context_window.config import Settings

if TYPE_CHECKING:
    from context_window.service import Service

SAVE_SECONDS = 0.6  # of a clean stop's second, the time snapshots may take (save_on_stop)


class Engine:
    """A Service built once (``ready``, ``warm_in_background``), or given built (tests)."""

    def __init__(self, settings: Settings, service: Service | None = None) -> None:
        self.settings = settings
        self._service = service
        self._lock = threading.Lock()

    @property
    def built(self) -> Service | None:
        """The Service once built, else None (nothing to save at a stop)."""
        return self._service

    @property
    def service(self) -> Service:
        """The Service, built here if it is not yet (blocking)."""
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
        if self._service is None:
            await anyio.to_thread.run_sync(lambda: self.service)
        return self.service

    def save_on_stop(self, until: float) -> None:
        """Save the snapshots the open sessions lack, if the Service was built."""
        if self._service is not None:
            self._service.save_on_stop(until)

    async def warm_in_background(self) -> None:
        """Build the Service beside the handshake, then calibrate the token ratio."""
        service = await self.ready()
        await service.calibrate_in_background()
