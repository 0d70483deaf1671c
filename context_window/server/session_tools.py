"""The session tools: thin adapters from MCP calls to the Service, plus their text views."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult
from pydantic import Field

from context_window.localtime import local_time
from context_window.models import Entry, Recall, SessionStats
from context_window.packing import header_reserve, settle
from context_window.server.adapters import DESTROYS, READ_ONLY, WRITES, guarded, result
from context_window.service import Compaction, Service, session_key
from context_window.sessions.session import Session

PREVIEW_CHARS = 160
FACTS_IN_REPORT = 30

TTL = "Expire after N days unless pinned"
SessionId = Annotated[str, Field(description="Session id from context_open")]


def bar(used: int, budget: int, width: int = 20) -> str:
    """A text gauge like ``[#####---------------] 1200/4000 tokens (30%)``."""
    share = used / budget if budget else 0.0
    filled = min(width, round(share * width))
    return f"[{'#' * filled}{'-' * (width - filled)}] {used}/{budget} tokens ({share:.0%})"


def preview(entry: Entry, chars: int = PREVIEW_CHARS) -> str:
    """One line naming an entry: id, role, tags, flags and the start of its text."""
    text = " ".join(entry.text.split())
    if len(text) > chars:
        text = text[: chars - 1] + "…"
    return f"{_head(entry)}: {text}"


def _when(stamp: float) -> str:
    return local_time(stamp)


def _head(entry: Entry) -> str:
    states = (("pinned", entry.pinned), ("expired", entry.expired), ("deleted", entry.deleted))
    flags = [f for f, on in states if on]
    if entry.superseded:
        flags.append(
            f"superseded by {', '.join(entry.replaced_by)}" if entry.replaced_by else "superseded"
        )
    tags = "".join(f" #{t}" for t in entry.tags)
    stamp = _when(entry.created_at)
    extra = f" ({', '.join(flags)})" if flags else ""
    return f"[{entry.id}] {stamp} {entry.role}{tags}{extra}"


def entry_data(entry: Entry) -> dict[str, Any]:
    """An entry as structured content."""
    return {
        "id": entry.id,
        "seq": entry.seq,
        "created_at": entry.created_at,
        "role": entry.role,
        "text": entry.text,
        "tokens": entry.tokens,
        "tags": list(entry.tags),
        "pinned": entry.pinned,
        "deleted": entry.deleted,
        "superseded": entry.superseded,
        "replaced_by": list(entry.replaced_by),
        "replaces": list(entry.replaces),
        "expires_at": entry.expires_at,
        "expired": entry.expired,
    }


_RECALL_KEYS = ("id", "created_at", "role", "text")  # always there; the rest when set
_SIZES = ("seq", "tokens")  # left out: the text is there to measure


def recalled_data(entry: Entry, score: float) -> dict[str, Any]:
    """A recalled entry as structured content: flags and lists only when set, so the
    structured answer stays near the size of the text one (both must fit the budget)."""
    full = entry_data(entry)
    out = {k: full[k] for k in _RECALL_KEYS}
    out["score"] = score
    out.update({k: v for k, v in full.items() if k not in _RECALL_KEYS and k not in _SIZES and v})
    return out


def advice(stats: SessionStats, budget: int) -> str:
    """What the model should do about the session's size, if anything."""
    if stats.live_tokens > budget:
        return "Over budget: call context_compact now, then context_recall what you need."
    if stats.live_tokens > 0.75 * budget:
        return "Nearing the budget: call context_compact soon."
    return ""


def render_open(session: Session, created: bool, stats: SessionStats, budget: int) -> str:
    """context_open's text: counts, gauge, pinned entries and the latest entries."""
    verb = "Created" if created else "Resumed"
    lines = [
        f"{verb} session '{session.id}' ({session.title}): {stats.live} live of {stats.total} "
        f"entries, {stats.pinned} pinned",
        bar(stats.live_tokens, budget),
    ]
    live = session.entries()
    pinned = [e for e in live if e.pinned]
    recent = [e for e in live if not e.pinned][-5:]
    if pinned:
        lines.append("Pinned:")
        lines.extend("  " + preview(e) for e in pinned)
    if recent:
        lines.append("Latest:")
        lines.extend("  " + preview(e) for e in recent)
    tip = advice(stats, budget)
    lines.append(tip or "Next: context_append notes as you work; context_recall with a query.")
    return "\n".join(lines)


def recall_label(entry: Entry) -> str:
    """The short line above each recalled entry: id, time, and role, tags and flags if any."""
    role = "" if entry.role == "note" else f" {entry.role}"
    tags = "".join(f" #{t}" for t in entry.tags)
    flags = [f for f, on in (("pinned", entry.pinned), ("expired", entry.expired)) if on]
    if entry.superseded:
        flags.append(
            f"superseded by {', '.join(entry.replaced_by)}" if entry.replaced_by else "superseded"
        )
    extra = f" ({', '.join(flags)})" if flags else ""
    when = local_time(entry.created_at, year=False)
    return f"[{entry.id} {when}{role}{tags}{extra}]"


NOTHING_MATCHED = "Nothing matched: try other words, or no query for the latest."


def recall_header(
    shown: int,
    candidates: int,
    used: int,
    budget: int,
    omitted: int,
    beyond: int,
    searchable: bool,
    terse: bool = False,
) -> str:
    """context_recall's first line(s): counts and tokens, and what was left out."""
    if terse:  # a budget too small for the full header
        return f"{shown}/{candidates} · {used}/{budget}"
    header = f"{shown} of {candidates} entries, best first · {used}/{budget} tokens"
    if omitted:
        header += f" · {omitted} did not fit"
    if beyond:
        header += f" · {beyond} past limit"
    if not searchable:
        header += "\nNo searchable words in the query: newest first."
    return header


def recall_reserve(total: int, budget: int, count: Callable[[str], int]) -> tuple[int, bool]:
    """Tokens kept for the header and any closing note (their widest form), and whether terse."""
    big = int("9" * len(str(max(total, 1))))
    used = int("9" * len(str(budget)))
    return header_reserve(
        lambda terse: recall_header(big, big, used, budget, big, big, False, terse), budget, count
    )


def render_recall(rec: Recall, terse: bool = False, used: int | None = None) -> str:
    """context_recall's text: a header with counts and tokens, then entries best first.

    ``used`` is the answer's own size for the header (default: what was packed).
    """
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
    )
    if not rec.entries:
        return header if terse else f"{header}\n{NOTHING_MATCHED}"
    body = [f"{rec.labels.get(e.id) or recall_label(e)}\n{e.text}" for e in rec.entries]
    return "\n\n".join([header, *body])


def render_compaction(c: Compaction, budget: int, stats: SessionStats) -> str:
    """context_compact's text: what was folded, how, and the tokens freed."""
    n = len(c.plan.entries)
    keep = f"kept the {c.plan.kept_recent} most recent and {c.plan.pinned_kept} pinned"
    if c.dry_run and n >= 2:
        return f"Dry run: would fold {n} entries ({c.plan.tokens} tokens) into one summary; {keep}."
    if c.summary is None or c.entry is None:
        return (
            f"Nothing to compact: {n} foldable entries ({keep}). "
            "Lower keep_recent or append more first."
        )
    method = c.summary.method + (f" ({c.summary.reason})" if c.summary.reason else "")
    lines = [
        f"Folded {n} entries ({c.plan.tokens} tokens) into summary {c.entry.id} "
        f"({c.summary.tokens} tokens) by {method}; freed {c.tokens_freed} tokens; {keep}.",
        bar(stats.live_tokens, budget),
    ]
    lost = len(c.kept_facts) + c.facts_not_kept
    if lost:
        shown = "; ".join(c.kept_facts[:FACTS_IN_REPORT])
        rest = len(c.kept_facts) - FACTS_IN_REPORT
        shown += f"; … {rest} more" if rest > 0 else ""
        line = f"The summary text lost {lost} facts of the originals"
        if c.kept_facts:
            line += f"; appended {len(c.kept_facts)} to it: {shown}"
        if c.facts_not_kept:
            line += f"; {c.facts_not_kept} more did not fit target_tokens (see the originals)"
        lines.append(line)
    lines.append(
        f"Originals are kept: context_recall(include_superseded=true) shows them; "
        f"context_uncompact(compaction_id={c.entry.id!r}) restores them."
    )
    return "\n".join(lines)


def register_session_tools(app: MCPServer, service: Service) -> None:
    """Register the context_* tools on ``app``."""
    budget = service.settings.budget
    audit = service.settings.audit

    @app.tool(
        annotations=WRITES,
        description="Create or resume a working-memory session. Call first; keep the id.",
    )
    @guarded("context_open", audit)
    async def context_open(
        session_id: Annotated[str | None, Field(description="Id to resume/create")] = None,
        title: str | None = None,
    ) -> CallToolResult:
        def work() -> CallToolResult:
            session, created = service.sessions.open(session_id, title)
            stats = session.stats()
            data = {
                "session_id": session.id,
                "title": session.title,
                "created": created,
                "live": stats.live,
                "total": stats.total,
                "tokens": stats.live_tokens,
                "budget": budget,
                "pinned": [entry_data(e) for e in session.entries() if e.pinned],
            }
            return result(render_open(session, created, stats, budget), data)

        return await service.run(session_key(session_id), work)

    @app.tool(
        annotations=WRITES,
        description="Save a note, decision or dead end. Pin what must never be lost.",
    )
    @guarded("context_append", audit)
    async def context_append(
        session_id: SessionId,
        text: str,
        role: Annotated[str, Field(description="note|user|assistant|system|decision")] = "note",
        tags: list[str] | None = None,
        pinned: bool = False,
        ttl_days: Annotated[float | None, Field(gt=0, le=36_500, description=TTL)] = None,
    ) -> CallToolResult:
        def work() -> CallToolResult:
            session = service.session(session_id)
            entry = session.append(text, role, tags, pinned, ttl_days=ttl_days)
            stats = session.stats()
            tip = advice(stats, budget)
            text_out = f"Saved {entry.id} ({entry.tokens} tokens). {bar(stats.live_tokens, budget)}"
            data = {
                "entry_id": entry.id,
                "tokens": entry.tokens,
                "session_tokens": stats.live_tokens,
                "budget": budget,
                "advice": tip,
            }
            return result(text_out + (f"\n{tip}" if tip else ""), data)

        return await service.run(session_key(session_id), work)

    @app.tool(
        annotations=READ_ONLY,
        description="Get the session entries relevant to a query (or the latest), within a budget.",
    )
    @guarded("context_recall", audit)
    async def context_recall(
        session_id: SessionId,
        query: str | None = None,
        budget_tokens: Annotated[int | None, Field(ge=64, le=1_000_000)] = None,
        limit: Annotated[int | None, Field(ge=1, le=1000)] = None,
        tags: list[str] | None = None,
        include_superseded: bool = False,
    ) -> CallToolResult:
        def work() -> CallToolResult:
            session = service.session(session_id)
            want = budget_tokens or budget
            # One digit to spare: entries appended meanwhile by another process may be counted.
            reserve, terse = recall_reserve(10 * session.size(), want, service.counter.count)
            rec = session.recall(
                query,
                want,
                limit=limit,
                tags=tags,
                include_superseded=include_superseded,
                label=recall_label,
                reserve=reserve,
            )
            text, used = settle(lambda u: render_recall(rec, terse, u), want, service.counter.count)
            data = {
                "session_id": session.id,
                "entries": [recalled_data(e, rec.scores.get(e.id, 0.0)) for e in rec.entries],
                "candidates": rec.candidates,
                "searchable": rec.searchable,
                "used_tokens": used,
                "budget": rec.packed.budget,
                "omitted": rec.packed.omitted,
                "beyond_limit": rec.beyond_limit,
            }
            return result(text, data, want, service.counter.count)

        return await service.run(session_key(session_id), work)

    @app.tool(
        annotations=WRITES,
        description="Fold older unpinned entries into one summary when the session is over budget.",
    )
    @guarded("context_compact", audit)
    async def context_compact(
        session_id: SessionId,
        keep_recent: Annotated[int, Field(ge=0, le=10_000)] = 10,
        target_tokens: Annotated[int, Field(ge=16, le=20_000)] = 400,
        dry_run: bool = False,
    ) -> CallToolResult:
        c = await service.compact(session_id, keep_recent, target_tokens, dry_run)
        stats = await service.run(
            session_key(session_id), lambda: service.session(session_id).stats()
        )
        data = {
            "session_id": c.session_id,
            "dry_run": c.dry_run,
            "folded": len(c.plan.entries) if len(c.plan.entries) >= 2 else 0,
            "folded_tokens": c.plan.tokens,
            "compaction_id": c.entry.id if c.entry else None,
            "summary_id": c.entry.id if c.entry else None,
            "summary_tokens": c.summary.tokens if c.summary else 0,
            "method": c.summary.method if c.summary else None,
            "reason": c.summary.reason if c.summary else "",
            "tokens_freed": c.tokens_freed,
            "kept_facts": list(c.kept_facts),
            "facts_not_kept": c.facts_not_kept,
        }
        return result(render_compaction(c, budget, stats), data)

    @app.tool(annotations=WRITES, description="Undo a compaction: its originals become live again.")
    @guarded("context_uncompact", audit)
    async def context_uncompact(
        session_id: SessionId,
        compaction_id: Annotated[str, Field(description="Summary id from context_compact")],
    ) -> CallToolResult:
        def work() -> CallToolResult:
            session = service.session(session_id)
            restored = session.uncompact(compaction_id)
            stats = session.stats()
            lines = [
                f"Undid compaction {compaction_id}: {len(restored)} entries are live again; "
                "the summary is retired (context_update on it with delete=false redoes the "
                "compaction).",
                bar(stats.live_tokens, budget),
            ]
            lines.extend("  " + preview(e) for e in restored[:20])
            if len(restored) > 20:
                lines.append(f"  … {len(restored) - 20} more: context_recall shows them")
            tip = advice(stats, budget)
            if tip:
                lines.append(tip)
            data = {
                "session_id": session.id,
                "compaction_id": compaction_id,
                "restored": [e.id for e in restored],
                "session_tokens": stats.live_tokens,
                "budget": budget,
            }
            return result("\n".join(lines), data)

        return await service.run(session_key(session_id), work)

    @app.tool(annotations=READ_ONLY, description="Session size, budget, token counting and advice.")
    @guarded("context_status", audit)
    async def context_status(session_id: SessionId) -> CallToolResult:
        def work() -> CallToolResult:
            session = service.session(session_id)
            s = session.stats()
            tip = advice(s, budget) or "Within budget."
            lines = [
                f"Session '{session.id}' ({session.title}): {s.live} live, "
                f"{s.superseded} superseded, {s.expired} expired, {s.deleted} deleted, "
                f"{s.pinned} pinned",
                bar(s.live_tokens, budget),
                f"Token counts: {service.counter.describe()}",
                f"Summaries: {service.summarizer.describe()}",
            ]
            lines.extend(f"Repaired: {r}" for r in s.repairs)
            if s.skipped_lines or s.orphan_patches:
                lines.append(
                    f"Storage: skipped {s.skipped_lines} unreadable lines, "
                    f"{s.orphan_patches} patches for unknown entries"
                )
            lines.append(tip)
            data = {
                **s.__dict__,
                "session_id": session.id,
                "budget": budget,
                "token_counts": service.counter.source,
                "token_ratio": service.counter.ratio,
                "summarizer": service.summarizer.describe(),
                "advice": tip,
            }
            return result("\n".join(lines), data)

        return await service.run(session_key(session_id), work)

    @app.tool(
        annotations=DESTROYS,
        description="Pin/unpin an entry, or delete it (delete=false restores it).",
    )
    @guarded("context_update", audit)
    async def context_update(
        session_id: SessionId,
        entry_id: str,
        pinned: bool | None = None,
        delete: bool | None = None,
    ) -> CallToolResult:
        def work() -> CallToolResult:
            entry = service.session(session_id).update(entry_id, pinned=pinned, deleted=delete)
            state = "deleted" if entry.deleted else ("pinned" if entry.pinned else "unpinned")
            return result(f"Entry {entry.id} is now {state}.\n{preview(entry)}", entry_data(entry))

        return await service.run(session_key(session_id), work)

    @app.tool(annotations=READ_ONLY, description="List sessions, newest first.")
    @guarded("context_list_sessions", audit)
    async def context_list_sessions() -> CallToolResult:
        def work() -> CallToolResult:
            infos = service.sessions.list()
            lines = [f"{len(infos)} sessions (newest first):"] + [
                f"  {i.id}: {i.title} (updated {_when(i.updated_at)})" for i in infos
            ]
            if not infos:
                lines = ["No sessions yet. Call context_open to start one."]
            data = {
                "sessions": [
                    {
                        "id": i.id,
                        "title": i.title,
                        "created_at": i.created_at,
                        "updated_at": i.updated_at,
                    }
                    for i in infos
                ]
            }
            return result("\n".join(lines), data)

        return await service.run("the session list", work)
