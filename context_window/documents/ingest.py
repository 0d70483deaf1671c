"""Ingest: a document built in a work directory and renamed into place, whole.

A file is copied in block by block, which tells its sha256; a replacement keeps its
first chunk settings and carries its cursors. An older release's document is
re-indexed from its stored source.
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from context_window.documents.build import (
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
from context_window.documents.freshness import INLINE_SOURCE
from context_window.documents.reingest import carry_cursors, chunk_settings, compare
from context_window.documents.sandbox import open_file
from context_window.documents.tables import DocInfo, Ingested, Kept
from context_window.errors import REINGEST, InvalidInput, NotFound, StorageError
from context_window.retrieval.analyzer import readable
from context_window.storage import (
    check_id,
    new_id,
    replace_dir,
    storage_error,
    work_dir,
    write_json_atomic,
)
from context_window.titles import check_title, clean_title, first_line

if TYPE_CHECKING:
    from context_window.documents.store import DocumentStore

COPY_BLOCK = 1 << 20  # a stored source is re-read this much at a time
log = logging.getLogger("context_window")


@dataclass(frozen=True)
class _Source:
    """Where an ingest's text comes from, as ``_ingest`` needs it."""

    name: str  # what meta.json's "source" says: the file's resolved path, or INLINE_SOURCE
    default_title: str
    max_chars: int
    mtime_ns: int | None = None  # a file's, recorded to tell when it changes
    place: Callable[[Path], tuple[str, int]] | None = None  # copies a file in: (sha256, size)
    sha256: str = ""  # inline text's, known before anything is written
    size: int = 0


def ingest(
    store: DocumentStore,
    text: str | None = None,
    file_path: str | None = None,
    title: str | None = None,
    doc_id: str | None = None,
    progress: Progress = no_progress,
    *,
    rechunk: bool = False,
) -> Ingested:
    """Ingest inline text or a file; the same doc_id replaces (first settings unless rechunk)."""
    started = time.perf_counter()
    if (text is None) == (file_path is None):
        both = ", not both" if text is not None else ""
        raise InvalidInput(f"give exactly one source: text=... or file_path=...{both}")
    if doc_id is not None:
        doc_id = store.spelled(check_id(doc_id, "doc_id"))  # another case replaces it
    check_title(title)
    progress(0.0, "reading")
    if file_path is not None:
        with open_file(file_path, store.ingest_roots, store.max_file_bytes) as opened:
            copied: list[Copied] = []

            def place(work: Path) -> tuple[str, int]:
                """Copy the file in, block by block: it is never in memory whole."""
                work.mkdir(parents=True)
                blocks = opened.blocks(store.max_file_bytes)
                copied.append(copy_source(blocks, work / "source.txt", str(opened.path)))
                return copied[0].sha256, copied[0].bytes

            def write_file(work: Path, spec: BuildSpec) -> None:
                build_file(work, spec, copied[0], progress)

            name, max_chars = str(opened.path), store.max_file_bytes
            source = _Source(name, opened.path.name, max_chars, opened.mtime_ns, place)
            return _ingest(store, source, title, doc_id, rechunk, write_file, started)
    assert text is not None
    if len(text) > store.max_chars:
        raise InvalidInput(f"text is {len(text):,} characters; the limit is {store.max_chars:,}")
    holder = [encode_text(text)]
    digest, size = sha256_of(holder[0]), len(holder[0])

    def write(work: Path, spec: BuildSpec) -> None:
        build(work, spec, holder, progress)

    named = first_line(readable(text[:4000]))
    source = _Source(INLINE_SOURCE, named, store.max_chars, None, None, digest, size)
    return _ingest(store, source, title, doc_id, rechunk, write, started)


def _ingest(
    store: DocumentStore,
    source: _Source,
    title: str | None,
    doc_id: str | None,
    rechunk: bool,
    write: Callable[[Path, BuildSpec], None],
    started: float,
) -> Ingested:
    """Build a document and rename it into place, or return one holding the text already."""
    digest, size = source.sha256, source.size
    same = _same_content(store, digest, doc_id) if digest else None
    if same is not None and doc_id is None:
        return _reused(store, same, source, size, started)
    final_id = doc_id or new_id("d")
    old_meta = store.read_meta(final_id) if doc_id is not None else None
    tokens, overlap, ratio = chunk_settings(
        None if rechunk else old_meta, store.chunk_tokens, store.chunk_overlap, store.counter.ratio
    )
    kept: Kept | None = None
    made = not store.root.exists()
    try:
        with work_dir(store.root, final_id) as work:
            if source.place is not None:
                digest, size = source.place(work)
                same = _same_content(store, digest, doc_id)
                if same is not None and doc_id is None:
                    shutil.rmtree(work, ignore_errors=True)
                    return _reused(store, same, source, size, started)
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
                store.segment_chars,
                *store.large,
            )
            write(work, spec)
            if old_meta is not None:
                kept = _carry_over(store.root / final_id, work)
            # What was ingested, though another process may forget it once in place.
            doc = DocInfo.from_meta(json.loads((work / "meta.json").read_bytes()))
            replaced = _commit(store, work, final_id)
    except OSError as exc:  # a full or read-only disk: say so, and leave nothing behind
        if made:
            shutil.rmtree(store.root, ignore_errors=True)
        raise storage_error(exc, f"cannot ingest document {final_id!r}") from exc
    dup = same.id if same is not None else None
    return Ingested(doc, dup, False, replaced, time.perf_counter() - started, kept)


def _same_content(store: DocumentStore, digest: str, doc_id: str | None) -> DocInfo | None:
    """Another document holding the text whose sha256 is ``digest``, if any."""
    return next((d for d in store.all() if d.sha256 == digest and d.id != doc_id), None)


def _reused(
    store: DocumentStore, same: DocInfo, source: _Source, size: int, started: float
) -> Ingested:
    """The document holding this text already (from this file: its source fresh again)."""
    if source.mtime_ns is not None and same.source == source.name:
        same = store.update_meta(same.id, source_stat={"size": size, "mtime_ns": source.mtime_ns})
    took = time.perf_counter() - started
    return Ingested(same, same.id, reused=True, replaced=False, seconds=took)


def _carry_over(old: Path, work: Path) -> Kept | None:
    """Compare a replacement with the version it replaces and carry its cursors over."""
    try:
        kept = compare(old, work)
    except (OSError, ValueError, IndexError) as exc:  # a damaged old version: start afresh
        log.warning("cannot compare %s with its new version: %s", old.name, exc)
        return None
    carry_cursors(old, work, kept)
    return kept


def _commit(store: DocumentStore, work: Path, doc_id: str) -> bool:
    """Rename a finished build into place, replacing any earlier version."""
    with store.guard():
        store.drop_cached(doc_id)
        try:
            old = replace_dir(work, store.root / doc_id, locked=True)
        except OSError as exc:
            raise storage_error(exc, f"cannot move document {doc_id!r} into place") from exc
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return old is not None


def reindex(store: DocumentStore, doc: DocInfo) -> None:
    """Rebuild an older release's document from its source (cursors and meta carry over)."""
    folder = store.root / doc.id
    meta = store.read_meta(doc.id)
    if meta is None:
        raise NotFound(f"no document {doc.id!r}")
    log.info("re-indexing document %s (written by an older release)", doc.id)
    tokens, overlap, ratio = chunk_settings(
        meta, store.chunk_tokens, store.chunk_overlap, store.counter.ratio
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
        store.segment_chars,
        *store.large,
    )
    with work_dir(store.root, doc.id) as work:
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
            raise StorageError(f"document {doc.id!r} re-chunked differently; ingest it again")
        for name in ("summaries.jsonl", "cursors"):
            if (folder / name).exists():
                copy = shutil.copytree if (folder / name).is_dir() else shutil.copy2
                copy(folder / name, work / name)
        write_json_atomic(work / "meta.json", {**meta, "terms": built["terms"]})
        _commit(store, work, doc.id)
