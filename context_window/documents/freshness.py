"""Whether a file-backed document still matches its source file on disk.

One stat per document: the same size and ``mtime_ns`` is fresh, another size changed,
no file missing. Only a new mtime at the same size is read again (through the sandbox)
and hashed, and the new mtime recorded. Inline text is never stale; documents ingested
without a stat are "unknown".
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from context_window.documents.sandbox import open_file, resolve_in_roots
from context_window.documents.tables import DocInfo
from context_window.errors import ContextWindowError, NotFound

INLINE_SOURCE = "inline text"
FRESH, CHANGED, MISSING, INLINE, UNKNOWN = "fresh", "changed", "missing", "inline", "unknown"


@dataclass(frozen=True)
class SourceState:
    """A document's source state; ``mtime_ns`` is set when a re-hash proved it unchanged."""

    state: str
    reason: str = ""
    mtime_ns: int | None = None


def source_state(doc: DocInfo, roots: Sequence[Path], max_bytes: int) -> SourceState:
    """Compare the document's recorded source stat with the file on disk now."""
    if doc.source_stat is None:
        if doc.source == INLINE_SOURCE:
            return SourceState(INLINE)
        return SourceState(UNKNOWN, "ingested before source files were tracked")
    size, mtime_ns = doc.source_stat
    try:
        now = resolve_in_roots(doc.source, roots).stat()
    except (NotFound, FileNotFoundError):
        return SourceState(MISSING, f"{doc.source} no longer exists")
    except (ContextWindowError, OSError) as exc:
        return SourceState(UNKNOWN, str(exc))
    if now.st_size != size:
        return SourceState(CHANGED, f"size {size:,} -> {now.st_size:,} bytes")
    if now.st_mtime_ns == mtime_ns:
        return SourceState(FRESH)
    digest = hashlib.sha256()
    try:
        with open_file(doc.source, roots, max_bytes) as opened:
            for block in opened.blocks(max_bytes):  # hashed as it is read: never held whole
                digest.update(block)
    except NotFound:
        return SourceState(MISSING, f"{doc.source} no longer exists")
    except ContextWindowError as exc:
        return SourceState(UNKNOWN, str(exc))
    except OSError as exc:
        return SourceState(UNKNOWN, f"cannot read {doc.source}: {exc.strerror}")
    if digest.hexdigest() != doc.sha256:
        return SourceState(CHANGED, "content differs (same size)")
    return SourceState(FRESH, "touched, content unchanged", opened.mtime_ns)
