"""A session's replayed state saved beside its journal, so the next process reads the
state and replays only what was appended after it.

``snapshot.npz`` (numpy's zip of arrays, read without pickle) holds the per-position
arrays, the entry records, the in-memory index as flat arrays, and the journal
position it reflects: the offset with the file's first bytes and the bytes just before
the offset. It is a cache, never trusted over the journal: it is used only when the
journal still starts with those bytes and holds the same bytes before that offset, when
its format, the analyzer and every part agree; anything else (missing, damaged,
stale, a purged journal) and the session is replayed from its first line as before.
It is written to a temporary file, fsynced and renamed over the old one, so a crash
while writing leaves the previous snapshot or none, never a torn one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import mmap
import os
import struct
import zipfile
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from context_window.errors import Busy
from context_window.sessions.state import (
    Blob,
    Columns,
    Records,
    SessionState,
    decode_text,
    encode_text,
    gc_paused,
)
from context_window.storage import JournalPosition, atomic_file, file_lock
from context_window.textindex import ANALYZER_VERSION, Analyzer, MemoryIndex
from context_window.tokens import TokenCounter

log = logging.getLogger("context_window")

SNAPSHOT = "snapshot.npz"
LOCK = ".snapshot.lock"  # held while a snapshot is written
FORMAT = 2  # 2: texts cut by byte ends (text_ends), read from the file when asked for
_FLAGS = ("pinned", "deleted", "superseded")


@dataclass(frozen=True)
class Loaded:
    """A state read from a snapshot, the journal position it reflects and its token ratio."""

    state: SessionState
    position: JournalPosition
    ratio: float


def save(directory: Path, state: SessionState, position: JournalPosition, ratio: float) -> bool:
    """Write ``state`` (as of ``position``) to ``directory/snapshot.npz`` atomically; False
    when another process is saving one at the same moment (its own will do).

    OSError when it cannot be written (the caller logs it: a snapshot is optional).
    """
    terms, index = state.index.export()
    meta = {
        "format": FORMAT,
        "analyzer": ANALYZER_VERSION,
        "ratio": ratio,
        "offset": position.offset,
        "head": position.head.hex(),
        "tail": position.tail.hex(),
        "journal_skipped": position.skipped,
        "max_seq": state.max_seq,
        "orphans": state.orphans,
        "skipped": state.skipped,
        "replacers": state.replacers,
        "explicit": state.explicit,
        "terms": terms,
    }
    entries = _entry_columns(state)
    n = len(entries)
    meta["roles"] = entries.roles
    meta["tags"] = entries.tags
    meta["replaces"] = entries.replaces
    arrays: dict[str, npt.NDArray[Any]] = {
        "meta": _blob(meta),
        "ids": np.frombuffer(encode_text("\n".join(state.order)), dtype=np.uint8),
        "texts": np.frombuffer(entries.texts.read(0, int(entries.ends[-1]) if n else 0), np.uint8),
        "text_ends": entries.ends,
        "roles": entries.role_codes,
        "created": entries.created,
        "seq": entries.seq,
        "seqs": np.frombuffer(bytes(state.seqs), dtype=np.float64),
        "costs": np.frombuffer(bytes(state.costs), dtype=np.int64),
        "expires": np.frombuffer(bytes(state.expires), dtype=np.float64),
        **{k: np.frombuffer(bytes(state.flags[k]), dtype=np.uint8) for k in _FLAGS},
        **{f"ix_{k}": v for k, v in index.items()},
    }
    try:
        with file_lock(directory / LOCK, f"the snapshot of session {directory.name!r}", 0):
            _write(directory, arrays)
    except Busy:
        return False  # another process is saving one right now
    return True


def _entry_columns(state: SessionState) -> Columns:
    """The entries' fields as columns (tags and replaces by position, those set): a
    state read from a snapshot gives its columns for the positions it held, and only
    the entries added since are taken from their records."""
    base = state.records.columns
    if base is None:
        base = Columns(
            np.zeros(0, np.int64),
            np.zeros(0, np.float64),
            np.zeros(0, np.uint8),
            [],
            Blob(),
            np.zeros(0, np.int64),
            {},
            {},
        )
    n = len(base)
    tail = [state.records[eid] for eid in state.order[n:]]
    roles = sorted({r.role for r in tail}.union(base.roles))
    code = {role: k for k, role in enumerate(roles)}
    recode = np.array([code[r] for r in base.roles], dtype=np.uint8)
    texts = [encode_text(r.text) for r in tail]
    start = int(base.ends[-1]) if n else 0
    ends = np.cumsum(np.fromiter(map(len, texts), np.int64, count=len(texts))) + start
    return Columns(
        np.concatenate([base.seq, np.fromiter((r.seq for r in tail), np.int64, len(tail))]),
        np.concatenate(
            [base.created, np.fromiter((r.created_at for r in tail), np.float64, len(tail))]
        ),
        np.concatenate(
            [recode[base.role_codes], np.fromiter((code[r.role] for r in tail), np.uint8)]
        ),
        roles,
        Blob(base.texts.read(0, start) + b"".join(texts)),
        np.concatenate([base.ends, ends]),
        {**base.tags, **{n + j: r.tags for j, r in enumerate(tail) if r.tags}},
        {**base.replaces, **{n + j: r.replaces for j, r in enumerate(tail) if r.replaces}},
    )


def _write(directory: Path, arrays: dict[str, npt.NDArray[Any]]) -> None:
    """The snapshot's file, written beside it and renamed in; under the snapshot lock,
    so the temporary files found here are those of killed writers."""
    for stale in directory.glob(f".{SNAPSHOT}.*.tmp"):
        with contextlib.suppress(OSError):
            stale.unlink()
    with atomic_file(directory / SNAPSHOT) as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]


def load(directory: Path, counter: TokenCounter, analyzer: Analyzer) -> Loaded | None:
    """The state in ``directory/snapshot.npz``, or None when there is none or it does not
    hold together (the caller then replays the journal)."""
    path = directory / SNAPSHOT
    if not path.is_file():
        return None
    try:
        # One open file for all of it: a snapshot renamed over this one meanwhile
        # must not mix with it.
        with path.open("rb") as f:
            arrays, offsets, mapped = _mapped(f)
            texts = Blob(fd=os.dup(f.fileno()), offset=offsets["texts"])
        with gc_paused():
            loaded = _state(arrays, counter, analyzer, texts)
        _release(mapped)
        return loaded
    except Exception as exc:  # a cache: whatever is wrong with it, the journal is replayed
        log.warning(
            "ignoring the snapshot of session %r (%s); replaying its journal", directory.name, exc
        )
        return None


def _mapped(f: BinaryIO) -> tuple[dict[str, npt.NDArray[Any]], dict[str, int], mmap.mmap | None]:
    """Every array of an .npz written by ``np.savez`` (stored, not compressed), each a
    view of the file memory-mapped (returned too): what is never read is never in
    memory, and a snapshot replaced meanwhile stays readable (its file lives while
    mapped), with where each array's data starts in the file. The map is read at
    random: the kernel then reads the pages asked for, not the read-ahead around each."""
    out: dict[str, npt.NDArray[Any]] = {}
    places: list[tuple[str, int, tuple[int, ...], np.dtype[Any]]] = []
    with zipfile.ZipFile(f) as z:
        infos = z.infolist()
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
            raise ValueError(f"{info.filename} is not a stored array")
        f.seek(info.header_offset)
        local = f.read(30)
        if local[:4] != b"PK\x03\x04":
            raise ValueError(f"{info.filename} has no local header")
        name_len, extra_len = struct.unpack("<HH", local[26:30])
        start = info.header_offset + 30 + name_len + extra_len
        f.seek(start)
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"{info.filename} has .npy version {version}")
        size = math.prod(shape) * dtype.itemsize
        if fortran or dtype.hasobject or f.tell() - start + size != info.file_size:
            raise ValueError(f"{info.filename} is not a plain array")
        places.append((info.filename.removesuffix(".npy"), f.tell(), shape, dtype))
    mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if places else None
    if mapped is not None and hasattr(mmap, "MADV_RANDOM"):
        mapped.madvise(mmap.MADV_RANDOM)
    for name, offset, shape, dtype in places:
        count = math.prod(shape)
        out[name] = (
            np.frombuffer(mapped, dtype=dtype, count=count, offset=offset).reshape(shape)
            if count and mapped is not None
            else np.zeros(shape, dtype=dtype)
        )
    return out, {name: offset for name, offset, _, _ in places}, mapped


def _release(mapped: mmap.mmap | None) -> None:
    """Let go of the pages of ``mapped`` read so far (the checks read whole arrays):
    they are read again, a page at a time, when asked for."""
    if mapped is not None and hasattr(mmap, "MADV_DONTNEED"):
        with contextlib.suppress(OSError):
            mapped.madvise(mmap.MADV_DONTNEED)


def remove(directory: Path) -> None:
    """Delete the snapshot (after a purge rewrote the journal it reflects)."""
    with contextlib.suppress(OSError):
        (directory / SNAPSHOT).unlink()


def _blob(value: Any) -> npt.NDArray[np.uint8]:
    return np.frombuffer(json.dumps(value).encode("ascii"), dtype=np.uint8)


def _json(arr: npt.NDArray[Any]) -> Any:
    return json.loads(arr.tobytes().decode("utf-8"))


def _state(
    arrays: dict[str, npt.NDArray[Any]], counter: TokenCounter, analyzer: Analyzer, texts: Blob
) -> Loaded | None:
    """The state the arrays hold; ``texts`` reads the bytes of ``arrays["texts"]``."""
    meta = _json(arrays["meta"])
    if meta.get("format") != FORMAT or meta.get("analyzer") != ANALYZER_VERSION:
        return None
    ids = decode_text(arrays["ids"].tobytes()).split("\n") if len(arrays["ids"]) else []
    n = len(ids)
    parts = [
        arrays[k]
        for k in ("seqs", "costs", "expires", "text_ends", "roles", "created", "seq", *_FLAGS)
    ]
    if any(len(a) != n for a in parts) or len(arrays["ix_doc_len"]) != n:
        raise ValueError("its parts hold different numbers of entries")
    ends = np.array(arrays["text_ends"], dtype=np.int64)
    blob = arrays["texts"]
    if blob.dtype != np.uint8 or blob.ndim != 1:
        raise ValueError("its texts are not bytes")
    if n and (ends[0] < 0 or np.any(np.diff(ends) < 0) or ends[-1] != len(blob)):
        raise ValueError("the texts do not add up")
    roles = [str(r) for r in meta["roles"]]
    codes = np.array(arrays["roles"], dtype=np.uint8)
    if n and int(codes.max()) >= len(roles):
        raise ValueError("an entry has a role not listed")
    state = SessionState(counter, analyzer)
    state.index = MemoryIndex.restore(
        [str(t) for t in meta["terms"]],
        {k[3:]: v for k, v in arrays.items() if k.startswith("ix_")},
    )
    columns = Columns(
        np.asarray(arrays["seq"], dtype=np.int64),
        np.asarray(arrays["created"], dtype=np.float64),
        codes,
        roles,
        texts,  # read from the file a text at a time, not through the map: a page cache
        # of large folios (Linux 6 on ext4, xfs) maps megabytes around each text read
        ends,
        {int(k): tuple(str(t) for t in v) for k, v in meta["tags"].items()},
        {int(k): tuple(str(x) for x in v) for k, v in meta["replaces"].items()},
    )
    state.pos = dict(zip(ids, range(n), strict=True))
    state.order = ids
    if len(state.pos) != n:
        raise ValueError("an entry id is listed twice")
    state.records = Records(state, columns)
    seqs = np.asarray(arrays["seqs"], dtype=np.float64)
    state.seqs = array("d", seqs.tobytes())
    state.seq_high = array("d", np.maximum.accumulate(seqs).tobytes() if n else b"")
    state.pinned_at = {int(i) for i in np.flatnonzero(arrays["pinned"])}
    state.costs = array("q", arrays["costs"].astype(np.int64).tobytes())
    state.expires = array("d", arrays["expires"].astype(np.float64).tobytes())
    state.flags = {k: bytearray(arrays[k].astype(np.uint8).tobytes()) for k in _FLAGS}
    state.timed = {int(i) for i in np.flatnonzero(np.isfinite(arrays["expires"]))}
    state.replacers = {str(k): [str(x) for x in v] for k, v in meta["replacers"].items()}
    state.explicit = {str(k): bool(v) for k, v in meta["explicit"].items()}
    state.max_seq = int(meta["max_seq"])
    state.orphans = int(meta["orphans"])
    state.skipped = int(meta["skipped"])
    state.count_all()
    position = JournalPosition(
        int(meta["offset"]),
        bytes.fromhex(meta["head"]),
        bytes.fromhex(meta["tail"]),
        int(meta["journal_skipped"]),
    )
    return Loaded(state, position, float(meta["ratio"]))
