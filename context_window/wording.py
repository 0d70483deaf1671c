"""Counts as people read them: "1 chunk", "3 entries", for the model and the shell alike."""

from __future__ import annotations


def plural(n: int, noun: str) -> str:
    """``1 chunk``, ``2 chunks``, ``1 entry``, ``3 entries`` (thousands separated)."""
    if n == 1:
        return f"1 {noun}"
    many = noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s"
    return f"{n:,} {many}"
