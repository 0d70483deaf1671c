"""Export files: sessions and documents as JSONL or Markdown, written and parsed back.

Pure functions over records and text (the formats: docs/operations.md). In Markdown only
the ``<!-- context-window/... -->`` comment lines and the fences are read back; every
other line starts with a fixed prefix, so entry text is never taken for structure.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from context_window.errors import InvalidInput
from context_window.journal import reject_constant
from context_window.localtime import local_time
from context_window.models import Entry
from context_window.sessions.records import entry_problem, patch_problem, time_problems

SESSION_FORMAT = "context-window/session"
DOCUMENT_FORMAT = "context-window/document"
VERSION = 1
FORMATS = ("jsonl", "md")

_COMMENT = re.compile(r"<!-- context-window/(session|document|entry|patch) (\{.*\}) -->")
_FENCE = re.compile(r"(`{3,})[^`]*")
_BACKTICKS = re.compile(r"`+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")


@dataclass(frozen=True)
class SessionArchive:
    """A parsed session export: its meta (id, title, created_at …) and journal records."""

    meta: dict[str, Any]
    records: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class DocumentArchive:
    """A parsed document export: its meta (id, title, source, sha256 …) and the full text."""

    meta: dict[str, Any]
    text: str


def invalid_record(record: Any, entry_ids: set[str]) -> str:
    """Why a journal record cannot be replayed ('' when it can); ``entry_ids`` grows."""
    if not isinstance(record, dict):
        return "not a JSON object"
    kind, rid = record.get("kind"), record.get("id")
    if kind == "entry":
        problem = entry_problem(record) or "; ".join(time_problems(record))
        if problem:
            return problem
        if rid in entry_ids:
            return f"a second entry with id {rid!r:.80}"
        entry_ids.add(str(rid))
        return ""
    if kind == "patch":
        patch = patch_problem(record)
        if patch:
            return patch
        if rid not in entry_ids:
            return f"a patch for an unknown entry {rid!r:.80}"
        return ""
    return f"unknown record kind {kind!r:.40}"


def _header(fmt: str, meta: Mapping[str, Any]) -> dict[str, Any]:
    """The header object: format and version first, then the meta fields."""
    rest = {k: v for k, v in meta.items() if k not in ("format", "version")}
    return {"format": fmt, "version": VERSION, **rest}


def _json_line(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def _comment(kind: str, obj: Any) -> str:
    """One HTML comment line holding JSON; '>' is escaped so it cannot close the comment."""
    body = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).replace(">", "\\u003e")
    return f"<!-- context-window/{kind} {body} -->\n"


def _oneline(text: str) -> str:
    """Decoration text on one line: control characters become spaces."""
    return _CONTROL.sub(" ", text).strip()


def _when(stamp: Any) -> str:
    return local_time(stamp, seconds=True, unknown="unknown time")


def fence_for(text: str) -> str:
    """A backtick fence longer than any backtick run in ``text`` (at least three)."""
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    return "`" * max(3, longest + 1)


def session_jsonl(meta: Mapping[str, Any], records: Iterable[dict[str, Any]]) -> Iterator[str]:
    """Lines of a session JSONL export."""
    yield _json_line(_header(SESSION_FORMAT, meta))
    for record in records:
        yield _json_line(record)


def entry_flags(entry: Entry | None) -> list[str]:
    """The states worth showing: pinned, superseded, deleted, expired."""
    if entry is None:
        return []
    names = ("pinned", "superseded", "deleted", "expired")
    return [name for name in names if getattr(entry, name)]


def session_markdown(
    meta: Mapping[str, Any], records: Iterable[dict[str, Any]], states: Mapping[str, Entry]
) -> Iterator[str]:
    """Lines of a session Markdown export; ``states`` (replayed entries) only decorate."""
    header = _header(SESSION_FORMAT, meta)
    yield _comment("session", header)
    yield f"# {_oneline(str(meta.get('title') or meta.get('id')))}\n\n"
    intro = (
        f"Session `{_oneline(str(meta.get('id')))}`, created {_when(meta.get('created_at'))}, "
        "exported by context-window: `context-window import FILE` reads it back. Each "
        "entry's metadata is in the HTML comment under its heading, its text in the fence."
    )
    yield "\n".join(textwrap.wrap(intro, 80, break_on_hyphens=False)) + "\n"
    for record in records:
        if record.get("kind") == "patch":
            changes = ", ".join(
                f"{k} {str(v).lower()}" for k, v in record.items() if k not in ("kind", "id")
            )
            yield f"\n_Change to `{_oneline(str(record.get('id')))}`: {_oneline(changes)}._\n\n"
            yield _comment("patch", record)
            continue
        text = str(record.get("text", ""))
        rest = {k: (None if k == "text" else v) for k, v in record.items()}
        eid = str(record.get("id"))
        flags = ", ".join(entry_flags(states.get(eid)))
        title = f"{_when(record.get('created_at'))} · {record.get('role', 'note')} · {eid}"
        yield f"\n## {_oneline(title)}{' · ' + flags if flags else ''}\n\n"
        yield _comment("entry", rest)
        tags = record.get("tags")
        if isinstance(tags, list) and tags:
            yield "\ntags: " + _oneline(", ".join(str(t) for t in tags)) + "\n"
        replaces = record.get("replaces")
        if isinstance(replaces, list) and replaces:
            yield (
                f"replaces: {len(replaces)} entries, "
                + _oneline(", ".join(str(r) for r in replaces))
                + "\n"
            )
        fence = fence_for(text)
        yield f"\n{fence}text\n{text}\n{fence}\n"


def document_jsonl(
    meta: Mapping[str, Any], text: str, chunks: Iterable[dict[str, Any]]
) -> Iterator[str]:
    """Lines of a document JSONL export: header, then chunk records carrying the gaps."""
    yield _json_line(_header(DOCUMENT_FORMAT, meta))
    covered = 0
    previous: dict[str, Any] | None = None
    for chunk in chunks:
        if previous is not None:
            yield _json_line(previous)
        start, end = int(chunk["start"]), int(chunk["end"])
        record = {k: v for k, v in chunk.items() if k not in ("before", "after")}
        if start > covered:
            record["before"] = text[covered:start]
        covered = max(covered, end)
        previous = record
    if previous is None:
        return
    if covered < len(text):
        previous["after"] = text[covered:]
    yield _json_line(previous)


def document_markdown(meta: Mapping[str, Any], text: str) -> Iterator[str]:
    """Lines of a document Markdown export: one header comment, then the text verbatim."""
    yield _comment("document", _header(DOCUMENT_FORMAT, meta))
    yield text


def parse(data: str, name: str = "the file") -> SessionArchive | DocumentArchive:
    """Parse an export of either kind and format; InvalidInput naming the first problem."""
    if data.startswith("\ufeff"):
        data = data[1:]
    end = data.find("\n")  # not partition: that would copy all the rest to test one line
    if end > 0 and data[end - 1] == "\r":  # saved with CRLF ends (Windows, git): undone
        data = data.replace("\r\n", "\n")
    first, _, rest = data.partition("\n")
    if first.startswith("{"):
        header = _load(first, name, 1)
        fmt = header.get("format")
        if fmt == SESSION_FORMAT:
            return _session_jsonl(header, rest, name)
        if fmt == DOCUMENT_FORMAT:
            return _document_jsonl(header, rest, name)
        raise InvalidInput(f"{name}: line 1 has format {fmt!r:.60}, not a context-window export")
    match = _COMMENT.fullmatch(first)
    if match is None or match[1] not in ("session", "document"):
        raise InvalidInput(
            f"{name} is not a context-window export: its first line is neither a JSON header "
            "nor a <!-- context-window/session|document {...} --> comment"
        )
    header = _checked_header(_load(match[2], name, 1), name)
    if match[1] == "document":
        return DocumentArchive(header, rest)
    return SessionArchive(header, tuple(_markdown_records(rest.split("\n"), name)))


def _load(text: str, name: str, line: int) -> dict[str, Any]:
    try:
        obj = json.loads(text, parse_constant=reject_constant)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{name}: line {line} is not valid JSON ({exc.msg})") from None
    except (ValueError, RecursionError):
        raise InvalidInput(
            f"{name}: line {line} is not valid JSON (NaN or nested too deep)"
        ) from None
    if not isinstance(obj, dict):
        raise InvalidInput(f"{name}: line {line} is not a JSON object")
    return obj


def _checked_header(header: dict[str, Any], name: str) -> dict[str, Any]:
    if header.get("version") != VERSION:
        raise InvalidInput(
            f"{name}: export version {header.get('version')!r:.20} is not supported "
            f"(this context-window reads version {VERSION})"
        )
    if not isinstance(header.get("id"), str):
        raise InvalidInput(f"{name}: the header has no id")
    return {k: v for k, v in header.items() if k not in ("format", "version")}


def _session_jsonl(header: dict[str, Any], rest: str, name: str) -> SessionArchive:
    meta = _checked_header(header, name)
    records: list[dict[str, Any]] = []
    for number, line in enumerate(rest.split("\n"), start=2):
        if line.strip():
            records.append(_load(line, name, number))
    _check_records(records, name)
    return SessionArchive(meta, tuple(records))


def _check_records(records: list[dict[str, Any]], name: str) -> None:
    seen: set[str] = set()
    for number, record in enumerate(records, start=1):
        problem = invalid_record(record, seen)
        if problem:
            raise InvalidInput(f"{name}: record {number} is {problem}; nothing was imported")


def _markdown_records(lines: list[str], name: str) -> list[dict[str, Any]]:
    """Entry and patch records from the lines after a Markdown session header."""
    records: list[dict[str, Any]] = []
    pending: dict[str, Any] | None = None
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 2
        match = _COMMENT.fullmatch(line)
        if pending is not None:
            fence = _FENCE.fullmatch(line)
            if fence is not None:
                close = next((j for j in range(i + 1, len(lines)) if lines[j] == fence[1]), None)
                if close is None:
                    raise InvalidInput(f"{name}: the fence opened on line {number} is not closed")
                pending["text"] = "\n".join(lines[i + 1 : close])
                records.append(pending)
                pending, i = None, close + 1
                continue
            if match is not None:
                raise InvalidInput(
                    f"{name}: entry {pending.get('id')!r:.80} has no fenced text "
                    f"before line {number}"
                )
        elif match is not None:
            if match[1] not in ("entry", "patch"):
                raise InvalidInput(f"{name}: line {number}: a second {match[1]} header")
            record = _load(match[2], name, number)
            if record.get("kind") != match[1]:
                raise InvalidInput(f"{name}: line {number}: the record's kind is not {match[1]}")
            if match[1] == "entry":
                pending = record
            else:
                records.append(record)
        i += 1
    if pending is not None:
        raise InvalidInput(f"{name}: entry {pending.get('id')!r:.80} has no fenced text")
    _check_records(records, name)
    return records


def _document_jsonl(header: dict[str, Any], rest: str, name: str) -> DocumentArchive:
    meta = _checked_header(header, name)
    parts: list[str] = []
    covered = 0
    index = 0
    for number, line in enumerate(rest.split("\n"), start=2):
        if not line.strip():
            continue
        rec = _load(line, name, number)
        text, start, end = rec.get("text"), rec.get("start"), rec.get("end")
        before, after = rec.get("before", ""), rec.get("after", "")
        if rec.get("index") != index:
            raise InvalidInput(f"{name}: line {number}: expected chunk {index}")
        if not (
            isinstance(text, str)
            and isinstance(start, int)
            and isinstance(end, int)
            and isinstance(before, str)
            and isinstance(after, str)
        ):
            raise InvalidInput(f"{name}: line {number}: chunk {index} is missing text/start/end")
        fits = start == covered + len(before) if before else start <= covered
        if not (fits and start >= 0 and end - start == len(text)):
            raise InvalidInput(
                f"{name}: line {number}: chunk {index} does not fit its start/end offsets"
            )
        parts += [before, text[min(len(text), max(0, covered - start)) :], after]
        covered = max(covered, end) + len(after)
        index += 1
    return DocumentArchive(meta, "".join(parts))
