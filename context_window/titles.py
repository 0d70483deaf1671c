"""Titles of sessions and documents: the rule for a given one, and how one is made."""

from __future__ import annotations

from context_window.errors import InvalidInput

MAX_TITLE_CHARS = 200


def check_title(title: str | None) -> str | None:
    """``title`` if it is at most ``MAX_TITLE_CHARS`` printable characters (or None)."""
    if title is not None and len(title) > MAX_TITLE_CHARS:
        raise InvalidInput(f"title is {len(title):,} characters; the limit is {MAX_TITLE_CHARS}")
    if title is not None and not title.isprintable():
        raise InvalidInput(
            "title must be one line of printable characters (no \\n, \\t or other controls)"
        )
    return title


def clean_title(text: str) -> str:
    """A title from a file name or a first line: printable, one line, ``MAX_TITLE_CHARS``."""
    kept = "".join(c if c.isprintable() else " " for c in text.replace("\ufeff", ""))
    title = " ".join(kept.split())
    return title if len(title) <= MAX_TITLE_CHARS else title[: MAX_TITLE_CHARS - 1] + "…"


def first_line(text: str) -> str:
    """A title from the first non-blank line (a heading's marks dropped), shortened."""
    for line in text[:4000].splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line[:80]
    return ""
