"""Export a session or document from a data dir, and import an export into one.

Imports validate the whole file first; a session is written as a complete hidden
directory renamed into place, a document re-ingested with the chunk settings it was
exported with, so its chunks come out the same.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

from context_window.cli.archive_format import (
    FORMATS,
    DocumentArchive,
    SessionArchive,
    document_jsonl,
    document_markdown,
    invalid_record,
    parse,
    session_jsonl,
    session_markdown,
)
from context_window.cli.catalog import Catalog, read_journal
from context_window.config import recorded_chunk_settings
from context_window.documents.build import Progress, encode_text, no_progress, sha256_of
from context_window.documents.sandbox import decode_utf8
from context_window.documents.store import MAX_CHARS, DocumentStore
from context_window.documents.tables import DocInfo
from context_window.errors import (
    LIST_DOCUMENTS,
    REINGEST,
    InvalidInput,
    NotFound,
    StorageError,
)
from context_window.journal import jsonl_line
from context_window.localtime import time_or_none
from context_window.sessions.store import SessionStore
from context_window.storage import atomic_text, check_id, spelled
from context_window.titles import clean_title
from context_window.tokens import TokenCounter

T = TypeVar("T")


@dataclass(frozen=True)
class Exported:
    """What an export wrote: how many records (or chunks), and how many it left out."""

    kind: str
    id: str
    records: int
    skipped: int


@dataclass(frozen=True)
class Imported:
    """What an import created: a session (entries) or a document (chunks)."""

    kind: str
    id: str
    title: str
    records: int
    replaced: bool
    duplicate_of: str | None = None


@dataclass(frozen=True)
class ChunkSettings:
    """How an imported document is chunked when its export does not say."""

    chunk_tokens: int = 800
    chunk_overlap: int = 80
    ratio: float = 0.27
    max_bytes: int = 256 * 1024 * 1024


def counted(items: Iterable[T], total: int, progress: Progress, what: str) -> Iterator[T]:
    """``items`` as they are, reporting ``progress`` as the share of ``total`` taken."""
    step = max(1, total // 200)
    for i, item in enumerate(items):
        if i % step == 0:
            progress(i / max(1, total), f"{i:,} of {total:,} {what}")
        yield item
    progress(1.0, f"{total:,} {what}")


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(FORMATS)}, not {fmt!r:.20}")


def export_session(
    catalog: Catalog, session_id: str, fmt: str, out: TextIO, progress: Progress = no_progress
) -> Exported:
    """Write a session's meta and journal records (verbatim, in file order) to ``out``."""
    _check_format(fmt)
    session = catalog.session(session_id)
    records, unreadable = read_journal(session.journal.path)
    seen: set[str] = set()
    # An unusable time reads as unknown on replay and an import refuses it: left out.
    kept = [r for r in (_known_times(r) for r in records) if not invalid_record(r, seen)]
    written = counted(kept, len(kept), progress, "records")
    if fmt == "jsonl":
        out.writelines(session_jsonl(session.meta, written))
    else:
        states = {e.id: e for e in session.entries(include_hidden=True)}
        out.writelines(session_markdown(session.meta, written, states))
    return Exported("session", session.id, len(kept), unreadable + len(records) - len(kept))


def _known_times(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` without the time fields that are not times (see ``records``)."""
    bad = [k for k in ("created_at", "expires_at") if k in record and record[k] is not None]
    bad = [k for k in bad if time_or_none(record[k]) is None]
    return {k: v for k, v in record.items() if k not in bad} if bad else record


def _stored(store: DocumentStore, doc: DocInfo) -> tuple[dict[str, Any], bytes]:
    """The document's stored meta.json and source bytes, checked against the sha256."""
    meta = store.read_meta(doc.id)
    if meta is None:
        raise NotFound(f"document {doc.id!r} was forgotten meanwhile", remedy=LIST_DOCUMENTS)
    try:
        data = (store.root / doc.id / "source.txt").read_bytes()
    except OSError as exc:
        raise StorageError(f"cannot read document {doc.id!r}: {exc.strerror}") from exc
    if doc.sha256 and sha256_of(data) != doc.sha256:
        raise StorageError(
            f"document {doc.id!r} is damaged: source.txt does not match its sha256",
            remedy=REINGEST,
        )
    return meta, data


def export_document(
    catalog: Catalog, doc_id: str, fmt: str, out: TextIO, progress: Progress = no_progress
) -> Exported:
    """Write a document's meta and its chunks (jsonl) or its original text (md) to ``out``."""
    _check_format(fmt)
    doc = catalog.document(doc_id)
    store = catalog.documents_store
    meta, data = _stored(store, doc)
    text = decode_utf8(data, f"document {doc.id!r}")
    del data
    if fmt == "md":
        out.writelines(document_markdown(meta, text))
    else:
        chunks = (asdict(c) for c in store.tables(doc).cut(text))
        out.writelines(document_jsonl(meta, text, counted(chunks, doc.chunks, progress, "chunks")))
    return Exported("document", doc.id, doc.chunks, 0)


def write_export(
    target: Path | None, stdout: TextIO, produce: Callable[[TextIO], Exported]
) -> Exported:
    """Run ``produce`` on stdout, or on a temp file renamed to ``target`` once complete.
    A symlink is followed; a device or a pipe (``/dev/null``) is written into, never
    replaced, which root could otherwise do."""
    if target is None:
        return produce(stdout)
    try:
        if target.exists() and not target.is_file():  # /dev/null, a FIFO, /dev/stdout
            with target.open("w", encoding="utf-8", newline="") as f:
                return produce(f)
        with atomic_text(target.resolve()) as f:
            return produce(f)
    except OSError as exc:
        raise StorageError(f"cannot write {target}: {exc.strerror}") from exc


def import_file(
    path: Path,
    data_dir: Path,
    *,
    session_id: str | None = None,
    doc_id: str | None = None,
    replace: bool = False,
    chunking: ChunkSettings = ChunkSettings(),
    progress: Progress = no_progress,
) -> Imported:
    """Import a session or document export under its own id (or the one given)."""
    if session_id is not None and doc_id is not None:
        raise InvalidInput("give a new session id or a new document id, not both")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise NotFound(f"no such file: {path}") from None
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}") from None
    progress(0.0, f"reading {path.name}")
    archive = parse(decode_utf8(data, str(path)), str(path))
    del data
    if isinstance(archive, SessionArchive):
        if doc_id is not None:
            raise InvalidInput(f"{path} holds a session: give a new session id, not a doc id")
        progress(0.5, "writing the session")
        return _import_session(archive, data_dir, session_id, replace)
    if session_id is not None:
        raise InvalidInput(f"{path} holds a document: give a new doc id, not a session id")
    return _import_document(archive, data_dir, doc_id, replace, chunking, progress)


def _import_session(
    archive: SessionArchive, data_dir: Path, new_id: str | None, replace: bool
) -> Imported:
    store = SessionStore(data_dir, TokenCounter(1.0))  # nothing is counted: bytes are moved
    sid = spelled(store.root, check_id(new_id or str(archive.meta["id"]), "session id"))
    if store.exists(sid) and not replace:
        raise InvalidInput(
            f"session {sid!r} already exists in {data_dir}; pass --replace to overwrite it "
            "or --session-id to import it under another id"
        )
    now = time.time()
    title = archive.meta.get("title")
    meta = {
        **archive.meta,
        "id": sid,
        "title": (clean_title(title) if isinstance(title, str) else "") or sid,
        "created_at": _number(archive.meta.get("created_at"), now),
        "updated_at": _number(archive.meta.get("updated_at"), now),
    }
    try:
        payload = b"".join(jsonl_line(r) for r in archive.records)
    except UnicodeEncodeError:
        raise InvalidInput(
            "a record holds text that is not valid Unicode; nothing imported"
        ) from None
    replaced = store.install(meta, payload, replace=replace)
    entries = sum(1 for r in archive.records if r.get("kind") == "entry")
    return Imported("session", sid, str(meta["title"]), entries, replaced)


def _number(value: Any, default: float) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else default


def _import_document(
    archive: DocumentArchive,
    data_dir: Path,
    new_id: str | None,
    replace: bool,
    chunking: ChunkSettings,
    progress: Progress = no_progress,
) -> Imported:
    meta = archive.meta
    did = check_id(new_id or str(meta["id"]), "document id")
    data = encode_text(archive.text)
    digest = meta.get("sha256")
    if isinstance(digest, str) and digest and sha256_of(data) != digest:
        raise InvalidInput(
            "the document's text does not match the sha256 in its header (the file was "
            "changed or cut short); nothing was imported"
        )
    if len(data) > chunking.max_bytes:
        raise InvalidInput(
            f"the document is {len(data):,} bytes, more than the {chunking.max_bytes:,} "
            "allowed; raise --max-file-mb"
        )
    del data
    tokens, overlap, ratio = _chunk_settings(meta, chunking)
    store = DocumentStore(
        data_dir,
        TokenCounter(ratio),
        chunk_tokens=tokens,
        chunk_overlap=overlap,
        max_chars=max(MAX_CHARS, len(archive.text)),  # the limit is for text sent over MCP
    )
    did = store.spelled(did)
    with contextlib.suppress(NotFound):
        store.get(did)
        if not replace:
            raise InvalidInput(
                f"document {did!r} already exists in {data_dir}; pass --replace to overwrite "
                "it or --doc-id to import it under another id"
            )
    title = meta.get("title")  # an older release stored titles as they came: clean it
    title = clean_title(title) if isinstance(title, str) else None
    done = store.ingest(  # the export's chunk settings, even over a document chunked otherwise
        text=archive.text, title=title or None, doc_id=did, progress=progress, rechunk=True
    )
    keep = {k: meta[k] for k in ("source",) if isinstance(meta.get(k), str)}
    if isinstance(meta.get("summary"), dict):  # the cached summary of this very text
        keep["summary"] = meta["summary"]
    doc = store.update_meta(did, **keep) if keep else done.doc
    return Imported("document", did, doc.title, doc.chunks, done.replaced, done.duplicate_of)


def _chunk_settings(meta: dict[str, Any], default: ChunkSettings) -> tuple[int, int, float]:
    """The export's chunk size, overlap and token ratio when valid, else the defaults."""
    recorded = recorded_chunk_settings(meta)
    return recorded or (default.chunk_tokens, default.chunk_overlap, default.ratio)
