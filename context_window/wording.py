"""Counts as people read them: "1 chunk", "3 entries", for the model and the shell alike."""

from __future__ import annotations


def plural(n: int, noun: str) -> str:
    """``1 chunk``, ``3 entries``, ``2 patches``: English plurals, thousands separated."""
    if n == 1:
        return f"1 {noun}"
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return f"{n:,} {noun[:-1]}ies"
    return f"{n:,} {noun}{'es' if noun.endswith(('s', 'x', 'ch', 'sh')) else 's'}"
