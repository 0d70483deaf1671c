"""Session logs on disk: append, recall ranking and packing, updates, compaction, listing."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from context_window.config import Settings
from context_window.errors import FIND_ENTRY, OPEN_SESSION, InvalidInput, NotFound, StorageError
from context_window.llm.summaries import split_sentences
from context_window.service import Service
from context_window.sessions.facts import lost_facts
from context_window.sessions.session import Session
from context_window.sessions.state import BATCH_CHARS, BATCH_INDEX
from context_window.sessions.store import SessionStore
from context_window.storage import check_id
from context_window.tokens import TokenCounter

SettingsFactory = Callable[..., Settings]


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    return SessionStore(tmp_path / "data", TokenCounter(0.27))


@pytest.fixture
def session(store: SessionStore) -> Session:
    return store.open("work", "Work log")[0]


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


TOPICS = [
    "Decided to use PostgreSQL for the orders database; SQLite lacked row locking.",
    "The login page throws a 500 when the session cookie has expired.",
    "Refactored getUserName into the auth_service module.",
    "Weather today is sunny, lunch at noon.",
    "Database migration 0042 adds an index on orders.customer_id.",
    "Read the style guide chapter about error messages.",
]


def fill(session: Session, texts: list[str]) -> list[str]:
    return [session.append(t).id for t in texts]


# --- open / get / list --------------------------------------------------------------------


def test_open_creates_then_resumes(store: SessionStore) -> None:
    s, created = store.open("task-1", "First title")
    assert created and s.title == "First title"
    s.append("hello world")
    again, created = SessionStore(store.root.parent, TokenCounter(0.27)).open("task-1")
    assert not created
    assert again.title == "First title"
    assert [e.text for e in again.entries()] == ["hello world"]


def test_open_without_id_generates_a_valid_one(store: SessionStore) -> None:
    s, created = store.open()
    assert created
    assert check_id(s.id) == s.id
    assert (store.root / s.id / "meta.json").is_file()


def test_open_renames_when_given_a_new_title(store: SessionStore) -> None:
    store.open("t", "old")
    s, _ = store.open("t", "new")
    assert s.title == "new"
    assert store.list()[0].title == "new"


@pytest.mark.parametrize("title", ["x" * 201, "bad\ntitle"])
def test_open_rejects_bad_titles(store: SessionStore, title: str) -> None:
    with pytest.raises(InvalidInput, match="title"):
        store.open("t", title)


@pytest.mark.parametrize("bad", ["../x", "a/b", "a\x00", "x" * 200, ".", ".."])
def test_open_and_get_reject_unsafe_ids(store: SessionStore, bad: str) -> None:
    with pytest.raises(InvalidInput):
        store.open(bad)
    with pytest.raises(InvalidInput):
        store.get(bad)
    assert not store.root.exists() or not any(store.root.parent.parent.glob("x*"))


def test_unknown_session_is_not_found_and_names_the_known_ones(store: SessionStore) -> None:
    store.open("alpha")
    store.open("beta")
    with pytest.raises(NotFound) as err:
        store.get("gamma")
    message = str(err.value)
    assert err.value.remedy == OPEN_SESSION and "context_open" not in message
    assert "alpha" in message and "beta" in message
    assert not (store.root / "gamma").exists()  # never created implicitly


def test_get_loads_a_session_written_by_another_store(store: SessionStore) -> None:
    other = SessionStore(store.root.parent, TokenCounter(0.27))
    other.open("x")[0].append("from elsewhere")
    assert [e.text for e in store.get("x").entries()] == ["from elsewhere"]


def test_list_sessions_newest_first(store: SessionStore) -> None:
    for sid in ("a", "b", "c"):
        store.open(sid)[0].append(f"note in {sid}")
    stamps = {"a": 2_000_000_000, "b": 2_000_000_300, "c": 1_900_000_000}
    for sid, t in stamps.items():
        os.utime(store.root / sid / "entries.jsonl", (t, t))
    assert [i.id for i in store.list()] == ["b", "a", "c"]
    fresh = SessionStore(store.root.parent, TokenCounter(0.27))
    infos = fresh.list()
    assert [i.id for i in infos] == ["b", "a", "c"]
    assert infos[0].updated_at == stamps["b"]


def test_list_is_empty_without_sessions(store: SessionStore) -> None:
    assert store.list() == []


# --- append -------------------------------------------------------------------------------


def test_append_records_everything(session: Session) -> None:
    e = session.append("Ship on Friday.", "Decision", ["plan", "Plan", " release "], pinned=True)
    assert e.role == "decision"  # roles and tags ignore case; a tag keeps its first spelling
    assert e.tags == ("plan", "release")
    assert e.pinned and e.live
    assert e.seq == 1
    assert e.tokens == session.counter.count("Ship on Friday.")
    assert session.append("next").seq == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"text": ""}, "non-empty"),
        ({"text": "   \n"}, "non-empty"),
        ({"text": "a\x00b"}, "NUL"),
        ({"text": "x" * 200_001}, "the limit is 200,000"),
        ({"text": "ok", "role": "summary"}, "role must be one of"),
        ({"text": "ok", "role": "boss"}, "role must be one of"),
        ({"text": "ok", "tags": [f"t{i}" for i in range(11)]}, "at most 10 tags"),
        ({"text": "ok", "tags": ["x" * 41]}, "1-40"),
        ({"text": "ok", "tags": [""]}, "1-40"),
        ({"text": "ok", "tags": ["a\tb"]}, "control"),
    ],
)
def test_append_rejects_bad_input(session: Session, kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        session.append(**kwargs)  # type: ignore[arg-type]
    assert session.stats().total == 0


def test_a_second_store_sees_appends_and_patches(store: SessionStore, session: Session) -> None:
    other = SessionStore(store.root.parent, TokenCounter(0.27)).get("work")
    first = session.append("one")
    assert [e.text for e in other.entries()] == ["one"]
    other.append("two")
    other.update(first.id, pinned=True)
    entries = session.entries()
    assert [e.text for e in entries] == ["one", "two"]
    assert entries[0].pinned
    assert [e.seq for e in entries] == [1, 2]


def test_token_counts_follow_a_new_ratio(session: Session) -> None:
    e = session.append("x" * 1000)
    assert e.tokens == 270
    session.counter.calibrate(0.5, "m")
    assert session.get(e.id).tokens == 500
    assert session.stats().live_tokens == 500


# --- update -----------------------------------------------------------------------------


def test_pin_unpin_delete_undelete(session: Session) -> None:
    a, b = fill(session, ["alpha entry", "beta entry"])
    assert session.update(a, pinned=True).pinned
    assert session.stats().pinned == 1
    assert not session.update(a, pinned=False).pinned
    assert session.update(b, deleted=True).deleted
    assert [e.id for e in session.entries()] == [a]
    assert [e.id for e in session.recall(None, 1000).entries] == [a]
    assert not session.update(b, deleted=False).deleted
    assert [e.id for e in session.entries()] == [a, b]
    stats = session.stats()
    assert (stats.live, stats.deleted, stats.pinned) == (2, 0, 0)


def test_update_needs_a_change_and_a_known_entry(session: Session) -> None:
    (a,) = fill(session, ["alpha"])
    with pytest.raises(InvalidInput):
        session.update(a)
    with pytest.raises(NotFound, match="no entry 'e-nope'") as err:
        session.update("e-nope", pinned=True)
    assert err.value.remedy == FIND_ENTRY
    with pytest.raises(NotFound):
        session.get("e-nope")


# --- recall -------------------------------------------------------------------------------


def test_recall_with_query_returns_only_matches(session: Session) -> None:
    ids = fill(session, TOPICS)
    rec = session.recall("database orders", 4000)
    # The two matches; their neighbours in time lend them credit but are not returned.
    assert {e.id for e in rec.entries} == {ids[0], ids[4]}
    assert rec.candidates == 2
    assert rec.packed.omitted == 0
    scores = [rec.scores[e.id] for e in rec.entries]
    assert all(score > 0 for score in scores)
    assert scores == sorted(scores, reverse=True)
    tight = session.recall("orders database migration index", session.get(ids[4]).tokens + 1)
    assert [e.id for e in tight.entries] == [ids[4]]
    assert tight.packed.omitted == tight.candidates - 1


def test_recall_finds_identifier_parts(session: Session) -> None:
    ids = fill(session, TOPICS)
    assert session.recall("user name", 4000).entries[0].id == ids[2]
    assert session.recall("auth service", 4000).entries[0].id == ids[2]


def test_recall_stems_query_and_entries(session: Session) -> None:
    ids = fill(session, ["The retries stopped after the third attempt.", "Lunch was late."])
    assert session.recall("retry", 4000).entries[0].id == ids[0]
    assert session.recall("attempted retrying", 4000).entries[0].id == ids[0]


def test_recall_matches_words_in_any_unicode_form(store: SessionStore, session: Session) -> None:
    ids = fill(session, ["The conﬁguration of the cafe\u0301 printer.", *TOPICS])
    again = SessionStore(store.root.parent, TokenCounter(0.27)).get(session.id)  # replayed
    for s in (session, again):
        assert [e.id for e in s.recall("configuration caf\u00e9", 4000).entries] == [ids[0]]


def test_recall_finds_a_word_inside_a_run_of_chinese(session: Session) -> None:
    ids = fill(session, ["服务器在凌晨三点重启了。", "数据库连接超时、已经重试三次。", *TOPICS])
    assert [e.id for e in session.recall("数据库超时", 4000).entries] == [ids[1]]
    assert [e.id for e in session.recall("重启", 4000).entries] == [ids[0]]


def test_recall_puts_pinned_first_even_when_irrelevant(session: Session) -> None:
    ids = fill(session, TOPICS)
    session.update(ids[3], pinned=True)  # the weather note
    rec = session.recall("database", 4000)
    assert rec.entries[0].id == ids[3]
    only_one = session.recall("database", session.get(ids[3]).tokens + 1)
    assert [e.id for e in only_one.entries] == [ids[3]]


def test_recall_without_query_returns_most_recent_first(session: Session) -> None:
    ids = fill(session, [f"entry number {i} with some words" for i in range(10)])
    per = session.get(ids[0]).tokens + 1
    rec = session.recall(None, per * 3)
    assert [e.id for e in rec.entries] == ids[-1:-4:-1]
    assert rec.packed.omitted == 7
    assert rec.candidates == 10
    assert [e.id for e in session.recall("   ", per * 3).entries] == ids[-1:-4:-1]


def test_recall_output_is_best_first(session: Session) -> None:
    fill(session, [f"filler note {i} on lunch" for i in range(8)])
    texts = ["cache miss one", "other thing", "cache cache cache miss miss", "cache too"]
    ids = fill(session, texts)
    rec = session.recall("cache miss", 4000)
    assert rec.entries[0].id == ids[2]
    scores = [rec.scores[e.id] for e in rec.entries]
    assert scores == sorted(scores, reverse=True)
    assert {e.id for e in rec.entries} == set(ids) - {ids[1]}  # "other thing" matches nothing


def test_recall_ignores_what_it_cannot_return_in_its_statistics(session: Session) -> None:
    # BM25 over the live entries only: deleting entries that hold a term makes it rarer,
    # so it weighs more, exactly as in a session that never had them.
    ids = fill(session, ["alpha beta", "alpha gamma", "alpha delta", "beta"])
    before = session.recall("alpha beta", 4000).scores[ids[0]]
    session.update(ids[1], deleted=True)
    session.update(ids[2], deleted=True)
    fresh = Session(session.dir.parent / "other", {"id": "other"}, session.counter)
    fresh.journal.path.parent.mkdir(parents=True, exist_ok=True)
    kept = [fresh.append("alpha beta").id, fresh.append("beta").id]
    after = session.recall("alpha beta", 4000).scores[ids[0]]
    assert after != before
    assert after == fresh.recall("alpha beta", 4000).scores[kept[0]]


@pytest.mark.parametrize("budget", [0, 1, 7, 15, 16, 40, 99, 250, 10_000])
def test_recall_never_exceeds_the_budget(session: Session, budget: int) -> None:
    fill(session, [("word " * (i * 7 % 40 + 1)) + f"topic{i % 3}" for i in range(30)])
    for query in (None, "word", "topic1 word"):
        rec = session.recall(query, budget)
        used = sum(e.tokens + 1 for e in rec.entries)  # each entry and its separator
        assert used == rec.packed.used_tokens <= budget
        assert len(rec.entries) + rec.packed.omitted == rec.candidates


def test_recall_counts_labels_and_the_reserve_against_the_budget(session: Session) -> None:
    fill(session, [f"note {i} about the cache" for i in range(20)])
    label = lambda e, dated: f"[{e.id} {e.role}]"  # noqa: E731
    rec = session.recall("cache", 120, label=label, reserve=30)
    cost = sum(e.tokens + 1 + session.counter.count(label(e, False)) for e in rec.entries)
    assert rec.packed.used_tokens == cost + 30 <= 120
    assert rec.packed.omitted == rec.candidates - len(rec.entries) > 0


def test_recall_skips_a_big_entry_and_takes_smaller_ones(session: Session) -> None:
    small_old = session.append("small old note").id
    session.append("huge " * 500)
    small_new = session.append("small new note").id
    rec = session.recall(None, 50)
    assert [e.id for e in rec.entries] == [small_new, small_old]
    assert rec.packed.omitted == 1


def test_recall_filters_by_tags_and_limit(session: Session) -> None:
    a = session.append("deploy the api", tags=["ops"]).id
    session.append("deploy the docs", tags=["docs"])
    c = session.append("deploy the worker", tags=["ops", "backend"]).id
    assert [e.id for e in session.recall(None, 4000, tags=["ops"]).entries] == [c, a]
    assert [e.id for e in session.recall("deploy", 4000, tags=["backend"]).entries] == [c]
    assert [e.id for e in session.recall(None, 4000, tags=["OPS", "Backend"]).entries] == [c, a]
    limited = session.recall(None, 4000, limit=1)
    assert [e.id for e in limited.entries] == [c]
    assert limited.packed.omitted == 0 and limited.beyond_limit == 2


def test_a_tag_is_the_same_with_the_hash_a_label_shows_it_with(tmp_path: Path) -> None:
    """Labels write tags as ``#ops``, and models copy them so; an entry saved with ``#``
    before it was dropped at append still matches."""
    session = SessionStore(tmp_path, TokenCounter(0.27)).open("work")[0]
    a = session.append("deploy the api", tags=["#Ops", "ops", "##release"]).id
    assert session.get(a).tags == ("Ops", "release")  # no "##Ops" label
    old = {"kind": "entry", "id": "e-old", "seq": 9, "created_at": 1.0, "role": "note",
           "text": "an older entry", "tags": ["#ops"], "pinned": False}  # fmt: skip
    with session.journal.locked():
        session.journal.write([old])
    session = SessionStore(tmp_path, TokenCounter(0.27)).open("work")[0]  # a restart
    for tags in (["ops"], ["#OPS"], ["#release", "docs"]):
        ids = {e.id for e in session.recall(None, 4000, tags=tags).entries}
        assert ids == ({a} if "release" in tags[0] else {a, "e-old"}), tags
    with pytest.raises(InvalidInput, match="1-40"):
        session.append("a tag of nothing but the mark", tags=["#"])


def test_recall_of_a_query_without_searchable_words_shows_the_newest(session: Session) -> None:
    ids = fill(session, TOPICS)
    rec = session.recall("the a of !!", 4000)
    assert not rec.searchable
    assert [e.id for e in rec.entries] == ids[::-1]
    assert session.recall("cache", 4000).searchable


@pytest.mark.parametrize("others", [0, 1, 2])
def test_recall_finds_a_match_in_a_tiny_session(session: Session, others: int) -> None:
    # With 1-3 entries BM25 gives a term in half or more of them an idf <= 0; a real match
    # must still be returned first, not dropped as "zero score".
    target = session.append("alpha release notes").id
    fill(session, [f"unrelated entry {i}" for i in range(others)])
    assert session.recall("alpha", 4000).entries[0].id == target
    assert session.recall("beta", 4000).entries == ()


def test_recall_returns_every_entry_when_all_match(session: Session) -> None:
    ids = fill(session, ["deploy api", "deploy docs", "deploy worker"])
    rec = session.recall("deploy", 4000)
    assert {e.id for e in rec.entries} == set(ids)
    # A term in every entry weighs nothing: the scores tie, and the newest comes first.
    assert [e.id for e in rec.entries] == ids[::-1]


def test_recall_of_empty_session(session: Session) -> None:
    rec = session.recall("anything", 4000)
    assert rec.entries == () and rec.candidates == 0


# --- compaction ---------------------------------------------------------------------------

LONG = [
    f"Step {i}: we investigated module_{i}.py and found that limit_{i} should be {i * 10}. "
    f"The fix for ticket CW-{100 + i} touches path /srv/app/{i}/config.yaml. "
    f"Open question {i}: is the cache in worker {i} still needed after the migration?"
    for i in range(12)
]


@pytest.fixture
def service(settings: SettingsFactory) -> Service:
    return Service(settings())


@pytest.mark.anyio
async def test_a_summary_whose_originals_were_purged_can_still_be_undone(
    service: Service,
) -> None:
    s = service.sessions.open("p")[0]
    ids = fill(s, LONG[:4])
    c = await service.compact("p", keep_recent=0, target_tokens=60)
    assert c.entry is not None
    for eid in ids:
        s.update(eid, deleted=True)
    s.purge()
    assert s.get(c.entry.id).replaces == ()
    assert s.uncompact(c.entry.id) == []  # nothing left to restore, but no error
    assert s.get(c.entry.id).deleted


@pytest.mark.anyio
async def test_compaction_folds_old_entries_and_keeps_originals(service: Service) -> None:
    s = service.sessions.open("c")[0]
    ids = fill(s, LONG[:8])
    s.update(ids[1], pinned=True)
    before = s.stats().live_tokens
    c = await service.compact("c", keep_recent=2, target_tokens=60)
    assert c.summary is not None and c.entry is not None
    folded = [e.id for e in c.plan.entries]
    assert folded == [ids[0], *ids[2:6]]  # not the pinned one, not the 2 most recent
    assert (c.plan.kept_recent, c.plan.pinned_kept) == (2, 1)
    assert c.summary.method == "extractive"
    assert "disabled" in c.summary.reason
    assert c.entry.role == "summary" and c.entry.replaces == tuple(folded)
    prose, _, facts = c.summary.text.partition("\nKept facts: ")
    assert service.counter.count(prose) <= 60  # target_tokens bounds the summary's prose
    # The facts the prose dropped follow it, as many as fit in target_tokens again, the
    # rest counted; paths before identifiers before numbers.
    listed, _, more = facts.partition(" (+")
    assert listed.split("; ") == list(c.kept_facts) and c.kept_facts
    assert service.counter.count(listed) <= 60
    assert more == f"{c.facts_not_kept} more in the originals)" and c.facts_not_kept > 0
    originals = "\n".join(e.text for e in c.plan.entries)
    lost = lost_facts(originals, prose)
    assert lost == [*c.kept_facts, *lost[len(c.kept_facts) :]]
    assert len(lost) == len(c.kept_facts) + c.facts_not_kept
    for i in (0, 2, 3, 4, 5):
        assert f"/srv/app/{i}/config.yaml" in c.summary.text
    assert c.tokens_freed == c.plan.tokens - c.summary.tokens > 0
    live = s.entries()
    # The summary stands where the newest folded entry stood, before the kept ones.
    assert [e.id for e in live] == [ids[1], c.entry.id, ids[6], ids[7]]
    assert s.stats().live_tokens == before - c.tokens_freed
    every = {e.id: e for e in s.entries(include_superseded=True)}
    assert all(every[i].superseded and not every[i].live for i in folded)
    assert not every[ids[1]].superseded
    originals = {e.id for e in s.recall(None, 100_000, include_superseded=True).entries}
    assert set(folded) <= originals
    assert not set(folded) & {e.id for e in s.recall(None, 100_000).entries}
    # Extractive: only sentences of the folded entries appear, a note's without "note:".
    sentences = {x.strip() for t in LONG[:8] for x in split_sentences(t)}
    picked = split_sentences(prose)
    assert picked and all(x.strip() in sentences for x in picked)


@pytest.mark.anyio
async def test_a_fold_of_short_notes_copied_whole_frees_tokens(service: Service) -> None:
    """A summary that copies its input (below its target) spends nothing on ``note:``: the
    role shows only when it is not a note, as labels show it, so the copy is no larger."""
    s = service.sessions.open("v")[0]
    fill(s, [f"short note {i}" for i in range(7)])
    s.append("Use Postgres", role="decision", tags=["db"])
    c = await service.compact("v", keep_recent=0)
    assert c.summary is not None and c.summary.method == "verbatim" and c.entry is not None
    assert c.summary.tokens < c.plan.tokens and c.tokens_freed > 0
    assert c.entry.text.startswith("short note 0\n") and "note:" not in c.entry.text
    assert "\ndecision [db]: Use Postgres" in c.entry.text


@pytest.mark.anyio
async def test_compaction_survives_a_restart(service: Service, settings: SettingsFactory) -> None:
    s = service.sessions.open("c")[0]
    fill(s, LONG[:6])
    c = await service.compact("c", keep_recent=1, target_tokens=50)
    assert c.entry is not None
    reopened = Service(settings()).sessions.get("c")
    assert [e.id for e in reopened.entries()] == [e.id for e in s.entries()]
    assert s.entries()[0].id == c.entry.id and len(s.entries()) == 2
    assert reopened.get(c.entry.id).replaces == tuple(e.id for e in c.plan.entries)
    assert reopened.stats().superseded == 5


@pytest.mark.anyio
async def test_summaries_fold_again_instead_of_piling_up(service: Service) -> None:
    s = service.sessions.open("c")[0]
    fill(s, LONG[:6])
    first = await service.compact("c", keep_recent=1, target_tokens=50)
    assert first.entry is not None
    fill(s, LONG[6:10])
    second = await service.compact("c", keep_recent=1, target_tokens=50)
    assert second.entry is not None
    assert first.entry.id in second.entry.replaces
    summaries = [e for e in s.entries() if e.role == "summary"]
    assert [e.id for e in summaries] == [second.entry.id]
    assert s.get(first.entry.id).superseded
    assert s.stats().live == 2


@pytest.mark.anyio
async def test_compaction_never_folds_pinned_entries(service: Service) -> None:
    s = service.sessions.open("c")[0]
    ids = fill(s, LONG[:6])
    for i in ids[:3]:
        s.update(i, pinned=True)
    c = await service.compact("c", keep_recent=0, target_tokens=40)
    assert {e.id for e in c.plan.entries} == set(ids[3:])
    assert all(s.get(i).live and s.get(i).pinned for i in ids[:3])


@pytest.mark.anyio
async def test_dry_run_changes_nothing_on_disk(service: Service) -> None:
    s = service.sessions.open("c")[0]
    fill(s, LONG[:6])
    root = service.settings.data_dir
    before = snapshot(root)
    c = await service.compact("c", keep_recent=2, target_tokens=40, dry_run=True)
    assert c.dry_run and c.summary is None and c.entry is None
    assert len(c.plan.entries) == 4
    assert snapshot(root) == before
    assert s.stats().live == 6


@pytest.mark.anyio
async def test_nothing_to_compact_writes_nothing(service: Service) -> None:
    s = service.sessions.open("c")[0]
    fill(s, LONG[:3])
    before = snapshot(service.settings.data_dir)
    c = await service.compact("c", keep_recent=2)
    assert c.summary is None and c.tokens_freed == 0
    assert snapshot(service.settings.data_dir) == before


@pytest.mark.anyio
@pytest.mark.parametrize("target", [0, 15, 20_001])
async def test_compaction_rejects_bad_target(service: Service, target: int) -> None:
    service.sessions.open("c")
    with pytest.raises(InvalidInput, match="target_tokens"):
        await service.compact("c", target_tokens=target)


@pytest.mark.anyio
async def test_compaction_of_unknown_session_is_not_found(service: Service) -> None:
    with pytest.raises(NotFound, match="no session 'ghost'") as err:
        await service.compact("ghost")
    assert err.value.remedy == OPEN_SESSION


@pytest.mark.parametrize("change", ["delete", "pin"])
def test_commit_fails_cleanly_if_a_planned_entry_changed(store: SessionStore, change: str) -> None:
    s = store.open("c")[0]
    ids = fill(s, LONG[:5])
    plan = s.plan_compaction(keep_recent=1)
    assert [e.id for e in plan.entries] == ids[:4]
    other = SessionStore(store.root.parent, TokenCounter(0.27)).get("c")  # another process
    if change == "delete":
        other.update(ids[2], deleted=True)
    else:
        other.update(ids[2], pinned=True)
    journal = store.root / "c" / "entries.jsonl"
    before = journal.read_bytes()
    with pytest.raises(StorageError, match="nothing was compacted"):
        s.commit_summary(plan, "a summary", "extractive")
    assert journal.read_bytes() == before
    assert not any(e.superseded for e in s.entries(include_superseded=True))
    assert all(e.role != "summary" for e in s.entries(include_superseded=True))


def test_plan_rejects_bad_keep_recent(session: Session) -> None:
    with pytest.raises(InvalidInput):
        session.plan_compaction(-1)


@pytest.mark.anyio
async def test_deleting_a_summary_brings_its_originals_back(service: Service) -> None:
    s = service.sessions.open("undo")[0]
    ids = fill(s, LONG[:8])
    first = await service.compact("undo", keep_recent=2, target_tokens=60)
    assert first.entry is not None
    s.append("one more note after the first summary")
    second = await service.compact("undo", keep_recent=1, target_tokens=60)
    assert second.entry is not None and first.entry.id in second.entry.replaces
    live = lambda: [e.id for e in s.entries()]  # noqa: E731
    assert live()[0] == second.entry.id and ids[0] not in live()
    s.update(second.entry.id, deleted=True)  # the first summary is live again
    assert first.entry.id in live() and ids[0] not in live()
    s.update(first.entry.id, deleted=True)  # and now the originals
    assert ids[:6] == [i for i in live() if i in ids[:6]]
    reopened = Service(service.settings).sessions.get("undo")  # replay agrees
    assert [e.id for e in reopened.entries()] == live()
    s.update(first.entry.id, deleted=False)  # undelete the inner summary: originals hide again
    assert first.entry.id in live() and ids[0] not in live()
    s.update(second.entry.id, deleted=False)  # and the outer one hides the inner
    assert live()[0] == second.entry.id and first.entry.id not in live()


@pytest.mark.parametrize("damage", [b"{half", b"", None], ids=["torn", "empty", "missing"])
def test_a_damaged_meta_is_rebuilt_kept_and_reported(tmp_path: Path, damage: bytes | None) -> None:
    first = SessionStore(tmp_path, TokenCounter(0.27))
    session, _ = first.open("m", title="Project M")
    kept = session.append("the entry that must survive").id
    meta = tmp_path / "sessions" / "m" / "meta.json"
    if damage is None:
        meta.unlink()
    else:
        meta.write_bytes(damage)
    again, created = SessionStore(tmp_path, TokenCounter(0.27)).open("m")
    assert not created and [e.id for e in again.entries()] == [kept]
    (repair,) = again.stats().repairs
    corrupt = meta.with_name("meta.json.corrupt")
    if damage is None:
        assert "missing" in repair and not corrupt.exists()
    else:
        assert "unreadable" in repair and corrupt.read_bytes() == damage
    assert meta.exists() and again.title == "m"


@pytest.mark.parametrize("pad", [0, 12_000])
def test_a_replay_indexes_in_batches_exactly_as_appends_do(tmp_path: Path, pad: int) -> None:
    """Replaying many entries counts their terms vectorized, in batches of BATCH_CHARS
    characters (with ``pad``, 200 entries make two); ranking must not change."""
    filler = " ".join(f"w{k % 997}" for k in range(pad // 5))
    texts = [
        f"{word} getUserName blk_{i % 17} naïve Straße 東京 {i * 7} $cost_{i % 5} "
        f"{'x' * (70 + i % 3)} {filler} end"
        for i, word in enumerate(["alpha", "Beta", "gammaRay", "DELTA_CASE", "é"] * 40)
    ]
    assert (sum(map(len, texts)) > BATCH_CHARS) == bool(pad)
    writer = SessionStore(tmp_path, TokenCounter(0.27)).open("s")[0]
    for i, text in enumerate(texts):  # one entry per apply: the per-entry path
        writer.append(text, tags=["t", f"tag{i % 3}"] if i % 2 else None)
    replayed = SessionStore(tmp_path, TokenCounter(0.27)).open("s")[0]
    assert len(texts) >= BATCH_INDEX
    queries = ["getusername", "user name", "blk 3", "naïve", "東京", "tag1", "gamma ray", "end"]
    queries += ["w5 w996", "w17"] if pad else []
    for q in [*queries, "x" * 71, "cost_2 delta"]:
        a, b = writer.recall(q, 100_000), replayed.recall(q, 100_000)
        assert [e.id for e in a.entries] == [e.id for e in b.entries], q
        assert a.scores == b.scores, q
        assert a.candidates == b.candidates > 0, q


def test_pinned_and_latest_are_what_the_whole_entry_list_would_give(tmp_path: Path) -> None:
    """context_open's pinned and latest entries, chosen on arrays, equal those picked from
    every live entry: through pins, deletions, expiry and a compaction."""
    now = [1.8e9]
    store = SessionStore(tmp_path / "data", TokenCounter(0.27), clock=lambda: now[0])
    session = store.open("mixed")[0]
    ids = [session.append(f"note {i} about item {i % 7}").id for i in range(60)]
    for i in range(0, 60, 9):
        session.update(ids[i], pinned=True)
    for i in range(5, 60, 11):
        session.update(ids[i], deleted=True)
    short = [session.append(f"short-lived {i}", ttl_days=1).id for i in range(4)]
    session.commit_summary(session.plan_compaction(20), "folded early notes", "extractive", [])
    tail = [session.append(f"late note {i}").id for i in range(3)]

    def picked(latest: int) -> tuple[list[str], list[str]]:
        live = session.entries()
        pinned = [e.id for e in live if e.pinned]
        recent = [e.id for e in live if not e.pinned][-latest:] if latest else []
        return pinned, recent

    for latest in (0, 1, 5, 500):
        pinned, recent = session.pinned_and_latest(latest)
        assert ([e.id for e in pinned], [e.id for e in recent]) == picked(latest)
    assert [e.id for e in session.pinned_and_latest(3)[1]] == tail
    assert set(short) <= {e.id for e in session.pinned_and_latest(500)[1]}
    now[0] += 2 * 86_400  # the short-lived entries expire
    assert not set(short) & {e.id for e in session.pinned_and_latest(500)[1]}
    assert (
        [e.id for e in session.pinned_and_latest(5)[0]],
        [e.id for e in session.pinned_and_latest(5)[1]],
    ) == picked(5)


def test_the_latest_entries_with_tied_times_are_those_the_whole_list_ends_with(
    tmp_path: Path,
) -> None:
    # A hand-edited (or merged) journal can give entries the same seq: the latest few,
    # picked without sorting every entry, are still the end of the full time order.
    folder = tmp_path / "data" / "sessions" / "tied"
    folder.mkdir(parents=True)
    seqs = [1, 2, 2, 2, 3, 3, 5, 4, 4, 5]
    lines = [
        json.dumps({"kind": "entry", "id": f"e{i}", "seq": q, "created_at": 1.8e9, "text": f"t{i}"})
        for i, q in enumerate(seqs)
    ]
    (folder / "entries.jsonl").write_text("\n".join(lines) + "\n")
    session = SessionStore(tmp_path / "data", TokenCounter(0.27)).get("tied")
    order = [e.id for e in session.entries()]
    for latest in range(12):
        got = [e.id for e in session.pinned_and_latest(latest)[1]]
        assert got == (order[-latest:] if latest else []), latest


@pytest.mark.parametrize("late", [3, 150, 297])
def test_the_latest_entries_are_found_from_the_end_even_when_an_early_one_is_later(
    tmp_path: Path, late: int
) -> None:
    # context_open looks for the latest entries from the end of the journal, a block at
    # a time; an entry far from the end with the latest time (a hand-edited seq) must
    # still be found, and deleted, pinned and expired entries left out on the way.
    folder = tmp_path / "data" / "sessions" / "far"
    folder.mkdir(parents=True)
    lines = []
    for i in range(300):
        rec = {"kind": "entry", "id": f"e{i}", "seq": 10_000 if i == late else i + 1}
        rec.update(created_at=1.8e9, text=f"t{i}", pinned=i % 97 == 5)
        if i % 13 == 0:
            rec["expires_at"] = 1.0  # long past
        lines.append(json.dumps(rec))
    lines += [json.dumps({"kind": "patch", "id": f"e{i}", "deleted": True}) for i in (296, 298)]
    (folder / "entries.jsonl").write_text("\n".join(lines) + "\n")
    session = SessionStore(tmp_path / "data", TokenCounter(0.27)).get("far")
    live = session.entries()
    unpinned = [e.id for e in live if not e.pinned]
    for latest in (1, 2, 5, 70, 299, 400):
        pinned, recent = session.pinned_and_latest(latest)
        assert [e.id for e in recent] == unpinned[-latest:], latest
        assert [e.id for e in pinned] == [e.id for e in live if e.pinned]
    assert unpinned[-1] == f"e{late}" or late % 13 == 0


def test_counts_kept_as_flags_change_equal_a_recount(tmp_path: Path) -> None:
    # stats() no longer walks every entry: its counts are kept as flags change, and only
    # entries with an expiry are looked at per call. A random mix of appends, pins,
    # deletes, compactions, undos, expiries and a ratio change must agree with a count
    # over every entry, and with a fresh replay of the journal.
    now = [1_000_000.0]
    counter = TokenCounter(0.27)
    store = SessionStore(tmp_path / "data", counter, clock=lambda: now[0])
    session = store.open("mix")[0]
    rng = random.Random(7)
    compactions: list[str] = []

    def recount(s: Session) -> dict[str, int]:
        every = s.entries(include_hidden=True)
        live = [e for e in every if e.live]
        return {
            "total": len(every),
            "live": len(live),
            "superseded": sum(e.superseded and not e.deleted for e in every),
            "deleted": sum(e.deleted for e in every),
            "pinned": sum(e.pinned for e in live),
            "expired": sum(e.expired and not e.deleted for e in every),
            "live_tokens": sum(e.tokens for e in live),
        }

    def counts(s: Session) -> dict[str, int]:
        st = s.stats()
        return {k: getattr(st, k) for k in recount(s)}

    for step in range(300):
        ids = [e.id for e in session.entries(include_hidden=True)]
        op = rng.random()
        if op < 0.45 or not ids:
            ttl = rng.choice([None, None, 0.001, 1.0])
            session.append(
                f"note {step} {rng.choice(TOPICS)}", pinned=rng.random() < 0.1, ttl_days=ttl
            )
        elif op < 0.65:
            with contextlib.suppress(InvalidInput):  # some pins are refused (folded, deleted)
                session.update(rng.choice(ids), pinned=rng.random() < 0.5)
        elif op < 0.8:
            session.update(rng.choice(ids), deleted=rng.random() < 0.7)
        elif op < 0.88:
            plan = session.plan_compaction(keep_recent=rng.randint(0, 5))
            if plan.entries:
                compactions.append(session.commit_summary(plan, f"summary {step}", "test").id)
        elif op < 0.93 and compactions:
            with contextlib.suppress(InvalidInput, NotFound):
                session.uncompact(compactions.pop(rng.randrange(len(compactions))))
        else:
            now[0] += rng.choice([30.0, 200.0, 90_000.0])
        if step == 150:
            counter.ratio = 0.3  # a calibration: every entry's tokens are counted again
        assert counts(session) == recount(session), step
    fresh = SessionStore(tmp_path / "data", counter, clock=lambda: now[0]).get("mix")
    assert counts(fresh) == recount(fresh) == counts(session)


def test_open_sessions_are_a_bounded_lru_and_eviction_loses_nothing(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "data", TokenCounter(0.27), max_open=3)
    for i in range(10):
        session = store.open(f"s{i}")[0]
        session.append(f"note {i} about the parser")
    assert store.kept() == ["s7", "s8", "s9"]  # least recently used first
    held = store.get("s8")  # used again: now the most recent
    assert store.kept() == ["s7", "s9", "s8"]
    again = store.get("s0")  # evicted long ago: replayed from its journal
    assert [e.text for e in again.entries()] == ["note 0 about the parser"]
    assert store.kept() == ["s9", "s8", "s0"]
    again.append("second note")
    store.open("s1")  # evicts s9
    assert "s9" not in store.kept()
    assert [e.text for e in store.get("s0").entries()] == ["note 0 about the parser", "second note"]
    # A session object still held after its eviction stays usable, and what it writes is
    # seen by the one replayed later (they meet in the journal, as two processes do).
    for i in range(3):
        store.open(f"x{i}")
    assert "s8" not in store.kept()
    held.append("written through the evicted object")
    texts = [e.text for e in store.get("s8").entries()]
    assert texts == ["note 8 about the parser", "written through the evicted object"]
    assert store.get("s8").recall("parser", 500).entries


def test_limit_and_budget_cut_a_recall_never_reorder_it(store: SessionStore) -> None:
    """``limit`` keeps the first entries of the full ranking; a smaller budget leaves out
    what does not fit, in the same order (a later, shorter entry may still fit)."""
    s = store.open("order")[0]
    rng = random.Random(5)
    words = "disk cache parser timeout retry node migration users table lunch deploy".split()
    for i in range(300):
        size = rng.choice((3, 8, 40))
        s.append(f"{i} " + " ".join(rng.choice(words) for _ in range(size)))
    for query in ("disk timeout", "migration users table", "parser", "lunch deploy retry", None):
        full = [e.id for e in s.recall(query, 1_000_000).entries]
        assert len(full) > 20
        for limit in (1, 3, 10, 20):
            assert [e.id for e in s.recall(query, 1_000_000, limit=limit).entries] == full[:limit]
        for budget in (100, 300, 1000, 4000):
            ids = [e.id for e in s.recall(query, budget).entries]
            ranked = iter(full)
            assert ids and all(i in ranked for i in ids), (query, budget)  # a subsequence


def test_an_entry_is_found_by_its_short_name(store: SessionStore, tmp_path: Path) -> None:
    """``e<seq>`` names an entry wherever an id is taken: held, read from a snapshot,
    a summary's ``s<seq>``; a name that fits several merged entries is refused."""
    s = store.open("refs")[0]
    made = [s.append(f"note {i} on the parser") for i in range(5)]
    assert [e.ref for e in made] == ["e1", "e2", "e3", "e4", "e5"]
    assert s.get("e3").id == made[2].id and s.update("e4", pinned=True).id == made[3].id
    for copied in ["E3", "[e3]", "#e3", " e3 ", "[e3 #build (pinned)]", made[2].id.upper()]:
        assert s.get(copied).id == made[2].id, copied  # as a model copies it from a label
    with pytest.raises(NotFound):
        s.get("e99")
    assert s.save_snapshot()
    fresh = SessionStore(tmp_path / "data", TokenCounter(0.27)).open("refs")[0]
    assert fresh.from_snapshot == 5  # e2 is built from the snapshot's columns
    assert fresh.get("e2").id == made[1].id and fresh.get("e4").pinned
    late = fresh.append("held, not in the snapshot")
    assert late.ref == "e6" and fresh.get("e6").id == late.id
    # Two logs merged by hand: two entries numbered 7. The full ids still work.
    log = tmp_path / "data" / "sessions" / "refs" / "entries.jsonl"
    twins = [f"e{n}x" for n in ("aaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbb")]
    with log.open("a", encoding="utf-8") as f:
        for eid in twins:
            record = {"kind": "entry", "id": eid, "seq": 7, "created_at": 1.7e9, "role": "note"}
            f.write(json.dumps(record | {"text": "twin", "tokens": 2}) + "\n")
    with pytest.raises(InvalidInput, match="e7 names 2 entries here: give the full id"):
        fresh.get("e7")
    assert fresh.get(twins[1]).text == "twin"


def test_labels_date_entries_only_when_they_are_from_several_days(
    tmp_path: Path,
) -> None:
    from context_window.server.session_text import recall_label

    clock = [1_780_000_000.0]
    s = SessionStore(tmp_path / "data", TokenCounter(0.27), lambda: clock[0]).open("days")[0]
    s.append("the deploy failed on monday", tags=["ops"])
    s.append("the deploy passed after the fix")
    same = s.recall("deploy", 1000, label=recall_label)
    assert list(same.labels.values()) == ["[e2]", "[e1 #ops]"]  # one day: no dates at all
    clock[0] += 3 * 86_400
    s.append("the deploy broke again", role="decision")
    mixed = s.recall("deploy", 1000, label=recall_label)
    labels = list(mixed.labels.values())
    assert len(labels) == 3 and all(" · saved " in label for label in labels)
    assert any(re.fullmatch(r"\[e3 decision · saved \d\d-\d\d\]", label) for label in labels)
    used = sum(e.tokens + 1 + s.counter.count(mixed.labels[e.id]) for e in mixed.entries)
    assert mixed.packed.used_tokens == used  # the dated labels are the ones measured


def test_a_recall_past_the_first_ranked_matches_keeps_the_full_order(
    store: SessionStore,
) -> None:
    """Only the best RANKED_FIRST matches are sorted at first; a budget or limit that
    reaches past them gets more put in order, never a different order."""
    from context_window.sessions.session import RANKED_FIRST

    s = store.open("deep")[0]
    rng = random.Random(9)
    for i in range(3 * RANKED_FIRST):
        s.append(f"{i} disk " + "full " * rng.randint(0, 3) + "x " * rng.randint(1, 30))
    full = [e.id for e in s.recall("disk full", 10**7).entries]
    assert len(full) == 3 * RANKED_FIRST
    wide = [e.id for e in s.recall("disk full", 10**7, limit=RANKED_FIRST + 100).entries]
    assert wide == full[: RANKED_FIRST + 100]
    for budget in (300, 5_000, 20_000, 60_000):
        ids = [e.id for e in s.recall("disk full", budget).entries]
        ranked = iter(full)
        assert ids and all(i in ranked for i in ids), budget
    many = s.recall("disk full", 60_000)
    assert len(many.entries) > RANKED_FIRST  # the walk went past the first ones


def test_a_decision_is_found_by_the_word_but_a_speaker_is_not(tmp_path: Path) -> None:
    """A model asks for "the decisions" more often than for their words; who spoke is no
    search term (every user turn would match "user")."""
    session = SessionStore(tmp_path, TokenCounter(0.27)).open("work")[0]
    chosen = session.append("use PostgreSQL for the orders database", role="Decision").id
    fill(session, ["the user asked about the orders database", "cache misses on login"])
    session.append("the login page fails", role="user")
    for s in (session, SessionStore(tmp_path, TokenCounter(0.27)).open("work")[0]):
        assert [e.id for e in s.recall("decisions", 4000).entries] == [chosen]
        assert s.recall("decisions about the orders database", 4000).entries[0].id == chosen
        assert s.recall("what did we decide for orders?", 4000).entries[0].id == chosen
        assert "user" not in {e.role for e in s.recall("user", 4000).entries}
