"""Session logs: append-only entries and patches, replayed last-value-wins, ranked for recall.

A session lives in ``<data>/sessions/<id>/``: ``meta.json`` (id, title, created_at)
and ``entries.jsonl``. Entry records never change; patch records set ``pinned``,
``deleted`` or ``superseded`` later. A compaction is one entry record (role
``summary``) whose ``replaces`` lists the entries it folds: replay marks those
superseded, so a summary and the retirement of its originals land in one line
and a torn write leaves the originals live rather than half-replaced.

An entry is superseded while some summary that replaces it is not deleted (or
when a patch says so explicitly): deleting a summary brings its originals back.
A summary takes the place in time of the newest entry it folds, so recall shows
it where its content happened, not after the entries that were kept.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from context_window.errors import InvalidInput, NotFound, StorageError
from context_window.models import ROLES, Entry, Packed, SessionInfo
from context_window.packing import pack
from context_window.storage import Journal, check_id, new_id, read_json, write_json_atomic
from context_window.textindex import Analyzer, MemoryIndex, recency_weights
from context_window.tokens import TokenCounter

MAX_TEXT_CHARS = 200_000
MAX_TITLE_CHARS = 200
MAX_TAGS = 10
MAX_TAG_CHARS = 40
Clock = Callable[[], float]


@dataclass(frozen=True)
class Recall:
    """Entries chosen for a recall, in chronological order, and what was left out."""

    entries: tuple[Entry, ...]
    candidates: int
    packed: Packed
    scores: dict[str, float]
    beyond_limit: int = 0


@dataclass(frozen=True)
class SessionStats:
    """Counts and token totals of one session after replay."""

    total: int
    live: int
    superseded: int
    deleted: int
    pinned: int
    live_tokens: int
    skipped_lines: int
    orphan_patches: int
    repairs: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompactionPlan:
    """The live, unpinned entries a compaction would fold, oldest first."""

    entries: tuple[Entry, ...]
    kept_recent: int
    pinned_kept: int

    @property
    def tokens(self) -> int:
        """Tokens of the entries to fold."""
        return sum(e.tokens for e in self.entries)


def _check_text(text: str, what: str = "text") -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(f"{what} must be a non-empty string")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidInput(
            f"{what} is {len(text)} characters; the limit is {MAX_TEXT_CHARS}. "
            "Split it, or ingest it as a document with doc_ingest"
        )
    if "\x00" in text:
        raise InvalidInput(f"{what} contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: JSON allows it, UTF-8 does not
        raise InvalidInput(
            f"{what} has an unpaired surrogate at character {exc.start}; send valid Unicode"
        ) from None
    return text


def check_tags(tags: Sequence[str] | None) -> tuple[str, ...]:
    """Validated, de-duplicated tags (at most 10, each 1-40 printable characters)."""
    if not tags:
        return ()
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"at most {MAX_TAGS} tags, not {len(tags)}")
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str) or not tag.strip() or len(tag) > MAX_TAG_CHARS:
            raise InvalidInput(f"each tag must be 1-{MAX_TAG_CHARS} characters: {tag!r:.60}")
        if not tag.isprintable():
            raise InvalidInput(f"tag {tag!r:.60} has control characters")
        if tag.strip() not in out:
            out.append(tag.strip())
    return tuple(out)


def _pack_ranked(costs: npt.NDArray[np.int64], budget: int) -> Packed:
    """``pack`` over ``costs``, stopping once nothing further down the ranking could still fit."""
    n = len(costs)
    if n == 0:
        return pack([], budget)
    suffix_min = np.minimum.accumulate(costs[::-1])[::-1]
    size = 256
    while True:
        size = min(size, n)
        packed = pack(costs[:size].tolist(), budget)
        if size == n or budget - packed.used_tokens < suffix_min[size]:
            return replace(packed, omitted=packed.omitted + n - size)
        size *= 4


class Session:
    """One session's journal replayed into memory and kept current with other writers."""

    def __init__(self, directory: Path, meta: dict[str, Any], counter: TokenCounter) -> None:
        self.dir = directory
        self.meta = meta
        self.counter = counter
        self.journal = Journal(directory / "entries.jsonl")
        self._analyzer = Analyzer()
        self._index = MemoryIndex()
        self._records: dict[str, dict[str, Any]] = {}
        self._order: list[str] = []  # entry ids by position in the index
        # Per position, mirrored from the records so recall works on arrays, not dicts.
        self._pos: dict[str, int] = {}
        self._seqs = array("d")
        self._costs = array("q")
        self._flags = {key: bytearray() for key in ("pinned", "deleted", "superseded")}
        self._replacers: dict[str, list[str]] = {}  # entry id -> summaries that replace it
        self._explicit_superseded: dict[str, bool] = {}  # from patch records
        self._max_seq = 0
        self._orphans = 0
        self._ratio_seen = counter.ratio
        self.repairs: list[str] = []  # what opening the session had to mend, for status

    @property
    def id(self) -> str:
        """The session id."""
        return str(self.meta["id"])

    @property
    def title(self) -> str:
        """The session title."""
        return str(self.meta.get("title") or self.id)

    def refresh(self) -> None:
        """Read what any process appended since the last look."""
        if self.journal.changed():
            with self.journal.locked():
                self._apply(self.journal.read_new())
        if self.counter.ratio != self._ratio_seen:  # calibration changed the ratio
            self._ratio_seen = self.counter.ratio
            for eid, rec in self._records.items():
                rec["tokens"] = self._costs[self._pos[eid]] = self.counter.count(rec["text"])

    def _apply(self, records: list[dict[str, Any]]) -> None:
        for rec in records:
            kind = rec.get("kind")
            if kind == "entry":
                self._apply_entry(rec)
            elif kind == "patch":
                target = self._records.get(str(rec.get("id")))
                if target is None:
                    self._orphans += 1
                    continue
                eid = target["id"]
                if isinstance(rec.get("pinned"), bool):
                    self._set_flag(eid, "pinned", rec["pinned"])
                if isinstance(rec.get("superseded"), bool):
                    self._explicit_superseded[eid] = rec["superseded"]
                    self._resolve_superseded(eid)
                if isinstance(rec.get("deleted"), bool):
                    self._set_flag(eid, "deleted", rec["deleted"])
                    for old in target["replaces"]:  # a deleted summary releases its originals
                        self._resolve_superseded(old)
            else:
                self.journal.skipped += 1

    def _apply_entry(self, rec: dict[str, Any]) -> None:
        eid, text = rec.get("id"), rec.get("text")
        if not isinstance(eid, str) or not isinstance(text, str) or eid in self._records:
            self.journal.skipped += 1
            return
        seq = rec.get("seq")
        seq = seq if isinstance(seq, int) else self._max_seq + 1
        raw_tags = rec.get("tags")
        raw_replaces = rec.get("replaces")
        tags = tuple(str(t) for t in raw_tags) if isinstance(raw_tags, list) else ()
        replaces = tuple(str(r) for r in raw_replaces) if isinstance(raw_replaces, list) else ()
        stamp = rec.get("created_at")  # a hand-edited line must not make the session unreadable
        state: dict[str, Any] = {
            "id": eid,
            "seq": seq,
            "created_at": float(stamp) if isinstance(stamp, int | float) else 0.0,
            "role": str(rec.get("role") or "note"),
            "text": text,
            "tokens": self.counter.count(text),
            "tags": tags,
            "pinned": bool(rec.get("pinned", False)),
            "deleted": False,
            "superseded": False,
            "replaces": replaces,
        }
        self._records[eid] = state
        self._pos[eid] = len(self._order)
        self._order.append(eid)
        folded = [self._seqs[self._pos[r]] for r in replaces if r in self._pos]
        self._seqs.append(max(folded) + 0.5 if folded else float(seq))
        self._costs.append(state["tokens"])
        for key, flags in self._flags.items():
            flags.append(state[key])
        self._index.add(self._analyzer.counts(text + " " + " ".join(tags)))
        self._max_seq = max(self._max_seq, seq)
        for old in replaces:
            if old in self._records:
                self._replacers.setdefault(old, []).append(eid)
                self._resolve_superseded(old)

    def _resolve_superseded(self, eid: str) -> None:
        """Superseded = an explicit patch's value, else whether a live summary replaces it."""
        if eid not in self._records:
            return
        value = self._explicit_superseded.get(eid)
        if value is None:
            value = any(not self._records[s]["deleted"] for s in self._replacers.get(eid, ()))
        self._set_flag(eid, "superseded", value)

    def _set_flag(self, eid: str, key: str, value: bool) -> None:
        self._records[eid][key] = value
        self._flags[key][self._pos[eid]] = value

    def _entry(self, eid: str) -> Entry:
        return Entry(**self._records[eid])

    def entries(self, *, include_superseded: bool = False) -> list[Entry]:
        """Entries in chronological order: live ones, plus superseded ones if asked."""
        self.refresh()
        out = []
        for i in sorted(range(len(self._order)), key=self._seqs.__getitem__):
            rec = self._records[self._order[i]]
            if rec["deleted"] or (rec["superseded"] and not include_superseded):
                continue
            out.append(Entry(**rec))
        return out

    def get(self, entry_id: str) -> Entry:
        """One entry by id, whatever its state."""
        self.refresh()
        if entry_id not in self._records:
            raise NotFound(f"no entry {entry_id!r} in session {self.id!r}")
        return self._entry(entry_id)

    def append(
        self,
        text: str,
        role: str = "note",
        tags: Sequence[str] | None = None,
        pinned: bool = False,
        *,
        now: float | None = None,
    ) -> Entry:
        """Append one entry and return it."""
        _check_text(text)
        if role not in ROLES:
            raise InvalidInput(f"role must be one of {', '.join(ROLES)}; not {role!r:.40}")
        record = {
            "kind": "entry",
            "id": new_id("e"),
            "created_at": time.time() if now is None else now,
            "role": role,
            "text": text,
            "tokens": self.counter.count(text),
            "tags": list(check_tags(tags)),
            "pinned": bool(pinned),
        }
        return self._write_entry(record)

    def _write_entry(self, record: dict[str, Any]) -> Entry:
        with self.journal.locked():
            self._apply(self.journal.read_new())
            record["seq"] = self._max_seq + 1
            self.journal.write([record])
            self._apply([record])
        return self._entry(str(record["id"]))

    def update(
        self, entry_id: str, pinned: bool | None = None, deleted: bool | None = None
    ) -> Entry:
        """Pin, unpin, delete or undelete an entry with a patch record."""
        if pinned is None and deleted is None:
            raise InvalidInput("give pinned and/or delete to change an entry")
        patch: dict[str, Any] = {"kind": "patch", "id": entry_id}
        if pinned is not None:
            patch["pinned"] = bool(pinned)
        if deleted is not None:
            patch["deleted"] = bool(deleted)
        with self.journal.locked():
            self._apply(self.journal.read_new())
            if entry_id not in self._records:
                raise NotFound(
                    f"no entry {entry_id!r} in session {self.id!r}; "
                    "entry ids are shown by context_recall and context_append"
                )
            self.journal.write([patch])
            self._apply([patch])
        return self._entry(entry_id)

    def plan_compaction(self, keep_recent: int) -> CompactionPlan:
        """Live unpinned entries older than the ``keep_recent`` most recent live ones."""
        if not 0 <= keep_recent <= 10_000:
            raise InvalidInput(f"keep_recent must be between 0 and 10000, not {keep_recent}")
        live = self.entries()
        unpinned = [e for e in live if not e.pinned]
        fold = unpinned[: max(0, len(unpinned) - keep_recent)]
        return CompactionPlan(
            tuple(fold), min(keep_recent, len(unpinned)), len(live) - len(unpinned)
        )

    def commit_summary(self, plan: CompactionPlan, text: str, method: str) -> Entry:
        """Append the summary that replaces ``plan``'s entries, if they are all still live."""
        record = {
            "kind": "entry",
            "id": new_id("s"),
            "created_at": time.time(),
            "role": "summary",
            "text": text,
            "tokens": self.counter.count(text),
            "tags": ["summary", method],
            "pinned": False,
            "replaces": [e.id for e in plan.entries],
        }
        with self.journal.locked():
            self._apply(self.journal.read_new())
            for e in plan.entries:
                rec = self._records[e.id]
                if rec["deleted"] or rec["superseded"] or rec["pinned"]:
                    raise StorageError(
                        f"entry {e.id} changed while the summary was being written; "
                        "nothing was compacted. Call context_compact again"
                    )
            record["seq"] = self._max_seq + 1
            self.journal.write([record])
            self._apply([record])
        return self._entry(str(record["id"]))

    def recall(
        self,
        query: str | None,
        budget: int,
        *,
        limit: int | None = None,
        tags: Sequence[str] | None = None,
        include_superseded: bool = False,
    ) -> Recall:
        """Rank entries (pinned first, then BM25 x recency or recency alone) and pack them."""
        self.refresh()
        wanted = set(check_tags(tags))
        n = len(self._order)
        seqs = np.array(self._seqs, dtype=np.float64)
        pinned_mask = np.frombuffer(self._flags["pinned"], dtype=np.bool_).copy()
        mask = np.frombuffer(self._flags["deleted"], dtype=np.bool_) == 0
        if not include_superseded:
            mask &= np.frombuffer(self._flags["superseded"], dtype=np.bool_) == 0
        if wanted:
            mask &= np.fromiter(
                (bool(wanted.intersection(self._records[eid]["tags"])) for eid in self._order),
                dtype=np.bool_,
                count=n,
            )
        recency = recency_weights(seqs)
        terms = self._analyzer.terms(query) if query and query.strip() else []
        if query and query.strip() and not terms:
            raise InvalidInput(f"query {query!r:.60} has no searchable words (2+ letters/digits)")
        scores = self._index.scores(terms) * recency if terms else recency
        pinned = np.flatnonzero(mask & pinned_mask)
        rest_mask = mask & ~pinned_mask
        if terms:  # BM25 can score a real match <= 0 (a term in half or more of few entries)
            rest_mask &= self._index.matching(terms)
        rest = np.flatnonzero(rest_mask)
        rest = rest[np.lexsort((-seqs[rest], -scores[rest]))]  # stable: ties keep position order
        ranked = np.concatenate([pinned, rest])
        candidates = len(ranked)
        if limit is not None:
            ranked = ranked[:limit]
        packed = _pack_ranked(np.array(self._costs, dtype=np.int64)[ranked], budget)
        chosen = sorted((int(ranked[k]) for k in packed.items), key=lambda i: seqs[i])
        entries = tuple(self._entry(self._order[i]) for i in chosen)
        score_map = {self._order[i]: float(scores[i]) for i in chosen}
        return Recall(entries, candidates, packed, score_map, candidates - len(ranked))

    def stats(self) -> SessionStats:
        """Counts after replay, including lines skipped as unreadable."""
        self.refresh()
        recs = self._records.values()
        live = [r for r in recs if not r["deleted"] and not r["superseded"]]
        return SessionStats(
            total=len(self._records),
            live=len(live),
            superseded=sum(1 for r in recs if r["superseded"] and not r["deleted"]),
            deleted=sum(1 for r in recs if r["deleted"]),
            pinned=sum(1 for r in live if r["pinned"]),
            live_tokens=sum(r["tokens"] for r in live),
            skipped_lines=self.journal.skipped,
            orphan_patches=self._orphans,
            repairs=tuple(self.repairs),
        )

    def updated_at(self) -> float:
        """Last change: the journal's mtime, or the time meta.json says (a rename)."""
        return _updated(self.journal.path, self.meta)


class SessionStore:
    """All sessions under ``<data>/sessions``; sessions are loaded once and kept current."""

    def __init__(self, data_dir: Path, counter: TokenCounter) -> None:
        self.root = data_dir / "sessions"
        self.counter = counter
        self._open: dict[str, Session] = {}

    def ids(self) -> list[str]:
        """Ids of the sessions on disk."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )

    def open(self, session_id: str | None = None, title: str | None = None) -> tuple[Session, bool]:
        """Resume a session, or create it; returns (session, created)."""
        if title is not None and (len(title) > MAX_TITLE_CHARS or not title.isprintable()):
            raise InvalidInput(f"title must be at most {MAX_TITLE_CHARS} printable characters")
        sid = check_id(session_id, "session_id") if session_id else new_id("s")
        directory = self.root / sid
        meta_path = directory / "meta.json"
        meta = read_json(meta_path)
        created = False
        repair = ""
        if meta is None:
            has_log = (directory / "entries.jsonl").exists()
            created = not has_log
            if meta_path.exists():  # unreadable: keep the damaged bytes for a person to see
                meta_path.replace(meta_path.with_name("meta.json.corrupt"))
                repair = "meta.json was unreadable: rebuilt it, damaged copy in meta.json.corrupt"
            elif has_log:
                repair = "meta.json was missing: rebuilt it (title reset to the id)"
            now = time.time()
            meta = {"id": sid, "title": title or sid, "created_at": now, "updated_at": now}
            write_json_atomic(meta_path, meta)
        elif title and title != meta.get("title"):
            meta = {**meta, "title": title, "updated_at": time.time()}
            write_json_atomic(meta_path, meta)
        meta["id"] = sid
        session = self._open.get(sid)
        if session is None:
            session = self._open[sid] = Session(directory, meta, self.counter)
        else:
            session.meta = meta
        if repair:
            session.repairs.append(repair)
        session.refresh()
        return session, created

    def get(self, session_id: str) -> Session:
        """An existing session; NotFound (naming context_open) otherwise."""
        check_id(session_id, "session_id")
        session = self._open.get(session_id)
        if session is not None:
            return session
        if not (self.root / session_id).is_dir():
            known = self.ids()
            listed = ", ".join(known[:10]) + (" …" if len(known) > 10 else "") if known else "none"
            raise NotFound(
                f"no session {session_id!r} (known sessions: {listed}). "
                "Call context_open to create or resume one"
            )
        return self.open(session_id)[0]

    def list(self) -> list[SessionInfo]:
        """Every session, most recently updated first."""
        out = []
        for sid in self.ids():
            meta = read_json(self.root / sid / "meta.json") or {"id": sid}
            session = self._open.get(sid)
            journal = self.root / sid / "entries.jsonl"
            updated = session.updated_at() if session else _updated(journal, meta)
            out.append(
                SessionInfo(
                    id=sid,
                    title=str(meta.get("title") or sid),
                    created_at=float(meta.get("created_at") or 0.0),
                    updated_at=updated,
                )
            )
        out.sort(key=lambda s: s.updated_at, reverse=True)
        return out


def _updated(journal: Path, meta: dict[str, Any]) -> float:
    """The later of the journal's mtime and meta's updated_at/created_at."""
    stamps = [meta.get("updated_at"), meta.get("created_at")]
    best = max((float(t) for t in stamps if isinstance(t, int | float)), default=0.0)
    try:
        return max(best, journal.stat().st_mtime)
    except FileNotFoundError:
        return best
