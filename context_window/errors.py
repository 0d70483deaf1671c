"""The errors context-window raises, each carrying a message a model can act on.

Hierarchy::

    ContextWindowError          base; ``str(err)`` is the user-facing message
    ├── InvalidInput            a bad argument: wrong range, bad id, too large
    ├── NotFound                an unknown session, entry or document
    ├── AccessDenied            a path outside the ingest roots, or not a regular file
    ├── StorageError            the data dir could not be read or written
    │   └── Busy                a session or store is held by another call or process
    ├── UpstreamError           the LLM endpoint failed (mapped once in ``llm.py``)
    └── ConfigError             invalid settings (the CLI exits with status 2)

A message states facts: what kind of thing, its id, the ids that do exist. It never
names a tool or a command. What can be done about it is a ``remedy``, one of the names
below, which each edge words its own way (``server.adapters.ADVICE`` for the model,
``cli.main.ADVICE`` for a person). The server layer maps every one of these errors to a
tool error in one place; anything else is a bug, logged with its traceback and reported
generically.
"""

from __future__ import annotations

# Remedies: what the reader can do, named for no edge. ``facts`` fill in the wording.
SPLIT_OR_INGEST = "split-or-ingest"  # a note too long for a session
FIND_ENTRY = "find-entry"  # an unknown entry id
FIND_COMPACTION = "find-compaction"  # an unknown compaction id
UNCOMPACT_FIRST = "uncompact-first"  # facts: compaction_id, the one to undo first
REDO_COMPACTION = "redo-compaction"  # a compaction already undone
RETRY = "retry"  # the state changed under the call; nothing was done
OPEN_SESSION = "open-session"  # an unknown session
LIST_DOCUMENTS = "list-documents"  # a document gone meanwhile
INGEST_FIRST = "ingest-first"  # an unknown document
REINGEST = "reingest"  # a damaged document
SET_INGEST_ROOT = "set-ingest-root"  # a file named, but no ingest root configured
REMEDIES = (
    SPLIT_OR_INGEST,
    FIND_ENTRY,
    FIND_COMPACTION,
    UNCOMPACT_FIRST,
    REDO_COMPACTION,
    RETRY,
    OPEN_SESSION,
    LIST_DOCUMENTS,
    INGEST_FIRST,
    REINGEST,
    SET_INGEST_ROOT,
)


class ContextWindowError(Exception):
    """Base class: the message is meant to be read by a model or a person.

    ``remedy`` (one of ``REMEDIES``, or None) and the ``facts`` its wording needs are
    for the edge that shows the error: see ``advised``.
    """

    def __init__(self, message: str = "", *, remedy: str | None = None, **facts: str) -> None:
        super().__init__(message)
        self.remedy = remedy
        self.facts = facts


def advised(exc: ContextWindowError, advice: dict[str, str]) -> str:
    """The error's message followed by the edge's wording of its remedy (if any).

    Each wording starts with its own separator ("; ", ". " or ": ") and may name ``facts``
    as ``{name}``.
    """
    wording = advice.get(exc.remedy or "", "")
    return str(exc) + wording.format(**exc.facts)


class InvalidInput(ContextWindowError):
    """An argument is malformed or out of range."""


class NotFound(ContextWindowError):
    """A named session, entry or document does not exist."""


class AccessDenied(ContextWindowError):
    """A file may not be read: outside every ingest root, or not a regular file."""


class StorageError(ContextWindowError):
    """The data directory could not be read or written."""


class Busy(StorageError):
    """A lock was not free within its wait: the caller should try again shortly."""


class UpstreamError(ContextWindowError):
    """The OpenAI-compatible endpoint was unreachable or answered badly."""


class ConfigError(ContextWindowError):
    """A setting is invalid; the CLI reports it on one line and exits with 2."""
