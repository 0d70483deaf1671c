"""Strings numbered in the order they were added (entry ids, index terms), found by number
and, through a snapshot's saved table of sorted 64-bit hashes, by text with one binary
search: a million strings are never hashed into a dict before the first lookup."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt


def stable_hash(key: str) -> int:
    """The key's 64-bit BLAKE2b hash (the same in every process, unlike ``hash``)."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def stable_hashes(keys: Iterable[str], count: int) -> npt.NDArray[np.uint64]:
    """Each key's ``stable_hash``."""
    return np.fromiter(map(stable_hash, keys), np.uint64, count=count)


class Keys:
    """``list[n]`` is the n-th string added; ``get(s)`` is the first n holding ``s``."""

    def __init__(
        self,
        strings: list[str] | None = None,
        table: tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]] | None = None,
    ) -> None:
        """``strings`` as numbered so far and their saved table (else a dict is made)."""
        self.list: list[str] = strings if strings is not None else []
        self._added: dict[str, int] = {}
        self._table = table
        self._saved = len(self.list) if table is not None else 0
        if table is None:
            # Reversed: a string listed twice keeps its first number.
            self._added = dict(
                zip(reversed(self.list), range(len(self.list) - 1, -1, -1), strict=True)
            )
        elif len(table[0]) != len(self.list) or len(table[1]) != len(self.list):
            raise ValueError("the table does not list every string")
        elif len(self.list) and (
            np.any(table[0][1:] < table[0][:-1])
            or not 0 <= table[1].min() <= table[1].max() < len(self.list)
        ):
            raise ValueError("the table is not sorted, or names a string past the end")

    def __len__(self) -> int:
        return len(self.list)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __getitem__(self, key: str) -> int:
        n = self.get(key)
        if n is None:
            raise KeyError(key)
        return n

    def get(self, key: str, default: int | None = None) -> int | None:
        """The number of ``key``, or ``default``."""
        n = self._added.get(key)
        if n is not None or self._table is None:
            return default if n is None else n
        hashes, numbers = self._table
        h = stable_hash(key)
        i = int(hashes.searchsorted(np.uint64(h)))
        while i < len(hashes) and int(hashes[i]) == h:  # a collision, however unlikely
            n = int(numbers[i])
            if 0 <= n < self._saved and self.list[n] == key:
                return n
            i += 1
        return default

    def numbers(self, keys: list[str]) -> list[int]:
        """The number of each of ``keys`` (distinct), new ones added: one search for all."""
        out = [self._added.get(k, -1) for k in keys]
        missing = [j for j, n in enumerate(out) if n < 0]
        if missing and self._table is not None and len(self._table[0]):
            hashes, numbers = self._table
            wanted = stable_hashes((keys[j] for j in missing), len(missing))
            at = np.minimum(np.searchsorted(hashes, wanted), len(hashes) - 1)
            hit = np.where(hashes[at] == wanted, numbers[at], -1).tolist()
            for j, n in zip(missing, hit, strict=True):
                if n >= 0 and not (n < self._saved and self.list[n] == keys[j]):
                    n = self.get(keys[j], -1)  # past a collision, however unlikely
                out[j] = n
        return [n if n >= 0 else self.add(k) for k, n in zip(keys, out, strict=True)]

    def add(self, key: str) -> int:
        """Number ``key`` next (the caller checked that it is new)."""
        n = self._added[key] = len(self.list)
        self.list.append(key)
        return n

    def table(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        """The sorted hashes of every string and their numbers, to be saved."""
        if self._table is None:
            hashes = stable_hashes(self.list, len(self.list))
            numbers = np.arange(len(self.list), dtype=np.int64)
        else:
            added = self.list[self._saved :]
            hashes = np.concatenate((self._table[0], stable_hashes(added, len(added))))
            numbers = np.concatenate(
                (self._table[1], np.arange(self._saved, len(self.list), dtype=np.int64))
            )
        order = np.argsort(hashes, kind="stable")  # equal hashes keep the lower number first
        return hashes[order], numbers[order]
