"""Vectors beside a session's journal or a document: derived, append-only, memory-mapped.

``vectors/<model key>.f16``: a 16-byte header (magic, dimension), then fixed records of
(position, id, float16 unit vector). A writer takes the file's lock, cuts a torn last
record and appends; a reader keeps the last record per position whose id still matches
(``rows``) or per id (``lookup``). A cache: losing it costs embedding again.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from context_window.storage import atomic_file, lock_fd, unlock_fd

MAGIC = b"ctxvec1\n"
HEADER = 16  # MAGIC, uint32 dimension, 4 bytes spare
ID_BYTES = 32
SCAN_BLOCK = 8192  # records compared with a query at once (12 MB as float32 at 384)
F32 = npt.NDArray[np.float32]
Rows = npt.NDArray[np.int64]


def id_key(entry_id: str) -> bytes:
    """What a record stores of an entry id: the id, or a digest of one too long to fit."""
    raw = entry_id.encode()
    return raw if len(raw) <= ID_BYTES else hashlib.sha256(raw).hexdigest()[:ID_BYTES].encode()


def model_key(model: str, prefix: str) -> str:
    """The file name's stem for vectors made by ``model`` with ``prefix``."""
    return hashlib.sha256(f"{model}\0{prefix}".encode()).hexdigest()[:16]


def record(dim: int) -> np.dtype[np.void]:
    """One record of a vectors file whose vectors have ``dim`` values."""
    return np.dtype([("pos", "<u4"), ("id", f"S{ID_BYTES}"), ("vec", "<f2", (dim,))])


class Vectors:
    """One session's or document's vectors for one model, written in batches."""

    def __init__(self, directory: Path, key: str) -> None:
        self.path = directory / "vectors" / f"{key}.f16"
        self.dim = 0
        self._seen: tuple[int, int] | None = None  # (inode, size) mapped
        self._data: npt.NDArray[np.void] | None = None
        self._rows: Rows = np.zeros(0, dtype=np.int64)  # per position: its record, or -1
        self._checked = 0  # records whose ids were matched against the order
        self._ids: dict[bytes, int] = {}  # for ``lookup``: id -> its last record
        self._ids_read = 0  # records whose ids are in ``_ids``

    def rows(self, order: Sequence[str]) -> Rows:
        """Per position of ``order`` (entry ids), the record holding its vector, or -1."""
        self._reload()
        n = len(order)
        if len(self._rows) < n:
            self._rows = np.concatenate([self._rows, np.full(n - len(self._rows), -1)])
        data = self._data
        if data is not None and self._checked < len(data):
            new = data[self._checked :]
            pos = new["pos"].astype(np.int64)
            inside = np.flatnonzero(pos < n)
            wanted = np.array([id_key(order[p]) for p in pos[inside].tolist()], dtype=object)
            same = inside[new["id"][inside].astype(object) == wanted]
            # The last record of a position wins: the first of each in reverse order.
            latest, at = np.unique(pos[same][::-1], return_index=True)
            self._rows[latest] = (self._checked + same)[::-1][at]
            self._checked = len(data)
        return self._rows[:n]

    def lookup(self, ids: Sequence[str]) -> dict[str, F32]:
        """The vectors of those ``ids`` that have one, at any position (passage digests)."""
        self._reload()
        data = self._data
        if data is None:
            return {}
        if self._ids_read < len(data):
            new = data["id"][self._ids_read :].tolist()
            self._ids.update(zip(new, range(self._ids_read, len(data)), strict=True))
            self._ids_read = len(data)
        rows = {i: r for i in ids if (r := self._ids.get(id_key(i))) is not None}
        return {i: data["vec"][r].astype(np.float32) for i, r in rows.items()}

    def cosines(self, query: F32) -> F32:
        """Each record's vector times ``query``, read in blocks in file order."""
        data = self._data
        if data is None:
            return np.zeros(0, dtype=np.float32)
        parts = [
            data["vec"][at : at + SCAN_BLOCK].astype(np.float32) @ query
            for at in range(0, len(data), SCAN_BLOCK)
        ]
        return np.concatenate(parts).astype(np.float32)

    def _reload(self) -> None:
        """Map the records written so far; a file replaced or restarted is read afresh."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            st = None
        if st is not None and self._seen == (st.st_ino, st.st_size):
            return
        head = b""
        if st is not None:
            with self.path.open("rb") as f:
                head = f.read(HEADER)
        dim = int.from_bytes(head[8:12], "little") if head.startswith(MAGIC) else 0
        count = (st.st_size - HEADER) // record(dim).itemsize if st and dim else 0
        moved = st is None or self._seen is None or self._seen[0] != st.st_ino
        if moved or dim != self.dim or count < max(self._checked, self._ids_read):
            self._rows, self._checked = np.zeros(0, dtype=np.int64), 0
            self._ids, self._ids_read = {}, 0
        self._seen = (st.st_ino, st.st_size) if st else None
        self.dim = dim
        self._data = (
            np.memmap(self.path, dtype=record(dim), mode="r", offset=HEADER, shape=(count,))
            if count
            else None
        )

    def write(self, items: Sequence[tuple[int, str, Sequence[float]]]) -> int:
        """Append (position, id, unit vector) records, replacing a file of another dimension."""
        if not items:
            return 0
        dim = len(items[0][2])
        self.path.parent.mkdir(exist_ok=True)
        kind = record(dim)
        records = np.zeros(len(items), dtype=kind)
        records["pos"] = [it[0] for it in items]
        records["id"] = [id_key(it[1]) for it in items]
        records["vec"] = np.asarray([it[2] for it in items], dtype=np.float32)
        header = MAGIC + dim.to_bytes(4, "little") + bytes(4)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o644)
        try:
            lock_fd(fd, f"the vectors of {self.path.parent.parent.name}")
            size = os.fstat(fd).st_size
            if size < HEADER:  # a new file: another model's is of no more use
                self._remove_others()
            if size and os.read(fd, HEADER) != header:
                # Renamed over, so a reader still mapping the old file never gets SIGBUS.
                with atomic_file(self.path) as f:
                    f.write(header + records.tobytes())
                return len(items)
            end = HEADER + max(0, size - HEADER) // kind.itemsize * kind.itemsize
            os.ftruncate(fd, end)  # a torn last record goes (no reader counts it)
            os.lseek(fd, 0 if end == HEADER else end, os.SEEK_SET)
            _write_all(fd, (header if end == HEADER else b"") + records.tobytes())
        finally:
            unlock_fd(fd)
            os.close(fd)
        return len(items)

    def _remove_others(self) -> None:
        """Delete the vectors of other models (or prefixes) in this folder."""
        for other in self.path.parent.glob("*.f16"):
            if other != self.path:
                other.unlink(missing_ok=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def unit(vectors: Sequence[Sequence[float]]) -> F32:
    """Rows scaled to length 1 (a zero row stays zero)."""
    arr = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(arr, axis=-1, keepdims=True)
    out: F32 = np.divide(arr, norms, out=np.zeros_like(arr), where=norms > 0)
    return out
