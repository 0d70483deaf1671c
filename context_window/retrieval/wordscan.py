"""A compiled pass over ASCII chunk texts that counts their raw words, for ``termcount``.

A numba loop reads each byte once, keeps a hash table of the distinct raw words and
counts each (chunk, word or number) pair: several times less work than numpy's sorts.
The loops release the GIL and never allocate; when a text may not fit, the scan stops
before it so the caller can grow the arrays. numba is the optional ``fast`` extra.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]

NUMBER_DIGITS = 19  # the longest number term: any 19-digit key fits in a uint64
# _CLASS[b]: 0 outside words, 1 a digit, 2 another word byte ([A-Za-z0-9_$]).
_CLASS = np.zeros(256, dtype=np.uint8)
_CLASS[np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_$", np.uint8)] = 2
_CLASS[np.frombuffer(b"0123456789", np.uint8)] = 1
_CLASS.flags.writeable = False

_log = logging.getLogger(__name__)


@functools.cache
def compiled_kernels() -> Any:
    """The compiled kernels, or None where numba cannot run (reported once if broken)."""
    try:
        from context_window.retrieval import kernels  # numba: only when needed
    except ImportError as exc:
        _log.info("counting words with numpy (numba is not installed: %s)", exc)
        return None
    try:
        Scanner(np.zeros(NUMBER_DIGITS + 2, dtype=np.uint64), kernels).scan(
            np.frombuffer(b"warm 42 up", dtype=np.uint8),
            np.zeros(1, dtype=np.int64),
            np.full(1, 10, dtype=np.int64),
            np.zeros(1, dtype=np.int32),
        )
    except Exception as exc:  # a broken numba: the numpy path counts the same
        _log.warning("counting words without the compiled scan: %s: %s", type(exc).__name__, exc)
        return None
    return kernels


def available() -> bool:
    """Whether the compiled scan runs here (see :func:`compiled_kernels`)."""
    return compiled_kernels() is not None


class Pairs:
    """Chunk ``row[i]`` holds word or number ``val[i]`` (``num[i]``) ``n[i]`` times."""

    def __init__(self, row: I32, val: I64, num: npt.NDArray[np.bool_], n: I32, keys: U64) -> None:
        self.row, self.val, self.num, self.n, self.keys = row, val, num, n, keys


class Scanner:
    """The scan's arrays kept from batch to batch: the word table and a batch's room."""

    def __init__(self, shorter: U64, kernels: Any) -> None:
        self._k = kernels
        self._shorter = shorter
        self._words = np.zeros(3, dtype=np.int64)  # distinct raw words, arena used, texts seen
        self.forget_words()
        self._n_slot = np.full(1 << 12, -1, dtype=np.int32)
        self._n_key = np.zeros(1 << 11, dtype=np.uint64)
        self._n_last = np.zeros(1 << 11, dtype=np.int64)
        self._n_pair = np.zeros(1 << 11, dtype=np.int64)
        self._nums = np.zeros(1, dtype=np.int64)
        self._out = np.zeros(1, dtype=np.int64)
        self._out_row = np.empty(0, dtype=np.int32)
        self._out_val = np.empty(0, dtype=np.int64)
        self._out_num = np.empty(0, dtype=np.bool_)
        self._out_n = np.empty(0, dtype=np.int32)

    @property
    def n_words(self) -> int:
        """How many distinct raw words the table holds."""
        return int(self._words[0])

    def forget_words(self) -> None:
        """Empty the table of raw words (their ids start again from 0)."""
        self._s_hash = np.zeros(1 << 12, dtype=np.uint64)
        self._s_id = np.full(1 << 12, -1, dtype=np.int32)
        self._w_hash = np.zeros(1 << 11, dtype=np.uint64)
        self._arena = np.zeros(1 << 16, dtype=np.uint8)
        self._w_start = np.zeros(1 << 11, dtype=np.int64)
        self._w_len = np.zeros(1 << 11, dtype=np.int64)
        self._w_last = np.zeros(1 << 11, dtype=np.int64)
        self._w_pair = np.zeros(1 << 11, dtype=np.int64)
        self._words[:2] = 0  # the count of texts seen goes on: number rows remember it

    def word(self, w: int) -> bytes:
        """The bytes of raw word ``w``."""
        start = int(self._w_start[w])
        return self._arena[start : start + int(self._w_len[w])].tobytes()

    def scan(self, buf: U8, starts: I64, ends: I64, rows: I32) -> Pairs:
        """Count the words of ``buf[starts[t]:ends[t]]`` for each t, chunk ``rows[t]``."""
        most = int((ends - starts).sum()) // 2 + len(starts)  # pairs: at most a word each
        if len(self._out_n) < most:  # kept from batch to batch, not allocated each time
            size = _power_of_two(most)
            self._out_row = np.empty(size, dtype=np.int32)
            self._out_val = np.empty(size, dtype=np.int64)
            self._out_num = np.empty(size, dtype=np.bool_)
            self._out_n = np.empty(size, dtype=np.int32)
        out_row, out_val, out_num, out_n = self._out_row, self._out_val, self._out_num, self._out_n
        self._n_slot.fill(-1)
        self._nums[0] = self._out[0] = 0
        t = 0
        while True:
            t = self._k.scan(
                buf, starts, ends, rows, t, _CLASS, self._shorter,
                self._s_hash, self._s_id, self._w_hash, self._arena, self._w_start,
                self._w_len, self._w_last, self._w_pair, self._words,
                self._n_slot, self._n_key, self._n_last, self._n_pair, self._nums,
                out_row, out_val, out_num, out_n, self._out,
            )  # fmt: skip
            if t == len(starts):
                break
            self._grow(int(ends[t] - starts[t]))
        n = int(self._out[0])
        keys = self._n_key[: int(self._nums[0])].copy()
        # Copies: the arrays are written again by the next scan.
        return Pairs(
            out_row[:n].copy(), out_val[:n].copy(), out_num[:n].copy(), out_n[:n].copy(), keys
        )

    def _grow(self, size: int) -> None:
        """Make room for one more text of ``size`` bytes."""
        most = (size + 1) // 2
        n_words, used = int(self._words[0]), int(self._words[1])
        if 2 * (n_words + most) > len(self._s_id):
            cap = _power_of_two(2 * (n_words + most))
            self._s_hash = np.zeros(cap, dtype=np.uint64)
            self._s_id = np.full(cap, -1, dtype=np.int32)
            self._k.rehash(self._s_hash, self._s_id, self._w_hash, n_words)
        if n_words + most > len(self._w_start):
            cap = _power_of_two(n_words + most)
            for name in ("_w_hash", "_w_start", "_w_len", "_w_last", "_w_pair"):
                setattr(self, name, resized(getattr(self, name), cap))
        if used + size > len(self._arena):
            self._arena = resized(self._arena, _power_of_two(used + size))
        n_nums = int(self._nums[0])
        if 2 * (n_nums + most) > len(self._n_slot):
            self._n_slot = np.full(_power_of_two(2 * (n_nums + most)), -1, dtype=np.int32)
            self._k.renumber(self._n_slot, self._n_key, n_nums)
        if n_nums + most > len(self._n_key):
            cap = _power_of_two(n_nums + most)
            for name in ("_n_key", "_n_last", "_n_pair"):
                setattr(self, name, resized(getattr(self, name), cap))


def _power_of_two(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def resized(a: npt.NDArray[Any], size: int) -> npt.NDArray[Any]:
    """A copy of ``a``, ``size`` long (at least ``len(a)``), zero past its items."""
    out = np.zeros(size, dtype=a.dtype)
    out[: len(a)] = a
    return out
