"""Recall by meaning as well as words, from the user's own embeddings endpoint.

``blend`` ranks the best ``depth`` entries by words and by cosine with
``retrieval.meaning.interpolate``. ``Embedder`` fills each session's vectors in the
background, newest first, never on an append's path; a recall that comes first embeds
its best word matches itself. Without vectors, recall ranks by words.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

import anyio
import numpy as np
import numpy.typing as npt

from context_window.config import Settings
from context_window.errors import Busy, ContextWindowError, UpstreamError
from context_window.llm.client import LLMClient
from context_window.retrieval.bm25 import best_first
from context_window.retrieval.meaning import interpolate
from context_window.retrieval.vectors import Vectors, model_key, unit
from context_window.sessions.session import RANKED_FIRST

if TYPE_CHECKING:
    from context_window.sessions.session import Session

log = logging.getLogger("context_window")

BATCH = 32  # entries per embeddings request
TEXT_CHARS = 2000  # of an entry's text embedded: past a small model's window anyway
BATCH_SECONDS = 60.0  # the longest wait for one batch's vectors (a query waits less)
FILL_NOW = BATCH  # a recall's best word matches without a vector: embedded then
F64 = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
Rows = npt.NDArray[np.int64]
T = TypeVar("T")
# (order, scores, allowed, matching, times) -> (scores, candidates), or None: words only
Rescore = Callable[[list[str], F64, Mask, Mask, F64], "tuple[F64, Mask] | None"]


class Lanes(Protocol):
    """What runs work on a session's lane: ``Service``."""

    async def run(self, key: str, work: Callable[[], T]) -> T: ...


@dataclass
class Meaning:
    """A recall's ``meaning``: the query's unit vector, the session's vectors, ``used``."""

    query: npt.NDArray[np.float32] | None
    vectors: Vectors
    depth: int
    fill: Callable[[Rows], bool] | None = None  # embed these positions' entries now
    used: bool = False

    def __call__(
        self, order: list[str], scores: F64, allowed: Mask, matching: Mask, times: F64
    ) -> tuple[F64, Mask] | None:
        found = None if self.query is None else blend(self, order, scores, allowed, matching, times)
        self.used = found is not None
        return found


def blend(
    meaning: Meaning,
    order: Sequence[str],
    scores: F64,
    allowed: Mask,
    lexical: Mask,
    times: F64,
) -> tuple[F64, Mask] | None:
    """Scores and candidates by meaning and words: the best ``depth`` by words and by
    cosine first (2 + their interpolation), other word matches after (below 1); None
    when no vector compares. The ``FILL_NOW`` best word matches lacking one are embedded
    first."""
    vec, query, depth = meaning.vectors, meaning.query, meaning.depth
    assert query is not None
    rows = vec.rows(order)
    words, _ = best_first(np.flatnonzero(lexical & allowed), scores, times, depth)
    best = words[:FILL_NOW]
    if meaning.fill is not None and np.any(rows[best] < 0) and meaning.fill(best):
        rows = vec.rows(order)
    have = np.flatnonzero((rows >= 0) & allowed)
    if not have.size or vec.dim != len(query):
        return None
    cos = np.full(len(order), np.nan)
    cos[have] = vec.cosines(query)[rows[have]]
    near, _ = best_first(have, np.nan_to_num(cos, nan=-2.0), times, depth)
    chosen = np.union1d(near[:depth], words[:depth])
    out = np.where(lexical & allowed, scores / (float(scores.max(initial=0.0)) + 1.0), 0.0)
    out[chosen] = 2.0 + interpolate(scores[chosen], cos[chosen])
    mask = allowed & lexical
    mask[chosen] = True
    return out, mask


def _records(
    batch: list[tuple[int, str, str]], found: npt.NDArray[np.float32]
) -> list[tuple[int, str, list[float]]]:
    """(position, id, vector) of each entry of ``batch`` (``Session.lacking``'s), to write."""
    return [(pos, eid, v) for (pos, eid, _), v in zip(batch, found.tolist(), strict=True)]


@dataclass
class Embedder:
    """Fills the vectors of the sessions it is told about, a batch at a time on their lanes."""

    client: LLMClient
    query_client: LLMClient
    model: str
    query_prefix: str
    passage_prefix: str
    lanes: Lanes
    sessions: Callable[[str], Session]
    _pending: dict[str, str] = field(default_factory=dict)  # session id -> lane, in order
    _vectors: dict[str, Vectors] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    @classmethod
    def configured(
        cls, settings: Settings, lanes: Lanes, sessions: Callable[[str], Session]
    ) -> Embedder | None:
        """The embedder ``settings`` ask for, or None (no ``embed_base_url``: words only)."""
        if not settings.embed_base_url:
            return None
        url, model = settings.embed_base_url, settings.embed_model
        return cls(
            LLMClient(url, model, timeout=BATCH_SECONDS),
            LLMClient(url, model, timeout=settings.embed_timeout),
            model,
            settings.embed_query_prefix,
            settings.embed_passage_prefix,
            lanes,
            sessions,
        )

    def describe(self) -> str:
        """How recall and search rank with this embedder, for the guide."""
        where = self.client.base_url + (f" (model {self.model})" if self.model else "")
        return (
            f"by words and meaning, embeddings from {where}; a header saying "
            '"words only" means that endpoint did not answer in time'
        )

    @property
    def key(self) -> str:
        """The vectors files' name for this model and passage prefix."""
        return model_key(self.model, self.passage_prefix)

    def vectors(self, session: Session) -> Vectors:
        """The vectors kept for ``session`` with this model."""
        key = str(session.dir)
        if key not in self._vectors:
            self._vectors[key] = Vectors(session.dir, self.key)
        return self._vectors[key]

    def meaning(self, session: Session, query: npt.NDArray[np.float32] | None) -> Meaning:
        """A recall's ``meaning`` for ``session``, its best word matches embedded first."""
        vectors = self.vectors(session)

        def fill(positions: Rows) -> bool:
            batch = session.lacking(vectors.rows, FILL_NOW, positions)
            found = anyio.from_thread.run(self._in_time, [t for *_, t in batch]) if batch else None
            if found is None:
                return False
            vectors.write(_records(batch, found))
            return True

        return Meaning(query, vectors, RANKED_FIRST, fill)

    async def _in_time(self, texts: list[str]) -> npt.NDArray[np.float32] | None:
        """Vectors of ``texts`` within the query's timeout, or None (filled later)."""
        with anyio.move_on_after(self.timeout):
            try:
                return await self.passages(texts)
            except ContextWindowError as exc:
                log.info("recall ranks without the entries just appended: %s", exc)
        return None

    async def query(self, text: str) -> npt.NDArray[np.float32] | None:
        """The query's unit vector, or None (the endpoint failed: words, reason logged)."""
        try:
            found = await self.query_client.embed([self.query_prefix + text])
        except ContextWindowError as exc:
            log.info("ranking by words only: %s", exc)
            return None
        vector: npt.NDArray[np.float32] = unit(found)[0]
        return vector

    async def passages(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit vectors of entries or passages, sent prefixed and cut at ``TEXT_CHARS``."""
        return unit(await self.client.embed([self.passage_prefix + t[:TEXT_CHARS] for t in texts]))

    @property
    def timeout(self) -> float:
        """The longest wait for a query's vector (``--embed-timeout``)."""
        return self.query_client.timeout

    def cooldown(self) -> float:
        """Seconds until the endpoint is asked again after a failure."""
        return self.client.cooldown_remaining()

    def wake(self, session_id: str, key: str) -> None:
        """Embed what ``session_id`` lacks, soon, after the work already asked for."""
        self._pending[session_id] = key
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._work())

    async def _work(self) -> None:
        while self._pending:  # a wake during a batch puts its session back: never lost
            session_id, key = next(iter(self._pending.items()))
            del self._pending[session_id]
            try:
                more = await self._one_batch(session_id, key)
            except (UpstreamError, Busy) as exc:  # try again after the endpoint's cooldown
                log.info("embedding %s paused: %s", session_id, exc)
                self._pending.setdefault(session_id, key)
                await asyncio.sleep(max(self.cooldown(), 1.0))
                continue
            except Exception as exc:  # a session gone; never take the server down for a cache
                log.warning("embedding %s stopped: %s", session_id, exc)
                more = False
            if more:  # behind the others: each session gets its turn
                self._pending.setdefault(session_id, key)

    async def _one_batch(self, session_id: str, key: str) -> bool:
        """Embed up to BATCH entries the session lacks vectors for; True if more may lack."""

        def todo() -> tuple[Vectors, list[tuple[int, str, str]]]:
            session = self.sessions(session_id)
            vectors = self.vectors(session)
            return vectors, session.lacking(vectors.rows, BATCH)

        vectors, batch = await self.lanes.run(key, todo)
        if not batch:
            return False
        found = await self.passages([t for _, _, t in batch])
        await asyncio.to_thread(vectors.write, _records(batch, found))
        return len(batch) == BATCH

    async def settled(self) -> None:
        """Wait until no session waits for vectors (tests and benchmarks)."""
        while self._task is not None and not self._task.done():
            await asyncio.wait([self._task])

    async def aclose(self) -> None:
        """Stop embedding and close the clients."""
        if self._task is not None:
            self._task.cancel()
        for client in (self.client, self.query_client):
            await client.aclose()
