"""Passages: a chunk's lines (or paragraphs, or a long line's sentences) as an answer
shows them, scored by BM25 plus half their neighbours' scores, with their shapes
(words once numbers, ids and addresses are masked)."""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import regex

from context_window.models import Chunk, Count, Hit
from context_window.retrieval.analyzer import WIDE_SENTENCE_END, plain
from context_window.retrieval.bm25 import K1, NEIGHBOUR_WEIGHT, B

LIKE_SHOWN = 5  # line numbers listed for the passages a shown one stands for
# A token holding a digit is masked in a shape: lines differing only in numbers share one.
_VARIABLE = re.compile(r"(?<![\w.:/@$+-])[\w.:/@$+-]*\d[\w.:/@$+-]*")
# The same for ASCII text, where spelling the classes out spares Unicode look-ups (~40 %).
_VARIABLE_ASCII = re.compile(
    r"(?<![A-Za-z0-9_.:/@$+-])[A-Za-z0-9_.:/@$+-]*[0-9][A-Za-z0-9_.:/@$+-]*"
)
_WORD = re.compile(r"[\w$]+")  # the index's raw words (the stdlib engine is faster here)
_NON_WORD_BYTES = bytes(
    c if chr(c).isascii() and (chr(c).isalnum() or chr(c) in "_$") else 0x20 for c in range(256)
)
_WORD_RUN = re.compile(r"[\w$]*")  # the rest of a raw word, from a position
# A sentence with the space after it: up to . ! or ? and a space, or a wide end (CJK).
_SENTENCE = regex.compile(rf".+?(?:(?<=[.!?])\s+(?=\S)|{WIDE_SENTENCE_END}\s*|$)", regex.DOTALL)
# Text that ends no sentence (minified JSON, a list, a line cut at a chunk's edge) and is
# too long breaks after " ", "," or ";"; a sentence is kept whole.
_ENDED = regex.compile(rf"(?:[.!?][\"')\]\u201d\u2019]*|{WIDE_SENTENCE_END})\s*$")
_BREAK = re.compile(r"(?<=[\s,;])(?=[^\s,;])")
# A line that opens with a word in lower case, as a wrapped sentence goes on (not a path,
# nor a label such as ``error:``, ``note:``, as compilers and git start their lines).
_PROSE_START = regex.compile(r"[ \t]*\p{Ll}[\p{L}\p{M}'\u2019-]*(?:[,;.!?)]*\s|[,;.!?)]*$)")
_NO_DIGITS = str.maketrans("", "", "0123456789")


@dataclass
class Passage:
    """Lines ``first..last`` of a document (1-based), as shown in an answer."""

    first: int
    last: int
    text: str
    doc: str = ""
    maybe: bool = True  # may hold a query term (else it is only context)
    terms: dict[str, int] = field(default_factory=dict)  # query terms held, with counts
    counted: bool = False  # ``terms`` and ``length`` are already known
    length: int = 0
    score: float = 0.0
    like: list[int] = field(default_factory=list)  # lines of same-shaped passages it stands for
    part: bool = False  # one of the pieces of a long line, which share its line number

    def render(self) -> str:
        """``first: text`` (``first-last:`` for several lines), with the lines it stands for."""
        where = str(self.first) if self.first == self.last else f"{self.first}-{self.last}"
        out = f"{where}: {self.text}"
        if self.like:
            shown = ", ".join(map(str, self.like[:LIKE_SHOWN]))
            more = ", …" if len(self.like) > LIKE_SHOWN else ""
            out += f" (+{len(self.like)} like it: lines {shown}{more})"
        return out


def split_passages(chunk: Chunk, max_tokens: int, count: Count) -> list[Passage]:
    """A chunk's passages: lines, wrapped paragraphs joined, long lines' sentences."""
    out: list[Passage] = []
    base = max(chunk.line, 1)
    run: list[tuple[int, str]] = []

    def close() -> None:
        if not run:
            return
        text = "\n".join(t for _, t in run)
        if 2 * len(text) <= max_tokens or count(text) <= max_tokens:  # see _sentences
            out.append(Passage(run[0][0], run[-1][0], text))
        else:
            for number, line in run:
                out.extend(_sentences(number, line, max_tokens, count))
        run.clear()

    for k, line in enumerate(chunk.text.split("\n")):
        line = line.rstrip("\r")
        if not line.strip():
            close()
            continue
        if run and not _continues(run[-1][1], line):
            close()
        run.append((base + k, line))
    close()
    return out


def _continues(previous: str, line: str) -> bool:
    """Whether ``line`` reads as the wrapped continuation of ``previous``: after an open
    line, it opens with a word in lower case (not a path), and not with the first word of
    ``previous``, as records do (``cc -c a.c`` over ``cc -c b.c``, ``sshd[1]:`` over
    ``sshd[2]:``)."""
    return (
        _PROSE_START.match(line) is not None
        and previous.rstrip()[-1:] not in ".!?:;)]}>\"'"
        and _first_word(line) != _first_word(previous)
    )


def _first_word(line: str) -> str:
    words = line.split(None, 1)
    return words[0].translate(_NO_DIGITS) if words else ""


def _wrapped(text: str) -> bool:
    """Whether ``text`` holds hard-wrapped prose: a line that continues the one before."""
    for m in _WRAPPED.finditer(text):
        at = text.index("\n", m.start())
        end = text.find("\n", at + 1)
        line = text[at + 1 : end if end >= 0 else len(text)]
        if _continues(text[text.rfind("\n", 0, at) + 1 : at], line):
            return True
    return False


def _sentences(number: int, line: str, max_tokens: int, count: Count) -> list[Passage]:
    """A long line as runs of whole sentences, each within ``max_tokens`` where it can be;
    longer text that ends no sentence as runs, half as long, of the pieces ``_BREAK`` cuts
    it into, so that one fits beside its hit's header."""
    # An estimate never exceeds 2 tokens a character (the highest ratio calibration accepts).
    if 2 * len(line) <= max_tokens or count(line) <= max_tokens:
        return [Passage(number, number, line)]
    out: list[Passage] = []
    run = ""
    for sentence in _SENTENCE.findall(line):
        long = 2 * len(sentence) > max_tokens and count(sentence) > max_tokens
        long = long and not _ENDED.search(sentence)
        limit = max_tokens // 2 if long else max_tokens  # room for the hit's header
        for piece in _BREAK.split(sentence) if long else (sentence,):
            if run and count((run + piece).rstrip()) > limit:
                out.append(Passage(number, number, run.rstrip()))
                run = piece
            else:
                run += piece
    if run:
        out.append(Passage(number, number, run.rstrip()))
    for p in out if len(out) > 1 else ():
        p.part = True
    return out


def shape(text: str) -> str:
    """The passage lowercased, tokens holding a digit masked, spaces collapsed."""
    low = text.lower()
    return " ".join((_VARIABLE_ASCII if low.isascii() else _VARIABLE).sub("#", low).split())


_ZERO_DIGITS = bytes.maketrans(b"123456789", b"000000000")


def _digit_twins_key(text: str) -> bytes:
    """One key for texts that differ only in their digits (each digit made 0)."""
    return text.encode("utf-8", "surrogatepass").translate(_ZERO_DIGITS)


class Shapes:
    """``shape`` for many passages, once per text up to its digits."""

    def __init__(self) -> None:
        self._known: dict[bytes, str] = {}

    def __call__(self, text: str) -> str:
        key = _digit_twins_key(text)
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = shape(text)
        return found


def word_count(text: str) -> int:
    """How many raw words (runs of ``[\\w$]``) ``text`` holds, as the index counts them."""
    if text.isascii():  # every other byte becomes a space: a C-speed count
        return len(text.encode("ascii").translate(_NON_WORD_BYTES).split())
    return len(_WORD.findall(text))


class Scorer:
    """BM25 of passages for one query with the index's idf, each distinct word read once."""

    def __init__(
        self,
        query: Sequence[str],
        idf: dict[str, float],
        expand: Callable[[str], tuple[str, ...]],
    ) -> None:
        self.idf = idf
        self._wanted = set(query)
        self._expand = expand
        self._matches: dict[str, tuple[str, ...]] = {}
        self._counted: dict[tuple[str, ...], dict[str, int]] = {}
        self._lines: dict[str | bytes, tuple[dict[str, int], int]] = {}
        self._digit_blind = not any(c.isdigit() for t in query for c in t)
        # Longest first, so a key that begins another does not hide it.
        alternatives = sorted(prefilter(query), key=len, reverse=True)
        keys = "|".join(map(re.escape, alternatives)) or "(?!)"
        self._key_word = re.compile(f"(?:{keys})[\\w$]*")  # a key and the rest of its word
        self.average = 0.0

    def may_match(self, text: str) -> bool:
        """Whether ``text`` holds a key (a query term may be there)."""
        return self._key_word.search(unicodedata.normalize("NFKC", text).lower()) is not None

    def terms_of(self, text: str) -> dict[str, int]:
        """The query terms in ``text``, with their counts (as the index's analyzer finds them)."""
        text = plain(unicodedata.normalize("NFKC", text))  # the analyzer's form
        low = text.lower()
        if len(low) != len(text):  # lowercasing moved the offsets: read every word
            return self.count(_WORD.findall(text))
        words: list[str] = []
        back = ""
        for m in self._key_word.finditer(low):
            start = at = m.start()
            if at and ((c := low[at - 1]).isalnum() or c in "_$"):  # the key is inside a word
                back = back or low[::-1]  # read the word's start backwards
                start = len(low) - _WORD_RUN.match(back, len(low) - at).end()  # type: ignore[union-attr]
            words.append(text[start : m.end()])
        return self.count(words) if words else {}

    def line_terms(self, line: str) -> tuple[dict[str, int], int]:
        """A line's query terms and raw word count, shared by lines differing in digits."""
        key: str | bytes = line
        if self._digit_blind:
            key = _digit_twins_key(line)
        found = self._lines.get(key)
        if found is None:
            found = self._lines[key] = (self.terms_of(line), word_count(line))
        return found

    def count(self, words: list[str]) -> dict[str, int]:
        """The query terms ``words`` yield, counted (shared: not to be changed)."""
        key = tuple(words)
        found = self._counted.get(key)
        if found is not None:
            return found
        matches, wanted = self._matches, self._wanted
        found = {}
        for w in words:
            hit = matches.get(w)
            if hit is None:
                hit = matches[w] = tuple(t for t in self._expand(w) if t in wanted)
            for t in hit:
                found[t] = found.get(t, 0) + 1
        self._counted[key] = found
        return found

    def count_terms(self, passages: Sequence[Passage]) -> None:
        """Fill in each passage's length and the query terms it holds."""
        for p in passages:
            if p.counted:
                continue
            if p.maybe:
                p.length = word_count(p.text)
                p.terms = self.terms_of(p.text)
            else:  # context only: its length just shapes the average
                p.length = len(p.text.split())

    def score(self, passages: Sequence[Passage]) -> None:
        """Each passage's own BM25 score (after ``count_terms``; the first call sets the mean)."""
        if not self.average and passages:
            self.average = max(1.0, sum(p.length for p in passages) / len(passages))
        known: dict[tuple[int, int], float] = {}  # lines read once (see line_terms) score once
        for p in passages:
            if not p.terms:
                p.score = 0.0
                continue
            key = (id(p.terms), p.length)
            score = known.get(key)
            if score is None:
                norm = K1 * (1.0 - B + B * p.length / self.average)
                score = known[key] = sum(
                    self.idf.get(t, 0.0) * tf * (K1 + 1.0) / (tf + norm)
                    for t, tf in p.terms.items()
                )
            p.score = score


# An open line then one in lower case: hard-wrapped prose, read by whole paragraphs.
_WRAPPED = regex.compile(r"[^.!?:;)\]}>\"'\s]\r?\n[ \t]*\p{Ll}")


def prefilter(query: Sequence[str]) -> tuple[str, ...]:
    """Lowercase strings one of which every word yielding a query term contains: a
    Snowball stem less its last letter (rare irregular stems aside); matches are checked
    exactly afterwards."""
    return tuple(sorted({t[:-1] if len(t) > 3 else t for t in query}))


@dataclass
class Group:
    """One candidate chunk's passages in line order; ``full`` when every line is there."""

    hit: Hit
    passages: list[Passage]
    full: bool

    @cached_property
    def lines(self) -> list[str]:
        """The chunk's lines."""
        return self.hit.chunk.text.split("\n")


def candidate_passages(
    hits: Sequence[Hit],
    share: int,
    count: Count,
    scorer: Scorer,
    seen: set[tuple[str, int]],
) -> list[Group]:
    """Per hit, its passages near a possible match, scored; lines in ``seen`` are left
    out. A chunk of records yields the lines that may match and their neighbours; prose
    is split whole."""
    groups: list[Group] = []
    for hit in hits:
        text = hit.chunk.text
        if not scorer.may_match(text):
            groups.append(Group(hit, [], False))
            continue
        full = _wrapped(text)
        found = (
            split_passages(hit.chunk, share, count)
            if full
            else _near(hit.chunk, share, count, scorer)
        )
        fresh = [p for p in found if (hit.doc_id, p.first) not in seen]
        for p in fresh:
            p.doc = hit.doc_id
            seen.add((hit.doc_id, p.first))
        groups.append(Group(hit, fresh, full))
    flat = [p for g in groups for p in g.passages]
    scorer.count_terms(flat)
    scorer.score(flat)
    return groups


def every_passage(chunk: Chunk, share: int, count: Count) -> list[Passage]:
    """All of a chunk's passages, as ``candidate_passages`` splits them for any query."""
    if _wrapped(chunk.text):
        return split_passages(chunk, share, count)
    base = max(chunk.line, 1)
    lines = (line.rstrip("\r") for line in chunk.text.split("\n"))
    return [
        p
        for i, line in enumerate(lines)
        if line.strip()
        for p in _sentences(base + i, line, share, count)
    ]


def _near(chunk: Chunk, share: int, count: Count, scorer: Scorer) -> list[Passage]:
    """The lines of a chunk of records holding a query term, and the lines beside them."""
    lines = chunk.text.split("\n")
    found = [scorer.line_terms(line) for line in lines]
    base = max(chunk.line, 1)
    last = len(lines) - 1
    out: list[Passage] = []
    for i, line in enumerate(lines):
        terms, length = found[i]
        near = terms or (i and found[i - 1][0]) or (i < last and found[i + 1][0])
        if not near or not line.strip():
            continue
        line = line.rstrip("\r")
        if 2 * len(line) <= share:  # short enough to be one passage (see _sentences)
            p = Passage(base + i, base + i, line, maybe=bool(terms), counted=True)
            p.terms, p.length = terms, length if terms else len(line.split())
            out.append(p)
            continue
        for p in _sentences(base + i, line, share, count):
            p.maybe = bool(terms)
            out.append(p)
    return out


def surroundings(
    group: Group, shown: Sequence[Passage]
) -> list[tuple[int, int, Passage | int, int]]:
    """``(distance, line, what, characters)`` per line not shown (``what``: ``materialize``)."""
    firsts = sorted(p.first for p in shown)
    taken = set(firsts)
    if group.full:
        rest = [p for p in group.passages if p.first not in taken]
        far = _distances([p.first for p in rest], firsts)
        return [(d, p.first, p, len(p.text)) for d, p in zip(far, rest, strict=True)]
    base = max(group.hit.chunk.line, 1)
    lines = [
        (base + i, i, len(line))
        for i, line in enumerate(group.lines)
        if base + i not in taken and line.strip()
    ]
    far = _distances([at for at, _, _ in lines], firsts)
    return [(d, at, i, size) for d, (at, i, size) in zip(far, lines, strict=True)]


def _distances(numbers: Sequence[int], marks: Sequence[int]) -> list[int]:
    """Each of ``numbers``'s distance to the nearest of ascending ``marks``: the two
    either side of where it would go."""
    sides = (marks[max(0, j - 1) : j + 1] for j in (bisect.bisect_left(marks, x) for x in numbers))
    return [min(abs(x - m) for m in near) for x, near in zip(numbers, sides, strict=True)]


def materialize(group: Group, what: Passage | int, share: int, count: Count) -> list[Passage]:
    """The passages of one surrounding line (see ``surroundings``)."""
    if isinstance(what, Passage):
        return [what]
    base = max(group.hit.chunk.line, 1)
    line = group.lines[what].rstrip("\r")
    out = _sentences(base + what, line, share, count)
    for p in out:
        p.doc = group.hit.doc_id
    return out


def smooth(groups: Sequence[Group]) -> None:
    """Each passage gains ``NEIGHBOUR_WEIGHT`` x the own scores of the passages beside it."""
    for group in groups:
        ps = group.passages
        own = [p.score for p in ps]
        for i, p in enumerate(ps):
            near = 0.0
            if i > 0 and (group.full or ps[i - 1].last + 1 == p.first):
                near += own[i - 1]
            if i + 1 < len(ps) and (group.full or p.last + 1 == ps[i + 1].first):
                near += own[i + 1]
            p.score = own[i] + NEIGHBOUR_WEIGHT * near
