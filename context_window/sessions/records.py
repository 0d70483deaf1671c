"""The journal's record schema, checked in one place: replay, import and doctor use it.

A record that breaks it is skipped (ids, text, seq, what a summary folds) or served
around (a bad time reads as unknown), counted, and named by doctor: nothing in a
record may stop replay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from context_window.errors import SPLIT_OR_INGEST, InvalidInput
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


MAX_TEXT_CHARS = 200_000
MAX_TAGS = 10
MAX_TAG_CHARS = 40


def check_text(text: str, what: str = "text") -> str:
    """``text`` if it is a non-empty entry text within the limit, else InvalidInput."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(f"{what} must be a non-empty string")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidInput(
            f"{what} is {len(text):,} characters; the limit is {MAX_TEXT_CHARS:,}",
            remedy=SPLIT_OR_INGEST,
        )
    if "\x00" in text:
        raise InvalidInput(f"{what} contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: JSON allows it, UTF-8 does not
        raise InvalidInput(
            f"{what} has an unpaired surrogate at character {exc.start}; send valid Unicode"
        ) from None
    return text


def check_tags(tags: Sequence[str] | None) -> tuple[str, ...]:
    """Validated tags, de-duplicated in any case (at most 10, each 1-40 printable characters),
    without a leading ``#``: the mark a label puts before each (``#build``)."""
    if not tags:
        return ()
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"at most {MAX_TAGS} tags, not {len(tags)}")
    out: list[str] = []
    for tag in tags:
        bare = tag.strip().lstrip("#").strip() if isinstance(tag, str) else ""
        if not bare or len(bare) > MAX_TAG_CHARS:
            raise InvalidInput(f"each tag must be 1-{MAX_TAG_CHARS} characters: {tag!r:.60}")
        if not tag.isprintable():
            raise InvalidInput(f"tag {tag!r:.60} has control characters")
        if tag_key(bare) not in map(tag_key, out):  # tags ignore case
            out.append(bare)
    return tuple(out)


def tag_key(tag: str) -> str:
    """What a tag is compared by: any case, and without the ``#`` a label shows it with
    (which entries saved before it was dropped at append may still hold)."""
    return tag.lstrip("#").casefold()


def searchable(text: str, tags: Sequence[str], role: str) -> str:
    """What an entry is found by: its text, its tags and, for a decision, the words that
    ask for one ("decisions", "what did we decide"); a role naming who spoke would match
    every turn of that speaker."""
    return " ".join([text, *tags, *(["decision decided"] if role == "decision" else [])])


def updated_time(journal: Path, meta: dict[str, Any]) -> float:
    """The later of the journal's mtime and meta's updated_at/created_at."""
    stamps = [time_or_none(meta.get("updated_at")), time_or_none(meta.get("created_at"))]
    best = max((t for t in stamps if t is not None), default=0.0)
    try:
        return max(best, journal.stat().st_mtime)
    except FileNotFoundError:
        return best


def without(
    records: list[dict[str, Any]], gone: set[str], known: Callable[[str], bool]
) -> tuple[list[dict[str, Any]], int, int]:
    """A purge's records without ``gone`` entries; how many patches and unknowns dropped."""
    kept: list[dict[str, Any]] = []
    patches = unknown = 0
    for rec in records:
        kind, target = rec.get("kind"), str(rec.get("id"))
        if kind == "patch" and (target in gone or not known(target)):
            patches += 1
        elif kind == "entry" and target in gone:
            continue
        elif kind in {"entry", "patch"}:
            if isinstance(rec.get("replaces"), list):
                rec = {**rec, "replaces": [r for r in rec["replaces"] if r not in gone]}
            kept.append(rec)
        else:
            unknown += 1
    return kept, patches, unknown
