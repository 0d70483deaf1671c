"""How the session tools read: the compact text the model sees for each answer."""

from __future__ import annotations

from context_window.localtime import local_time
from context_window.models import Count, Entry, Recall, Reserve, SessionPage, SessionStats
from context_window.packing import fit_lines, header_reserve
from context_window.retrieval.meaning import WORDS_ONLY
from context_window.service import Changed, Opened
from context_window.sessions.compaction import Compaction
from context_window.sessions.session import FOLD_TOKENS, repeat_key
from context_window.tokens import TokenCounter
from context_window.wording import plural

PREVIEW_CHARS = 160
FACTS_IN_REPORT = 30
RESTORED_SHOWN = 20


def bar(used: int, budget: int, width: int = 20) -> str:
    """A text gauge like ``[#####---------------] 1,200/4,000 tokens (30%)``."""
    share = used / budget if budget else 0.0
    filled = min(width, round(share * width))
    return f"[{'#' * filled}{'-' * (width - filled)}] {used:,}/{budget:,} tokens ({share:.0%})"


def preview(entry: Entry, chars: int = PREVIEW_CHARS) -> str:
    """One line naming an entry: id, role, tags, flags and the start of its text."""
    text = " ".join(entry.text.split())
    if len(text) > chars:
        text = text[: chars - 1] + "…"
    return f"{_head(entry)}: {text}"


def _head(entry: Entry) -> str:
    tags = "".join(f" #{t}" for t in entry.tags)
    return f"[{entry.ref}] {local_time(entry.created_at)} {entry.role}{tags}{_flags(entry)}"


def _flags(entry: Entry) -> str:
    """`` (pinned, superseded by s3)``, or nothing for a plain entry."""
    states = (("pinned", entry.pinned), ("expired", entry.expired), ("deleted", entry.deleted))
    flags = [f for f, on in states if on]
    if entry.superseded:
        flags.append(
            f"superseded by {', '.join(entry.replaced_by)}" if entry.replaced_by else "superseded"
        )
    return f" ({', '.join(flags)})" if flags else ""


def advice(stats: SessionStats, budget: int) -> str:
    """What the model should do about the session's size, if anything."""
    if stats.live_tokens > budget:
        return "Over budget: call context_compact now, then context_recall what you need."
    if stats.live_tokens > 0.75 * budget:
        return "Nearing the budget: call context_compact soon."
    return ""


NAMESAKES_SHOWN = 5  # the newest sessions of a new one's title that context_open names


def render_open(o: Opened) -> str:
    """context_open's text: counts, gauge, pinned entries and the latest entries."""
    verb = "Created" if o.created else "Resumed"
    stats, budget = o.stats, o.budget
    lines = [
        f"{verb} session '{o.session.id}' ({o.session.title}): {stats.live:,} live of "
        f"{plural(stats.total, 'entry')}, {stats.pinned:,} pinned",
        bar(stats.live_tokens, budget),
    ]
    if o.pinned:
        lines.append("Pinned:")
        lines.extend("  " + preview(e) for e in o.pinned)
    if o.recent:
        lines.append("Latest:")
        lines.extend("  " + line for line in _once(o.recent))
    if o.namesakes:  # a model resuming by title makes a new session instead
        n, first = len(o.namesakes), o.namesakes[0]
        who = "Another session has" if n == 1 else f"{n} other sessions have"
        lines.append(
            f"{who} this title: {', '.join(o.namesakes[:NAMESAKES_SHOWN])}. To resume "
            f"{'it' if n == 1 else 'the newest'} instead: context_open(session_id='{first}')"
        )
    tip = advice(stats, budget)
    lines.append(tip or "Next: context_append notes as you work; context_recall with a query.")
    return "\n".join(lines)


def _once(entries: list[Entry]) -> list[str]:
    """A preview of each text's newest copy, spaces aside, naming the older ones: a model
    that saved a note again (a retry, a loop) sees it once, as recall shows it."""
    keys = [repeat_key(e) for e in entries]
    copies: dict[str, list[str]] = {}
    for e, key in zip(entries, keys, strict=True):
        copies.setdefault(key, []).append(e.ref)
    out = []
    for e, key in zip(entries, keys, strict=True):
        *older, newest = copies[key]
        if e.ref == newest:
            more = f" (+{plural(len(older), 'older copy')}: {', '.join(older)})" if older else ""
            out.append(preview(e) + more)
    return out


def recall_label(entry: Entry, dated: bool = False) -> str:
    """The line above a recalled entry: name, role, tags, flags, the day if several."""
    role = "" if entry.role == "note" else f" {entry.role}"
    tags = "".join(f" #{t}" for t in entry.tags)
    when = f" · saved {local_time(entry.created_at, year=False)[:5]}" if dated else ""
    return f"[{entry.ref}{role}{tags}{_flags(entry)}{when}]"


NOTHING_MATCHED = "Nothing matched: try other words, or no query for the latest."


def _nothing(rec: Recall) -> str:
    """Why a recall shows no entry: no match, no entry with the tags, or none at all."""
    if rec.queried:
        return NOTHING_MATCHED
    if rec.tagged:
        return "No live entry has those tags: try without tags."
    return "No live entries: context_append saves one."


def recall_header(
    shown: int,
    candidates: int,
    used: int,
    budget: int,
    omitted: int,
    beyond: int,
    searchable: bool,
    terse: bool = False,
    words_only: bool = False,
) -> str:
    """context_recall's header: counts, tokens, left out, and words only if so."""
    header = f"{shown}/{candidates} · {used:,}/{budget:,}" + (WORDS_ONLY if words_only else "")
    if terse:  # a budget too small for the full header
        return header
    header = f"{shown} of {plural(candidates, 'entry')}, best first · {used:,}/{budget:,} tokens"
    if words_only:
        header += WORDS_ONLY
    if omitted:
        header += f" · {omitted} did not fit"
    if beyond:
        header += f" · {beyond} past limit"
    if not searchable:
        header += "\nNo searchable words in the query: newest first."
    return header


def recall_reserve(total: int, budget: int, count: Count, searchable: bool = False) -> Reserve:
    """Tokens kept for the header, at its widest for ``total`` candidates, and whether terse."""
    big = int("9" * len(str(max(total, 1))))
    used = int("9" * len(str(budget)))
    return header_reserve(
        lambda terse: recall_header(big, big, used, budget, big, big, searchable, terse),
        budget,
        count,
    )


class RecallText:
    """context_recall's layout (see ``service.RecallLayout``)."""

    label = staticmethod(recall_label)
    reserve = staticmethod(recall_reserve)


RECALL = RecallText()


def recall_body(rec: Recall) -> str:
    """context_recall's entries, best first, each under its label (the text below the header)."""
    return "\n\n".join(f"{rec.labels.get(e.id) or recall_label(e)}\n{e.text}" for e in rec.entries)


def render_recall(
    rec: Recall, terse: bool = False, used: int | None = None, body: str | None = None
) -> str:
    """context_recall's text: the header (``used``), then the entries best first."""
    p = rec.packed
    header = recall_header(
        len(rec.entries),
        rec.candidates,
        p.used_tokens if used is None else used,
        p.budget,
        p.omitted,
        rec.beyond_limit,
        rec.searchable,
        terse,
        rec.words_only,
    )
    if not rec.entries:
        return header if terse else f"{header}\n{_nothing(rec)}"
    return f"{header}\n\n{recall_body(rec) if body is None else body}"


def render_compaction(c: Compaction) -> str:
    """context_compact's text: what was folded, how, and the tokens freed."""
    n = len(c.plan.entries)
    keep = f"kept the {c.plan.kept_recent} most recent and {c.plan.pinned_kept} pinned"
    later = (
        f" {plural(c.plan.left, 'more foldable entry')} past this batch's "
        f"{FOLD_TOKENS:,}-token bound: call context_compact again for them."
        if c.plan.left
        else ""
    )
    if c.dry_run and n >= 2:
        return (
            f"Dry run: would fold {n:,} entries ({c.plan.tokens:,} tokens) into one summary; "
            f"{keep}.{later}"
        )
    if c.summary is None or c.entry is None:
        return (
            f"Nothing to compact: {plural(n, 'foldable entry')} ({keep}). "
            "Lower keep_recent or append more first."
        )
    method = c.summary.method + (f" ({c.summary.reason})" if c.summary.reason else "")
    lines = [
        f"Folded {n:,} entries ({c.plan.tokens:,} tokens) into summary {c.entry.ref} "
        f"({c.summary.tokens:,} tokens) by {method}; "
        f"freed {c.tokens_freed:,} tokens; {keep}.{later}",
        bar(c.stats.live_tokens if c.stats else 0, c.budget),
    ]
    lost = len(c.kept_facts) + c.facts_not_kept
    if lost:
        shown = "; ".join(c.kept_facts[:FACTS_IN_REPORT])
        rest = len(c.kept_facts) - FACTS_IN_REPORT
        shown += f"; … {rest:,} more" if rest > 0 else ""
        line = f"The summary text lost {plural(lost, 'fact')} of the originals"
        if c.kept_facts:
            line += f"; appended {len(c.kept_facts):,} to it: {shown}"
        if c.facts_not_kept:
            line += f"; {c.facts_not_kept:,} more did not fit target_tokens (see the originals)"
        lines.append(line)
    lines.append(
        f"Originals are kept: context_recall(include_superseded=true) shows them; "
        f"context_uncompact(compaction_id={c.entry.ref!r}) restores them."
    )
    return "\n".join(lines)


def render_append(c: Changed) -> str:
    """context_append's text: the new entry's id and size, the gauge, and any advice."""
    entry = c.entries[0]
    tip = advice(c.stats, c.budget)
    text = f"Saved {entry.ref} ({entry.tokens:,} tokens). {bar(c.stats.live_tokens, c.budget)}"
    return text + (f"\n{tip}" if tip else "")


def render_uncompact(c: Changed, compaction_id: str) -> str:
    """context_uncompact's text: what is live again, and how to redo the compaction."""
    lines = [
        f"Undid compaction {compaction_id}: {plural(len(c.entries), 'entry')} live again; "
        "the summary is retired (context_update on it with delete=false redoes the "
        "compaction).",
        bar(c.stats.live_tokens, c.budget),
    ]
    lines.extend("  " + preview(e) for e in c.entries[:RESTORED_SHOWN])
    if len(c.entries) > RESTORED_SHOWN:
        lines.append(f"  … {len(c.entries) - RESTORED_SHOWN} more: context_recall shows them")
    tip = advice(c.stats, c.budget)
    if tip:
        lines.append(tip)
    return "\n".join(lines)


def render_status(c: Changed, token_counts: str, summarizer: str) -> str:
    """context_status's text: counts, gauge, how tokens are counted, repairs, advice."""
    s = c.stats
    lines = [
        f"Session '{c.session.id}' ({c.session.title}): {s.live:,} live, "
        f"{s.superseded:,} superseded, {s.expired:,} expired, {s.deleted:,} deleted, "
        f"{s.pinned:,} pinned",
        bar(s.live_tokens, c.budget),
        f"Token counts: {token_counts}",
        f"Summaries: {summarizer}",
    ]
    lines.extend(f"Repaired: {r}" for r in s.repairs)
    if s.skipped_lines or s.orphan_patches:
        lines.append(
            f"Storage: skipped {plural(s.skipped_lines, 'unreadable line')}, "
            f"{plural(s.orphan_patches, 'patch')} for unknown entries"
        )
    lines.append(advice(s, c.budget) or "Within budget.")
    return "\n".join(lines)


def render_update(entry: Entry) -> str:
    """context_update's text: the entry's new state."""
    state = "deleted" if entry.deleted else ("pinned" if entry.pinned else "unpinned")
    return f"Entry {entry.ref} is now {state}.\n{preview(entry)}"


def render_sessions(page: SessionPage, budget: int, counter: TokenCounter) -> str:
    """context_list_sessions' text: a line per session within ``budget``, the next page."""
    if not page.total:
        return "No sessions yet. Call context_open to start one."
    n, first = len(page.sessions), page.offset + 1
    of = f"{page.total:,}"
    if page.text:
        of = f"{page.matched:,} holding {page.text!r:.80} ({page.total:,} in all)"
    if not n:
        return f"No sessions from offset {page.offset}: {of}."
    header = f"Sessions {first}-{page.offset + n} of {of}, newest first:"
    lines = [f"  {i.id}: {i.title} (updated {local_time(i.updated_at)})" for i in page.sessions]

    def more(omitted: int) -> str:
        return f"{omitted:,} more did not fit. Next: offset={page.offset + n - omitted}"

    text = "\n".join([header, *lines])
    if counter.count(text) > budget:
        return fit_lines(header, lines, budget, counter, more)
    note = f"Next: offset={page.offset + n}"
    if page.offset + n < page.matched and counter.count(f"{text}\n{note}") <= budget:
        text += f"\n{note}"
    return text
