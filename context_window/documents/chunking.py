"""Structure-aware splitting of a document into chunks under a heading trail.

Blocks (fenced code kept whole, ATX headings, paragraphs) are packed greedily into
chunks of at most ``target_tokens``; a heading closes a chunk at least half full, and
an oversized block is packed by lines, an oversized line cut at whitespace. A chunk
starts with up to ``overlap_tokens`` of the last one's trailing blocks. Every chunk is
``source[start:end]`` trimmed; together they cover every non-blank character. Block
costs (plus ``ratio`` per whitespace character) bound the joined estimate from above.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from itertools import pairwise
from typing import NamedTuple

from context_window.errors import InvalidInput
from context_window.models import Chunk
from context_window.tokens import estimate, longest_prefix

# A line that may open or close a block: blank, a fence, or an ATX heading.
_MARK = re.compile(r"\n(?=[^\S\n]*(?:\n|\Z)| {0,3}(?:```|~~~|#{1,6}[ \t]))")
_KIND = re.compile(
    r"(?P<blank>[^\S\n]*(?:\n|\Z))"
    r"|(?P<fence> {0,3}(?P<ch>`{3,}|~{3,}))"
    r"| {0,3}(?P<hashes>#{1,6})[ \t]"
)
_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+$")
_NONSPACE = re.compile(r"\S")
BOM = "\ufeff"  # a byte order mark, as Windows tools write UTF-8: it opens no line

_BLOCK, _LINES, _PART = 0, 1, 2


class _Seg(NamedTuple):
    """A piece of a chunk: a whole block, a run of whole lines, or part of a line."""

    start: int
    end: int
    cost: float
    kind: int
    trail: str
    head: bool


# A heading trail is copied into each chunk under it, so trails are capped.
MAX_HEADING_CHARS = 100  # one heading in a trail
MAX_TRAIL_CHARS = 240  # the whole trail; outer headings give way to inner ones


def heading_trail(headings: list[str]) -> str:
    """``A > B > C``, each heading and the whole within their caps, cut with an ellipsis."""
    parts = [
        h if len(h) <= MAX_HEADING_CHARS else h[: MAX_HEADING_CHARS - 1] + "…" for h in headings
    ]
    text = " > ".join(parts)
    while len(text) > MAX_TRAIL_CHARS and len(parts) > 1:
        parts = parts[1:]
        text = "… > " + " > ".join(parts)
    return text


def chunk_text(
    text: str, target_tokens: int = 800, overlap_tokens: int = 80, ratio: float = 0.27
) -> list[Chunk]:
    """Split ``text`` into ordered chunks of about ``target_tokens`` under heading trails."""
    if target_tokens < 1:
        raise InvalidInput(f"chunk size must be at least 1 token, not {target_tokens}")
    if not 0 <= overlap_tokens < target_tokens:
        raise InvalidInput(
            f"chunk overlap must be >= 0 and < the chunk size ({target_tokens}), "
            f"not {overlap_tokens}"
        )
    if not (math.isfinite(ratio) and ratio > 0):
        raise InvalidInput(f"token ratio must be a positive number, not {ratio}")
    packer = _Packer(text, target_tokens, overlap_tokens, ratio)
    for start, end, head, trail in _blocks(text):
        packer.block(start, end, head, trail)
    return packer.finish()


def _blocks(text: str) -> Iterator[tuple[int, int, bool, str]]:
    """Yield ``(start, end, is_heading, heading_trail)`` for each block of ``text``."""
    n = len(text)
    trail: list[tuple[int, str]] = []
    trail_text = ""
    para = -1  # start of the paragraph being gathered, if any
    first = pos = int(text.startswith(BOM))  # always the start of a line; a BOM is no text
    while pos < n:
        if pos == first and _KIND.match(text, first):
            ls = first
        else:
            mark = _MARK.search(text, max(pos - 1, 0))
            ls = mark.end() if mark else n
        if ls > pos and para < 0:
            para = pos
        if ls >= n:
            break
        kind = _KIND.match(text, ls)
        assert kind is not None  # _MARK only stops where _KIND matches
        eol = text.find("\n", ls)
        eol = n if eol < 0 else eol
        fence = kind["ch"]
        if fence and fence[0] == "`" and "`" in text[kind.end() : eol]:
            if para < 0:  # an inline code span, not a fence: ordinary text
                para = ls
            pos = eol + 1
            continue
        if para >= 0:
            end = _rtrim(text, para, ls)
            if end > para:  # all blank in the Unicode sense: nothing to keep
                yield para, end, False, trail_text
            para = -1
        if kind["hashes"]:
            level = len(kind["hashes"])
            title = _CLOSING_HASHES.sub("", text[kind.end() : eol].strip()).strip()
            while trail and trail[-1][0] >= level:
                trail.pop()
            trail.append((level, title))
            trail_text = heading_trail([t for _, t in trail if t])
            yield ls, _rtrim(text, ls, eol), True, trail_text
            pos = eol + 1
        elif fence:
            end = _fence_end(text, eol, fence)
            yield ls, _rtrim(text, ls, end), False, trail_text
            pos = end + 1
        else:
            pos = eol + 1
    if para >= 0:
        end = _rtrim(text, para, n)
        if end > para:
            yield para, end, False, trail_text


def _fence_end(text: str, eol: int, fence: str) -> int:
    """End of the line closing ``fence`` opened on the line ending at ``eol``; else EOF."""
    closing = re.compile(rf"\n {{0,3}}{fence[0]}{{{len(fence)},}}[^\S\n]*(?=\n|\Z)")
    found = closing.search(text, eol)
    return found.end() if found else len(text)


def _rtrim(text: str, start: int, end: int) -> int:
    """``end`` moved back over trailing whitespace, not before ``start``."""
    while end > start:
        window = text[max(start, end - 256) : end]
        kept = len(window.rstrip())
        if kept:
            return end - len(window) + kept
        end -= len(window)
    return start


def _cost_of(ratio: float, segs: list[_Seg]) -> float:
    """Packing cost of consecutive segments: their costs plus the whitespace between."""
    gaps = sum(b.start - a.end for a, b in pairwise(segs))
    return sum(s.cost for s in segs) + gaps * ratio


class _Packer:
    """Greedy packing state for one ``chunk_text`` call."""

    def __init__(self, text: str, target: int, overlap: int, ratio: float) -> None:
        self.text, self.target, self.overlap, self.ratio = text, target, overlap, ratio
        self.low_rate = min(ratio, 1.0)  # no character estimates below this
        self.chunks: list[Chunk] = []
        self.cur: list[_Seg] = []
        self.fresh = 0  # index in cur of the first segment not carried as overlap
        self.fill = 0.0
        self.carried = 0.0  # the part of fill that is overlap
        self.memo = (0, 0, 0)  # (start, end, estimate) of the last chunk text estimated

    def block(self, start: int, end: int, head: bool, trail: str) -> None:
        """Add one block: whole if it fits a chunk, else by lines."""
        if (end - start) * self.low_rate <= self.target:
            cost = estimate(self.text[start:end], self.ratio)
            if cost <= self.target:
                self._piece(_Seg(start, end, cost, _BLOCK, trail, head))
                return
        self._lines(start, end, head, trail)

    def finish(self) -> list[Chunk]:
        """Emit the last chunk and return them all."""
        if len(self.cur) > self.fresh:
            self._emit(self.cur)
        return self.chunks

    def _piece(self, seg: _Seg) -> None:
        """Add a segment no larger than a chunk, closing the current chunk if needed."""
        if len(self.cur) > self.fresh:
            half_full = seg.head and self.fill - self.carried >= self.target / 2
            if half_full or self._room(seg.start) < seg.cost:
                self._close(seg.start, seg.cost)
        if self.cur and len(self.cur) == self.fresh and self._room(seg.start) < seg.cost:
            self._reset()  # the carried overlap leaves no room for this piece
        self._add(seg)

    def _lines(self, start: int, end: int, head: bool, trail: str) -> None:
        """Pack an oversized block by whole lines, a chunk at a time."""
        text, p = self.text, start
        while p < end:
            eol = text.find("\n", p, end)
            eol = end if eol < 0 else eol
            q, cost = self._fit(p, end, eol)
            if q < 0:  # not even the first line fits here
                first = estimate(text[p:eol], self.ratio)
                if first > self.target:
                    for part in self._parts(p, eol, head, trail):
                        self._piece(part)
                else:
                    self._piece(_Seg(p, eol, first, _LINES, trail, head))
                head = False
                p = self._next_line(eol, end)
                continue
            before = self.fill
            self._add(_Seg(p, q, cost - before, _LINES, trail, head))
            self.fill = cost  # the exact estimate of the chunk so far
            head = False
            p = self._next_line(q, end)
            if p < end:
                eol = text.find("\n", p, end)
                self._close(p, estimate(text[p : end if eol < 0 else eol], self.ratio))

    def _fit(self, p: int, end: int, eol: int) -> tuple[int, int]:
        """Last line end from ``p`` such that the chunk up to it fits, with its cost; or -1."""
        text, target = self.text, self.target
        base = self.cur[0].start if self.cur else p
        limit = base + int(target / self.low_rate) + 1  # + 1: the estimate decides
        if eol > limit:
            return -1, 0
        q = end if limit >= end else text.rfind("\n", p, limit + 1)
        while True:
            trimmed = _rtrim(text, base, q)
            cost = estimate(text[base:trimmed], self.ratio)
            if cost <= target:
                self.memo = (base, trimmed, cost)
                return q, cost
            if q == eol:
                return -1, 0
            limit = base + int((q - base) * target / cost)
            q = max(text.rfind("\n", p, limit + 1), eol)

    def _parts(self, start: int, end: int, head: bool, trail: str) -> Iterator[_Seg]:
        """Cut one oversized line into pieces within the target, at whitespace if possible."""
        text, ratio, target = self.text, self.ratio, self.target
        found = _NONSPACE.search(text, start, end)
        p = found.start() if found else end
        while p < end:
            n = min(end - p, max(1, int(target / self.low_rate)))
            if estimate(text[p : p + n], ratio) > target:  # at least one char
                n = longest_prefix(text, p, p + n - 1, target, ratio)
            q = p + n
            if q < end:
                piece = text[p:q]
                space = max(piece.rfind(" "), piece.rfind("\t"))
                if space > n // 2:
                    q = p + space
            q = _rtrim(text, p, q)
            yield _Seg(p, q, estimate(text[p:q], ratio), _PART, trail, head)
            head = False
            found = _NONSPACE.search(text, q, end)
            p = found.start() if found else end

    def _next_line(self, q: int, end: int) -> int:
        """Start of the first non-blank line after position ``q``, or ``end``."""
        found = _NONSPACE.search(self.text, q, end)
        if not found:
            return end
        return max(self.text.rfind("\n", q, found.start()) + 1, q)

    def _room(self, start: int) -> float:
        if not self.cur:
            return float(self.target)
        return self.target - self.fill - (start - self.cur[-1].end) * self.ratio

    def _add(self, seg: _Seg) -> None:
        if self.cur:
            self.fill += (seg.start - self.cur[-1].end) * self.ratio
        self.fill += seg.cost
        self.cur.append(seg)

    def _reset(self, segs: list[_Seg] | None = None, fresh: int = 0) -> None:
        self.cur = segs or []
        self.fresh = fresh if self.cur else 0
        self.fill = self._cost(self.cur)
        self.carried = self._cost(self.cur[: self.fresh])

    def _cost(self, segs: list[_Seg]) -> float:
        return _cost_of(self.ratio, segs)

    def _close(self, next_start: int, next_cost: float) -> None:
        """Emit the current chunk and start the next with overlap (and any dangling headings)."""
        cur, fresh = self.cur, self.fresh
        k = len(cur)
        while k - 1 > fresh and cur[k - 1].head and cur[k - 1].kind == _BLOCK:
            k -= 1
        nxt = _Seg(next_start, next_start, next_cost, _BLOCK, "", False)
        moved = cur[k:]
        if moved and self._cost([*moved, nxt]) > self.target:
            moved, k = [], len(cur)
        done = cur[:k] if moved else cur
        self._emit(done)
        after = _cost_of(self.ratio, [*moved, nxt])
        room = self.target - after - ((moved or [nxt])[0].start - done[-1].end) * self.ratio
        carry = self._carry(done, min(self.overlap, room)) if self.overlap else []
        while carry and self._cost([*carry, *moved, nxt]) > self.target:
            carry.pop(0)
        self._reset(carry + moved, len(carry))

    def _carry(self, segs: list[_Seg], room: float) -> list[_Seg]:
        """Trailing whole blocks or lines of ``segs`` within ``room``, never all of them."""
        out: list[_Seg] = []
        for i in range(len(segs) - 1, self.fresh - 1, -1):
            seg = segs[i]
            gap = (out[0].start - seg.end) * self.ratio if out else 0.0
            if seg.kind == _LINES:
                tail = self._tail(seg, room - gap, whole=i > 0)
                if tail is None:
                    break
                out.insert(0, tail)
                room -= tail.cost + gap
                if tail.start != seg.start:
                    break
            elif seg.kind == _BLOCK and i > 0 and seg.cost + gap <= room:
                out.insert(0, seg)
                room -= seg.cost + gap
            else:
                break
        return out

    def _tail(self, seg: _Seg, room: float, whole: bool) -> _Seg | None:
        """The trailing whole lines of a run within ``room``; its first line only if ``whole``."""
        text, end = self.text, seg.end
        p = seg.start if whole else text.find("\n", seg.start, end) + 1
        if p <= 0 or room <= 0:
            return None
        shortest = end - int(room / self.low_rate)  # any longer tail is over the room
        if shortest > p:
            p = text.find("\n", shortest - 1, end) + 1
        while p > 0:
            p = self._next_line(p - 1, end)
            if p >= end:
                return None
            cost = estimate(text[p:end], self.ratio)
            if cost <= room:
                return seg._replace(start=p, cost=cost, head=False)
            limit = end - int((end - p) * room / cost)
            p = text.find("\n", max(limit - 1, p), end) + 1
        return None

    def _emit(self, segs: list[_Seg]) -> None:
        """Append the chunk spanning ``segs``, trimmed, with its real token estimate."""
        start, text = segs[0].start, self.text
        end = _rtrim(text, start, segs[-1].end)
        body = text[start:end]
        base, last, tokens = self.memo  # _fit often estimated exactly this text already
        if (base, last) != (start, end):
            tokens = estimate(body, self.ratio)
        heading = segs[self.fresh].trail
        self.chunks.append(Chunk(len(self.chunks), body, tokens, start, end, heading))
