"""Per-session document cursors: one small JSON file per session in ``<doc>/cursors/``,
written atomically, so no two sessions share a read-modify-write; ``doc_forget`` removes
them, a re-ingest carries them over."""

from __future__ import annotations

from pathlib import Path

from context_window.errors import LIST_DOCUMENTS, NotFound
from context_window.storage import check_id, read_json, write_json_atomic

CURSORS = "cursors"
_SUFFIX = ".json"


def cursor_path(doc_dir: Path, session_id: str) -> Path:
    """The cursor file of ``session_id`` in ``doc_dir`` (the id is checked first)."""
    return doc_dir / CURSORS / f"{check_id(session_id, 'session_id')}{_SUFFIX}"


def read_cursor(doc_dir: Path, session_id: str) -> int:
    """The session's cursor: 0 if it never paged (or its file is unreadable)."""
    data = read_json(cursor_path(doc_dir, session_id))
    value = data.get("cursor") if data is not None else None
    return value if isinstance(value, int) and value >= 0 else 0


def write_cursor(doc_dir: Path, session_id: str, value: int) -> None:
    """Store the session's cursor; NotFound if the document directory is gone."""
    path = cursor_path(doc_dir, session_id)
    try:
        path.parent.mkdir(exist_ok=True)  # never parents: a forgotten document stays gone
    except FileNotFoundError:
        raise NotFound(
            f"document {doc_dir.name!r} was forgotten or replaced", remedy=LIST_DOCUMENTS
        ) from None
    write_json_atomic(path, {"cursor": int(value)})


def all_cursors(doc_dir: Path) -> dict[str, int]:
    """Every session cursor stored for the document, by session id."""
    folder = doc_dir / CURSORS
    if not folder.is_dir():
        return {}
    found = {}
    for p in folder.iterdir():
        if p.suffix == _SUFFIX and not p.name.startswith("."):
            data = read_json(p)
            value = data.get("cursor") if data is not None else None
            if isinstance(value, int) and value >= 0:
                found[p.stem] = value
    return found
