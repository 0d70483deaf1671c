"""Counts and lists as people read them: "1 chunk", "3 entries", "a, b and 9 more", for
the model and the shell alike."""

from __future__ import annotations

import difflib


def plural(n: int, noun: str) -> str:
    """``1 chunk``, ``3 entries``, ``2 patches``: English plurals, thousands separated."""
    if n == 1:
        return f"1 {noun}"
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return f"{n:,} {noun[:-1]}ies"
    return f"{n:,} {noun}{'es' if noun.endswith(('s', 'x', 'ch', 'sh')) else 's'}"


def known_ids(wanted: str, ids: list[str], shown: int) -> str:
    """``ids`` as an error names them, at most ``shown``: those spelled nearest ``wanted``
    (any case) first, then the rest in order; "none" when there are none."""
    folded = {i.casefold(): i for i in ids}
    near = [folded[i] for i in difflib.get_close_matches(wanted.casefold(), folded, n=3)]
    listed = [*near, *(i for i in ids if i not in near)][:shown]
    more = f" and {len(ids) - shown:,} more" if len(ids) > shown else ""
    return ", ".join(listed) + more if ids else "none"
