"""How the document tools read: the compact text the model sees for each answer."""

from __future__ import annotations

from context_window.documents import answers
from context_window.documents.freshness import CHANGED, MISSING, SourceState
from context_window.documents.reingest import describe
from context_window.documents.summaries import DocSummary
from context_window.documents.tables import DocInfo, Ingested, Window, window_label
from context_window.localtime import local_time
from context_window.models import Count, Reserve
from context_window.packing import fit_lines, header_reserve
from context_window.retrieval.meaning import WORDS_ONLY
from context_window.service import Listed
from context_window.tokens import TokenCounter
from context_window.wording import plural


def render_ingest(done: Ingested) -> str:
    """doc_ingest's text: id, size, and what to call next."""
    d = done.doc
    if done.reused:
        return (
            f"Same content as doc {d.id} ({d.title}), already ingested: returned it, no copy "
            f"made. {d.chars:,} chars, ~{d.tokens:,} tokens, {plural(d.chunks, 'chunk')}.\n"
            f"next: doc_outline(doc_id={d.id!r}) / doc_search(query, doc_id={d.id!r})"
        )
    verb = "Replaced" if done.replaced else "Ingested"
    lines = [
        f"{verb} doc {d.id} ({d.title}): {d.chars:,} chars, ~{d.tokens:,} tokens, "
        f"{plural(d.chunks, 'chunk')} in {done.seconds:.1f}s."
    ]
    if done.kept is not None:
        lines.append(f"{describe(done.kept)}; cursor at {d.cursor}.")
    if done.duplicate_of:
        lines.append(f"Note: same content as doc {done.duplicate_of}.")
    lines.append(f"next: doc_outline(doc_id={d.id!r}) / doc_search(query, doc_id={d.id!r})")
    return "\n".join(lines)


def render_doc_line(d: DocInfo, state: SourceState, sessions: int) -> str:
    """One doc_list line, with a second line saying how to refresh a stale source."""
    cursors = f" (+{plural(sessions, 'session cursor')})" if sessions else ""
    line = (
        f"  {d.id}: {d.title} — {plural(d.chunks, 'chunk')}, ~{d.tokens:,} tokens, "
        f"cursor {d.cursor}{cursors}, ingested {local_time(d.created_at)}"
    )
    if state.state == CHANGED:
        line += (
            f"\n    STALE: source changed since ingest ({state.reason}); re-ingest with "
            f"doc_ingest(file_path={d.source!r}, doc_id={d.id!r})"
        )
    elif state.state == MISSING:
        line += f"\n    SOURCE MISSING: {d.source} is gone; this copy still works"
    return line


SEARCH_TIP = "Read on from a line: doc_window(doc_id, line=N)"


def search_header(
    hits: int, used: int, budget: int, omitted: int, terse: bool = False, words_only: bool = False
) -> str:
    """doc_search's first lines: what is shown, tokens, left out, words only, read on."""
    head = answers.search_header(hits, used, budget, omitted, terse)
    head += WORDS_ONLY if words_only else ""
    return head if terse else f"{head}\n{SEARCH_TIP}"


def window_header(
    doc_id: str,
    first: int,
    last: int,
    chunks: int,
    used: int,
    budget: int,
    next_call: str,
    truncated: bool,
    terse: bool = False,
) -> str:
    """doc_window's first line(s): the range, the tokens, and how to go on."""
    if terse:  # a budget too small for the full header
        return f"[{first}-{last}]/{chunks} · {used:,}/{budget:,}"
    head = f"{doc_id} [{first}-{last}] of {plural(chunks, 'chunk')} · {used:,}/{budget:,} tokens · "
    head += next_call
    if truncated:
        head += f"\nchunk {first} is over the budget: cut (raise budget_tokens to read it whole)"
    return head


def window_reserve(doc: DocInfo, session_id: str | None, budget: int, count: Count) -> Reserve:
    """Tokens doc_window keeps for its header (at its widest), and whether it must be terse."""
    big = int("9" * len(str(max(doc.chunks, 1))))
    used = int("9" * len(str(budget)))
    call = _next_call(doc.id, session_id, big, moved=False)  # the longer of the two
    return header_reserve(
        lambda terse: window_header(doc.id, big, big, doc.chunks, used, budget, call, True, terse),
        budget,
        count,
    )


def _next_call(doc_id: str, session_id: str | None, cursor: int, moved: bool = True) -> str:
    call = f"doc_id={doc_id!r}" + (f", session_id={session_id!r}" if session_id else "")
    if not moved:  # a read-only data dir: the cursor stayed, so the call must say where
        return f"next: doc_window({call}, from={cursor}) (read-only data dir: cursor not moved)"
    return f"next: doc_window({call}) from {cursor}"


def render_window(w: Window, budget: int, terse: bool = False, used: int | None = None) -> str:
    """doc_window's text: a header, then each chunk under its label (``used``: its size)."""
    d = w.doc
    if not w.chunks:
        return (
            f"end of document; reset=true to start over, or pass from=N "
            f"({d.id} has {plural(d.chunks, 'chunk')})"
        )
    first, last = w.chunks[0].index, w.chunks[-1].index
    then = "end of document" if w.at_end else _next_call(d.id, w.session_id, w.cursor, w.moved)
    used = w.used_tokens if used is None else used
    head = window_header(d.id, first, last, d.chunks, used, budget, then, w.truncated, terse)
    body = [c.text if terse else f"{window_label(c)}\n{c.text}" for c in w.chunks]
    return "\n\n".join([head, *body])


def render_summary(s: DocSummary) -> str:
    """doc_summarize's text: scope, method (and why), what was read, then the summary."""
    what = "whole document" if s.whole else f"chunks {s.first}-{s.last}"
    method = s.summary.method + (f" ({s.summary.reason})" if s.summary.reason else "")
    cached = " (cached; refresh=true recomputes)" if s.cached else ""
    return (
        f"Summary of {s.doc.id} ({s.doc.title}), {what}: {s.summary.tokens:,} tokens by "
        f"{method}{cached}. {s.note}.\n\n{s.summary.text}"
    )


def render_docs(listed: list[Listed], budget: int, counter: TokenCounter) -> str:
    """doc_list's text: a line per document, newest first, with stale sources flagged;
    past ``budget``, the newest that fit and how to reach the rest."""
    if not listed:
        return "No documents yet. Call doc_ingest(text=... or file_path=...)."
    header = f"{plural(len(listed), 'document')} (newest first):"
    lines = [render_doc_line(x.doc, x.state, len(x.cursors)) for x in listed]
    return fit_lines(header, lines, budget, counter, _more_documents)


def _more_documents(omitted: int) -> str:
    return f"{omitted:,} more did not fit: doc_search without doc_id searches every document"


def render_forget(doc: DocInfo) -> str:
    """doc_forget's text."""
    return f"Forgot doc {doc.id} ({doc.title}): its files, index and summaries are deleted."


def _span(first: int, last: int) -> str:
    return f"[{first}]" if first == last else f"[{first}-{last}]"


class OutlineText:
    """doc_outline's layout (see ``documents.outline.OutlineLayout``)."""

    def header(self, doc: DocInfo, shown: int, headless: bool) -> str:
        """The title, the chunks shown, the size and the cursor."""
        head = (
            f"{doc.title} ({doc.id}): chunks 0-{shown - 1} of {doc.chunks}, "
            f"~{doc.tokens:,} tokens, cursor at {doc.cursor}"
        )
        if headless:
            head += "\nNo headings: use doc_search, doc_window, or summarize=true."
        return head

    def run(self, first: int, last: int, trail: str, tokens: int | None) -> str:
        """``[a-b] trail — n tokens``."""
        line = f"{_span(first, last)} {trail or '(no heading)'}"
        return line if tokens is None else f"{line} — {tokens:,} tokens"

    def summarized(self, index: int, trail: str, tokens: int, summary: str) -> str:
        """``[i] trail — n tokens: summary``."""
        return f"[{index}] {trail or '-'} — {tokens:,} tokens: {summary}"

    def omitted(self, lines: int, budget: int) -> str:
        """How many lines did not fit, and what to call instead."""
        return (
            f"… {lines:,} more lines omitted to fit {budget} tokens "
            "(use max_chunks, doc_window or doc_search)"
        )

    def overview(self, doc: DocInfo | None) -> str:
        """Why a search shows an overview, and of what."""
        note = "No searchable words in the query (only stop words or symbols)."
        return f"{note} Outline of {doc.id}:" if doc is not None else f"{note} Documents:"

    def listed(self, doc: DocInfo) -> str:
        """A document in the overview of every document."""
        return f"{doc.id}: {doc.title} ({plural(doc.chunks, 'chunk')})"


class SearchText(OutlineText):
    """doc_search's layout (see ``service.SearchLayout``)."""

    reserve = staticmethod(answers.search_reserve)

    def no_match(self, doc_id: str | None) -> str:
        """Nothing matched."""
        where = f"document {doc_id}" if doc_id else "any document"
        return f"No line of {where} matches. Try other or fewer words."


class WindowText:
    """doc_window's layout (see ``service.WindowLayout``)."""

    label = staticmethod(window_label)
    reserve = staticmethod(window_reserve)


OUTLINE, SEARCH, WINDOW = OutlineText(), SearchText(), WindowText()
