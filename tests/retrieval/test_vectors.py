"""The vectors file beside a session's journal or a document: real files, a real SIGKILL
mid-write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from context_window.retrieval.vectors import HEADER, Vectors, record, unit

ORDER = [f"e{i:018d}" for i in range(9)] + ["imported-" + "x" * 40]  # one longer than 32 bytes


def vec(seed: int, dim: int = 8) -> list[float]:
    return unit([np.random.default_rng(seed).normal(size=dim)])[0].tolist()


def test_the_last_record_of_a_position_wins_and_a_moved_entry_is_dropped(tmp_path: Path) -> None:
    v = Vectors(tmp_path, "k")
    assert v.rows(ORDER).tolist() == [-1] * 10  # no file yet
    v.write([(0, ORDER[0], vec(0)), (1, ORDER[1], vec(1)), (2, "e-purged-since", vec(2))])
    v.write([(0, ORDER[0], vec(3)), (9, ORDER[9], vec(9))])
    rows = Vectors(tmp_path, "k").rows(ORDER)  # a fresh reader
    assert rows.tolist()[:3] == [3, 1, -1] and rows[9] == 4
    reader = Vectors(tmp_path, "k")
    rows = reader.rows(ORDER)
    for position, seed in ((0, 3), (1, 1), (9, 9)):  # each its latest vector, as float16
        assert abs(reader.cosines(np.array(vec(seed), np.float32))[rows[position]] - 1) < 1e-3


def test_another_dimension_starts_the_file_anew_and_readers_follow(tmp_path: Path) -> None:
    reader, writer = Vectors(tmp_path, "k"), Vectors(tmp_path, "k")
    writer.write([(i, ORDER[i], vec(i)) for i in range(5)])
    assert (reader.rows(ORDER) >= 0).sum() == 5
    writer.write([(7, ORDER[7], vec(7, dim=4))])  # the model behind the name changed
    assert reader.rows(ORDER).tolist() == [-1] * 7 + [0, -1, -1]
    assert reader.dim == 4


def test_lookup_finds_content_keys_wherever_they_sit_and_follows_the_file(tmp_path: Path) -> None:
    keys = [f"{i:032x}" for i in range(6)]  # digests, as documents store passages
    reader, writer = Vectors(tmp_path, "k"), Vectors(tmp_path, "k")
    assert reader.lookup(keys) == {}  # no file yet
    writer.write([(0, keys[0], vec(0)), (1, keys[1], vec(1))])
    assert set(reader.lookup(keys)) == {keys[0], keys[1]}
    writer.write([(0, keys[2], vec(2)), (1, keys[1], vec(5))])  # positions mean nothing here
    found = reader.lookup(keys)
    assert set(found) == {keys[0], keys[1], keys[2]}
    assert float(found[keys[1]] @ np.array(vec(5), np.float32)) > 0.999  # the last one wins
    with writer.path.open("ab") as f:
        f.write(b"\x01" * 7)  # a torn record: not read
    assert set(reader.lookup(keys)) == {keys[0], keys[1], keys[2]}
    writer.write([(0, keys[3], vec(3, dim=4))])  # another dimension: a new file
    assert set(reader.lookup(keys)) == {keys[3]} and reader.dim == 4


def test_a_sigkill_mid_write_leaves_a_file_the_next_write_mends(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, numpy as np\n"
            "from pathlib import Path\n"
            "from context_window.retrieval.vectors import Vectors\n"
            "v = Vectors(Path(sys.argv[1]), 'k')\n"
            "rows = [(i % 10, f'e{i % 10:018d}', list(np.ones(384) / 384 ** 0.5))"
            " for i in range(4096)]\n"
            "print('go', flush=True)\n"
            "while True:\n"
            "    v.write(rows)\n",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdout.readline() == b"go\n"
    path = tmp_path / "vectors" / "k.f16"
    size = record(384).itemsize
    deadline = time.monotonic() + 60
    while not path.exists() or path.stat().st_size < HEADER + 4096 * size:
        assert child.poll() is None and time.monotonic() < deadline  # one batch first
        time.sleep(0.002)
    for _ in range(200):  # kill it while a record is half written, if that can be seen
        time.sleep(0.002)
        if path.exists() and (path.stat().st_size - HEADER) % size:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    rows = Vectors(tmp_path, "k").rows(ORDER)  # whatever was cut, it reads
    assert (rows[:9] >= 0).all()  # the child wrote ORDER's ids but the long one's
    Vectors(tmp_path, "k").write([(3, ORDER[3], vec(3, dim=384))])
    assert (path.stat().st_size - HEADER) % size == 0  # the torn record went
    after = Vectors(tmp_path, "k")
    at = after.rows(ORDER)[3]
    assert abs(after.cosines(np.array(vec(3, dim=384), np.float32))[at] - 1) < 1e-3
