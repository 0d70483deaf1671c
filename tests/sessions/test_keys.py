"""Strings found by their number and, through a saved table of hashes, by their text."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from context_window.sessions.keys import Keys, stable_hash, stable_hashes


def test_a_table_finds_what_a_dict_finds() -> None:
    strings = [f"id-{k}" for k in range(2_000)] + ["caf\u00e9", "lone \udc80", "id-7"]
    plain = Keys(list(strings))
    saved = Keys(list(strings), plain.table())
    for keys in (plain, saved):
        assert [keys.get(s) for s in strings[:-1]] == list(range(len(strings) - 1))
        assert keys["id-7"] == 7  # a string listed twice keeps its first number
        assert keys.get("id-2000") is None and "nope" not in keys
        with pytest.raises(KeyError):
            keys["nope"]
    assert saved._added == {}  # nothing hashed into a dict
    assert saved.numbers(["id-5", "new", "id-9", "newer"]) == [5, 2_003, 9, 2_004]
    assert saved.add("newest") == 2_005 and saved["new"] == 2_003 and len(saved) == 2_006
    assert saved._added == {"new": 2_003, "newer": 2_004, "newest": 2_005}
    # The table saved next holds the new strings, as one made from scratch would.
    fresh = Keys(list(saved.list)).table()
    merged = saved.table()
    assert np.array_equal(merged[0], fresh[0]) and np.array_equal(merged[1], fresh[1])


def test_the_hash_is_the_same_in_every_process() -> None:
    # BLAKE2b of the UTF-8 bytes (lone surrogates passed through), little-endian: a
    # table saved by one process is read by another, whatever its hash seed.
    digest = hashlib.blake2b("\udc80é".encode("utf-8", "surrogatepass"), digest_size=8)
    assert stable_hash("\udc80é") == int.from_bytes(digest.digest(), "little")
    assert stable_hash("abc") == 0x5995D533D814BBD8 != stable_hash("abd")
    assert stable_hashes(["abc", "x"], 2).tolist() == [stable_hash("abc"), stable_hash("x")]


def test_a_collision_in_the_table_is_passed_over() -> None:
    # Two strings under one hash (forced here: BLAKE2b's are not found by chance): the
    # compare with the string itself picks the right one, one at a time or in bulk.
    strings = ["a", "b", "c"]
    h = np.uint64(stable_hash("b"))
    hashes = np.sort(np.array([h, h, stable_hash("c")], dtype=np.uint64))
    numbers = np.array([0, 1, 2] if hashes[0] == h else [2, 0, 1], dtype=np.int64)
    keys = Keys(list(strings), (hashes, numbers))
    assert keys.get("b") == 1 and keys.get("a") is None  # "a" is under another hash
    assert keys.numbers(["b", "c", "d"]) == [1, 2, 3]


@pytest.mark.parametrize(
    "table",
    [
        (np.array([3, 2, 1], dtype=np.uint64), np.array([0, 1, 2])),  # not sorted
        (np.array([1, 2, 3], dtype=np.uint64), np.array([0, 1, 3])),  # past the end
        (np.array([1, 2], dtype=np.uint64), np.array([0, 1])),  # one short
    ],
)
def test_a_table_that_does_not_hold_together_is_refused(table: tuple) -> None:
    with pytest.raises(ValueError):
        Keys(["x", "y", "z"], table)
