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
from array import array
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from context_window.errors import Busy
from context_window.sessions.state import Record, SessionState, gc_paused
from context_window.storage import JournalPosition, atomic_file, file_lock
from context_window.textindex import ANALYZER_VERSION, Analyzer, MemoryIndex
from context_window.tokens import TokenCounter

log = logging.getLogger("context_window")

SNAPSHOT = "snapshot.npz"
LOCK = ".snapshot.lock"  # held while a snapshot is written
FORMAT = 1
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
    records = [state.records[eid] for eid in state.order]
    roles = sorted({r["role"] for r in records})
    texts = [r["text"] for r in records]
    meta["roles"] = roles
    meta["tags"] = {i: list(r["tags"]) for i, r in enumerate(records) if r["tags"]}
    meta["replaces"] = {i: list(r["replaces"]) for i, r in enumerate(records) if r["replaces"]}
    code = {role: k for k, role in enumerate(roles)}
    # The entries as columns: their texts in one UTF-8 blob cut by character counts.
    arrays: dict[str, npt.NDArray[Any]] = {
        "meta": _blob(meta),
        "ids": np.frombuffer(_encode("\n".join(state.order)), dtype=np.uint8),
        "texts": np.frombuffer(_encode("".join(texts)), dtype=np.uint8),
        "text_chars": np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)),
        "roles": np.fromiter(
            (code[r["role"]] for r in records), dtype=np.uint8, count=len(records)
        ),
        "created": np.fromiter(
            (r["created_at"] for r in records), dtype=np.float64, count=len(records)
        ),
        "seq": np.fromiter((r["seq"] for r in records), dtype=np.int64, count=len(records)),
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
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        with gc_paused():
            return _state(arrays, counter, analyzer)
    except Exception as exc:  # a cache: whatever is wrong with it, the journal is replayed
        log.warning(
            "ignoring the snapshot of session %r (%s); replaying its journal", directory.name, exc
        )
        return None


def remove(directory: Path) -> None:
    """Delete the snapshot (after a purge rewrote the journal it reflects)."""
    with contextlib.suppress(OSError):
        (directory / SNAPSHOT).unlink()


def _blob(value: Any) -> npt.NDArray[np.uint8]:
    return np.frombuffer(json.dumps(value).encode("ascii"), dtype=np.uint8)


def _encode(text: str) -> bytes:
    # A hand-edited journal can hold a lone surrogate (JSON allows "\ud800"): kept as is.
    return text.encode("utf-8", "surrogatepass")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def _json(arr: npt.NDArray[Any]) -> Any:
    return json.loads(arr.tobytes().decode("utf-8"))


def _state(
    arrays: dict[str, npt.NDArray[Any]], counter: TokenCounter, analyzer: Analyzer
) -> Loaded | None:
    meta = _json(arrays["meta"])
    if meta.get("format") != FORMAT or meta.get("analyzer") != ANALYZER_VERSION:
        return None
    ids = _decode(arrays["ids"].tobytes()).split("\n") if len(arrays["ids"]) else []
    n = len(ids)
    parts = [
        arrays[k]
        for k in ("seqs", "costs", "expires", "text_chars", "roles", "created", "seq", *_FLAGS)
    ]
    if any(len(a) != n for a in parts) or len(arrays["ix_doc_len"]) != n:
        raise ValueError("its parts hold different numbers of entries")
    text = _decode(arrays["texts"].tobytes())
    ends = np.cumsum(arrays["text_chars"].astype(np.int64)).tolist()
    if n and ends[-1] != len(text):
        raise ValueError("the texts do not add up")
    state = SessionState(counter, analyzer)
    state.index = MemoryIndex.restore(
        [str(t) for t in meta["terms"]],
        {k[3:]: v for k, v in arrays.items() if k.startswith("ix_")},
    )
    roles = [str(r) for r in meta["roles"]]
    tags = {int(k): tuple(str(t) for t in v) for k, v in meta["tags"].items()}
    replaces = {int(k): tuple(str(x) for x in v) for k, v in meta["replaces"].items()}
    flags = {k: arrays[k].astype(bool).tolist() for k in _FLAGS}
    expires = [None if x == math.inf else x for x in arrays["expires"].astype(float).tolist()]
    # Column by column (map builds the records at C speed): a million entries load in
    # about a second.
    records = map(
        Record,
        ids,
        arrays["seq"].tolist(),
        arrays["created"].tolist(),
        list(map(roles.__getitem__, arrays["roles"].tolist())),
        [text[a:b] for a, b in zip([0, *ends], ends)],  # noqa: B905  one start too many
        arrays["costs"].tolist(),
        [tags.get(i, ()) for i in range(n)] if tags else repeat((), n),
        flags["pinned"],
        flags["deleted"],
        flags["superseded"],
        [replaces.get(i, ()) for i in range(n)] if replaces else repeat((), n),
        expires,
    )
    state.records = dict(zip(ids, records, strict=True))
    state.pos = dict(zip(ids, range(n), strict=True))
    state.order = ids
    if len(state.records) != n:
        raise ValueError("an entry id is listed twice")
    state.seqs = array("d", arrays["seqs"].astype(np.float64).tobytes())
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
