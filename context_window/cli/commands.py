"""The command line's commands for people: look at the data dir, export and import.

Each is a :class:`Command`: its arguments and a runner that prints what the library
returns. Only ``import`` and ``purge`` write. Library modules are imported inside the
runners so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from context_window.config import Settings
from context_window.errors import ConfigError
from context_window.wording import plural

if TYPE_CHECKING:
    from context_window.cli.catalog import Catalog

Runner = Callable[[Settings, argparse.Namespace], int]


def _no_arguments(_parser: argparse.ArgumentParser) -> None:
    """A command without arguments of its own."""


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, help line, its own arguments, and the function that runs it."""

    name: str
    help: str
    run: Runner
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    creates_data_dir: bool = False  # read-only commands must never create it


def _out(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _json(obj: Any) -> None:
    _out(json.dumps(obj, ensure_ascii=False, indent=2))


def _catalog(settings: Settings) -> Catalog:
    """The data dir to read; ConfigError if it does not exist (a typo is not "no sessions")."""
    from context_window.cli.catalog import Catalog
    from context_window.tokens import TokenCounter

    if not settings.data_dir.is_dir():
        state = "is not a directory" if settings.data_dir.exists() else "does not exist"
        raise ConfigError(
            f"the data dir {settings.data_dir} {state}: check --data-dir or "
            "CTX_DATA_DIR (a server creates it on its first start)"
        )
    return Catalog(settings.data_dir, TokenCounter(settings.token_ratio), settings.budget)


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def _sessions(settings: Settings, ns: argparse.Namespace) -> int:
    from context_window.cli import views

    catalog = _catalog(settings)
    rows = catalog.sessions()
    _json(views.sessions_json(rows)) if ns.json else _out(views.sessions_view(rows))
    _note_unreadable(catalog)
    return 0


def _note_unreadable(catalog: Catalog) -> None:
    """One stderr line per session or document a listing or search had to skip."""
    for sid, why in sorted(catalog.unreadable.items()):
        sys.stderr.write(
            f"context-window: skipped session {sid!r}, unreadable: {why} "
            "(see context-window doctor)\n"
        )
    for did, why in sorted(catalog.damaged.items()):
        sys.stderr.write(
            f"context-window: skipped document {did!r}: {why} (see context-window doctor)\n"
        )


def _show_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION", help="the session id")
    p.add_argument("--all", action="store_true", help="include superseded and deleted entries")
    _json_flag(p)


def _show(settings: Settings, ns: argparse.Namespace) -> int:
    from context_window.cli import views

    catalog = _catalog(settings)
    session = catalog.session(ns.session)
    entries = session.entries(include_hidden=ns.all)
    if ns.json:
        _json(views.session_json(session, entries))
    else:
        _out(views.session_view(session, entries, ns.all))
    return 0


def _docs(settings: Settings, ns: argparse.Namespace) -> int:
    from context_window.cli import views
    from context_window.documents.freshness import source_state

    catalog = _catalog(settings)
    docs = [  # a source's own folder is its root: a person may read any file
        (d, source_state(d, [Path(d.source).parent], settings.max_file_bytes))
        for d in catalog.documents_store.all()
    ]
    _json(views.documents_json(docs)) if ns.json else _out(views.documents_view(docs))
    for doc_id, why in catalog.documents_store.unreadable().items():
        sys.stderr.write(
            f"context-window: skipped document {doc_id!r}: damaged meta.json ({why}) "
            "(see context-window doctor)\n"
        )
    return 0


def _search_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", metavar="QUERY", help="words to look for (BM25)")
    p.add_argument("--session", metavar="ID", help="search only this session")
    p.add_argument("--doc", metavar="ID", help="search only this document")
    p.add_argument(
        "--limit", metavar="N", type=int, default=10, help="at most N entries and N hits"
    )
    _json_flag(p)


def _search(settings: Settings, ns: argparse.Namespace) -> int:
    from context_window.cli import views

    catalog = _catalog(settings)
    found = catalog.search(ns.query, session_id=ns.session, doc_id=ns.doc, limit=ns.limit)
    _json(views.search_json(found)) if ns.json else _out(views.search_view(found))
    _note_unreadable(catalog)
    return 0


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", choices=["session", "doc"], help="what to export")
    p.add_argument("id", metavar="ID", help="the session or document id")
    p.add_argument(
        "--format", choices=["jsonl", "md"], default="jsonl", help="file format (default jsonl)"
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")


def _export(settings: Settings, ns: argparse.Namespace) -> int:
    from context_window.cli.archive import export_document, export_session, write_export
    from context_window.cli.progress import Meter

    catalog = _catalog(settings)
    export = export_session if ns.kind == "session" else export_document
    target = Path(ns.output) if ns.output else None
    with Meter(f"export {ns.kind} {ns.id}") as meter:
        done = write_export(
            target, sys.stdout, lambda out: export(catalog, ns.id, ns.format, out, meter)
        )
    if done.skipped:
        lines = plural(done.skipped, "unreadable or invalid journal line")
        sys.stderr.write(f"context-window: skipped {lines} (see context-window doctor)\n")
    if target is not None:
        what = plural(done.records, "record" if done.kind == "session" else "chunk")
        sys.stderr.write(f"exported {done.kind} {done.id} ({what}) to {target}\n")
    return 0


def _import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a file written by context-window export")
    new = p.add_mutually_exclusive_group()
    new.add_argument("--session-id", metavar="NEW", help="import the session under this id")
    new.add_argument("--doc-id", metavar="NEW", help="import the document under this id")
    p.add_argument(
        "--replace", action="store_true", help="overwrite a session or document with that id"
    )


def _import(settings: Settings, ns: argparse.Namespace) -> int:
    from context_window.cli.archive import ChunkSettings, import_file
    from context_window.cli.progress import Meter

    chunking = ChunkSettings(
        settings.chunk_tokens,
        settings.chunk_overlap,
        settings.token_ratio,
        settings.max_file_bytes,
    )
    with Meter(f"import {Path(ns.file).name}") as meter:
        done = import_file(
            Path(ns.file),
            settings.data_dir,
            session_id=ns.session_id,
            doc_id=ns.doc_id,
            replace=ns.replace,
            chunking=chunking,
            progress=meter,
        )
    what = plural(done.records, "entry" if done.kind == "session" else "chunk")
    verb = "replaced" if done.replaced else "imported"
    _out(f"{verb} {done.kind} {done.id} ({what}): {done.title}")
    if done.duplicate_of:
        _out(f"note: document {done.duplicate_of} holds the same text")
    return 0


def _ingest_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", type=Path, help="the text file to ingest")
    p.add_argument("--doc-id", metavar="ID", help="create or replace this id (default: new)")
    p.add_argument("--title", metavar="TITLE", help="the document's title (default: its name)")


def _ingest(settings: Settings, ns: argparse.Namespace) -> int:
    """Ingest a file a person names: its own folder is the ingest root for this call."""
    from context_window.cli.progress import Meter
    from context_window.documents.reingest import describe
    from context_window.service import Service

    try:  # a name too long, a symlink loop or a folder not searchable: one line too
        path = ns.file.expanduser().resolve()
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError(f"no such file: {ns.file}") from None
    except (OSError, RuntimeError) as exc:  # RuntimeError: resolve's loop (Python < 3.13)
        raise ConfigError(f"cannot read {ns.file}: {getattr(exc, 'strerror', exc)}") from None
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{ns.file} is not a regular file (a folder? ingest one file at a time)")
    service = Service(settings.with_changes(ingest_roots=(path.parent,), llm_enabled=False))
    with Meter(f"ingest {path.name}") as meter:
        done = service.documents.ingest(
            file_path=str(path), title=ns.title, doc_id=ns.doc_id or None, progress=meter
        )
    doc = done.doc
    verb = "replaced" if done.replaced else ("kept" if done.reused else "ingested")
    _out(
        f"{verb} {doc.id}: {doc.title} ({plural(doc.chunks, 'chunk')}, "
        f"{plural(doc.tokens, 'token')}, {done.seconds:.2f} s)"
    )
    if done.kept is not None:  # what a replacement kept, as doc_ingest says it
        _out(describe(done.kept))
    if done.reused:
        _out("note: this text was ingested already; no copy was made")
    elif done.duplicate_of:
        _out(f"note: document {done.duplicate_of} holds the same text")
    return 0


def _purge_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION", help="the session id")
    p.add_argument(
        "--dry-run", action="store_true", help="report what would be erased, change nothing"
    )


def _purge(settings: Settings, ns: argparse.Namespace) -> int:
    from context_window.cli import views

    session = _catalog(settings).session(ns.session)
    done = session.purge(dry_run=ns.dry_run)
    _out(views.purge_view(session.id, done, ns.dry_run))
    return 0


def _window_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("doc", metavar="DOC", help="the document id")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--line", metavar="N", type=int, help="open three lines above source line N")
    where.add_argument("--from", dest="first", metavar="I", type=int, help="the first chunk")
    p.add_argument("--to", dest="last", metavar="J", type=int, help="the last chunk")


def _window(settings: Settings, ns: argparse.Namespace) -> int:
    from context_window.cli import views
    from context_window.documents.tables import window_label

    catalog = _catalog(settings)
    doc = catalog.document(ns.doc)
    window = catalog.documents_store.window(
        doc.id,
        first=ns.first,
        last=ns.last,
        budget=settings.budget,
        reset=True,  # from the start unless told where: a person's read moves no cursor
        line=ns.line,
        label=window_label,
        move_cursor=False,
    )
    _out(views.window_view(window))
    return 0


DATA_COMMANDS: tuple[Command, ...] = (
    Command("sessions", "list every session, newest first", _sessions, _json_flag),
    Command("show", "print a session's entries in time order", _show, _show_arguments),
    Command("docs", "list every ingested document", _docs, _json_flag),
    Command("search", "search sessions and documents (BM25)", _search, _search_arguments),
    Command(
        "window",
        "page through a document from a line or a chunk, as doc_window does",
        _window,
        _window_arguments,
    ),
    Command(
        "export", "export a session or document as JSONL or Markdown", _export, _export_arguments
    ),
    Command("import", "import a file written by export", _import, _import_arguments),
    Command(
        "ingest",
        "ingest a text file as a document (as doc_ingest does)",
        _ingest,
        _ingest_arguments,
        creates_data_dir=True,
    ),
    Command(
        "purge",
        "erase a session's deleted and expired entries from its log",
        _purge,
        _purge_arguments,
    ),
)
