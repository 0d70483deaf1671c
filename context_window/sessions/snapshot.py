"""A session's replayed state saved beside its journal, so the next process replays only
what was appended after it.

``snapshot.json`` holds the journal position (offset, first bytes, bytes before it), the
small fields and the name of a ``snapshot-<hex>/`` directory of ``.npy`` arrays, mapped
with ``mmap_mode="r"``. The directory is written whole and renamed before a new
``snapshot.json`` names it, so a crash leaves the old snapshot or none. A cache, never
trusted over the journal: any mismatch of position, format, analyzer or parts replays
the journal (earlier formats never shipped).
"""

from __future__ import annotations

import contextlib
import json
import logging
import mmap
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from context_window.errors import Busy
from context_window.journal import JournalPosition
from context_window.retrieval.analyzer import ANALYZER_VERSION, Analyzer
from context_window.sessions.index import MemoryIndex
from context_window.sessions.keys import Keys
from context_window.sessions.state import (
    Blob,
    ByPosition,
    Columns,
    SessionState,
    decode_text,
    encode_text,
)
from context_window.storage import atomic_file, file_lock, read_json
from context_window.tokens import TokenCounter

log = logging.getLogger("context_window")

SNAPSHOT = "snapshot.json"
ARRAYS = "snapshot"  # the arrays' directories: snapshot-<hex>
LOCK = ".snapshot.lock"  # held while a snapshot is written
FORMAT = 5  # 4: with the tables of ids and terms (see keys.py); 5: decisions indexed
_FLAGS = ("pinned", "deleted", "superseded")


@dataclass(frozen=True)
class Loaded:
    """A state read from a snapshot, the journal position it reflects and its token ratio."""

    state: SessionState
    position: JournalPosition
    ratio: float


def save(directory: Path, state: SessionState, position: JournalPosition, ratio: float) -> bool:
    """Write ``state`` atomically; False when another process is saving one."""
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
    }
    entries = _entry_columns(state)
    n = len(entries)
    meta["roles"] = entries.roles
    meta["replaces"] = entries.replaces
    id_hashes, id_numbers = state.pos.table()
    arrays: dict[str, npt.NDArray[Any]] = {
        "ids": _joined(state.order),
        "id_hashes": id_hashes,
        "id_numbers": id_numbers,
        "terms": _joined(terms),
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
    arrays["tag_at"], arrays["tags"] = entries.tags.at, _joined(entries.tags.lines)
    try:
        with file_lock(directory / LOCK, f"the snapshot of session {directory.name!r}", 0):
            _write(directory, meta, arrays)
    except Busy:
        return False  # another process is saving one right now
    return True


def _joined(strings: list[str]) -> npt.NDArray[np.uint8]:
    """Strings without a newline (ids, terms) as the bytes of one text, a line each."""
    return np.frombuffer(encode_text("\n".join(strings)), dtype=np.uint8)


def _split(joined: npt.NDArray[Any]) -> list[str]:
    return decode_text(bytes(joined)).split("\n") if len(joined) else []


def _entry_columns(state: SessionState) -> Columns:
    """The entries' fields as columns: the snapshot's, plus the entries added since."""
    base = state.records.columns
    if base is None:
        base = Columns(
            np.zeros(0, np.int64),
            np.zeros(0, np.float64),
            np.zeros(0, np.uint8),
            [],
            Blob(),
            np.zeros(0, np.int64),
            ByPosition(np.zeros(0, np.int64), [], 0),
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
        base.tags.merged({n + j: r.tags for j, r in enumerate(tail) if r.tags}, n + len(tail)),
        {**base.replaces, **{n + j: r.replaces for j, r in enumerate(tail) if r.replaces}},
    )


def _write(directory: Path, meta: dict[str, Any], arrays: dict[str, npt.NDArray[Any]]) -> None:
    """Write the arrays to a new directory and point ``snapshot.json`` at it (locked)."""
    current = read_json(directory / SNAPSHOT) or {}
    _sweep(directory, keep={str(current.get("arrays"))})  # the old stays usable
    name = f"{ARRAYS}-{secrets.token_hex(4)}"
    work = directory / f".{name}.tmp"
    work.mkdir()
    for key, value in arrays.items():
        with (work / f"{key}.npy").open("wb") as f:
            np.save(f, value, allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
    work.rename(directory / name)
    with atomic_file(directory / SNAPSHOT) as f:  # ASCII: a lone surrogate stays escaped
        f.write(json.dumps({**meta, "arrays": name}).encode("ascii"))
    _sweep(directory, keep={name})


def _sweep(directory: Path, keep: set[str]) -> None:
    """Remove the snapshot's array directories and temporary files but those in ``keep``."""
    for p in directory.iterdir():
        ours = p.name.startswith((f"{ARRAYS}-", f".{ARRAYS}-", f".{SNAPSHOT}."))
        if ours and p.name not in keep:
            with contextlib.suppress(OSError):
                shutil.rmtree(p) if p.is_dir() else p.unlink()


def load(directory: Path, counter: TokenCounter, analyzer: Analyzer) -> Loaded | None:
    """The state saved in ``directory``, or None (the caller replays the journal)."""
    try:
        meta = read_json(directory / SNAPSHOT)
        if meta is None:
            return None
        arrays = _mapped(directory / str(meta["arrays"]))
        texts = Blob(
            fd=os.open(arrays["texts"].filename, os.O_RDONLY), offset=arrays["texts"].offset
        )
        loaded = _state(meta, arrays, counter, analyzer, texts)
        _release(arrays)
        return loaded
    except Exception as exc:  # a cache: whatever is wrong with it, the journal is replayed
        log.warning(
            "ignoring the snapshot of session %r (%s); replaying its journal", directory.name, exc
        )
        return None


def _mapped(folder: Path) -> dict[str, Any]:
    """Every array of a snapshot directory, memory-mapped and read at random."""
    out: dict[str, Any] = {}
    for path in folder.glob("*.npy"):
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
        base = getattr(arr, "_mmap", None)
        if base is not None and hasattr(mmap, "MADV_RANDOM"):
            base.madvise(mmap.MADV_RANDOM)
        out[path.stem] = arr
    return out


def _release(arrays: dict[str, Any]) -> None:
    """Let go of the pages the checks read; they are read again when asked for."""
    for arr in arrays.values():
        base = getattr(arr, "_mmap", None)
        if base is not None and hasattr(mmap, "MADV_DONTNEED"):
            with contextlib.suppress(OSError, ValueError):
                base.madvise(mmap.MADV_DONTNEED)


def remove(directory: Path) -> None:
    """Delete the snapshot (after a purge rewrote the journal it reflects)."""
    with contextlib.suppress(OSError):
        (directory / SNAPSHOT).unlink()
    with contextlib.suppress(OSError):
        _sweep(directory, keep=set())


def _state(
    meta: dict[str, Any],
    arrays: dict[str, npt.NDArray[Any]],
    counter: TokenCounter,
    analyzer: Analyzer,
    texts: Blob,
) -> Loaded | None:
    """The state the arrays hold; ``texts`` reads the bytes of ``arrays["texts"]``."""
    if meta.get("format") != FORMAT or meta.get("analyzer") != ANALYZER_VERSION:
        return None
    ids = Keys(_split(arrays["ids"]), (arrays["id_hashes"], arrays["id_numbers"]))
    n = len(ids)
    parts = [
        arrays[k]
        for k in ("seqs", "costs", "expires", "text_ends", "roles", "created", "seq", *_FLAGS)
    ]
    if any(a.ndim != 1 or len(a) != n for a in parts) or len(arrays["ix_doc_len"]) != n:
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
    columns = Columns(
        np.asarray(arrays["seq"], dtype=np.int64),
        np.asarray(arrays["created"], dtype=np.float64),
        codes,
        roles,
        # Read by pread, not through the map: large folios map megabytes around each text.
        texts,
        ends,
        ByPosition(np.asarray(arrays["tag_at"], np.int64), _split(arrays["tags"]), n),
        {int(k): tuple(str(x) for x in v) for k, v in meta["replaces"].items()},
    )
    state = SessionState.from_columns(
        counter,
        analyzer,
        ids=ids,
        columns=columns,
        index=MemoryIndex.restore(
            _split(arrays["terms"]),
            {k[3:]: v for k, v in arrays.items() if k.startswith("ix_")},
        ),
        seqs=np.asarray(arrays["seqs"], dtype=np.float64),
        costs=np.asarray(arrays["costs"], dtype=np.int64),
        expires=np.asarray(arrays["expires"], dtype=np.float64),
        flags={k: np.asarray(arrays[k], dtype=np.uint8) for k in _FLAGS},
        replacers={str(k): [str(x) for x in v] for k, v in meta["replacers"].items()},
        explicit={str(k): bool(v) for k, v in meta["explicit"].items()},
        counts=(int(meta["max_seq"]), int(meta["orphans"]), int(meta["skipped"])),
    )
    position = JournalPosition(
        int(meta["offset"]),
        bytes.fromhex(meta["head"]),
        bytes.fromhex(meta["tail"]),
        int(meta["journal_skipped"]),
    )
    return Loaded(state, position, float(meta["ratio"]))
