"""Session logs: append-only entries and patches, replayed last-value-wins, ranked for recall.

``<data>/sessions/<id>/`` holds ``meta.json`` and ``entries.jsonl``. Entry records never
change; patch records set ``pinned``, ``deleted`` or ``superseded`` later. A compaction
is one summary entry whose ``replaces`` lists what it folds, so a torn write leaves the
originals live, never half-replaced. Deleting a summary brings its originals back; a
summary sits in time where the newest entry it folds was.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from context_window.errors import (
    FIND_COMPACTION,
    FIND_ENTRY,
    REDO_COMPACTION,
    RETRY,
    UNCOMPACT_FIRST,
    InvalidInput,
    NotFound,
    StorageError,
    check_range,
)
from context_window.journal import Journal
from context_window.localtime import several_days
from context_window.models import (
    ROLES,
    CompactionPlan,
    Entry,
    Packed,
    Purged,
    Recall,
    SessionStats,
)
from context_window.packing import excerpt, pack
from context_window.retrieval.analyzer import Analyzer, QueryLimits
from context_window.retrieval.bm25 import best_first, best_line, smooth_neighbours
from context_window.sessions import snapshot
from context_window.sessions.compaction import check_pins
from context_window.sessions.records import check_tags, check_text, tag_key, updated_time, without
from context_window.sessions.state import SessionState
from context_window.storage import new_id
from context_window.tokens import TokenCounter

if TYPE_CHECKING:
    from context_window.sessions.meaning import Rescore, Rows

log = logging.getLogger("context_window")

MAX_TTL_DAYS = 36_500
PACK_OVERSHOOT = 16  # entries a recall may measure in vain beyond those it shows (pack)
RANKED_FIRST = 512  # matches put in order before packing; all of them if it needs more
SNAPSHOT_AFTER = 4_000  # records past the last snapshot before another is saved (0.17 s)
TAIL_SHARE = 175  # or sooner (see _apply): a replay costs 175x a load per entry
SNAPSHOT_MIN = 1_000  # but not before this many records (a replay of about 40 ms)
# A compaction folds at most this many tokens of originals, oldest first: bounded calls.
FOLD_TOKENS = 30_000
DAY = 86_400.0


Clock = Callable[[], float]


class Session:
    """One session's journal replayed into memory and kept current with other writers."""

    def __init__(
        self,
        directory: Path,
        meta: dict[str, Any],
        counter: TokenCounter,
        clock: Clock = time.time,
        limits: QueryLimits | None = None,
        *,
        analyzer: Analyzer | None = None,
        snapshot_after: int | None = SNAPSHOT_AFTER,
    ) -> None:
        self.dir = directory
        self.meta = meta
        self.counter = counter
        self.clock = clock
        self.journal = Journal(directory / "entries.jsonl")
        self._analyzer = analyzer or Analyzer(limits)
        self.snapshot_after = snapshot_after  # None: never save one (read-only); still read
        self.from_snapshot = 0  # entries the first read took from a snapshot, not the journal
        self._clear()
        self.repairs: list[str] = []  # what opening the session had to mend, for status

    def _clear(self) -> None:
        """Empty the replayed state, to replay a journal from its first line."""
        self._state = SessionState(self.counter, self._analyzer)
        self._ratio_seen = self.counter.ratio
        self._generation = self.journal.generation
        self._unsaved = 0  # records applied since the last snapshot (or since it was read)
        self.snapshot_due = False  # a snapshot is to be saved when the journal lock is released

    @property
    def id(self) -> str:
        """The session id."""
        return str(self.meta["id"])

    @property
    def title(self) -> str:
        """The session title."""
        return str(self.meta.get("title") or self.id)

    def refresh(self, *, save: bool = True) -> None:
        """Read what was appended since the last look, then save a due snapshot if ``save``."""
        if self.journal.changed():
            with self.journal.locked():
                self._catch_up()
        if self.counter.ratio != self._ratio_seen:  # calibration changed the ratio
            self._ratio_seen = self.counter.ratio
            self._state.recount()
        if save:  # not under the journal lock: other processes may append meanwhile
            self.save_due()

    def _catch_up(self) -> None:
        """Apply what was appended since the last read (locked), from a matching snapshot."""
        if self.journal.offset == 0 and not self._state.order:
            loaded = snapshot.load(self.dir, self.counter, self._analyzer)
            if loaded is not None and self.journal.resume(loaded.position):
                self._state, self._ratio_seen = loaded.state, loaded.ratio
                self.from_snapshot = len(loaded.state.order)
        records = self.journal.read_new()
        if self.journal.generation != self._generation:  # purged by some process
            self._clear()
        self._apply(records)

    def _write(self, records: list[dict[str, Any]]) -> None:
        """Append ``records`` to the journal, and apply them (the lock held)."""
        self.journal.write(records)
        self._apply(records)

    def _apply(self, records: list[dict[str, Any]]) -> None:
        """Apply ``records``; a snapshot is due once replaying would cost more than loading."""
        self._state.apply(records)
        self._unsaved += len(records)
        tail = max(SNAPSHOT_MIN, len(self._state.order) // TAIL_SHARE)
        if self.snapshot_after is not None and self._unsaved >= min(tail, self.snapshot_after):
            self.snapshot_due = True

    @property
    def unsaved(self) -> int:
        """Records a start would replay past the last snapshot (0 if none are saved)."""
        return 0 if self.snapshot_after is None else self._unsaved

    def save_snapshot(self) -> bool:
        """Save a snapshot of the state now (OSError if it cannot be written); False when
        another process is saving one. Taken under the lock right after catching up, so
        it is exactly the journal up to its position."""
        with self.journal.locked():
            self._catch_up()
            at = self.journal.position()
        self.snapshot_due = False
        saved = snapshot.save(self.dir, self._state, at, self._ratio_seen)
        self._unsaved = 0
        return saved

    def save_due(self) -> None:
        """Save the snapshot a refresh found due, if still due (a failure is logged)."""
        if not self.snapshot_due:
            return
        try:
            self.save_snapshot()
        except Exception as exc:  # a full disk, a lock held too long: a cache, never fatal
            self.snapshot_due = False
            log.warning("no snapshot for session %r: %s", self.id, exc)

    def _entry(self, key: str | int, now: float | None = None) -> Entry:
        return self._state.entry(key, self.clock() if now is None else now)

    def entries(
        self, *, include_superseded: bool = False, include_hidden: bool = False
    ) -> list[Entry]:
        """Entries in time order: live ones, plus folded or even hidden ones if asked."""
        self.refresh()
        now = self.clock()
        m = self._state.masks(now)
        if include_hidden:
            shown = np.ones(len(self._state.order), dtype=np.bool_)
        else:
            shown = m.live | (include_superseded & m.superseded & ~m.deleted & ~m.expired)
        ordered = self._time_ordered(shown).tolist()
        return [self._entry(i, now) for i in ordered]

    def pinned_and_latest(self, latest: int) -> tuple[list[Entry], list[Entry]]:
        """The live pinned entries and the ``latest`` live unpinned ones, in time order."""
        self.refresh()
        now = self.clock()
        state = self._state
        pinned = np.array(sorted(state.pinned_at), dtype=np.intp)
        pins = self._time_ordered_at(pinned[state.masks(now, pinned).live]).tolist()
        latest_ones = self._latest(latest, now).tolist()
        return [self._entry(i, now) for i in pins], [self._entry(i, now) for i in latest_ones]

    def _time_ordered_at(self, positions: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
        """``positions`` (ascending) in time order, ties by position."""
        seqs = np.frombuffer(self._state.seqs, dtype=np.float64)[positions]
        return positions[np.argsort(seqs, kind="stable")]

    def _time_ordered(self, mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.intp]:
        """``mask``'s positions in time order."""
        return self._time_ordered_at(np.flatnonzero(mask))

    def _latest(self, last: int, now: float) -> npt.NDArray[np.intp]:
        """The ``last`` latest live unpinned positions in time order, found from the end."""
        state = self._state
        n = len(state.order)
        seqs = np.frombuffer(state.seqs, dtype=np.float64)
        size = max(64, 4 * last)
        while last > 0:
            a = max(0, n - size)
            m = state.masks(now, slice(a, None))
            positions = np.flatnonzero(m.live & ~m.pinned) + a
            block = seqs[positions]
            if len(positions) > last:  # every position tied with the last-th latest stays
                kth = np.partition(block, len(block) - last)[len(block) - last]
                keep = block >= kth
                positions, block = positions[keep], block[keep]
            if a == 0 or (len(positions) >= last and state.seq_high[a - 1] <= block.min()):
                ordered = positions[np.lexsort((positions, block))]
                return ordered[len(ordered) - min(last, len(ordered)) :]
            size *= 4
        return np.zeros(0, dtype=np.intp)

    def get(self, entry_id: str) -> Entry:
        """One entry by id, whatever its state."""
        self.refresh()
        if (eid := self._state.resolve(entry_id)) not in self._state.records:
            raise NotFound(f"no entry {entry_id!r:.80} in session {self.id!r}")
        return self._entry(eid)

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
        check_text(text)
        role = role.casefold() if isinstance(role, str) else role
        if role not in ROLES:
            raise InvalidInput(
                f"role must be one of {', '.join(ROLES)}; not {role!r:.40} (a tag carries any "
                f"other label: tags=[{role!r:.40}])"
            )
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
            record["seq"] = self._state.max_seq + 1
            self._write([record])
        return self._entry(str(record["id"]))

    def update(
        self, entry_id: str, pinned: bool | None = None, deleted: bool | None = None
    ) -> Entry:
        """Pin, unpin, delete or undelete an entry (by id or short name) with a patch."""
        if pinned is None and deleted is None:
            raise InvalidInput("give pinned and/or delete to change an entry")
        with self.journal.locked():
            self._catch_up()
            if (eid := self._state.resolve(entry_id)) not in self._state.records:
                raise NotFound(
                    f"no entry {entry_id!r:.80} in session {self.id!r}", remedy=FIND_ENTRY
                )
            check_pins(self._state, eid, pinned, deleted)
            patch = {"kind": "patch", "id": eid, "pinned": pinned, "deleted": deleted}
            self._write([{k: v for k, v in patch.items() if v is not None}])
        return self._entry(eid)

    def plan_compaction(self, keep_recent: int, max_tokens: int = FOLD_TOKENS) -> CompactionPlan:
        """The oldest live unpinned entries beyond the ``keep_recent`` newest, in one batch."""
        check_range("keep_recent", keep_recent, 0, 10_000)
        self.refresh()
        now = self.clock()
        m = self._state.masks(now)
        unpinned = self._time_ordered(m.live & ~m.pinned)
        foldable = unpinned[: max(0, len(unpinned) - keep_recent)]
        costs = np.frombuffer(self._state.costs, dtype=np.int64)[foldable]
        take = int(np.searchsorted(np.cumsum(costs), max_tokens, side="right"))
        take = max(take, min(2, len(foldable)))
        batch = [self._entry(i, now) for i in foldable[:take].tolist()]
        return CompactionPlan(
            tuple(batch),
            min(keep_recent, len(unpinned)),
            int(np.count_nonzero(m.live & m.pinned)),
            left=len(foldable) - take,
        )

    def commit_summary(
        self, plan: CompactionPlan, text: str, method: str, kept_facts: Sequence[str] = ()
    ) -> Entry:
        """Append the summary replacing ``plan``'s entries, if they are all still live."""
        record: dict[str, Any] = {
            "kind": "entry",
            "id": new_id("s"),
            "created_at": self.clock(),
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
                rec = self._state.records.get(e.id)  # None: erased by a purge meanwhile
                if (
                    rec is None
                    or rec["deleted"]
                    or rec["superseded"]
                    or rec["pinned"]
                    or self._state.expired(rec, now)
                ):
                    raise StorageError(
                        f"entry {e.id} changed while the summary was being written; "
                        "nothing was compacted",
                        remedy=RETRY,
                    )
            record["seq"] = self._state.max_seq + 1
            self._write([record])
        return self._entry(str(record["id"]))

    def uncompact(self, compaction_id: str) -> list[Entry]:
        """Undo a compaction: retire its summary so the entries it folded are live again."""
        with self.journal.locked():
            self._catch_up()
            compaction_id = self._state.resolve(compaction_id)
            rec = self._state.records.get(compaction_id)
            # A summary stays a compaction when a purge erased every entry it folded.
            if rec is None or not (rec["replaces"] or rec["role"] == "summary"):
                raise NotFound(
                    f"no compaction {compaction_id!r:.80} in session {self.id!r}",
                    remedy=FIND_COMPACTION,
                )
            if rec["deleted"]:
                raise InvalidInput(
                    f"compaction {compaction_id} is already undone", remedy=REDO_COMPACTION
                )
            outer = self._state.live_replacers(compaction_id)
            if outer:
                raise InvalidInput(
                    f"summary {compaction_id} was itself folded into {outer[0]}",
                    remedy=UNCOMPACT_FIRST,
                    compaction_id=outer[0],
                )
            patch = {"kind": "patch", "id": compaction_id, "deleted": True, "uncompacted": True}
            self._write([patch])
            now = self.clock()
            restored = [
                self._entry(eid, now) for eid in rec["replaces"] if eid in self._state.records
            ]
        return [e for e in restored if e.live]

    def recall(
        self,
        query: str | None,
        budget: int,
        *,
        limit: int | None = None,
        tags: Sequence[str] | None = None,
        include_superseded: bool = False,
        label: Callable[[Entry, bool], str] | None = None,
        reserve: int | Callable[[int, bool], int] = 0,
        meaning: Rescore | None = None,
    ) -> Recall:
        """Rank entries and pack the best into ``budget`` tokens, pinned first.

        With a query, entries matching a term rank by BM25 plus ``NEIGHBOUR_WEIGHT`` x
        their neighbours' in time, recency breaking ties (``meaning``: by meaning and words,
        ``sessions.meaning.blend``); else the newest. An entry costs its text and ``label``;
        ``reserve`` tokens are the header's."""
        self.refresh()
        asked = check_tags(tags)
        wanted = set(map(tag_key, asked))  # a tag in any case
        n = len(self._state.order)
        seqs = np.array(self._state.seqs, dtype=np.float64)
        now = self.clock()
        flags = self._state.masks(now)
        mask = ~flags.deleted & ~flags.expired
        if not include_superseded:
            mask &= ~flags.superseded
        if wanted:
            mask &= self._state.records.tagged(wanted)
        terms = self._analyzer.query(query) if query and query.strip() else []
        searchable = not (query and query.strip()) or bool(terms)
        pinned = np.flatnonzero(mask & flags.pinned)  # shown whatever the query
        scores, matching = np.zeros(n, dtype=np.float64), np.zeros(n, dtype=np.bool_)
        if terms:
            scores = self._state.index.scores(terms, exclude=~mask)
            scores = smooth_neighbours(np.maximum(scores, 0.0), mask, seqs)
            # Only entries matching a term: a neighbour's credit never brings one in.
            matching = self._state.index.matching(terms)
        blended = meaning(self._state.order, scores, mask, matching, seqs) if meaning else None
        if blended is not None:
            (scores, mask), searchable = blended, True
        elif terms:
            mask &= matching
        rest = np.flatnonzero(mask & ~flags.pinned)
        pinned = best_first(pinned, scores, seqs)[0]
        candidates = len(pinned) + len(rest)
        room = reserve(candidates, searchable) if callable(reserve) else reserve
        few = limit is None or limit <= len(pinned) + RANKED_FIRST
        first, dated = RANKED_FIRST if few else None, False
        order, ordered = best_first(rest, scores, seqs, first)
        while True:  # the best in order first; more of them if the packing walks past those
            ranked = np.concatenate([pinned, order])[:limit]
            listed = len(pinned) + ordered
            chosen, packed, labels = self._pack(ranked, listed, budget, label, room, now, dated)
            left, shown = budget - packed.used_tokens, len(packed.items)
            if packed.unlisted and left * shown >= packed.used_tokens - room:  # room for more
                first = None if first is None or 4 * first >= len(rest) else 4 * first
                order, ordered = best_first(rest, scores, seqs, first)
            elif label and not dated and several_days(e.created_at for e in chosen.values()):
                dated = True  # labels say the day when the entries shown are from several
            else:
                break
        top = len(pinned) if len(ranked) > len(pinned) else 0  # the best match
        if len(ranked) and all(k < top for k in packed.items):  # it is over the room left
            chosen, packed, labels = self._excerpt(
                ranked[top], top, terms, (chosen, packed, labels), label, now, dated
            )
        entries = tuple(chosen.values())
        score_map = {self._state.order[i]: round(float(scores[i]), 4) for i in chosen}
        beyond, queried = candidates - len(ranked), bool(query and query.strip())
        return Recall(  # a repeat of an entry shown is one with it, not another candidate
            entries, candidates - packed.repeats, packed, score_map, beyond, searchable, labels,
            queried=queried, tagged=bool(asked),
        )  # fmt: skip

    def _pack(
        self,
        ranked: npt.NDArray[np.intp],
        listed: int,
        budget: int,
        label: Callable[[Entry, bool], str] | None,
        reserve: int,
        now: float,
        dated: bool,
    ) -> tuple[dict[int, Entry], Packed, dict[str, str]]:
        """Greedy in rank order: each entry costs its text, its label and a separator.
        The chosen positions in rank order and their labels by id; only the first
        ``listed`` of ``ranked`` are in order (see ``pack``'s ``beyond``)."""
        built: dict[int, tuple[Entry, str]] = {}  # not ranked.tolist(): few are measured
        shown: set[str] = set()  # the texts chosen, spaces aside
        said: dict[int, str] = {}  # each measured one's; those not built are repeats

        def measure(k: int) -> int | None:
            entry = self._entry(int(ranked[k]), now)
            said[k] = repeat_key(entry)
            if said[k] in shown:
                return None
            text = label(entry, dated) if label is not None else ""
            built[k] = (entry, text)
            return int(costs[k]) + (self.counter.count(text) if text else 0)

        def taken(k: int) -> None:
            shown.add(said[k])

        costs = np.array(self._state.costs, dtype=np.int64)[ranked] + 1
        beyond = int(costs[listed:].min()) if listed < len(costs) else None
        packed = pack(
            costs[:listed],
            budget - reserve,
            exact=measure,
            taken=taken,
            overshoot=PACK_OVERSHOOT,
            beyond=beyond,
        )
        chosen = {int(ranked[k]): built[k][0] for k in packed.items}
        labels = {built[k][0].id: built[k][1] for k in packed.items}
        used, n = packed.used_tokens + reserve, len(said) - len(built)
        omitted = len(ranked) - len(packed.items) - n
        packed = replace(packed, used_tokens=used, budget=budget, omitted=omitted, repeats=n)
        return chosen, packed, labels

    def _excerpt(
        self,
        position: np.intp,
        k: int,
        terms: Sequence[str],
        packing: tuple[dict[int, Entry], Packed, dict[str, str]],
        label: Callable[[Entry, bool], str] | None,
        now: float,
        dated: bool,
    ) -> tuple[dict[int, Entry], Packed, dict[str, str]]:
        """``packing`` (``_pack``'s) with the ``k``-th ranked entry, at ``position``, cut to
        the lines around the one that best matches ``terms`` (``best_line``) in the room
        left; unchanged if not a word fits."""
        chosen, packed, labels = packing
        entry = self._entry(int(position), now)
        if repeat_key(entry) in map(repeat_key, chosen.values()):  # a repeat of a pinned one
            return packing
        head = label(entry, dated) if label is not None else ""
        lines = entry.text.split("\n")
        best = best_line(lines, terms, self._analyzer.terms)
        cost = self.counter.count(head) + 1  # as ``_pack`` measures
        text = excerpt(lines, best, packed.budget - packed.used_tokens - cost, self.counter)
        if not text:
            return packing
        used = packed.used_tokens + cost + self.counter.count(text)
        packed = replace(
            packed, items=(*packed.items, k), used_tokens=used, omitted=packed.omitted - 1
        )
        chosen = {**chosen, int(position): replace(entry, text=text)}  # after the pinned
        return chosen, packed, {**labels, entry.id: head}

    def lacking(
        self, rows: Callable[[list[str]], Rows], limit: int, among: Rows | None = None
    ) -> list[tuple[int, str, str]]:
        """Live entries without a vector (``SessionState.lacking``)."""
        self.refresh()
        return self._state.lacking(rows, limit, self.clock(), among)

    def size(self) -> int:
        """How many entries the log holds, in any state (as of the last refresh)."""
        return len(self._state.order)

    def stats(self, *, save: bool = True) -> SessionStats:
        """Counts after replay, unreadable lines included (``save``: as for ``refresh``)."""
        self.refresh(save=save)
        return SessionStats(
            total=len(self._state.order),
            **self._state.counts(self.clock()),
            skipped_lines=self.journal.skipped + self._state.skipped,
            orphan_patches=self._state.orphans,
            repairs=tuple(self.repairs),
        )

    def purge(self, *, dry_run: bool = False) -> Purged:
        """Rewrite the log without deleted or expired entries, atomically."""
        with self.journal.locked():
            self._catch_up()
            m = self._state.masks(self.clock())  # the flags: no entry is built to read them
            gone = {self._state.order[i] for i in np.flatnonzero(m.deleted | m.expired)}
            known = self._state.records.__contains__
            kept, patches, unknown = without(self.journal.read_all(), gone, known)
            unreadable = self.journal.skipped + unknown
            folded = tuple(
                (eid, s)
                for eid in sorted(gone)
                for s in self._state.live_replacers(eid)
                if s not in gone
            )
            result = Purged(tuple(sorted(gone)), patches, unreadable, len(kept), folded)
            if not dry_run:
                self.journal.rewrite(kept)
                snapshot.remove(self.dir)  # it reflects the journal before the rewrite
                self._clear()
                self._apply(kept)  # what was written, without reading it back
                self._catch_up()
        return result

    def updated_at(self) -> float:
        """Last change: the journal's mtime, or the time meta.json says (a rename)."""
        return updated_time(self.journal.path, self.meta)


def repeat_key(entry: Entry) -> str:
    """An entry's text, spaces aside: recall leaves out, and context_open names, repeats."""
    return " ".join(entry.text.split())
