"""Doctor: audit a data dir without changing it, one line per problem found.

Every session log is replayed and every document checked as the server reads them, but
reported instead of skipped. Nothing is repaired; each log's lock is taken while it is
read, so a line being written is never taken for a torn one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from context_window.documents.checks import load_array, meta_problem, summary_problem
from context_window.documents.index import INDEX_VERSION, OldIndex
from context_window.documents.tables import INDEX_ARRAYS, Tables
from context_window.errors import StorageError
from context_window.journal import REWRITE, Journal, parse_line
from context_window.sessions.records import entry_problem, patch_problem, time_problems
from context_window.storage import (
    CHOOSE_ANOTHER,
    is_valid_id,
    read_json,
    replaced_name,
    unwritable_line,
    work_is_live,
    write_access,
)
from context_window.wording import plural


@dataclass(frozen=True)
class Problem:
    """Something the server would skip, ignore or trip over; ``where`` is relative to the dir."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class Report:
    """What an audit found: counts of what is healthy and the problems."""

    data_dir: Path
    sessions: int = 0
    entries: int = 0
    documents: int = 0
    chunks: int = 0
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # facts worth knowing, not problems

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    def add(self, where: Path | str, message: str) -> None:
        """Record one problem at ``where`` (a path under the data dir, or a label)."""
        if isinstance(where, Path):
            try:
                where = str(where.relative_to(self.data_dir))
            except ValueError:
                where = str(where)
        self.problems.append(Problem(where, message))

    def render(self) -> str:
        """One line per problem, then a summary line."""
        lines = [f"note: {n}" for n in self.notes] + [f"problem: {p}" for p in self.problems]
        verdict = "OK" if self.ok else f"{plural(len(self.problems), 'problem')} found"
        lines.append(
            f"{verdict} in {self.data_dir}: {plural(self.sessions, 'session')} "
            f"({plural(self.entries, 'entry')}), {plural(self.documents, 'document')} "
            f"({plural(self.chunks, 'chunk')})"
        )
        return "\n".join(lines)


def audit(data_dir: Path) -> Report:
    """Audit ``data_dir`` read-only and return what was found."""
    report = Report(data_dir)
    if not data_dir.exists():  # a fresh install: nothing to audit yet
        report.notes.append(
            f"the data dir {data_dir} does not exist yet; the server creates it on its first "
            f"start ({CHOOSE_ANOTHER})"
        )
        return report
    if not data_dir.is_dir():
        report.add(str(data_dir), "the data dir is not a directory")
        return report
    reason = write_access(data_dir)
    if reason is not None:  # a read-only mount may be meant
        report.notes.append(unwritable_line(data_dir, reason))
    _audit_calibration(report, data_dir / "calibration.json")
    _leftover_temps(report, data_dir)
    sessions = data_dir / "sessions"
    if sessions.is_dir():
        _leftover_temps(report, sessions)
        _audit_each(report, sessions, _audit_session)
    documents = data_dir / "documents"
    if documents.is_dir():
        _leftover_temps(report, documents)
        _audit_each(report, documents, _audit_document)
    return report


def _audit_each(report: Report, parent: Path, check: Callable[[Report, Path], None]) -> None:
    """``check`` each directory in ``parent``; one this process may not read is named."""
    for child in _children(parent):
        try:
            check(report, child)
        except OSError as exc:
            where = f" on {exc.filename}" if exc.filename else ""
            report.add(
                child,
                f"unreadable: {(exc.strerror or type(exc).__name__).lower()}{where}; the "
                "server skips it until this user may read it (chmod or chown it)",
            )


def run(data_dir: Path, out: TextIO) -> int:
    """Audit, write the report to ``out``; 0 when clean, 1 when problems were found."""
    report = audit(data_dir)
    out.write(report.render() + "\n")
    return 0 if report.ok else 1


def _children(directory: Path) -> Iterator[Path]:
    """Visible entries of a directory, sorted (hidden ones are temps, handled apart)."""
    return iter(sorted(p for p in directory.iterdir() if not p.name.startswith(".")))


def _leftover_temps(report: Report, directory: Path) -> None:
    """Hidden temporary files or directories a crashed writer left behind."""
    for p in sorted(directory.iterdir()):
        if p.name == "meta.json.corrupt":
            report.add(p, "a damaged meta.json the server set aside and rebuilt; inspect, delete")
        elif (name := replaced_name(p)) is not None and p.is_dir():
            if (directory / name).exists():
                report.add(p, f"earlier version of {name}, left by a completed replace; delete")
            else:
                report.add(
                    p,
                    f"{name} itself: a replace of it was interrupted; the next server start "
                    "puts it back (do not delete)",
                )
        elif p.name.startswith(".trash-"):
            report.add(p, "leftover directory of a forgotten document")
        elif p.name.startswith(".tmp-") and (p.name.endswith(".lock") or work_is_live(p)):
            continue  # work a living process is doing, or the lock that says so
        elif p.name.startswith(".") and (p.name.endswith(".tmp") or p.name.startswith(".tmp")):
            kind = "directory (an interrupted ingest)" if p.is_dir() else "file"
            report.add(p, f"leftover temporary {kind}; never read, safe to delete")


def _audit_calibration(report: Report, path: Path) -> None:
    if path.exists() and read_json(path) is None:
        report.add(path, "unreadable JSON; calibration will be measured again")


def _audit_meta(report: Report, directory: Path, required: tuple[str, ...]) -> dict[str, Any]:
    """The directory's meta.json, reporting it missing, unreadable or naming another id."""
    path = directory / "meta.json"
    if not path.exists():
        report.add(path, "missing")
        return {}
    meta = read_json(path)
    if meta is None:
        report.add(path, "unreadable (not a JSON object)")
        return {}
    missing = [k for k in required if k not in meta]
    if missing:
        report.add(
            path, f"missing {'fields' if len(missing) > 1 else 'field'}: {', '.join(missing)}"
        )
    if "id" in meta and meta["id"] != directory.name:
        report.add(path, f"id {meta['id']!r} does not match the directory name")
    return meta


def _usable_dir(report: Report, directory: Path, kind: str) -> bool:
    """Whether ``directory`` is a session/document directory the server reads; report if not."""
    if not directory.is_dir():
        report.add(directory, f"not a {kind} directory (a stray file)")
        return False
    if not is_valid_id(directory.name):
        report.add(directory, f"directory name is not a valid {kind} id; the server ignores it")
        return False
    _leftover_temps(report, directory)
    return True


def _audit_session(report: Report, directory: Path) -> None:
    if not _usable_dir(report, directory, "session"):
        return
    report.sessions += 1
    _audit_meta(report, directory, ("id", "created_at"))
    journal = directory / "entries.jsonl"
    if journal.exists():
        report.entries += _audit_journal(report, journal)


def _audit_journal(report: Report, path: Path) -> int:
    """Replay a session log in file order as the server does; return the entry count."""
    try:
        with Journal(path).locked():
            raw = path.read_bytes()
    except (OSError, StorageError) as exc:
        report.add(path, f"unreadable: {exc}")
        return 0
    entries: set[str] = set()
    seqs: dict[int, str] = {}
    folded: dict[str, str] = {}  # entry -> the live summary folding it
    folds: dict[str, list[str]] = {}  # summary -> the entries it folds
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path.relative_to(report.data_dir)} line {number}"
        torn = number == len(lines)  # the last piece had no newline after it
        rec = None if torn else parse_line(line)  # a torn line never counts, even if it parses
        if rec is None:
            what = "torn last line (a crashed write)" if torn else "unreadable line"
            report.add(where, f"{what}, {len(line)} bytes skipped")
            continue
        kind = rec.get("kind")
        if kind == "entry":
            _check_entry(report, where, rec, entries, seqs, folded)
            folds[str(rec.get("id"))] = list(rec.get("replaces") or [])
        elif kind == "patch" and (problem := patch_problem(rec)) is not None:
            report.add(where, f"{problem}; skipped")
        elif kind == "patch":
            if str(rec.get("id")) not in entries:
                report.add(where, f"patch for unknown entry {rec.get('id')!r:.80} (orphan)")
            elif isinstance(rec.get("deleted"), bool):
                _refold(report, where, str(rec["id"]), rec["deleted"], folds, folded)
        elif kind == REWRITE and number == 1:
            continue  # the identity line a purge starts a rewritten log with
        else:
            report.add(where, f"unknown record kind {kind!r:.40}; skipped")
    return len(entries)


def _refold(
    report: Report,
    where: str,
    summary: str,
    deleted: bool,
    folds: dict[str, list[str]],
    folded: dict[str, str],
) -> None:
    """A summary retired (an undone compaction) releases what it folds; redone, folds it again."""
    for old in folds.get(summary, ()):
        if deleted:
            if folded.get(old) == summary:
                del folded[old]
        elif folded.get(old, summary) != summary:
            report.add(
                where, f"redone summary {summary} folds {old}, already folded by {folded[old]}"
            )
        else:
            folded[old] = summary


def _check_entry(
    report: Report,
    where: str,
    rec: dict[str, Any],
    entries: set[str],
    seqs: dict[int, str],
    folded: dict[str, str],
) -> None:
    problem = entry_problem(rec)
    if problem is not None:
        report.add(where, f"{problem}; skipped")
        return
    for what in time_problems(rec):
        report.add(where, f"{what}; read as unknown")
    eid = str(rec["id"])
    if eid in entries:
        report.add(where, f"duplicate entry id {eid}; the later record is skipped")
        return
    entries.add(eid)
    seq = rec.get("seq")
    if isinstance(seq, int):
        if seq in seqs:
            report.add(where, f"seq {seq} already used by {seqs[seq]}")
        seqs[seq] = eid
    replaces = rec.get("replaces")
    for old in replaces if isinstance(replaces, list) else ():
        if old not in entries or old == eid:
            report.add(where, f"summary {eid} replaces unknown entry {old!r:.80}")
        elif old in folded:
            report.add(where, f"summary {eid} replaces {old}, already folded by {folded[old]}")
        else:
            folded[old] = eid


def _audit_document(report: Report, directory: Path) -> None:
    if not _usable_dir(report, directory, "document"):
        return
    report.documents += 1
    meta = _audit_meta(report, directory, ("id", "chunks", "sha256", "chars"))
    n = meta.get("chunks")
    if meta and (problem := meta_problem(meta)) is not None:
        report.add(directory / "meta.json", f"{problem}: the tools refuse this document")
        n = n if isinstance(n, int) else None
    if meta and (problem := summary_problem(meta.get("summary"))) is not None:
        report.add(directory / "meta.json", f"cached summary {problem}: it is made again")
    chars = _audit_source(report, directory, meta)
    stats = read_json(directory / "index" / "stats.json")
    if (directory / "chunks.jsonl").exists() or (
        stats is not None and stats.get("version") != INDEX_VERSION
    ):  # an older release's index: rebuilt from meta.json and source.txt on first use
        report.chunks += n or 0
        return
    found = _audit_table(report, directory, chars)
    if found is None:
        return
    report.chunks += found
    if n is not None and found != n:
        report.add(directory / "index", f"{found} chunks, but meta.json says {n}")
    cursor = meta.get("cursor", 0)
    if meta and not (isinstance(cursor, int) and 0 <= cursor <= found):
        report.add(directory / "meta.json", f"cursor {cursor!r:.40} outside 0..{found}")
    before = len(report.problems)
    _audit_index(report, directory, found, stats)
    if len(report.problems) == before:
        _audit_reader(report, directory)


def _audit_reader(report: Report, directory: Path) -> None:
    """Open the document as the tools do, then check every value the reads rely on."""
    try:
        tables = Tables(directory)
    except OldIndex:
        return  # re-indexed on first use
    except (OSError, ValueError, KeyError, TypeError) as exc:
        report.add(directory / "index", f"damaged: {exc!s:.200}")
        return
    for problem in tables.index.verify():
        report.add(directory / "index", f"damaged: {problem}")


def _read(report: Report, path: Path) -> bytes | None:
    """The bytes of ``path``, or None after reporting it missing or unreadable."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        report.add(path, "missing")
    except OSError as exc:
        report.add(path, f"unreadable: {exc.strerror}")
    return None


def _audit_source(report: Report, directory: Path, meta: dict[str, Any]) -> int | None:
    """Check source.txt against meta's sha256 and chars; return its length in characters."""
    path = directory / "source.txt"
    data = _read(report, path)
    if data is None:
        return None
    if meta.get("sha256") and hashlib.sha256(data).hexdigest() != meta["sha256"]:
        report.add(path, "content does not match the sha256 in meta.json")
    try:
        chars = len(data.decode("utf-8"))
    except UnicodeDecodeError:
        report.add(path, "not valid UTF-8")
        return None
    if isinstance(meta.get("chars"), int) and chars != meta["chars"]:
        report.add(path, f"{chars} characters, but meta.json says {meta['chars']}")
    return chars


def _audit_table(report: Report, directory: Path, chars: int | None) -> int | None:
    """Check the chunk table's ranges and byte spans; its chunk count (None: unreadable)."""
    index = directory / "index"
    if not index.is_dir():
        report.add(index, "missing")
        return None
    try:
        table = load_array(index / "chunks.npy")
        spans = load_array(index / "spans.npy")
        size = (directory / "source.txt").stat().st_size
    except FileNotFoundError as exc:
        report.add(Path(str(exc.filename)), "missing")
        return None
    except (OSError, ValueError, EOFError) as exc:
        report.add(index, f"unreadable chunk table: {exc}")
        return None
    if table.ndim != 2 or table.shape[1] != 4 or spans.shape != (len(table), 2):
        report.add(index, f"chunk table shapes {table.shape} and {spans.shape} do not agree")
        return None
    starts, ends = table[:, 0], table[:, 1]
    bad = (starts < 0) | (ends < starts) | (spans[:, 0] < 0) | (spans[:, 1] < spans[:, 0])
    bad |= spans[:, 1] > size
    if chars is not None:
        bad |= ends > chars
    for i in np.flatnonzero(bad)[:10].tolist():
        report.add(
            index / "chunks.npy",
            f"chunk {i}: characters {int(starts[i])}..{int(ends[i])}, bytes "
            f"{int(spans[i, 0])}..{int(spans[i, 1])} do not fit the source "
            f"({chars if chars is not None else '?'} characters, {size} bytes)",
        )
    return len(table)


def _audit_index(report: Report, directory: Path, n: int, stats: dict[str, Any] | None) -> None:
    """Check ``stats`` (stats.json as read) and the index arrays for ``n`` chunks."""
    index = directory / "index"
    if stats is None:
        report.add(index / "stats.json", "missing or unreadable")
    elif (chunks := stats.get("chunks")) != n:
        report.add(index / "stats.json", f"says {chunks!r} chunks, the chunk table has {n}")
    if read_json(index / "headings.json") is None:
        report.add(index / "headings.json", "missing or unreadable")
    for name, extra in INDEX_ARRAYS.items():
        path = index / name
        try:
            arr = load_array(path)
        except FileNotFoundError:
            report.add(path, "missing")
            continue
        except (OSError, ValueError, EOFError) as exc:
            report.add(path, f"unreadable array: {exc}")
            continue
        if extra is not None and len(arr) != n + extra:
            report.add(path, f"{len(arr)} rows, expected {n + extra} for {n} chunks")
