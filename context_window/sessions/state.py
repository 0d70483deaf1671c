"""The replayed state of one session's journal: its entries, their flags, and a BM25 index.

Records apply in file order, last value winning. Beside the records the state keeps
per-position arrays (time position, token cost, expiry, flags), so recall works on
numpy arrays.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import weakref
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from context_window.errors import InvalidInput
from context_window.localtime import time_or_none
from context_window.models import REF, Entry
from context_window.retrieval.analyzer import Analyzer
from context_window.retrieval.termcount import TermCounter
from context_window.sessions.index import MemoryIndex
from context_window.sessions.keys import Keys
from context_window.sessions.records import entry_problem, patch_problem, searchable, tag_key
from context_window.storage import read_at
from context_window.tokens import TokenCounter

# The counts kept per session (see ``SessionState.tally``).
_TALLY = ("live", "superseded", "deleted", "pinned", "expired", "live_tokens")
BATCH_INDEX = 64  # from this many new entries on, index them with vectorized term counts
BATCH_CHARS = 2_000_000  # text counted per vectorized batch (its temporaries are ~10x)


@dataclass(slots=True, eq=False)
class Record:
    """One entry's replayed fields, read as a dict's in a twelfth of its memory."""

    id: str
    seq: int
    created_at: float
    role: str
    text: str
    tokens: int
    tags: tuple[str, ...]
    pinned: bool
    deleted: bool
    superseded: bool
    replaces: tuple[str, ...]
    expires_at: float | None

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self, key, value)

    def keys(self) -> tuple[str, ...]:
        """The field names (so ``**record`` passes them all)."""
        return RECORD_FIELDS


RECORD_FIELDS = tuple(f.name for f in fields(Record))


def encode_text(text: str) -> bytes:
    """Text as UTF-8 for a snapshot, a lone surrogate kept as it is."""
    return text.encode("utf-8", "surrogatepass")


def decode_text(data: bytes) -> str:
    """What ``encode_text`` made, as text again."""
    return data.decode("utf-8", "surrogatepass")


class Blob:
    """Bytes by range from memory, or by pread from a descriptor this owns."""

    def __init__(self, data: bytes = b"", fd: int = -1, offset: int = 0) -> None:
        self._data = data
        self._offset = offset
        self._fd = fd

    def __del__(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end``."""
        if self._fd < 0:
            return self._data[start:end]
        data = read_at(self._fd, self._offset + start, end - start)
        if len(data) != end - start:
            raise OSError(f"the snapshot ends {end - start - len(data)} bytes short")
        return data


class ByPosition:
    """Tags by position: a line of JSON each, parsed when asked for."""

    def __init__(self, at: npt.NDArray[np.int64], lines: list[str], n: int) -> None:
        """ValueError unless ``at`` ascends within the ``n`` positions, a line each."""
        if len(at) != len(lines) or (
            len(at) and (at[0] < 0 or at[-1] >= n or np.any(np.diff(at) <= 0))
        ):
            raise ValueError("its tags are not listed by position")
        self.at, self.lines = at, lines

    def merged(self, more: Mapping[int, tuple[str, ...]], n: int) -> ByPosition:
        """These, then ``more`` at later positions, within ``n`` positions."""
        at = sorted(more)
        lines = [*self.lines, *(json.dumps(more[i]) for i in at)]
        return ByPosition(np.concatenate([self.at, np.array(at, np.int64)]), lines, n)

    def get(self, i: int) -> tuple[str, ...]:
        """The tags of position ``i`` (none when it has none)."""
        k = int(self.at.searchsorted(i))
        return _tags(self.lines[k]) if k < len(self.at) and self.at[k] == i else ()

    def pairs(self) -> Iterator[tuple[int, tuple[str, ...]]]:
        """Every (position, tags), in position order: the lines parsed as one JSON array,
        or each on its own if that fails, so a bad line costs only its own tags."""
        try:
            parsed = json.loads(f"[{','.join(self.lines)}]")
        except ValueError:
            parsed = None
        if parsed is None or len(parsed) != len(self.lines):
            return zip(self.at.tolist(), map(_tags, self.lines), strict=True)
        return zip(self.at.tolist(), map(_strings, parsed), strict=True)


def _tags(line: str) -> tuple[str, ...]:
    try:
        return _strings(json.loads(line))
    except ValueError:
        return ()


def _strings(value: Any) -> tuple[str, ...]:
    """A JSON list's items as strings (a record's tags or replaces); () for anything else."""
    return tuple(map(str, value)) if isinstance(value, list) else ()


@dataclass(frozen=True)
class Columns:
    """A snapshot's entries as its arrays; a record is built when asked for."""

    seq: npt.NDArray[np.int64]
    created: npt.NDArray[np.float64]
    role_codes: npt.NDArray[np.uint8]
    roles: list[str]
    texts: Blob  # every text, UTF-8, one after another (read from the file when asked)
    ends: npt.NDArray[np.int64]  # where each text ends in ``texts``
    tags: ByPosition  # the entries that have any
    replaces: dict[int, tuple[str, ...]]

    def __len__(self) -> int:
        return len(self.ends)

    def text(self, i: int) -> str:
        """The text of position ``i``."""
        start = int(self.ends[i - 1]) if i else 0
        return decode_text(self.texts.read(start, int(self.ends[i])))


class Records:
    """Entry id -> its Record, read like a dict; a snapshot's built when asked for."""

    def __init__(self, state: SessionState, columns: Columns | None = None) -> None:
        # A proxy: a cycle would keep a dropped session's state until a full collection.
        self._state: SessionState = weakref.proxy(state)
        self.columns = columns
        self._base = len(columns) if columns is not None else 0
        self._held: dict[str, Record] = {}

    def __len__(self) -> int:
        return len(self._state.order)

    def __contains__(self, eid: object) -> bool:
        return eid in self._state.pos  # every entry has a position, held or not

    def __getitem__(self, eid: str) -> Record:
        rec = self.get(eid)
        if rec is None:
            raise KeyError(eid)
        return rec

    def __setitem__(self, eid: str, rec: Record) -> None:
        self._held[eid] = rec

    def get(self, eid: str, default: Record | None = None) -> Record | None:
        """The record of ``eid``, or ``default``."""
        rec = self._held.get(eid)
        if rec is not None:
            return rec
        i = self._state.pos.get(eid)
        return default if i is None or i >= self._base else self._built(i)

    def at(self, i: int) -> Record:
        """The record at position ``i`` (no id lookup)."""
        held = self._held.get(self._state.order[i])
        return held if held is not None else self._built(i)

    def items(self) -> Iterator[tuple[str, Record]]:
        """(id, record) of every entry, in position order."""
        for i, eid in enumerate(self._state.order):
            yield eid, self.at(i)

    def tagged(self, wanted: set[str]) -> npt.NDArray[np.bool_]:
        """Per position: whether the entry has a tag in ``wanted`` (``tag_key``s). Read from
        the snapshot's tag column and the held records: no record is built."""
        hits = np.zeros(len(self), dtype=np.bool_)
        pos = self._state.pos
        held = ((pos[eid], rec.tags) for eid, rec in self._held.items() if rec.tags)
        columns = self.columns.tags.pairs() if self.columns is not None else ()
        for i, tags in itertools.chain(columns, held):  # tags never change: copies agree
            hits[i] = any(tag_key(t) in wanted for t in tags)
        return hits

    def with_seq(self, seq: int) -> list[str]:
        """The ids of the entries numbered ``seq`` (one, unless records were merged)."""
        cols = self.columns
        found = (
            []
            if cols is None
            else [self._state.order[int(i)] for i in np.flatnonzero(cols.seq == seq)]
        )
        return found + [eid for eid, rec in self._held.items() if rec.seq == seq]

    def _built(self, i: int) -> Record:
        cols, state = self.columns, self._state
        assert cols is not None
        expires = state.expires[i]
        return Record(
            state.order[i],
            int(cols.seq[i]),
            float(cols.created[i]),
            cols.roles[cols.role_codes[i]],
            cols.text(i),
            state.costs[i],
            cols.tags.get(i),
            bool(state.flags["pinned"][i]),
            bool(state.flags["deleted"][i]),
            bool(state.flags["superseded"][i]),
            cols.replaces.get(i, ()),
            None if expires == math.inf else expires,
        )


@dataclass(frozen=True)
class Masks:
    """Per position: each flag, and whether the entry is expired at a given time."""

    pinned: npt.NDArray[np.bool_]
    deleted: npt.NDArray[np.bool_]
    superseded: npt.NDArray[np.bool_]
    expired: npt.NDArray[np.bool_]

    @property
    def live(self) -> npt.NDArray[np.bool_]:
        """Neither deleted, nor superseded, nor expired."""
        return ~(self.deleted | self.superseded | self.expired)


_EVERY = slice(None)


class SessionState:
    """Entries replayed from journal records, with the arrays and index recall needs."""

    def __init__(self, counter: TokenCounter, analyzer: Analyzer) -> None:
        self.counter = counter
        self.analyzer = analyzer
        self.index = MemoryIndex()
        self.records = Records(self)
        self.pos = Keys()  # entry id -> its position in the index
        self.order = self.pos.list  # entry ids by position
        # Per position, mirrored from the records so recall works on arrays, not dicts.
        self.seqs = array("d")
        # seq_high[i]: the latest time position among 0..i, to find the latest from the end.
        self.seq_high = array("d")
        self.pinned_at: set[int] = set()  # positions whose entry is pinned
        self.costs = array("q")
        self.expires = array("d")  # expiry time per position; inf = never
        self.flags = {key: bytearray() for key in ("pinned", "deleted", "superseded")}
        self.replacers: dict[str, list[str]] = {}  # entry id -> summaries that replace it
        self.explicit: dict[str, bool] = {}  # superseded as set by patch records
        # ``tally``'s counts over positions without expiry, kept as flags change.
        self.totals = [0] * len(_TALLY)
        self.timed: set[int] = set()  # positions with a finite expiry time
        self.counted = 0  # positions below it are in ``totals`` (unless timed)
        self.max_seq = 0
        self.orphans = 0  # patches for unknown entries
        self.skipped = 0  # records that are not a valid entry or patch

    @classmethod
    def from_columns(
        cls,
        counter: TokenCounter,
        analyzer: Analyzer,
        *,
        ids: Keys,
        columns: Columns,
        index: MemoryIndex,
        seqs: npt.NDArray[np.float64],
        costs: npt.NDArray[np.int64],
        expires: npt.NDArray[np.float64],
        flags: dict[str, npt.NDArray[np.uint8]],
        replacers: dict[str, list[str]],
        explicit: dict[str, bool],
        counts: tuple[int, int, int],
    ) -> SessionState:
        """A state from a snapshot: columns, arrays, index; counts (max_seq, orphans, skipped)."""
        state = cls(counter, analyzer)
        n = len(ids)
        state.index = index
        state.pos, state.order = ids, ids.list
        state.records = Records(state, columns)
        state.seqs = array("d", seqs.tobytes())
        state.seq_high = array("d", np.maximum.accumulate(seqs).tobytes() if n else b"")
        state.pinned_at = {int(i) for i in np.flatnonzero(flags["pinned"])}
        state.costs = array("q", costs.tobytes())
        state.expires = array("d", expires.tobytes())
        state.flags = {k: bytearray(v.tobytes()) for k, v in flags.items()}
        state.timed = {int(i) for i in np.flatnonzero(np.isfinite(expires))}
        state.replacers, state.explicit = replacers, explicit
        state.max_seq, state.orphans, state.skipped = counts
        state.count_all()
        return state

    def recount(self) -> None:
        """Estimate every entry's tokens again (the token ratio changed)."""
        for i, (_, rec) in enumerate(self.records.items()):  # items() is in position order
            rec["tokens"] = self.costs[i] = self.counter.count(rec["text"])
        self.count_all()

    def count_all(self) -> None:
        """Count every position again (after the arrays were replaced or recounted)."""
        self.totals = [0] * len(_TALLY)
        self.counted = 0
        self._count_new()

    def _count_new(self) -> None:
        """Add the positions from ``counted`` on (those without expiry) to ``totals``, at once."""
        a, b = self.counted, len(self.order)
        if a >= b:
            return
        pinned, deleted, superseded = (
            np.frombuffer(bytes(self.flags[k][a:b]), dtype=np.bool_)
            for k in ("pinned", "deleted", "superseded")
        )
        untimed = np.ones(b - a, dtype=np.bool_)
        untimed[[i - a for i in self.timed if i >= a]] = False
        live = untimed & ~deleted & ~superseded
        sums = (
            live,
            untimed & superseded & ~deleted,
            untimed & deleted,
            live & pinned,
            np.zeros(0, dtype=np.bool_),  # nothing without an expiry expires
        )
        for k, mask in enumerate(sums):
            self.totals[k] += int(np.count_nonzero(mask))
        self.totals[5] += int(np.array(self.costs[a:b], dtype=np.int64)[live].sum())
        self.counted = b

    def tally(self, i: int, now: float) -> tuple[int, ...]:
        """Position ``i``'s share of each count in ``_TALLY`` at time ``now``."""
        pinned, deleted = self.flags["pinned"][i], self.flags["deleted"][i]
        superseded = self.flags["superseded"][i]
        expired = self.expires[i] <= now and not pinned
        live = not (deleted or superseded or expired)
        return (
            live,
            bool(superseded and not deleted),
            bool(deleted),
            bool(pinned and live),
            bool(expired and not deleted),
            self.costs[i] if live else 0,
        )

    def _count(self, i: int, sign: int) -> None:
        """Add (``sign`` 1) or take away (-1) an entry without expiry from ``totals``."""
        for k, v in enumerate(self.tally(i, 0.0)):
            self.totals[k] += sign * v

    def counts(self, now: float) -> dict[str, int]:
        """Each count of ``_TALLY`` over every entry at ``now``."""
        sums = list(self.totals)
        for i in self.timed:
            for k, v in enumerate(self.tally(i, now)):
                sums[k] += v
        return dict(zip(_TALLY, sums, strict=True))

    def apply(self, records: list[dict[str, Any]]) -> None:
        """Apply journal records in order; count what cannot be applied."""
        texts: list[str] = []  # of new entries, in position order, indexed below
        for rec in records:
            kind = rec.get("kind")
            if kind == "entry":
                self._add_entry(rec, texts)
            elif kind == "patch":
                if patch_problem(rec) is not None:
                    self.skipped += 1
                    continue
                target = self.records.get(str(rec.get("id")))
                if target is None:
                    self.orphans += 1
                    continue
                eid = target["id"]
                if isinstance(rec.get("pinned"), bool):
                    self.set_flag(eid, "pinned", rec["pinned"])
                    self.resolve_superseded(eid)
                if isinstance(rec.get("superseded"), bool):
                    self.explicit[eid] = rec["superseded"]
                    self.resolve_superseded(eid)
                if isinstance(rec.get("deleted"), bool):
                    self.set_flag(eid, "deleted", rec["deleted"])
                    for old in target["replaces"]:  # a deleted summary releases its originals
                        self.resolve_superseded(old)
            else:
                self.skipped += 1
        if len(texts) >= BATCH_INDEX:  # a replay: count terms vectorized, a batch at a time
            counter = TermCounter(self.analyzer)
            start = 0
            while start < len(texts):  # batches bound the counting's temporary arrays
                end, size = start, 0
                while end < len(texts) and (end == start or size < BATCH_CHARS):
                    size += len(texts[end])
                    end += 1
                t = counter.count(texts[start:end])
                self.index.add_many(t.chunk, t.term, t.tf, t.lengths, list(counter.vocab))
                start = end
        else:
            for text in texts:
                self.index.add(self.analyzer.counts(text))
        self._count_new()

    def _add_entry(self, rec: dict[str, Any], texts: list[str]) -> None:
        if entry_problem(rec) is not None or rec["id"] in self.records:
            self.skipped += 1
            return
        eid, text = str(rec["id"]), str(rec["text"])
        seq = rec.get("seq")
        seq = seq if isinstance(seq, int) else self.max_seq + 1
        tags, replaces = _strings(rec.get("tags")), _strings(rec.get("replaces"))
        # A hand-edited time must not make the session unreadable: it reads as unknown.
        stamp = time_or_none(rec.get("created_at"))
        expires = time_or_none(rec.get("expires_at"))
        state = Record(
            eid,
            seq,
            stamp if stamp is not None else 0.0,
            str(rec.get("role") or "note"),
            text,
            self.counter.count(text),
            tags,
            bool(rec.get("pinned", False)),
            False,
            False,
            replaces,
            expires,
        )
        self.records[eid] = state
        self.pos.add(eid)
        folded = [self.seqs[self.pos[r]] for r in replaces if r in self.pos]
        self.seqs.append(max(folded) + 0.5 if folded else float(seq))
        self.seq_high.append(
            max(self.seq_high[-1], self.seqs[-1]) if self.seq_high else self.seqs[-1]
        )
        if state["pinned"]:
            self.pinned_at.add(len(self.order) - 1)
        self.costs.append(state["tokens"])
        self.expires.append(math.inf if state["expires_at"] is None else state["expires_at"])
        for key, flags in self.flags.items():
            flags.append(state[key])
        if state["expires_at"] is not None:
            self.timed.add(len(self.order) - 1)  # counted per call (see counts); the rest
            # are added to the totals in one step after the records are applied
        texts.append(searchable(text, tags, state["role"]))
        self.max_seq = max(self.max_seq, seq)
        for old in replaces:
            if old in self.records:
                self.replacers.setdefault(old, []).append(eid)
                self.resolve_superseded(old)

    def resolve_superseded(self, eid: str) -> None:
        """An explicit patch's value, else whether a live summary replaces it (never a pin)."""
        if eid not in self.records:
            return
        value = self.explicit.get(eid)
        if value is None:
            value = bool(self.live_replacers(eid))
        value = value and not self.records[eid]["pinned"]
        self.set_flag(eid, "superseded", value)

    def set_flag(self, eid: str, key: str, value: bool) -> None:
        """Set a flag in the record and in its array (and in the running counts)."""
        i = self.pos[eid]
        self.records[eid][key] = value
        if self.flags[key][i] == value:
            return
        counted = i < self.counted and i not in self.timed
        if counted:
            self._count(i, -1)
        self.flags[key][i] = value
        if key == "pinned" and value:
            self.pinned_at.add(i)
        elif key == "pinned":
            self.pinned_at.discard(i)
        if counted:
            self._count(i, 1)

    def expired(self, rec: Record, now: float) -> bool:
        """Whether a record is past its expiry at ``now`` (pinned entries never are)."""
        return rec.expires_at is not None and rec.expires_at <= now and not rec.pinned

    def masks(self, now: float, at: slice | npt.NDArray[np.intp] = _EVERY) -> Masks:
        """The flags of the positions ``at`` as arrays, with expiry at ``now``."""
        flag = {k: np.frombuffer(v, dtype=np.bool_)[at].copy() for k, v in self.flags.items()}
        due = np.frombuffer(self.expires, dtype=np.float64)[at] <= now
        return Masks(flag["pinned"], flag["deleted"], flag["superseded"], due & ~flag["pinned"])

    def lacking(
        self,
        rows: Callable[[list[str]], npt.NDArray[np.int64]],
        limit: int,
        now: float,
        among: npt.NDArray[np.intp] | None = None,
    ) -> list[tuple[int, str, str]]:
        """Up to ``limit`` live entries lacking a vector, newest first: (position, id, text)."""
        at = _EVERY if among is None else among  # flags of the positions asked about only
        flags = self.masks(now, at)
        need = (rows(self.order)[at] < 0) & ~flags.deleted & ~flags.expired
        picked = (np.flatnonzero(need)[::-1] if among is None else among[need])[:limit].tolist()
        return [(p, self.order[p], self.records[self.order[p]]["text"]) for p in picked]

    def live_replacers(self, eid: str) -> list[str]:
        """The summaries folding ``eid`` that are not deleted."""
        return [s for s in self.replacers.get(eid, ()) if not self.records[s]["deleted"]]

    def resolve(self, ref: str) -> str:
        """The id ``ref`` names (an id or ``e42``, in any case, or a label copied whole:
        ``[e42 #tag (pinned)]``), else ``ref``; InvalidInput if several."""
        words = ref.strip().strip("[]#").split()
        key = words[0].casefold() if words and ref not in self.pos else ref
        m = REF.fullmatch(key)
        if key in self.pos or m is None:
            return key if key in self.pos else ref
        found = [eid for eid in self.records.with_seq(int(m[2])) if eid.startswith(m[1])]
        if len(found) > 1:
            raise InvalidInput(f"{ref} names {len(found)} entries here: give the full id")
        return found[0] if found else ref

    def entry(self, key: str | int, now: float) -> Entry:
        """The entry with id ``key`` (or at position ``key``) as of ``now``."""
        r = self.records.at(key) if isinstance(key, int) else self.records[key]
        expired = self.expired(r, now)
        replaced_by = tuple(self.live_replacers(r.id)) if r.id in self.replacers else ()
        return Entry(  # named fields: a third of the cost of Entry(**r), on recall's path
            id=r.id,
            seq=r.seq,
            created_at=r.created_at,
            role=r.role,
            text=r.text,
            tokens=r.tokens,
            tags=r.tags,
            pinned=r.pinned,
            deleted=r.deleted,
            superseded=r.superseded,
            replaces=r.replaces,
            expires_at=r.expires_at,
            expired=expired,
            replaced_by=replaced_by,
        )
