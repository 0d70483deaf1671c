"""Running an ingest in a worker thread while reporting its progress from the event loop."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from context_window.documents.store import DocumentStore
from context_window.documents.tables import Ingested
from context_window.wording import plural

PROGRESS_SECONDS = 0.2


Report = Callable[[float, float, str], Awaitable[None]]


async def ingest_in_thread(
    store: DocumentStore,
    report: Report | None,
    *,
    text: str | None = None,
    file_path: str | None = None,
    title: str | None = None,
    doc_id: str | None = None,
) -> Ingested:
    """Ingest in a worker thread; this side polls its progress and forwards it to ``report``."""
    latest: list[tuple[float, str]] = [(0.0, "starting")]

    def note(fraction: float, message: str) -> None:
        latest[0] = (fraction, message)

    async def forward() -> None:
        sent: tuple[float, str] | None = None
        while True:
            current = latest[0]
            if report is not None and current != sent:
                await report(round(current[0] * 100, 1), 100.0, current[1])
                sent = current
            await anyio.sleep(PROGRESS_SECONDS)

    def work() -> Ingested:
        return store.ingest(text, file_path, title, doc_id, note)

    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(forward)
        try:
            done = await anyio.to_thread.run_sync(work)
        except Exception as exc:  # raised below, outside the task group's exception group
            failure = exc
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    if report is not None:
        await report(100.0, 100.0, f"done: {plural(done.doc.chunks, 'chunk')}")
    return done
