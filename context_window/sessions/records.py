"""The journal's record schema, checked in one place: replay, import and doctor use it.

A journal is a file anyone can edit, and an import is a file anyone can craft. A
record that breaks the schema is skipped (structure: ids, text, sequence numbers, what
a summary folds) or served around (times: a time that is not a finite number in
range reads as unknown); either way it is counted, and doctor names it. Nothing in a
record may stop replay, listing, the CLI or doctor.
"""

from __future__ import annotations

from typing import Any

from context_window.localtime import time_or_none

MAX_SEQ = 2**53  # sequence numbers past this are not numbers a log can reach


def entry_problem(rec: dict[str, Any]) -> str | None:
    """Why an entry record must be skipped, or None if it can be replayed."""
    eid, text = rec.get("id"), rec.get("text")
    if not isinstance(eid, str) or not eid or not isinstance(text, str):
        return "entry without a string id and text"
    seq = rec.get("seq")  # a seq that is not a number is served around: the next one is used
    if isinstance(seq, int) and not isinstance(seq, bool) and not 0 <= seq < MAX_SEQ:
        return f"entry {eid:.40} has an impossible seq ({str(seq)[:20]}…)"
    replaces = rec.get("replaces")
    if replaces is not None:
        if not isinstance(replaces, list) or not all(isinstance(r, str) for r in replaces):
            return f"entry {eid:.40} has a malformed list of what it folds"
        if eid in replaces:
            return f"summary {eid:.40} folds itself"
    return None  # malformed tags are served around: they are dropped


def time_problems(rec: dict[str, Any]) -> list[str]:
    """The time fields of a record that read as unknown (the record itself is kept)."""
    out = []
    if "created_at" in rec and time_or_none(rec["created_at"]) is None:
        out.append(f"created_at {str(rec['created_at'])[:24]} is not a time")
    expires = rec.get("expires_at")
    if expires is not None and time_or_none(expires) is None:
        out.append(f"expires_at {str(expires)[:24]} is not a time")
    return out


def patch_problem(rec: dict[str, Any]) -> str | None:
    """Why a patch record must be skipped, or None."""
    if not isinstance(rec.get("id"), str):
        return "patch without a string id"
    for key in ("pinned", "deleted", "superseded"):
        if key in rec and not isinstance(rec[key], bool):
            return f"patch for {rec['id']!s:.40} has a non-boolean {key}"
    return None
