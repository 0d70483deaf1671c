"""Frozen records passed between the core modules."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

ROLES: tuple[str, ...] = ("note", "user", "assistant", "system", "decision")
SummaryMethod = Literal["llm", "extractive", "verbatim"]


REF = re.compile(r"([a-z])([0-9]{1,15})")  # an entry's short name: letter, number
LIST_LIMIT = 20  # sessions context_list_sessions shows unless asked for more
MAX_LIST_LIMIT = 200


@dataclass(frozen=True)
class Entry:
    """One session entry after replay: its latest pinned/deleted/superseded state."""

    id: str
    seq: int
    created_at: float
    role: str
    text: str
    tokens: int
    tags: tuple[str, ...] = ()
    pinned: bool = False
    deleted: bool = False
    superseded: bool = False
    replaces: tuple[str, ...] = ()
    expires_at: float | None = None
    expired: bool = False
    replaced_by: tuple[str, ...] = ()  # the live summaries that fold this entry

    @property
    def live(self) -> bool:
        """Neither deleted, nor folded into a summary, nor past its expiry."""
        return not (self.deleted or self.superseded or self.expired)

    @property
    def ref(self) -> str:
        """The entry's short name in its session (``e42``), taken wherever its id is."""
        ref = f"{self.id[:1]}{self.seq}"
        return ref if REF.fullmatch(ref) else self.id


@dataclass(frozen=True)
class Chunk:
    """A slice of a document under its heading trail; ``line``: its 1-based first line."""

    index: int
    text: str
    tokens: int
    start: int
    end: int
    heading: str = ""
    line: int = 0


@dataclass(frozen=True)
class Summary:
    """A summary and how it was made; ``reason`` explains an extractive fallback."""

    text: str
    method: SummaryMethod
    tokens: int
    reason: str = ""


@dataclass(frozen=True)
class Packed:
    """Items fitted into a budget, in the order chosen, and how many did not fit."""

    items: tuple[int, ...]
    used_tokens: int
    omitted: int
    budget: int
    unlisted: bool = False  # the walk reached the items not listed (see pack's ``beyond``)
    repeats: int = 0  # items left out, not in ``omitted``: each the same as one chosen


@dataclass(frozen=True)
class Hit:
    """A search result: a chunk of a document with its score."""

    doc_id: str
    title: str
    chunk: Chunk
    score: float


@dataclass(frozen=True)
class SessionInfo:
    """A session's metadata as listed."""

    id: str
    title: str
    created_at: float
    updated_at: float
    extra: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Recall:
    """Entries chosen for a recall, best first, and what was left out."""

    entries: tuple[Entry, ...]
    candidates: int
    packed: Packed
    scores: dict[str, float]
    beyond_limit: int = 0
    searchable: bool = True
    labels: dict[str, str] = field(default_factory=dict)  # each entry's label line, as packed
    words_only: bool = False  # ranked by words alone: the embeddings endpoint did not answer
    queried: bool = True  # a query was given (else the newest were asked for)
    tagged: bool = False  # only entries with given tags were asked for


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
class SessionPage:
    """One page of the session list: newest first, after a filter, with the counts."""

    sessions: tuple[SessionInfo, ...]
    total: int  # sessions on disk
    matched: int  # of those, the ones the filter kept
    offset: int
    text: str = ""  # the filter: a part of an id or title


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
    left: int = 0  # foldable entries past this batch's token bound, for the next compaction

    @property
    def tokens(self) -> int:
        """Tokens of the entries to fold."""
        return sum(e.tokens for e in self.entries)


Reserve = tuple[int, bool]  # tokens kept for an answer's header, and whether it is terse
Count = Callable[[str], int]


class RecallLayout(Protocol):
    """What an edge puts around recalled entries, which packing leaves room for."""

    def label(self, entry: Entry, dated: bool) -> str:
        """The line above an entry (``dated``: the entries shown are from several days)."""
        ...

    def reserve(self, total: int, budget: int, count: Count, searchable: bool) -> Reserve:
        """The header's widest size, for up to ``total`` entries."""
        ...
