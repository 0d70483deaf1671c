"""Recall returns only entries that match a query term (issue 31, item 8).

Neighbour credit (an entry gains part of the score of the entries beside it in time)
ranks matches; it must never bring in an entry that shares no word with the query,
nor rank one above a real match. A real data dir, a real server process restarted.
"""

from __future__ import annotations

from pathlib import Path

from .support import service_for

NOTES = [
    "Reviewed the users table schema before the migration window.",
    "Lunch options near the office: the noodle bar or the deli.",
    "Checked the migration of the users table again after lunch.",
    "The database migration failed on the users table.",
    "Weather is fine today.",
]


def test_an_entry_without_a_query_word_is_never_returned(tmp_path: Path) -> None:
    service = service_for(tmp_path)
    session = service.sessions.open("work")[0]
    ids = [session.append(text).id for text in NOTES]
    rec = service_for(tmp_path).sessions.get("work").recall("migration users table", 4000)
    returned = [e.id for e in rec.entries]
    assert ids[1] not in returned and ids[4] not in returned  # lunch and weather
    assert set(returned) == {ids[0], ids[2], ids[3]}
    assert rec.candidates == 3
    # Smoothing still counts: the failure note, between two matches, ranks first.
    assert returned[0] in {ids[2], ids[3]}
