"""The errors context-window raises, each with a message a model can act on.

``ContextWindowError`` is the base; under it ``InvalidInput``, ``NotFound``,
``AccessDenied``, ``StorageError`` (and ``Busy``), ``UpstreamError`` and ``ConfigError``.
A message states facts and never names a tool; what can be done is a ``remedy`` that
each edge words its own way (``server.adapters.ADVICE``, ``cli.main.ADVICE``).
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
USE_ID = "use-id"  # facts: name (the argument), id (of what the title named)
REINGEST = "reingest"  # a damaged document
SET_INGEST_ROOT = "set-ingest-root"  # a file named, but no ingest root configured


class ContextWindowError(Exception):
    """Base class; ``remedy`` and its ``facts`` are worded by the edge (``advised``)."""

    def __init__(self, message: str = "", *, remedy: str | None = None, **facts: str) -> None:
        super().__init__(message)
        self.remedy = remedy
        self.facts = facts


def advised(exc: ContextWindowError, advice: dict[str, str]) -> str:
    """The message and the edge's wording of its remedy (own separator, ``{facts}``)."""
    wording = advice.get(exc.remedy or "", "")
    return str(exc) + wording.format(**exc.facts)


class InvalidInput(ContextWindowError):
    """An argument is malformed or out of range."""


def check_range(name: str, value: int, low: int, high: int) -> None:
    """InvalidInput unless ``low <= value <= high``."""
    if not low <= value <= high:
        raise InvalidInput(f"{name} must be between {low:,} and {high:,}, not {value}")


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
