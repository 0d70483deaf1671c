"""Outlines fitted to a budget: a document's, and a search's overview with no words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from context_window.documents.store import DocumentStore
from context_window.documents.tables import DocInfo
from context_window.models import Count, Reserve
from context_window.packing import fit_lines
from context_window.tokens import TokenCounter

Run = tuple[int, int, str, int]  # first chunk, last chunk, heading trail, tokens


class OutlineLayout(Protocol):
    """The words of an outline: its header, its lines, and the note on what did not fit."""

    def header(self, doc: DocInfo, shown: int, headless: bool) -> str:
        """The first line(s): ``shown`` chunks of ``doc``; ``headless`` if none has a heading."""
        ...

    def run(self, first: int, last: int, trail: str, tokens: int | None) -> str:
        """One line for chunks ``first``-``last`` under ``trail`` (``tokens`` None: no size)."""
        ...

    def summarized(self, index: int, trail: str, tokens: int, summary: str) -> str:
        """One line for a chunk with its one-line summary."""
        ...

    def omitted(self, lines: int, budget: int) -> str:
        """The closing note: ``lines`` lines did not fit ``budget``."""
        ...

    def overview(self, doc: DocInfo | None) -> str:
        """The header of a search's overview: of ``doc``, or of every document (None)."""
        ...

    def listed(self, doc: DocInfo) -> str:
        """One document in a search's overview of every document."""
        ...


class SearchLayout(OutlineLayout, Protocol):
    """What an edge puts around search hits, and its words for no answer."""

    def reserve(self, budget: int, count: Count) -> Reserve:
        """The header's widest size."""
        ...

    def no_match(self, doc_id: str | None) -> str:
        """The answer when no line matches (in ``doc_id``, or in any document)."""
        ...


@dataclass(frozen=True)
class Outline:
    """A document's outline: the chunks it covers and its text, fitted to ``budget``."""

    doc: DocInfo
    entries: list[tuple[int, str, int]]  # (chunk, heading trail, tokens) of the chunks covered
    text: str
    budget: int


def collapse(entries: list[tuple[int, str, int]]) -> list[Run]:
    """Runs of consecutive chunks with the same heading trail: (first, last, trail, tokens)."""
    runs: list[Run] = []
    for i, trail, tokens in entries:
        if runs and runs[-1][2] == trail and runs[-1][1] == i - 1:
            first, _, _, total = runs[-1]
            runs[-1] = (first, i, trail, total + tokens)
        else:
            runs.append((i, i, trail, tokens))
    return runs


def fit_outline(
    doc: DocInfo,
    entries: list[tuple[int, str, int]],
    summaries: dict[int, str] | None,
    budget: int,
    counter: TokenCounter,
    layout: OutlineLayout,
) -> Outline:
    """The outline of ``entries`` (a line per chunk with ``summaries``, else per run)."""
    if summaries is not None:
        lines = [layout.summarized(i, t, n, summaries[i]) for i, t, n in entries]
    else:
        lines = [layout.run(a, b, t, n) for a, b, t, n in collapse(entries)]
    headless = summaries is None and all(not t for _, t, _ in entries)
    header = layout.header(doc, len(entries), headless)
    text = fit_lines(header, lines, budget, counter, lambda n: layout.omitted(n, budget))
    return Outline(doc, entries, text, budget)


def overview(
    store: DocumentStore,
    doc_id: str | None,
    budget: int,
    counter: TokenCounter,
    layout: OutlineLayout,
) -> str:
    """A search with no searchable words: the document's outline, or every document."""
    if doc_id is not None:
        doc = store.get(doc_id)
        lines = [layout.run(a, b, t, None) for a, b, t, _ in collapse(store.outline(doc))]
        header = layout.overview(doc)
    else:
        lines = [layout.listed(d) for d in store.all()] or ["none"]
        header = layout.overview(None)
    return fit_lines(header, lines, budget, counter, lambda n: layout.omitted(n, budget))
