"""The document store: ingest, list, forget, search, page with a cursor, cache summaries.

A document is ``<data>/documents/<id>/`` with a valid ``meta.json`` (layout in ``build``
and ``index``); hidden ``.tmp-*`` and ``.trash-*`` directories are work or leftovers.
Reads memory-map the index and read chunk texts from ``source.txt`` by byte offset.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import math
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from context_window.documents.answers import Answer
from context_window.documents.build import (
    CHILD_MIN_CHARS,
    MAX_STRUCTURED_CHARS,
    SEGMENT_CHARS,
    Progress,
    no_progress,
)
from context_window.documents.checks import Damaged, meta_problem
from context_window.documents.cursors import read_cursor, write_cursor
from context_window.documents.freshness import SourceState, source_state
from context_window.documents.index import Corpus, OldIndex
from context_window.documents.ingest import ingest, reindex
from context_window.documents.ranking import (
    READ_AT_ONCE,
    Ranked,
    Rescore,
    best_passages,
    hits_of,
    pool,
    ranked_chunks,
)
from context_window.documents.tables import DocInfo, Ingested, Tables, Window, from_line
from context_window.errors import (
    INGEST_FIRST,
    LIST_DOCUMENTS,
    USE_ID,
    InvalidInput,
    NotFound,
    StorageError,
    check_range,
)
from context_window.models import Chunk, Hit
from context_window.packing import fit_chunks, leading
from context_window.retrieval.analyzer import Analyzer, QueryLimits
from context_window.storage import (
    check_id,
    file_stamp,
    is_valid_id,
    read_json,
    recover_replaced,
    replace_lock,
    spelled,
    storage_error,
    subdirs,
    sweep_work,
    unwritable,
    write_json_atomic,
)
from context_window.tokens import TokenCounter
from context_window.wording import known_ids

MAX_CHARS = 20_000_000  # inline text: it travels through the protocol
MAX_FILE_BYTES = 2048 * 1024 * 1024  # files: read from disk, indexed in segments
LINE_CONTEXT = 3  # lines shown above the one doc_window(line=N) opens at
SETTLED_NS = 100_000_000  # a listing is reused once the directory is this much older
COARSE_SETTLED_NS = 3_000_000_000  # the same where mtimes fall on whole seconds (FAT: 2 s)
log = logging.getLogger("context_window")


P = ParamSpec("P")
R = TypeVar("R")


def _steady(
    read: Callable[Concatenate[DocumentStore, P], R],
) -> Callable[Concatenate[DocumentStore, P], R]:
    """A read that, failing on the files, runs once more under ``guard`` on fresh data."""

    @functools.wraps(read)
    def wrapper(store: DocumentStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        def again() -> R:
            if args and isinstance(args[0], DocInfo):  # the caller's copy may be stale
                fresh = (store.get(args[0].id), *args[1:])
                return read(store, *fresh, **kwargs)  # type: ignore[arg-type]
            return read(store, *args, **kwargs)

        return store.retried(lambda: read(store, *args, **kwargs), again)

    return wrapper


class DocumentStore:
    """All documents under ``<data>/documents``."""

    def __init__(
        self,
        data_dir: Path,
        counter: TokenCounter,
        *,
        ingest_roots: Sequence[Path] = (),
        chunk_tokens: int = 800,
        chunk_overlap: int = 80,
        max_chars: int = MAX_CHARS,
        max_file_bytes: int = MAX_FILE_BYTES,
        query_limits: QueryLimits | None = None,
        segment_chars: int = SEGMENT_CHARS,
        child_min_chars: int | None = CHILD_MIN_CHARS,
        max_structured_chars: int = MAX_STRUCTURED_CHARS,
    ) -> None:
        self.root = data_dir / "documents"
        self.counter = counter
        self.ingest_roots = tuple(ingest_roots)
        self.chunk_tokens = chunk_tokens
        self.chunk_overlap = chunk_overlap
        self.max_chars = max_chars
        self.max_file_bytes = max_file_bytes
        self.segment_chars = segment_chars
        self.large = (child_min_chars, max_structured_chars)  # see BuildSpec
        self._lock = threading.RLock()
        self._guarded = False  # whether this process holds the directory lock (see guard)
        self._tables: dict[str, tuple[float, Tables]] = {}
        # meta.json files parsed, by document id, with the stat they were parsed at.
        self._metas: dict[str, tuple[tuple[int, int, int], tuple[dict[str, Any], DocInfo]]] = {}
        self._joined: tuple[list[Tables], Corpus] | None = None  # see _corpus
        self._searched: tuple[tuple[int, int, int], list[DocInfo]] | None = None  # see _searchable
        # all()'s last answer, with the (name, stamp) of every directory it looked at.
        self._listed: (
            tuple[tuple[tuple[str, tuple[int, int, int] | None], ...], list[DocInfo]] | None
        ) = None
        self.analyzer = Analyzer(query_limits)

    def recover(self) -> list[str]:
        """Put back every document whose replace a crash interrupted, and remove work
        directories no living process holds; returns the restored ids. Done at start-up
        by ``Service``, never by opening the store."""
        if not self.root.is_dir():
            return []
        restored = recover_replaced(self.root)  # a replace killed between its renames
        for doc_id in restored:
            log.warning("restored document %r: a replace of it was interrupted", doc_id)
        sweep_work(self.root)
        return restored

    def read_meta(self, doc_id: str) -> dict[str, Any] | None:
        """A document's meta.json if it is valid (a copy: callers may change it)."""
        found = self._parsed(doc_id)
        return None if found is None else dict(found[0])

    def _parsed(self, doc_id: str) -> tuple[dict[str, Any], DocInfo] | None:
        """meta.json and its DocInfo, parsed again only when the file changed."""
        path = f"{self.root}/{doc_id}/meta.json"
        stamp = file_stamp(path)
        return None if stamp is None else self._parse(doc_id, path, stamp)

    def _parse(
        self, doc_id: str, path: str, stamp: tuple[int, int, int]
    ) -> tuple[dict[str, Any], DocInfo] | None:
        cached = self._metas.get(doc_id)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        meta = read_json(Path(path))
        if meta is None or meta.get("id") != doc_id:
            return None
        try:
            info = DocInfo.from_meta(meta)
        except (KeyError, TypeError, ValueError):
            return None
        self._metas[doc_id] = (stamp, (meta, info))
        return meta, info

    def all(self) -> list[DocInfo]:
        """Every complete document, newest first (a stat of each meta.json when none changed)."""
        stamps = tuple(
            (name, file_stamp(f"{self.root}/{name}/meta.json")) for name in subdirs(self.root)
        )
        listed = self._listed
        if listed is not None and listed[0] == stamps:
            return list(listed[1])
        docs = []
        for name, stamp in stamps:
            parsed = (
                None if stamp is None else self._parse(name, f"{self.root}/{name}/meta.json", stamp)
            )
            if parsed is not None:
                docs.append(parsed[1])
        docs.sort(key=lambda d: (-d.created_at, d.id))
        self._listed = (stamps, docs)
        return list(docs)

    def _searchable(self) -> list[DocInfo]:
        """Every complete document, for a search over all of them. Documents change only
        by renames in the documents directory, so the listing is reused while its mtime
        holds, once that is ``SETTLED_NS`` old (``COARSE_SETTLED_NS`` for whole-second
        mtimes, as FAT, ext3 and HFS+ keep)."""
        began = time.time_ns()
        stamp = file_stamp(self.root)
        last = self._searched
        if stamp is not None and last is not None and last[0] == stamp:
            return list(last[1])
        docs = self.all()
        wait = SETTLED_NS if stamp is not None and stamp[1] % 1_000_000_000 else COARSE_SETTLED_NS
        settled = stamp is not None and began - stamp[1] > wait
        self._searched = (stamp, docs) if settled and stamp is not None else None
        return list(docs)

    def unreadable(self) -> dict[str, str]:
        """The document directories ``all`` leaves out, each with what is wrong with it."""
        found = {name: self.meta_damage(name) for name in sorted(subdirs(self.root))}
        return {name: why for name, why in found.items() if why is not None}

    def meta_damage(self, doc_id: str) -> str | None:
        """What makes ``doc_id``'s meta.json unusable (None: usable, or no such document)."""
        if self.read_meta(doc_id) is not None or not (self.root / doc_id).is_dir():
            return None
        meta = read_json(self.root / doc_id / "meta.json")
        if meta is None:
            return "missing or not a JSON object"
        if meta.get("id") != doc_id:
            return f"its id is {meta.get('id')!r:.40}"
        return meta_problem(meta) or "changed while read"

    def spelled(self, doc_id: str) -> str:
        """``doc_id`` as stored, which may differ in case (see ``storage.spelled``)."""
        if not is_valid_id(doc_id) and (titled := self._titled(doc_id)) is not None:
            raise titled
        found = self.read_meta(check_id(doc_id, "doc_id")) is not None
        return doc_id if found else spelled(self.root, doc_id)

    def _titled(self, wanted: str) -> NotFound | None:
        """NotFound naming the documents titled ``wanted`` or read from a file so named:
        a model may take either for an id. None if there are none."""
        ids = [d.id for d in self.all() if d.is_named(wanted.strip().casefold())]
        if not ids:
            return None
        named = f"no document {wanted!r:.80}: that is the title or file name of "
        remedy = USE_ID if len(ids) == 1 else LIST_DOCUMENTS
        return NotFound(named + known_ids(wanted, ids, 5), remedy=remedy, name="doc_id", id=ids[0])

    def get(self, doc_id: str) -> DocInfo:
        """One document (NotFound with the known ids otherwise)."""
        doc_id = self.spelled(doc_id)
        meta = self.read_meta(doc_id)
        if meta is None and self.root.is_dir():  # between a replace's two renames? wait for it
            with self.guard():
                meta = self.read_meta(doc_id)
        if meta is None and (why := self.meta_damage(doc_id)) is not None:
            raise Damaged(doc_id, why, "meta.json")
        if meta is None:
            known = known_ids(doc_id, [d.id for d in self.all()], 20)
            missing = f"no document {doc_id!r}; known documents: {known}"
            raise self._titled(doc_id) or NotFound(missing, remedy=INGEST_FIRST)
        return DocInfo.from_meta(meta)

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Hold the store against replaces, forgets and meta updates in every process (a
        flock on the documents directory); re-entrant per thread."""
        with self._lock:
            if self._guarded or not self.root.is_dir():
                yield
                return
            with replace_lock(self.root):
                self._guarded = True
                try:
                    yield
                finally:
                    self._guarded = False

    def update_meta(self, doc_id: str, expect: str | None = None, **changes: Any) -> DocInfo:
        """Change fields of meta.json atomically under ``guard``. With ``expect`` (a sha256),
        nothing is written unless the document still holds that text; a forgotten
        document is never recreated."""
        with self.guard():
            meta = self.read_meta(doc_id)
            if meta is None:
                raise NotFound(f"no document {doc_id!r}; it may have been forgotten")
            if expect is not None and meta.get("sha256") != expect:
                return DocInfo.from_meta(meta)
            meta.update(changes)
            write_json_atomic(self.root / doc_id / "meta.json", meta)
            return DocInfo.from_meta(meta)

    def tables(self, doc: DocInfo) -> Tables:
        """The memory-mapped tables of ``doc`` (opened once per ingest of it)."""
        with self._lock:
            cached = self._tables.get(doc.id)
            if cached is not None and cached[0] == doc.created_at:
                return cached[1]
            try:
                try:
                    tables = Tables(self.root / doc.id)
                except OldIndex:
                    reindex(self, doc)
                    tables = Tables(self.root / doc.id)
            except (OSError, ValueError, KeyError, IndexError, TypeError, EOFError) as exc:
                if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
                    raise storage_error(exc, f"cannot open document {doc.id!r}") from exc
                raise Damaged(doc.id, str(exc)) from exc
            if tables.index.n_chunks != doc.chunks:
                why = f"it says {doc.chunks:,} chunks, the index holds {tables.index.n_chunks:,}"
                raise Damaged(doc.id, why, "meta.json")
            self._tables[doc.id] = (doc.created_at, tables)
            return tables

    def retried(self, first: Callable[[], R], again: Callable[[], R]) -> R:
        """``first()``; if it fails on the files, ``again()`` under ``guard``, uncached."""
        try:
            return first()
        except (StorageError, OSError):
            pass
        with self.guard():
            self.forget_cached()
            return again()

    def read_steadily(self, doc: DocInfo, read: Callable[[DocInfo], R]) -> tuple[DocInfo, R]:
        """``read(doc)``, retried as ``_steady`` does; returns the document it was read from."""

        def again() -> tuple[DocInfo, R]:
            fresh = self.get(doc.id)
            return fresh, read(fresh)

        return self.retried(lambda: (doc, read(doc)), again)

    def forget_cached(self) -> None:
        """Drop every cached table (files of replaced versions may be gone)."""
        with self._lock:
            for doc_id in list(self._tables):
                self.drop_cached(doc_id)

    def drop_cached(self, doc_id: str) -> None:
        # Never close the mappings: another thread may still read them (unmapped with the
        # last reference; a mapping outlives its file's rename).
        self._tables.pop(doc_id, None)

    def ingest(
        self,
        text: str | None = None,
        file_path: str | None = None,
        title: str | None = None,
        doc_id: str | None = None,
        progress: Progress = no_progress,
        *,
        rechunk: bool = False,
    ) -> Ingested:
        """Ingest inline text or a file under an ingest root (see ``ingest.ingest``)."""
        return ingest(self, text, file_path, title, doc_id, progress, rechunk=rechunk)

    def forget(self, doc_id: str) -> DocInfo:
        """Delete a document and everything derived from it."""
        doc = self.get(doc_id)
        with self.guard():
            self.drop_cached(doc.id)
            trash = self.root / f".trash-{doc.id}-{secrets.token_hex(4)}"
            try:
                (self.root / doc.id).rename(trash)
            except OSError as exc:
                raise storage_error(exc, f"cannot remove document {doc.id!r}") from exc
        shutil.rmtree(trash, ignore_errors=True)
        return doc

    def scale(self, doc: DocInfo) -> float:
        """Factor from stored token estimates to the current ratio (never below 1)."""
        return max(1.0, self.counter.ratio / doc.ratio) if doc.ratio > 0 else 1.0

    @_steady
    def read_chunks(self, doc: DocInfo, first: int, last: int) -> list[Chunk]:
        """Chunks ``first..last`` of ``doc`` (inclusive)."""
        return self.tables(doc).read(first, last)

    @_steady
    def search(self, query: str, doc_id: str | None = None, limit: int = 10) -> list[Hit]:
        """The best chunks for ``query``: one document's, or every document's, best first."""
        terms = self.analyzer.query(query or "")
        if not terms:
            raise InvalidInput(
                f"query {query!r:.60} has no searchable words (2+ letters or digits, "
                "not only stop words)"
            )
        check_range("limit", limit, 1, 1000)
        docs, tables, ranked = self._ranked(terms, doc_id, limit)
        return self._hits(docs, tables, ranked, doc_id is None)

    def _ranked(
        self, terms: list[str], doc_id: str | None, limit: int, skip: Collection[str] = ()
    ) -> tuple[list[DocInfo], list[Tables], Ranked]:
        """The documents searched (all but ``skip``), their tables and ``limit`` best chunks."""
        searched = self._searchable() if doc_id is None else [self.get(doc_id)]
        docs = [d for d in searched if d.id not in skip]
        tables = [self.tables(d) for d in docs]
        return docs, tables, ranked_chunks(self._corpus(tables), terms, limit)

    def _hits(
        self, docs: list[DocInfo], tables: list[Tables], ranked: Ranked, fresh: bool
    ) -> list[Hit]:
        """The ``ranked`` chunks read; with ``fresh``, titled as meta.json holds them now."""
        hits = hits_of(docs, tables, ranked)
        if fresh:
            parsed = {h.doc_id: self._parsed(h.doc_id) for h in hits}
            hits = [
                replace(h, title=found[1].title) if (found := parsed[h.doc_id]) else h for h in hits
            ]
        return hits

    def _corpus(self, tables: list[Tables]) -> Corpus:
        """The indexes of ``tables`` joined, reused while they are these very tables."""
        with self._lock:
            last = self._joined
            if (
                last is not None
                and len(last[0]) == len(tables)
                and all(a is b for a, b in zip(last[0], tables, strict=True))
            ):
                return last[1]
            corpus = Corpus([t.index for t in tables])
            if len(tables) > 1:
                self._joined = (tables, corpus)
            return corpus

    def answer(
        self, query: str, doc_id: str | None, limit: int, budget: int, reserve: int = 0,
        meaning: Rescore | None = None,
    ) -> Answer | None:  # fmt: skip
        """The best passages for ``query`` within ``budget`` (see ``best_passages``, and
        its ``meaning``); None when the query has no searchable terms. A search of every
        document skips one with a damaged index and names it in the answer's ``skipped``."""
        skipped: dict[str, str] = {}
        while True:
            try:
                found = self._answer(query, doc_id, limit, budget, reserve, skipped, meaning)
            except Damaged as exc:
                if doc_id is not None or exc.doc_id in skipped:
                    raise
                skipped[exc.doc_id] = str(exc)
                continue
            return replace(found, skipped=tuple(skipped.items())) if found else found

    @_steady
    def _answer(
        self,
        query: str,
        doc_id: str | None,
        limit: int,
        budget: int,
        reserve: int,
        skip: Collection[str],
        meaning: Rescore | None,
    ) -> Answer | None:
        terms = self.analyzer.query(query or "")
        if not terms:
            return None
        check_range("limit", limit, 1, 1000)
        # Ranked once, read as needed: the best k chunks are the best k of any more.
        top = max(limit, pool(meaning))
        docs, tables, ranked = self._ranked(terms, doc_id, max(top, READ_AT_ONCE), skip)
        searched = {d.id: t for d, t in zip(docs, tables, strict=True)}
        corpus = self._corpus(tables)
        # Read the pool's chunks; while most earn a hit of their own, read twice as many.
        every = len(ranked) < max(top, READ_AT_ONCE)
        whole = sum(int(tables[r.doc].tokens()[r.chunk]) for r in ranked)
        want = top if every and whole <= budget - reserve else pool(meaning)
        ranked = ranked[:top]
        hits: list[Hit] = []
        while True:
            hits += self._hits(docs, tables, ranked[len(hits) : want], doc_id is None)
            found = best_passages(
                hits, searched, corpus, terms, self.analyzer, self.counter, limit, budget, reserve,
                meaning,
            )  # fmt: skip
            if want >= len(ranked) or len(hits) < want or 2 * len(found.hits) <= len(hits):
                return found
            want = min(len(ranked), 2 * want)

    @_steady
    def window(
        self,
        doc_id: str,
        first: int | None = None,
        last: int | None = None,
        budget: int = 4000,
        reset: bool = False,
        session_id: str | None = None,
        *,
        line: int | None = None,
        label: Callable[[Chunk], str] | None = None,
        reserve: int = 0,
        move_cursor: bool = True,
    ) -> Window:
        """Chunks in order from ``first`` (default: the cursor) within ``budget`` less
        ``reserve``; moves the cursor unless ``move_cursor`` is False. ``line`` opens
        ``LINE_CONTEXT`` lines above that source line; ``session_id`` uses that session's
        own cursor."""
        doc = self.get(doc_id)
        folder = self.root / doc.id
        cursor = doc.cursor if session_id is None else read_cursor(folder, session_id)
        n = doc.chunks
        if first is not None:
            doc.span(first, last)  # raises on a range the document does not have
        if budget < 1:
            raise InvalidInput(f"budget_tokens must be positive, not {budget}")
        tables = self.tables(doc)
        opening = None
        if line is not None:
            if first is not None:
                raise InvalidInput("give from (a chunk) or line (a source line), not both")
            lines = self.line_count(doc)
            if not 1 <= line <= lines:
                raise InvalidInput(f"line={line} is out of range: {doc.id!r} has lines 1-{lines}")
            opening = max(1, line - LINE_CONTEXT)
            first = tables.chunk_of(opening)
        start = first if first is not None else (0 if reset else cursor)
        if last is not None and last < start:
            raise InvalidInput(
                f"to ({last}) is before the cursor ({start}); pass from, or reset=true"
            )
        if start >= n:
            return Window(doc, (), False, cursor, True, 0, session_id)
        stop = n - 1 if last is None else min(last, n - 1)
        room = budget - reserve
        costs = tables.tokens()[start : stop + 1] * self.scale(doc)
        chunks = tables.read(start, start + max(1, leading(costs, room)) - 1)
        if opening is not None:
            chunks[0] = from_line(chunks[0], opening)
        kept, used, truncated = fit_chunks(chunks, room, label, self.counter)
        grow = 1  # stored counts hold colour codes and zero bytes: read on while all fit
        while not truncated and len(kept) == len(chunks) <= stop - start:
            more = max(grow, leading(costs[len(chunks) :], room - used))
            chunks += tables.read(start + len(chunks), min(stop, start + len(chunks) + more - 1))
            kept, used, truncated = fit_chunks(chunks, room, label, self.counter)
            grow *= 2
        end = kept[-1].index
        try:
            if move_cursor and session_id is None:
                doc = self.update_meta(doc.id, expect=doc.sha256, cursor=end + 1)
            elif move_cursor and session_id is not None:
                with self.guard():  # not into a forgotten or a newer version's folder
                    if self.read_meta(doc.id) is None:
                        raise NotFound(
                            f"document {doc.id!r} was forgotten meanwhile", remedy=LIST_DOCUMENTS
                        )
                    write_cursor(folder, session_id, end + 1)
        except OSError as exc:  # a read-only data dir still pages, without a cursor
            if not unwritable(exc):
                raise
            move_cursor = False
        done = end + 1 >= n
        return Window(
            doc, tuple(kept), truncated, end + 1, done, used + reserve, session_id, move_cursor
        )

    @_steady
    def line_count(self, doc: DocInfo) -> int:
        """How many lines the source has (a final newline ends the last line)."""
        tables = self.tables(doc)
        last = tables.read(doc.chunks - 1, doc.chunks - 1)[0]
        return max(1, last.line) + last.text.count("\n") - last.text.endswith("\n")

    def source_state(self, doc: DocInfo) -> SourceState:
        """Whether ``doc``'s source file changed since ingest (see ``docfresh``)."""
        state = source_state(doc, self.ingest_roots, self.max_file_bytes)
        if state.mtime_ns is not None and doc.source_stat is not None:
            with self._lock:  # touched, not changed: record the new mtime so it is hashed once
                meta = self.read_meta(doc.id)
                if meta is not None and meta.get("sha256") == doc.sha256:
                    stat = {"size": doc.source_stat[0], "mtime_ns": state.mtime_ns}
                    self.update_meta(doc.id, source_stat=stat)
        return state

    @_steady
    def outline(self, doc: DocInfo) -> list[tuple[int, str, int]]:
        """(index, heading trail, tokens) of every chunk, from the chunk table alone."""
        tables = self.tables(doc)
        scale = self.scale(doc)
        tokens = tables.tokens()
        return [
            (i, tables.heading(i), math.ceil(int(tokens[i]) * scale)) for i in range(doc.chunks)
        ]
