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

The server layer maps every one of these to a tool error in one place; anything
else is a bug, logged with its traceback and reported generically.
"""

from __future__ import annotations


class ContextWindowError(Exception):
    """Base class: the message is meant to be read by a model or a person."""


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
