"""The compiled loops of ``wordscan`` (numba): imported only when they are needed."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True)
_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)
_MIX = np.uint64(0x9E3779B97F4A7C15)


@_jit
def _slot_of(h: Any, mask: Any) -> Any:
    return (h ^ (h >> np.uint64(29))) & mask


@_jit
def scan(
    buf: Any, starts: Any, ends: Any, rows: Any, t0: int, klass: Any, shorter: Any,
    s_hash: Any, s_id: Any, w_hash: Any, arena: Any, w_start: Any, w_len: Any,
    w_last: Any, w_pair: Any, words: Any,
    n_slot: Any, n_key: Any, n_last: Any, n_pair: Any, nums: Any,
    out_row: Any, out_val: Any, out_num: Any, out_n: Any, out: Any,
) -> int:  # fmt: skip
    """Count the words of texts ``t0``.. of ``buf``; return the text it stopped before."""
    most_digits = len(shorter) - 2  # shorter[n] is given for n up to the longest number
    w_mask = np.uint64(len(s_id) - 1)
    n_mask = np.uint64(len(n_slot) - 1)
    n_words, used, serial = words[0], words[1], words[2]
    n_nums, n = nums[0], out[0]
    t = t0
    while t < len(starts):
        i, end = starts[t], ends[t]
        most = (end - i + 1) // 2  # words a text of this many bytes can hold
        if (
            2 * (n_words + most) > len(s_id)
            or n_words + most > len(w_start)
            or used + end - i > len(arena)
            or 2 * (n_nums + most) > len(n_slot)
            or n_nums + most > len(n_key)
        ):
            break
        serial += 1
        row = rows[t]
        while i < end:
            if klass[buf[i]] == 0:
                i += 1
                continue
            j = i
            h = _FNV_OFFSET
            value = np.uint64(0)
            digits = True
            while j < end:
                b = buf[j]
                c = klass[b]
                if c == 0:
                    break
                h = (h ^ np.uint64(b)) * _FNV_PRIME
                if c == 2:
                    digits = False
                else:
                    value = value * np.uint64(10) + np.uint64(b - 48)
                j += 1
            size = j - i
            if digits and 2 <= size <= most_digits:
                key = shorter[size] + value
                s = _slot_of(key * _MIX, n_mask)
                while True:
                    k = n_slot[s]
                    if k < 0:
                        k = n_nums
                        n_nums += 1
                        n_slot[s] = k
                        n_key[k] = key
                        n_last[k] = -1
                        break
                    if n_key[k] == key:
                        break
                    s = (s + np.uint64(1)) & n_mask
                if n_last[k] == serial:
                    out_n[n_pair[k]] += 1
                else:
                    n_last[k] = serial
                    n_pair[k] = n
                    out_row[n], out_val[n], out_num[n], out_n[n] = row, k, True, 1
                    n += 1
            else:
                s = _slot_of(h, w_mask)
                while True:
                    w = s_id[s]
                    if w < 0:
                        w = n_words
                        n_words += 1
                        s_id[s], s_hash[s], w_hash[w] = w, h, h
                        w_start[w], w_len[w], w_last[w] = used, size, -1
                        arena[used : used + size] = buf[i:j]
                        used += size
                        break
                    if s_hash[s] == h and w_len[w] == size:
                        a = w_start[w]
                        same = True
                        for q in range(size):
                            if arena[a + q] != buf[i + q]:
                                same = False
                                break
                        if same:
                            break
                    s = (s + np.uint64(1)) & w_mask
                if w_last[w] == serial:
                    out_n[w_pair[w]] += 1
                else:
                    w_last[w] = serial
                    w_pair[w] = n
                    out_row[n], out_val[n], out_num[n], out_n[n] = row, w, False, 1
                    n += 1
            i = j
        t += 1
    words[0], words[1], words[2] = n_words, used, serial
    nums[0], out[0] = n_nums, n
    return t


@_jit
def rehash(s_hash: Any, s_id: Any, w_hash: Any, n_words: int) -> None:
    """Place word ids 0..n_words-1 into an empty table by their hashes."""
    mask = np.uint64(len(s_id) - 1)
    for w in range(n_words):
        h = w_hash[w]
        s = _slot_of(h, mask)
        while s_id[s] >= 0:
            s = (s + np.uint64(1)) & mask
        s_id[s], s_hash[s] = w, h


@_jit
def renumber(n_slot: Any, n_key: Any, n_nums: int) -> None:
    """Place number ids 0..n_nums-1 into an empty table by their keys."""
    mask = np.uint64(len(n_slot) - 1)
    for k in range(n_nums):
        s = _slot_of(n_key[k] * _MIX, mask)
        while n_slot[s] >= 0:
            s = (s + np.uint64(1)) & mask
        n_slot[s] = k
