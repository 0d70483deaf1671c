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

import math
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
from context_window.termcount import TermCounter
from context_window.textindex import Analyzer, MemoryIndex, recency_weights
from context_window.tokens import TokenCounter

MAX_TEXT_CHARS = 200_000
MAX_TITLE_CHARS = 200
MAX_TAGS = 10
MAX_TAG_CHARS = 40
MAX_TTL_DAYS = 36_500
DAY = 86_400.0
BATCH_INDEX = 64  # from this many new entries on, index them with vectorized term counts
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
    expired: int
    live_tokens: int
    skipped_lines: int
    orphan_patches: int
    repairs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Purged:
    """What a purge removed from a session's log, and what it could not erase."""

    entries: tuple[str, ...]
    patches: int
    unreadable: int
    kept: int
    folded: tuple[tuple[str, str], ...]  # (removed entry, live summary that folded its text)


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

    def __init__(
        self,
        directory: Path,
        meta: dict[str, Any],
        counter: TokenCounter,
        clock: Clock = time.time,
    ) -> None:
        self.dir = directory
        self.meta = meta
        self.counter = counter
        self.clock = clock
        self.journal = Journal(directory / "entries.jsonl")
        self._analyzer = Analyzer()
        self._clear()
        self.repairs: list[str] = []  # what opening the session had to mend, for status

    def _clear(self) -> None:
        """Empty the replayed state, to replay a journal from its first line."""
        self._index = MemoryIndex()
        self._records: dict[str, dict[str, Any]] = {}
        self._order: list[str] = []  # entry ids by position in the index
        # Per position, mirrored from the records so recall works on arrays, not dicts.
        self._pos: dict[str, int] = {}
        self._seqs = array("d")
        self._costs = array("q")
        self._expires = array("d")  # expiry time per position; inf = never
        self._flags = {key: bytearray() for key in ("pinned", "deleted", "superseded")}
        self._replacers: dict[str, list[str]] = {}  # entry id -> summaries that replace it
        self._explicit_superseded: dict[str, bool] = {}  # from patch records
        self._max_seq = 0
        self._orphans = 0
        self._ratio_seen = self.counter.ratio
        self._generation = self.journal.generation

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
                self._catch_up()
        if self.counter.ratio != self._ratio_seen:  # calibration changed the ratio
            self._ratio_seen = self.counter.ratio
            for eid, rec in self._records.items():
                rec["tokens"] = self._costs[self._pos[eid]] = self.counter.count(rec["text"])

    def _catch_up(self) -> None:
        """Apply what was appended since the last read (under the lock); replay a rewritten log."""
        records = self.journal.read_new()
        if self.journal.generation != self._generation:  # purged by some process
            self._clear()
        self._apply(records)

    def _apply(self, records: list[dict[str, Any]]) -> None:
        texts: list[str] = []  # of new entries, in position order, indexed below
        for rec in records:
            kind = rec.get("kind")
            if kind == "entry":
                self._apply_entry(rec, texts)
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
        if len(texts) >= BATCH_INDEX:  # a replay: count all terms at once (5x faster)
            counter = TermCounter(self._analyzer)
            t = counter.count(texts)
            self._index.add_many(t.chunk, t.term, t.tf, t.lengths, list(counter.vocab))
        else:
            for text in texts:
                self._index.add(self._analyzer.counts(text))

    def _apply_entry(self, rec: dict[str, Any], texts: list[str]) -> None:
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
        expires = rec.get("expires_at")
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
            "expires_at": float(expires) if isinstance(expires, int | float) else None,
        }
        self._records[eid] = state
        self._pos[eid] = len(self._order)
        self._order.append(eid)
        folded = [self._seqs[self._pos[r]] for r in replaces if r in self._pos]
        self._seqs.append(max(folded) + 0.5 if folded else float(seq))
        self._costs.append(state["tokens"])
        self._expires.append(math.inf if state["expires_at"] is None else state["expires_at"])
        for key, flags in self._flags.items():
            flags.append(state[key])
        texts.append(text + " " + " ".join(tags))
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

    def _expired(self, rec: dict[str, Any], now: float) -> bool:
        return rec["expires_at"] is not None and rec["expires_at"] <= now and not rec["pinned"]

    def _entry(self, eid: str, now: float | None = None) -> Entry:
        rec = self._records[eid]
        by = tuple(s for s in self._replacers.get(eid, ()) if not self._records[s]["deleted"])
        now = self.clock() if now is None else now
        return Entry(**rec, expired=self._expired(rec, now), replaced_by=by)

    def entries(
        self, *, include_superseded: bool = False, include_hidden: bool = False
    ) -> list[Entry]:
        """Entries in time order: live ones, plus superseded ones, or every one if asked.

        ``include_hidden`` adds deleted and expired entries too (for people inspecting
        the log); ``include_superseded`` adds only entries folded into a summary.
        """
        self.refresh()
        now = self.clock()
        out = []
        for i in sorted(range(len(self._order)), key=self._seqs.__getitem__):
            entry = self._entry(self._order[i], now)
            shown = entry.live or (include_superseded and entry.superseded)
            if include_hidden or (shown and not entry.deleted and not entry.expired):
                out.append(entry)
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
        ttl_days: float | None = None,
        now: float | None = None,
    ) -> Entry:
        """Append one entry and return it; ``ttl_days`` makes an unpinned entry expire."""
        _check_text(text)
        if role not in ROLES:
            raise InvalidInput(f"role must be one of {', '.join(ROLES)}; not {role!r:.40}")
        if ttl_days is not None and not (0 < ttl_days <= MAX_TTL_DAYS and math.isfinite(ttl_days)):
            raise InvalidInput(
                f"ttl_days must be above 0 and at most {MAX_TTL_DAYS}, not {ttl_days}"
            )
        created = self.clock() if now is None else now
        record: dict[str, Any] = {
            "kind": "entry",
            "id": new_id("e"),
            "created_at": created,
            "role": role,
            "text": text,
            "tokens": self.counter.count(text),
            "tags": list(check_tags(tags)),
            "pinned": bool(pinned),
        }
        if ttl_days is not None:
            record["expires_at"] = created + ttl_days * DAY
        return self._write_entry(record)

    def _write_entry(self, record: dict[str, Any]) -> Entry:
        with self.journal.locked():
            self._catch_up()
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
            self._catch_up()
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

    def commit_summary(
        self, plan: CompactionPlan, text: str, method: str, kept_facts: Sequence[str] = ()
    ) -> Entry:
        """Append the summary that replaces ``plan``'s entries, if they are all still live.

        ``kept_facts`` are the facts of the originals the summary text had lost; the
        caller has already appended them to ``text``, and the record lists them.
        """
        record: dict[str, Any] = {
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
        if kept_facts:
            record["kept_facts"] = list(kept_facts)
        with self.journal.locked():
            self._catch_up()
            now = self.clock()
            for e in plan.entries:
                rec = self._records[e.id]
                if rec["deleted"] or rec["superseded"] or rec["pinned"] or self._expired(rec, now):
                    raise StorageError(
                        f"entry {e.id} changed while the summary was being written; "
                        "nothing was compacted. Call context_compact again"
                    )
            record["seq"] = self._max_seq + 1
            self.journal.write([record])
            self._apply([record])
        return self._entry(str(record["id"]))

    def uncompact(self, compaction_id: str) -> list[Entry]:
        """Undo a compaction: retire its summary so the entries it folded are live again."""
        with self.journal.locked():
            self._catch_up()
            rec = self._records.get(compaction_id)
            if rec is None or not rec["replaces"]:
                raise NotFound(
                    f"no compaction {compaction_id!r} in session {self.id!r}; its id is the "
                    "summary id context_compact returned (role summary in context_recall)"
                )
            if rec["deleted"]:
                raise InvalidInput(
                    f"compaction {compaction_id} is already undone; "
                    "context_update(entry_id, delete=false) would redo it"
                )
            outer = [
                s for s in self._replacers.get(compaction_id, ()) if not self._records[s]["deleted"]
            ]
            if outer:
                raise InvalidInput(
                    f"summary {compaction_id} was itself folded into {outer[0]}; "
                    f"call context_uncompact with compaction_id={outer[0]!r} first"
                )
            patch = {"kind": "patch", "id": compaction_id, "deleted": True, "uncompacted": True}
            self.journal.write([patch])
            self._apply([patch])
            now = self.clock()
            restored = [self._entry(eid, now) for eid in rec["replaces"] if eid in self._records]
        return [e for e in restored if e.live]

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
        mask &= (np.array(self._expires, dtype=np.float64) > self.clock()) | pinned_mask
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
        now = self.clock()
        entries = tuple(self._entry(self._order[i], now) for i in chosen)
        score_map = {self._order[i]: float(scores[i]) for i in chosen}
        return Recall(entries, candidates, packed, score_map, candidates - len(ranked))

    def stats(self) -> SessionStats:
        """Counts after replay, including lines skipped as unreadable."""
        self.refresh()
        now = self.clock()
        recs = self._records.values()
        expired = [r for r in recs if not r["deleted"] and self._expired(r, now)]
        live = [r for r in recs if not (r["deleted"] or r["superseded"] or self._expired(r, now))]
        return SessionStats(
            total=len(self._records),
            live=len(live),
            superseded=sum(1 for r in recs if r["superseded"] and not r["deleted"]),
            deleted=sum(1 for r in recs if r["deleted"]),
            pinned=sum(1 for r in live if r["pinned"]),
            expired=len(expired),
            live_tokens=sum(r["tokens"] for r in live),
            skipped_lines=self.journal.skipped,
            orphan_patches=self._orphans,
            repairs=tuple(self.repairs),
        )

    def purge(self, *, dry_run: bool = False) -> Purged:
        """Rewrite the log without deleted or expired entries (and their patches), atomically.

        Everything else is kept as it was written, so pins, compactions and their
        originals survive. A removed entry that a live summary folded may still be
        paraphrased in that summary's text: the result names those pairs.
        """
        with self.journal.locked():
            self._catch_up()
            now = self.clock()
            gone = {
                eid
                for eid, rec in self._records.items()
                if rec["deleted"] or self._expired(rec, now)
            }
            records = self.journal.read_all()
            kept: list[dict[str, Any]] = []
            patches = unknown = 0
            for rec in records:
                kind, target = rec.get("kind"), str(rec.get("id"))
                if kind == "patch" and (target in gone or target not in self._records):
                    patches += 1
                elif kind == "entry" and target in gone:
                    continue
                elif kind in {"entry", "patch"}:
                    if isinstance(rec.get("replaces"), list):
                        rec = {**rec, "replaces": [r for r in rec["replaces"] if r not in gone]}
                    kept.append(rec)
                else:
                    unknown += 1
            unreadable = self.journal.skipped + unknown
            folded = tuple(
                (eid, s)
                for eid in sorted(gone)
                for s in self._replacers.get(eid, ())
                if s not in gone and not self._records[s]["deleted"]
            )
            result = Purged(tuple(sorted(gone)), patches, unreadable, len(kept), folded)
            if not dry_run:
                self.journal.rewrite(kept)
                self._clear()
                self._catch_up()
        return result

    def updated_at(self) -> float:
        """Last change: the journal's mtime, or the time meta.json says (a rename)."""
        return _updated(self.journal.path, self.meta)


class SessionStore:
    """All sessions under ``<data>/sessions``; sessions are loaded once and kept current."""

    def __init__(self, data_dir: Path, counter: TokenCounter, clock: Clock = time.time) -> None:
        self.root = data_dir / "sessions"
        self.counter = counter
        self.clock = clock
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
            session = self._open[sid] = Session(directory, meta, self.counter, self.clock)
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
