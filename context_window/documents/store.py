"""The document store: ingest, list, forget, search, page with a cursor, cache summaries.

A document lives in ``<data>/documents/<id>/`` (layout in ``build`` and
``index``). Only directories with a valid ``meta.json`` are documents; hidden
``.tmp-*`` and ``.trash-*`` directories are work in progress or leftovers. Reads
touch only what they need: the chunk table and index are memory-mapped, and chunk
texts are read from ``source.txt`` by byte offset, never the whole file.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from context_window.documents.answers import Answer
from context_window.documents.build import (
    CHILD_MIN_CHARS,
    MAX_STRUCTURED_CHARS,
    SEGMENT_CHARS,
    BuildSpec,
    Copied,
    Progress,
    build,
    build_file,
    copy_source,
    encode_text,
    no_progress,
    sha256_of,
)
from context_window.documents.cursors import all_cursors, read_cursor, write_cursor
from context_window.documents.freshness import INLINE_SOURCE, SourceState, source_state
from context_window.documents.index import Corpus, OldIndex
from context_window.documents.ranking import (
    CANDIDATE_CHUNKS,
    Ranked,
    best_passages,
    hits_of,
    ranked_chunks,
)
from context_window.documents.reingest import carry_cursors, chunk_settings, compare
from context_window.documents.sandbox import open_file
from context_window.documents.tables import (
    DocInfo,
    Ingested,
    Kept,
    Tables,
    Window,
)
from context_window.errors import (
    INGEST_FIRST,
    LIST_DOCUMENTS,
    REINGEST,
    InvalidInput,
    NotFound,
    StorageError,
)
from context_window.models import Chunk, Hit
from context_window.packing import fit_chunks, leading
from context_window.retrieval.analyzer import Analyzer, QueryLimits
from context_window.storage import (
    Journal,
    check_id,
    file_stamp,
    new_id,
    read_json,
    recover_replaced,
    replace_dir,
    replace_lock,
    storage_error,
    subdirs,
    sweep_work,
    work_dir,
    write_json_atomic,
)
from context_window.titles import check_title, clean_title, first_line
from context_window.tokens import TokenCounter

MAX_CHARS = 20_000_000  # inline text: it travels through the protocol
MAX_FILE_BYTES = 2048 * 1024 * 1024  # files: read from disk, indexed in segments
COPY_BLOCK = 1 << 20  # a stored source is re-read this much at a time
LINE_CONTEXT = 3  # lines shown above the one doc_window(line=N) opens at
SETTLED_NS = 100_000_000  # a listing is reused once the directory is this much older
COARSE_SETTLED_NS = 3_000_000_000  # the same where mtimes fall on whole seconds (FAT: 2 s)
log = logging.getLogger("context_window")


P = ParamSpec("P")
R = TypeVar("R")


def _steady(
    read: Callable[Concatenate[DocumentStore, P], R],
) -> Callable[Concatenate[DocumentStore, P], R]:
    """A read that, if it fails on the files (another process may have replaced or forgot
    the document under it), runs once more under ``guard``, when no replace can happen,
    on the document as it is now. Readers see the old version or the new one; a document
    that is really damaged fails the second time too."""

    @functools.wraps(read)
    def wrapper(store: DocumentStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        def again() -> R:
            if args and isinstance(args[0], DocInfo):  # the caller's copy may be stale
                fresh = (store.get(args[0].id), *args[1:])
                return read(store, *fresh, **kwargs)  # type: ignore[arg-type]
            return read(store, *args, **kwargs)

        return store.retried(lambda: read(store, *args, **kwargs), again)

    return wrapper


@dataclass(frozen=True)
class _Source:
    """Where an ingest's text comes from, as ``DocumentStore._ingest`` needs it."""

    name: str  # what meta.json's "source" says: the file's resolved path, or INLINE_SOURCE
    default_title: str
    max_chars: int
    mtime_ns: int | None = None  # a file's, recorded to tell when it changes
    place: Callable[[Path], tuple[str, int]] | None = None  # copies a file in: (sha256, size)
    sha256: str = ""  # inline text's, known before anything is written
    size: int = 0


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= 1000:
        raise InvalidInput(f"limit must be between 1 and 1000, not {limit}")


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
        self._large = (child_min_chars, max_structured_chars)  # see BuildSpec
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
        self._analyzer = Analyzer(query_limits)

    def recover(self) -> list[str]:
        """Put back every document whose replace a crash interrupted, and remove the work
        directories of ingests no living process holds; returns the restored ids.

        An explicit step at start-up (``Service`` takes it), never a side effect of
        opening the store: the CLI's read-only commands only report such leftovers.
        """
        if not self.root.is_dir():
            return []
        restored = recover_replaced(self.root)  # a replace killed between its renames
        for doc_id in restored:
            log.warning("restored document %r: a replace of it was interrupted", doc_id)
        sweep_work(self.root)
        return restored

    def _meta(self, doc_id: str) -> dict[str, Any] | None:
        """A document's meta.json if it is valid (a copy: callers may change it)."""
        found = self._parsed(doc_id)
        return None if found is None else dict(found[0])

    def _parsed(self, doc_id: str) -> tuple[dict[str, Any], DocInfo] | None:
        """meta.json and its DocInfo, parsed again only when the file changed (its inode,
        mtime or size: every write replaces it), so listing many documents costs a stat
        each."""
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
        """Every complete document, for a search over all of them, with a stat of the
        documents directory alone while it is unchanged.

        A document is added, replaced or forgotten only by a rename in that directory,
        which changes its mtime; what changes in place (a cursor, a summary, a title
        an import restores) is not what a search reads, and hits take their titles
        from ``meta`` afresh. A listing is reused only once the directory's mtime is
        ``SETTLED_NS`` older than the listing: a file system's clock ticks coarsely,
        and a change in the same tick as the listing would keep the same mtime. An
        mtime on a whole second may come from a file system that keeps no fractions
        (FAT, ext3, HFS+): then the wait is ``COARSE_SETTLED_NS``.
        """
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

    def unreadable(self) -> list[str]:
        """Ids of document directories ``all`` leaves out: no readable meta.json."""
        return sorted(name for name in subdirs(self.root) if self._meta(name) is None)

    def get(self, doc_id: str) -> DocInfo:
        """One document (NotFound with the known ids otherwise)."""
        check_id(doc_id, "doc_id")
        meta = self._meta(doc_id)
        if meta is None and self.root.is_dir():  # between a replace's two renames? wait for it
            with self.guard():
                meta = self._meta(doc_id)
        if meta is None:
            known = ", ".join(d.id for d in self.all()[:20]) or "none"
            raise NotFound(f"no document {doc_id!r}; known documents: {known}", remedy=INGEST_FIRST)
        return DocInfo.from_meta(meta)

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Hold the store against replaces, forgets and meta updates, in this process and
        in every other one (a flock on the documents directory); re-entrant per thread."""
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
        """Change fields of meta.json: read, change and write it atomically under ``guard``.

        With ``expect`` (a sha256), nothing is written unless the document still holds
        that text: a cursor or a summary of the old version must not land on a new one
        that another process ingested meanwhile. A forgotten document is never recreated.
        """
        with self.guard():
            meta = self._meta(doc_id)
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
                    self._reindex(doc)
                    tables = Tables(self.root / doc.id)
            except (OSError, ValueError, KeyError, IndexError, TypeError, EOFError) as exc:
                raise StorageError(
                    f"document {doc.id!r} has a damaged index ({exc})", remedy=REINGEST
                ) from exc
            self._tables[doc.id] = (doc.created_at, tables)
            return tables

    def stored(self, doc: DocInfo) -> tuple[dict[str, Any], bytes]:
        """The document's meta.json as stored and its source bytes, checked against the
        sha256 (StorageError if they no longer match: the document is damaged)."""
        folder = self.root / doc.id
        meta = self._meta(doc.id)
        if meta is None:
            raise NotFound(f"document {doc.id!r} was forgotten meanwhile", remedy=LIST_DOCUMENTS)
        try:
            data = (folder / "source.txt").read_bytes()
        except OSError as exc:
            raise StorageError(f"cannot read document {doc.id!r}: {exc.strerror}") from exc
        if doc.sha256 and sha256_of(data) != doc.sha256:
            raise StorageError(
                f"document {doc.id!r} is damaged: source.txt does not match its sha256",
                remedy=REINGEST,
            )
        return meta, data

    def stored_chunks(self, doc: DocInfo, text: str) -> Iterator[Chunk]:
        """The document's chunks as stored, one by one, cut from ``text`` (its source) by
        the chunk table; StorageError once a chunk's range does not lie within it."""
        tables = self.tables(doc)
        for i, row in enumerate(tables.table.tolist()):
            start, end, tokens, line = (int(v) for v in row)
            if not 0 <= start <= end <= len(text):
                raise StorageError(
                    f"document {doc.id!r} is damaged (chunk {i} is at {start}..{end} of a "
                    f"{len(text):,}-character source)",
                    remedy=REINGEST,
                )
            yield Chunk(i, text[start:end], tokens, start, end, tables.heading(i), line)

    def _reindex(self, doc: DocInfo) -> None:
        """Rebuild a document written by an older release from its stored source.

        Chunking is unchanged across index versions, so the chunks come out the same
        and the cursors, chunk summaries and meta.json fields carry over as they are.
        """
        folder = self.root / doc.id
        meta = self._meta(doc.id)
        if meta is None:
            raise NotFound(f"no document {doc.id!r}")
        log.info("re-indexing document %s (written by an older release)", doc.id)
        tokens, overlap, ratio = chunk_settings(
            meta, self.chunk_tokens, self.chunk_overlap, self.counter.ratio
        )
        spec = BuildSpec(
            doc.id,
            doc.title,
            doc.source,
            doc.sha256,
            tokens,
            overlap,
            ratio,
            (folder / "source.txt").stat().st_size + 1,
            None,
            self.segment_chars,
            *self._large,
        )
        with work_dir(self.root, doc.id) as work:
            try:
                work.mkdir(parents=True)
                with (folder / "source.txt").open("rb") as f:  # block by block, as at ingest
                    blocks = iter(functools.partial(f.read, COPY_BLOCK), b"")
                    copied = copy_source(blocks, work / "source.txt", doc.source)
                if doc.sha256 and copied.sha256 != doc.sha256:
                    raise StorageError(
                        f"document {doc.id!r} is damaged: source.txt does not match its sha256",
                        remedy=REINGEST,
                    )
                built = build_file(work, spec, copied, stored=True)
                if built["chunks"] != meta.get("chunks"):
                    raise StorageError(
                        f"document {doc.id!r} re-chunked differently; ingest it again"
                    )
                for name in ("summaries.jsonl", "cursors"):
                    if (folder / name).exists():
                        copy = shutil.copytree if (folder / name).is_dir() else shutil.copy2
                        copy(folder / name, work / name)
                write_json_atomic(work / "meta.json", {**meta, "terms": built["terms"]})
                self._commit(work, doc.id)
            except BaseException:
                shutil.rmtree(work, ignore_errors=True)
                raise

    def retried(self, first: Callable[[], R], again: Callable[[], R]) -> R:
        """``first()``; if it fails on the files, ``again()`` under ``guard`` (no replace or
        forget can run then) with no cached tables. See ``_steady``."""
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
                self._drop(doc_id)

    def _drop(self, doc_id: str) -> None:
        # Never close the mappings here: a reader in another thread may still be using
        # this table. Its terms.bin and arrays are unmapped when the last reference goes,
        # and a mapping stays valid after its file is renamed or unlinked.
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
        """Ingest inline text or a file under an ingest root; the same doc_id replaces.

        A replacement keeps the chunk settings the document was first ingested with,
        so unchanged text keeps its chunks; ``rechunk`` uses this store's settings.
        """
        started = time.perf_counter()
        if (text is None) == (file_path is None):
            raise InvalidInput("give exactly one source: text=... or file_path=..., not both")
        if doc_id is not None:
            check_id(doc_id, "doc_id")
        check_title(title)
        progress(0.0, "reading")
        if file_path is not None:
            with open_file(file_path, self.ingest_roots, self.max_file_bytes) as opened:
                copied: list[Copied] = []

                def place(work: Path) -> tuple[str, int]:
                    """Copy the file in, block by block: it is never in memory whole."""
                    work.mkdir(parents=True)
                    blocks = opened.blocks(self.max_file_bytes)
                    copied.append(copy_source(blocks, work / "source.txt", str(opened.path)))
                    return copied[0].sha256, copied[0].bytes

                def write_file(work: Path, spec: BuildSpec) -> None:
                    build_file(work, spec, copied[0], progress)

                name, max_chars = str(opened.path), self.max_file_bytes
                source = _Source(name, opened.path.name, max_chars, opened.mtime_ns, place)
                return self._ingest(source, title, doc_id, rechunk, write_file, started)
        assert text is not None
        if len(text) > self.max_chars:
            raise InvalidInput(f"text is {len(text):,} characters; the limit is {self.max_chars:,}")
        holder = [encode_text(text)]
        digest, size = sha256_of(holder[0]), len(holder[0])

        def write(work: Path, spec: BuildSpec) -> None:
            build(work, spec, holder, progress)

        source = _Source(INLINE_SOURCE, first_line(text), self.max_chars, None, None, digest, size)
        return self._ingest(source, title, doc_id, rechunk, write, started)

    def _ingest(
        self,
        source: _Source,
        title: str | None,
        doc_id: str | None,
        rechunk: bool,
        write: Callable[[Path, BuildSpec], None],
        started: float,
    ) -> Ingested:
        """Build a document in a work directory and rename it into place; a text another
        document holds already, with no doc_id asked for, returns that one instead. A
        file is first copied into the work directory (``source.place``), which tells its
        sha256; inline text is checked for a duplicate before anything is written."""
        digest, size = source.sha256, source.size
        same = self._same_content(digest, doc_id) if digest else None
        if same is not None and doc_id is None:
            return self._reused(same, source, size, started)
        final_id = doc_id or new_id("d")
        old_meta = self._meta(final_id) if doc_id is not None else None
        tokens, overlap, ratio = chunk_settings(
            None if rechunk else old_meta, self.chunk_tokens, self.chunk_overlap, self.counter.ratio
        )
        kept: Kept | None = None
        made = not self.root.exists()
        try:
            with work_dir(self.root, final_id) as work:
                try:
                    if source.place is not None:
                        digest, size = source.place(work)
                        same = self._same_content(digest, doc_id)
                        if same is not None and doc_id is None:
                            shutil.rmtree(work, ignore_errors=True)
                            return self._reused(same, source, size, started)
                    spec = BuildSpec(
                        final_id,
                        title or clean_title(source.default_title) or final_id,
                        source.name,
                        digest,
                        tokens,
                        overlap,
                        ratio,
                        source.max_chars,
                        source.mtime_ns,
                        self.segment_chars,
                        *self._large,
                    )
                    write(work, spec)
                    if old_meta is not None:
                        kept = self._carry_over(self.root / final_id, work)
                    replaced = self._commit(work, final_id)
                except BaseException:
                    shutil.rmtree(work, ignore_errors=True)
                    raise
        except OSError as exc:  # a full or read-only disk: say so, and leave nothing behind
            if made:
                shutil.rmtree(self.root, ignore_errors=True)
            raise storage_error(exc, f"cannot ingest document {final_id!r}") from exc
        doc = self.get(final_id)
        dup = same.id if same is not None else None
        return Ingested(doc, dup, False, replaced, time.perf_counter() - started, kept)

    def _same_content(self, digest: str, doc_id: str | None) -> DocInfo | None:
        """Another document holding the text whose sha256 is ``digest``, if any."""
        return next((d for d in self.all() if d.sha256 == digest and d.id != doc_id), None)

    def _reused(self, same: DocInfo, source: _Source, size: int, started: float) -> Ingested:
        """The document that holds this text already; when it came from this very file,
        its source is recorded as fresh again."""
        if source.mtime_ns is not None and same.source == source.name:
            same = self.update_meta(
                same.id, source_stat={"size": size, "mtime_ns": source.mtime_ns}
            )
        took = time.perf_counter() - started
        return Ingested(same, same.id, reused=True, replaced=False, seconds=took)

    def _carry_over(self, old: Path, work: Path) -> Kept | None:
        """Compare a replacement with the version it replaces and carry its cursors over."""
        try:
            kept = compare(old, work)
        except (OSError, ValueError, IndexError) as exc:  # a damaged old version: start afresh
            log.warning("cannot compare %s with its new version: %s", old.name, exc)
            return None
        carry_cursors(old, work, kept)
        return kept

    def _commit(self, work: Path, doc_id: str) -> bool:
        """Rename a finished build into place, replacing any earlier version."""
        with self.guard():
            self._drop(doc_id)
            try:
                old = replace_dir(work, self.root / doc_id, locked=True)
            except OSError as exc:
                raise StorageError(f"cannot move the new document into place: {exc}") from exc
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return old is not None

    def forget(self, doc_id: str) -> DocInfo:
        """Delete a document and everything derived from it."""
        doc = self.get(doc_id)
        with self.guard():
            self._drop(doc_id)
            trash = self.root / f".trash-{doc_id}-{secrets.token_hex(4)}"
            try:
                (self.root / doc_id).rename(trash)
            except OSError as exc:
                raise StorageError(f"cannot remove document {doc_id!r}: {exc}") from exc
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
        terms = self._analyzer.query(query or "")
        if not terms:
            raise InvalidInput(
                f"query {query!r:.60} has no searchable words (2+ letters or digits, "
                "not only stop words)"
            )
        return self._best_chunks(terms, doc_id, limit)[0]

    def _best_chunks(
        self, terms: list[str], doc_id: str | None, limit: int
    ) -> tuple[list[Hit], dict[str, Tables]]:
        """The best chunks for analysed ``terms``, and the tables of the documents searched."""
        _check_limit(limit)
        docs, tables, ranked = self._ranked(terms, doc_id, limit)
        hits = self._hits(docs, tables, ranked, doc_id is None)
        return hits, {d.id: t for d, t in zip(docs, tables, strict=True)}

    def _ranked(
        self, terms: list[str], doc_id: str | None, limit: int
    ) -> tuple[list[DocInfo], list[Tables], Ranked]:
        """The documents searched, their tables, and their ``limit`` best chunks ranked
        (the caller has checked the limit it was given)."""
        docs = [self.get(doc_id)] if doc_id is not None else self._searchable()
        tables = [self.tables(d) for d in docs]
        return docs, tables, ranked_chunks(self._corpus(tables), terms, limit)

    def _hits(
        self, docs: list[DocInfo], tables: list[Tables], ranked: Ranked, fresh: bool
    ) -> list[Hit]:
        """The ``ranked`` chunks read; with ``fresh``, titled as meta.json holds them now
        (a search over every document lists them from a listing, see ``_searchable``)."""
        hits = hits_of(docs, tables, ranked)
        if fresh:
            parsed = {h.doc_id: self._parsed(h.doc_id) for h in hits}
            hits = [
                replace(h, title=found[1].title) if (found := parsed[h.doc_id]) else h for h in hits
            ]
        return hits

    def _corpus(self, tables: list[Tables]) -> Corpus:
        """The indexes of ``tables`` joined: the last one built while it was built from
        these very tables (a document ingested, replaced or forgotten makes a new one)."""
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

    @_steady
    def answer(
        self, query: str, doc_id: str | None, limit: int, budget: int, reserve: int = 0
    ) -> Answer | None:
        """The best passages for ``query`` within ``budget`` (see ``docsearch``).

        None when the query has no searchable terms.
        """
        terms = self._analyzer.query(query or "")
        if not terms:
            return None
        _check_limit(limit)
        # Ranked once, read as needed: the best k chunks are the best k of any more.
        top = max(limit, CANDIDATE_CHUNKS)
        docs, tables, ranked = self._ranked(terms, doc_id, top)
        searched = {d.id: t for d, t in zip(docs, tables, strict=True)}
        # Read CANDIDATE_CHUNKS chunks. While most chunks read earn a hit of their own,
        # a higher limit can show more: read twice as many (up to the limit) and redo.
        # Where most do not, their lines repeat those shown, as further chunks' would.
        # When all the chunks ranked fit in the budget together, read them at once.
        whole = sum(int(tables[k].tokens()[i]) for _, k, i in ranked)
        want = len(ranked) if whole <= budget - reserve else CANDIDATE_CHUNKS
        hits: list[Hit] = []
        while True:
            hits += self._hits(docs, tables, ranked[len(hits) : want], doc_id is None)
            shown = {d: searched[d] for d in sorted({h.doc_id for h in hits})}
            found = best_passages(
                hits, shown, terms, self._analyzer, self.counter, limit, budget, reserve
            )
            if want >= limit or len(hits) < want or 2 * len(found.hits) <= len(hits):
                return found
            want = min(limit, 2 * want)

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
    ) -> Window:
        """Chunks in order from ``first`` (default: the cursor) within budget; moves the cursor.

        With ``line``, the window opens ``LINE_CONTEXT`` lines above that source line.
        Each chunk costs its text, its ``label`` line and a separator; ``reserve``
        tokens are kept for the caller's header, so the whole answer fits ``budget``.
        With ``session_id`` the cursor is that session's own (see ``doccursors``),
        else the document's shared cursor in meta.json.
        """
        doc = self.get(doc_id)
        folder = self.root / doc.id
        cursor = doc.cursor if session_id is None else read_cursor(folder, session_id)
        n = doc.chunks
        if first is not None and not 0 <= first < n:
            raise InvalidInput(
                f"from={first} is out of range: document {doc.id!r} has {n} chunks (0-{n - 1})"
            )
        if last is not None and first is not None and last < first:
            raise InvalidInput(f"to ({last}) is before from ({first}); give to >= from")
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
        fits = leading(costs, room)
        chunks = tables.read(start, start + max(1, fits) - 1)
        if opening is not None:
            chunks[0] = _from_line(chunks[0], opening)

        kept, used, truncated = fit_chunks(chunks, room, label, self.counter)
        end = kept[-1].index
        if session_id is None:
            doc = self.update_meta(doc.id, expect=doc.sha256, cursor=end + 1)
        else:
            with self.guard():  # not into a forgotten or a newer version's folder
                if self._meta(doc.id) is None:
                    raise NotFound(
                        f"document {doc.id!r} was forgotten meanwhile", remedy=LIST_DOCUMENTS
                    )
                write_cursor(folder, session_id, end + 1)
        return Window(
            doc, tuple(kept), truncated, end + 1, end + 1 >= n, used + reserve, session_id
        )

    @_steady
    def line_count(self, doc: DocInfo) -> int:
        """How many lines the source has (a final newline ends the last line)."""
        tables = self.tables(doc)
        last = tables.read(doc.chunks - 1, doc.chunks - 1)[0]
        return max(1, last.line) + last.text.count("\n") - last.text.endswith("\n")

    def session_cursors(self, doc: DocInfo) -> dict[str, int]:
        """The per-session cursors stored for ``doc``, by session id."""
        return all_cursors(self.root / doc.id)

    def source_state(self, doc: DocInfo) -> SourceState:
        """Whether ``doc``'s source file changed since ingest (see ``docfresh``)."""
        state = source_state(doc, self.ingest_roots, self.max_file_bytes)
        if state.mtime_ns is not None and doc.source_stat is not None:
            with self._lock:  # touched, not changed: record the new mtime so it is hashed once
                meta = self._meta(doc.id)
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

    def analyzer_terms(self, text: str) -> list[str]:
        """Index terms of ``text`` as queries see them."""
        return self._analyzer.terms(text)

    def chunk_summaries(self, doc: DocInfo) -> dict[int, dict[str, Any]]:
        """Cached one-line chunk summaries of ``doc`` by chunk index."""
        journal = Journal(self.root / doc.id / "summaries.jsonl")
        if not journal.path.exists():
            return {}
        with journal.locked():
            records = journal.read_new()
        return {int(r["index"]): r for r in records if isinstance(r.get("index"), int)}

    def save_chunk_summaries(self, doc: DocInfo, records: list[dict[str, Any]]) -> None:
        """Append one-line chunk summaries to the cache."""
        if not records or not (self.root / doc.id).is_dir():
            return
        journal = Journal(self.root / doc.id / "summaries.jsonl")
        with journal.locked():
            journal.read_new()
            journal.write(records)


def _from_line(chunk: Chunk, line: int) -> Chunk:
    """``chunk`` without the lines before source line ``line`` (if it holds them)."""
    pos = 0
    for _ in range(line - max(chunk.line, 1)):
        pos = chunk.text.find("\n", pos) + 1
        if pos == 0:
            return chunk
    return replace(chunk, text=chunk.text[pos:], start=chunk.start + pos, line=line)
