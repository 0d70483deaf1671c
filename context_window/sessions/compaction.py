"""What a compaction folds and what it keeps: the summarizer's input, the facts the
summary lost (kept beside it, as many as fit), the outcome's record, and the rule that
no change may fold a pinned entry."""

from __future__ import annotations

from dataclasses import dataclass, replace

from context_window.errors import UNCOMPACT_FIRST, InvalidInput
from context_window.models import CompactionPlan, Entry, SessionStats, Summary
from context_window.packing import leading
from context_window.sessions.facts import lost_facts
from context_window.sessions.state import SessionState
from context_window.tokens import TokenCounter


@dataclass(frozen=True)
class Compaction:
    """What a compaction did (or, on a dry run, would do)."""

    session_id: str
    plan: CompactionPlan
    summary: Summary | None
    entry: Entry | None
    dry_run: bool
    kept_facts: tuple[str, ...] = ()
    facts_not_kept: int = 0
    stats: SessionStats | None = None  # the session's after the compaction
    budget: int = 0

    @property
    def tokens_freed(self) -> int:
        """Live tokens removed from the session, net of the summary."""
        if self.summary is None:
            return 0
        return max(0, self.plan.tokens - self.summary.tokens)


def summary_input(plan: CompactionPlan) -> str:
    """The entries to fold as the summarizer sees them, a paragraph each (``_render``)."""
    return "\n\n".join(_render(e) for e in plan.entries)


def keep_facts(
    summary: Summary, plan: CompactionPlan, target_tokens: int, counter: TokenCounter
) -> tuple[Summary, list[str], int]:
    """``summary`` with the lost facts that fit appended: (text, facts, how many did not)."""
    originals = "\n".join(e.text for e in plan.entries)
    lost = lost_facts(originals, summary.text)
    if not lost:
        return summary, [], 0
    kept = lost[: leading((counter.count(f) + 1 for f in lost), target_tokens)]
    more = len(lost) - len(kept)
    extra = f" (+{more:,} more in the originals)" if more else ""
    listed = "; ".join(kept) if kept else "none fitted"
    text = f"{summary.text}\nKept facts: {listed}{extra}"
    return replace(summary, text=text, tokens=counter.count(text)), kept, more


def _render(entry: Entry) -> str:
    """An entry as the summarizer reads it: its role unless a note (as labels show roles),
    then its tags, before the text; a summary copied whole spends nothing on ``note:``."""
    head = [] if entry.role == "note" else [entry.role]
    head += [f"[{', '.join(entry.tags)}]"] if entry.tags else []
    return f"{' '.join(head)}: {entry.text}" if head else entry.text


def check_pins(
    state: SessionState, entry_id: str, pinned: bool | None, deleted: bool | None
) -> None:
    """Refuse a change that would fold a pinned entry into a summary."""
    rec = state.records[entry_id]
    if deleted is False and rec["deleted"] and rec["replaces"]:
        for old in rec["replaces"]:
            other = state.records.get(old)
            if other is None:
                continue
            if other["pinned"]:
                raise InvalidInput(
                    f"cannot redo compaction {entry_id}: entry {old} it folded was pinned "
                    "since, and pinned entries are never folded; unpin it first"
                )
            later = [s for s in state.live_replacers(old) if s != entry_id]
            if later:
                raise InvalidInput(
                    f"cannot redo compaction {entry_id}: entry {old} it folded is now "
                    f"folded by {later[0]}; undo that one first"
                )
    if pinned and rec["superseded"]:
        folder = (state.live_replacers(entry_id) or ["a summary"])[0]
        raise InvalidInput(
            f"entry {entry_id} is folded into {folder}; it can be pinned once that "
            "compaction is undone",
            remedy=UNCOMPACT_FIRST,
            compaction_id=folder,
        )
