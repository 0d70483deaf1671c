"""Property: any sequence of session operations replays to the same state after a restart.

Hypothesis draws sequences of append, pin/unpin, delete/undelete, compaction,
undoing a compaction, purge and restarts; after each sequence a new Service on the
same directory must see every entry with the same text, seq, flags and
``replaces``, and those flags must match a simple model (last patch wins; a summary
that is not deleted supersedes what it folds; a purge drops deleted entries).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from context_window.errors import InvalidInput
from context_window.models import ROLES, Entry
from context_window.service import Service

from .support import service_for

texts = st.one_of(
    st.text(min_size=1, max_size=120).filter(lambda t: t.strip() and "\x00" not in t),
    st.lists(
        st.sampled_from(["alpha", "beta", "gamma", "Decided.", "Fixed it.", "x"]),
        min_size=1,
        max_size=30,
    ).map(" ".join),
)
appends = st.tuples(
    st.just("append"),
    texts,
    st.sampled_from(ROLES),
    st.booleans(),
    st.lists(st.sampled_from(["a", "b", "todo", "fix"]), max_size=3),
)
patches = st.tuples(
    st.just("patch"),
    st.integers(min_value=0, max_value=10_000),
    st.one_of(st.none(), st.booleans()),
    st.one_of(st.none(), st.booleans()),
).filter(lambda op: op[2] is not None or op[3] is not None)
compactions = st.tuples(
    st.just("compact"), st.integers(min_value=0, max_value=4), st.sampled_from([16, 64, 300])
)
restarts = st.tuples(st.just("restart"))
uncompacts = st.tuples(st.just("uncompact"), st.integers(min_value=0, max_value=10_000))
purges = st.tuples(st.just("purge"))
operations = st.lists(
    st.one_of(appends, appends, patches, compactions, uncompacts, purges, restarts),
    min_size=1,
    max_size=40,
)


@dataclass
class Model:
    """What the flags of each entry should be."""

    order: list[str] = field(default_factory=list)
    pinned: dict[str, bool] = field(default_factory=dict)
    deleted: dict[str, bool] = field(default_factory=dict)
    folded_by: dict[str, list[str]] = field(default_factory=dict)
    folds: dict[str, list[str]] = field(default_factory=dict)  # summary -> what it folded

    def add(self, entry: Entry) -> None:
        self.order.append(entry.id)
        self.pinned[entry.id] = entry.pinned
        self.deleted[entry.id] = False
        self.folded_by[entry.id] = []

    def superseded(self, eid: str) -> bool:
        """Folded into a summary that is not deleted (deleting a summary restores its originals);
        never when pinned (pins are never folded)."""
        return any(not self.deleted[s] for s in self.folded_by[eid]) and not self.pinned[eid]

    def refuses(self, eid: str, pinned: bool | None, deleted: bool | None) -> bool:
        """Whether an update would fold a pinned entry: pinning a folded entry, or redoing a
        compaction whose original was pinned since or is folded by another summary."""
        if pinned and self.superseded(eid):
            return True
        if deleted is False and self.deleted[eid] and self.folds.get(eid):
            for old in self.folds[eid]:
                others = [
                    s for s in self.folded_by.get(old, []) if s != eid and not self.deleted[s]
                ]
                if self.pinned.get(old) or others:
                    return True
        return False

    def live(self, eid: str) -> bool:
        return not self.deleted[eid] and not self.superseded(eid)

    def purge(self) -> set[str]:
        """Drop deleted entries, and every mention of them; return their ids."""
        gone = {e for e in self.order if self.deleted[e]}
        self.order = [e for e in self.order if e not in gone]
        for table in (self.pinned, self.deleted, self.folded_by, self.folds):
            for e in gone:
                table.pop(e, None)
        for lists in (self.folded_by, self.folds):
            for key, ids in lists.items():
                lists[key] = [i for i in ids if i not in gone]
        return gone


def full_state(service: Service, ids: list[str]) -> list[Entry]:
    """Every entry by id, whatever its state."""
    session = service.sessions.get("prop")
    return [session.get(i) for i in ids]


def run(ops: list[tuple[Any, ...]], data: Path) -> None:
    service = service_for(data)
    service.sessions.open("prop")
    model = Model()
    for op in ops:
        session = service.sessions.get("prop")
        if op[0] == "append":
            _, text, role, pinned, tags = op
            model.add(session.append(text, role, tags, pinned))
        elif op[0] == "patch" and model.order:
            eid = model.order[op[1] % len(model.order)]
            if model.refuses(eid, op[2], op[3]):
                with pytest.raises(InvalidInput):
                    session.update(eid, pinned=op[2], deleted=op[3])
                continue
            entry = session.update(eid, pinned=op[2], deleted=op[3])
            if op[2] is not None:
                model.pinned[eid] = op[2]
            if op[3] is not None:
                model.deleted[eid] = op[3]
            assert (entry.pinned, entry.deleted) == (model.pinned[eid], model.deleted[eid])
        elif op[0] == "compact":
            done = anyio.run(service.compact, "prop", op[1], op[2])
            if done.entry is not None:
                for folded in done.plan.entries:
                    assert not (model.pinned[folded.id] or model.deleted[folded.id])
                    assert not model.superseded(folded.id)
                model.add(done.entry)
                model.folds[done.entry.id] = [f.id for f in done.plan.entries]
                for folded in done.plan.entries:
                    model.folded_by[folded.id].append(done.entry.id)
        elif op[0] == "uncompact":
            undoable = [s for s in model.folds if model.live(s)]
            if undoable:
                summary = undoable[op[1] % len(undoable)]
                restored = session.uncompact(summary)
                event("uncompact undid a compaction")
                model.deleted[summary] = True
                expected = [e for e in model.folds[summary] if model.live(e)]
                assert [e.id for e in restored] == expected
        elif op[0] == "purge":
            done = session.purge()
            assert set(done.entries) == model.purge()
            event(f"purge erased {'some' if done.entries else 'nothing'}")
        elif op[0] == "restart":
            service = service_for(data)
    before = full_state(service, model.order)
    after = full_state(service_for(data), model.order)
    assert after == before
    for e in after:
        assert e.pinned == model.pinned[e.id], e
        assert e.deleted == model.deleted[e.id], e
        assert e.superseded == model.superseded(e.id), e
    assert [e.seq for e in after] == sorted({e.seq for e in after})
    stats = service_for(data).sessions.get("prop").stats()
    assert (stats.skipped_lines, stats.orphan_patches) == (0, 0)
    assert stats.total == len(model.order)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_replay_after_restart_is_identical(ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run(ops, Path(tmp))


long_runs = st.lists(
    st.one_of(appends, appends, appends, patches, compactions, uncompacts, purges, restarts),
    min_size=15,
    max_size=60,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_runs)
def test_long_runs_with_undo_and_purge_replay_identically(ops: list[tuple[Any, ...]]) -> None:
    """Longer sequences, so compactions, their undoing and purges of deletions all occur."""
    with tempfile.TemporaryDirectory() as tmp:
        run(ops, Path(tmp))
