"""Search by meaning as well as words: the passages ``doc_search`` reads, rescored.

The best ``DEEP`` passages with stored vectors, and the best ``DEPTH`` in any case, rank
by ``retrieval.meaning.interpolate`` of BM25 and cosine, ahead of the rest.
``DocumentVectors`` fills each document's passage vectors in the background (figures
in docs/retrieval.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import anyio
import numpy as np
import numpy.typing as npt

from context_window.documents.passages import Passage, every_passage
from context_window.errors import Busy, ContextWindowError, NotFound, UpstreamError
from context_window.models import Count
from context_window.retrieval.meaning import interpolate
from context_window.retrieval.vectors import Vectors

if TYPE_CHECKING:
    from context_window.documents.store import DocumentStore

log = logging.getLogger("context_window")

CHUNKS = 24  # chunks whose passages meaning ranks together (words alone rank 6)
DEPTH = 64  # the best passages ranked by meaning even if they must be embedded now
DEEP = 512  # the best passages ranked by meaning when their vectors are stored
FILLED_AT_MOST = 20_000  # passages per document embedded in the background (8 min of MiniLM)
BATCH = 32  # passages per embeddings request while filling
F32 = npt.NDArray[np.float32]


def digest(text: str) -> str:
    """The key a passage's vector is stored under: a digest of its text."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


@dataclass
class PassageMeaning:
    """A search's query vector, ways to embed and look up passages; ``used``: meaning ranked."""

    query: F32 | None
    embed: Callable[[list[Passage]], F32]
    stored: Callable[[Sequence[Passage]], dict[str, F32]]  # by digest
    used: bool = False

    @property
    def chunks(self) -> int:
        """How many of the best chunks to rank together: ``CHUNKS`` with a query vector."""
        return CHUNKS if self.query is not None else 0

    def __call__(self, passages: Sequence[Passage]) -> bool:
        """Rescore ``passages`` in place; whether they were (not if embedding failed)."""
        scored = sorted((p for p in passages if p.score > 0), key=lambda p: -p.score)
        self.used = False
        if self.query is None or not scored:
            return False
        keys = [digest(p.text) for p in scored[:DEEP]]
        shape = self.query.shape  # vectors of another shape: another model made them
        vectors = {k: v for k, v in self.stored(scored[:DEEP]).items() if v.shape == shape}
        missing = [i for i, k in enumerate(keys[:DEPTH]) if k not in vectors]
        try:
            made = self.embed([scored[i] for i in missing]) if missing else None
        except ContextWindowError:
            return False
        if made is not None:
            if made.shape[1:] != shape:
                return False
            vectors.update((keys[i], v) for i, v in zip(missing, made, strict=True))
        ranked = [i for i, k in enumerate(keys) if k in vectors]
        found = np.array([vectors[keys[i]] for i in ranked], dtype=np.float32)
        cosines = (found @ self.query).astype(np.float64)
        hybrid = interpolate(np.array([scored[i].score for i in ranked]), cosines)
        top = scored[0].score
        for p in scored:
            p.score /= top + 1.0  # below every passage ranked by meaning too
        for i, h in zip(ranked, hybrid.tolist(), strict=True):
            scored[i].score = 1.0 + h
        self.used = True
        return True


READ = 256  # chunks read at once while listing a document's passages


def passage_texts(store: DocumentStore, doc_id: str, count: Count, share: int) -> list[str] | None:
    """``doc_id``'s distinct passages at ``share`` tokens; None past ``FILLED_AT_MOST``."""
    out: dict[str, None] = {}  # in order, once each (chunks overlap; logs repeat lines)
    try:
        doc = store.get(doc_id)
        for first in range(0, doc.chunks, READ):
            for chunk in store.read_chunks(doc, first, min(doc.chunks, first + READ) - 1):
                out.update((p.text, None) for p in every_passage(chunk, share, count))
            if len(out) > FILLED_AT_MOST:
                return None
    except NotFound:
        return None
    return list(out)


class Embeds(Protocol):
    """What embeds passages: ``sessions.meaning.Embedder``."""

    @property
    def key(self) -> str: ...

    @property
    def timeout(self) -> float: ...

    async def passages(self, texts: Sequence[str]) -> F32: ...

    def cooldown(self) -> float: ...


@dataclass
class DocumentVectors:
    """Each document's passage vectors for one model (a cache), filled in the background."""

    root: Path
    key: str
    embedder: Embeds
    texts: Callable[[str], Awaitable[list[str] | None]]
    _files: dict[str, Vectors] = field(default_factory=dict)
    _pending: dict[str, None] = field(default_factory=dict)  # documents to fill, in order
    _filled: set[str] = field(default_factory=set)  # documents filled by this process
    _task: asyncio.Task[None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the files' readers
    _asked: set[str] = field(default_factory=set)  # digests a search is having embedded
    _later: set[asyncio.Task[None]] = field(default_factory=set)  # those embeddings

    @classmethod
    def configured(
        cls,
        embedder: Embeds | None,
        store: DocumentStore,
        share: int,
        count: Count,
        run: Callable[[Callable[[], list[str] | None]], Awaitable[list[str] | None]],
    ) -> DocumentVectors | None:
        """The vectors of passages at ``share`` tokens, or None without an ``embedder``."""
        if embedder is None:
            return None
        texts = partial(passage_texts, store, count=count, share=share)
        return cls(store.root, embedder.key, embedder, lambda doc_id: run(partial(texts, doc_id)))

    def of(self, doc_id: str) -> Vectors:
        """The vectors file of ``doc_id``."""
        if doc_id not in self._files:
            self._files[doc_id] = Vectors(self.root / doc_id, self.key)
        return self._files[doc_id]

    def stored(self, passages: Sequence[Passage]) -> dict[str, F32]:
        """The stored vectors of ``passages``, by digest."""
        out: dict[str, F32] = {}
        with self._lock:
            for doc in {p.doc for p in passages}:
                out.update(self.of(doc).lookup([digest(p.text) for p in passages if p.doc == doc]))
        return out

    def embed_from_thread(self, passages: list[Passage]) -> F32:
        """Unit vectors of ``passages``; UpstreamError past the timeout (stored later)."""
        wanted = {digest(p.text): p for p in passages}
        if anyio.from_thread.run(self._embed_now, wanted):
            found = self.stored(passages)
            if len(found) == len(wanted):
                return np.array([found[digest(p.text)] for p in passages], dtype=np.float32)
        raise UpstreamError(
            f"passage vectors not stored within {self.embedder.timeout:g} s; "
            "they are being made for the next search"
        )

    async def _embed_now(self, wanted: dict[str, Passage]) -> bool:
        """Have ``wanted`` embedded and stored, once; whether that met the query's timeout."""
        asked = {k: p for k, p in wanted.items() if k not in self._asked}
        if asked:
            self._asked.update(asked)
            task = asyncio.get_running_loop().create_task(self._store(asked))
            self._later.add(task)
            task.add_done_callback(self._later.discard)
        with anyio.move_on_after(self.embedder.timeout):
            while not self._asked.isdisjoint(wanted):
                await asyncio.sleep(0.01)
            return True
        return False

    async def _store(self, asked: dict[str, Passage]) -> None:
        try:
            found = await self.embedder.passages([p.text for p in asked.values()])
            made = list(zip(asked.items(), found.tolist(), strict=True))
            for doc in {p.doc for p in asked.values()}:
                items = [(0, k, v) for (k, p), v in made if p.doc == doc]
                await asyncio.to_thread(self.of(doc).write, items)
        except (ContextWindowError, OSError) as exc:  # the next search asks again
            log.info("passage vectors not made: %s", exc)
        finally:
            self._asked.difference_update(asked)

    def wake(self, doc_ids: Sequence[str], again: bool = False) -> None:
        """Fill the vectors ``doc_ids`` lack in the background (``again``: after an ingest)."""
        for doc_id in doc_ids:
            if again or doc_id not in self._filled:
                self._filled.add(doc_id)
                self._pending[doc_id] = None
        if self._pending and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._work())

    async def _work(self) -> None:
        while self._pending:
            doc_id = next(iter(self._pending))
            del self._pending[doc_id]
            try:
                await self._fill(doc_id)
            except (UpstreamError, Busy) as exc:  # the endpoint: again after its cooldown
                log.info("embedding the passages of %s paused: %s", doc_id, exc)
                self._pending.setdefault(doc_id, None)
                await asyncio.sleep(max(self.embedder.cooldown(), 1.0))
            except Exception as exc:  # a document gone; never take the server down for a cache
                log.warning("embedding the passages of %s stopped: %s", doc_id, exc)

    async def _fill(self, doc_id: str) -> None:
        texts = await self.texts(doc_id)
        if texts is None:
            return
        vectors = self.of(doc_id)
        wanted = {digest(t): t for t in texts}
        have = await asyncio.to_thread(self._lookup, vectors, list(wanted))
        todo = [(k, t) for k, t in wanted.items() if k not in have]
        for at in range(0, len(todo), BATCH):
            batch = todo[at : at + BATCH]
            found = await self.embedder.passages([t for _, t in batch])
            items = [
                (at + i, k, v)
                for i, ((k, _), v) in enumerate(zip(batch, found.tolist(), strict=True))
            ]
            await asyncio.to_thread(vectors.write, items)

    def _lookup(self, vectors: Vectors, keys: list[str]) -> dict[str, F32]:
        with self._lock:
            return vectors.lookup(keys)

    async def settled(self) -> None:
        """Wait until no document or search waits for vectors (tests and benchmarks)."""
        while (self._task is not None and not self._task.done()) or self._later:
            await asyncio.wait([t for t in [self._task, *self._later] if t is not None])

    def close(self) -> None:
        """Stop filling."""
        for task in [self._task, *self._later]:
            if task is not None:
                task.cancel()
