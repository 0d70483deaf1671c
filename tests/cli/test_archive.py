"""Export formats on their own: text that looks like structure survives, bad files are refused."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_window.cli.archive_format import (
    DocumentArchive,
    SessionArchive,
    document_jsonl,
    document_markdown,
    fence_for,
    parse,
    session_jsonl,
    session_markdown,
)
from context_window.cli.catalog import Catalog, read_journal
from context_window.cli.main import main
from context_window.config import Settings
from context_window.documents.chunking import chunk_text
from context_window.errors import InvalidInput
from context_window.models import Entry
from context_window.service import Service
from context_window.tokens import TokenCounter

META = {"id": "s1", "title": "T <!-- x --> `y`", "created_at": 1000.0}
HOSTILE = [
    "",
    "plain",
    "ends with a newline\n",
    "\n\nleading blank lines and trailing ones\n\n",
    "# a heading\n## another\n```python\nprint(1)\n```\n",
    "````\n```\n`````",
    '<!-- context-window/entry {"kind":"entry","id":"fake","text":null} -->',
    '<!-- context-window/patch {"kind":"patch","id":"s1","deleted":true} -->\n```text',
    "windows\r\nline\rendings\r\n",
    "unicode \u2028 separators \u2029 and nul-free → ✓ 漢字",
    "--> closes a comment? -->",
]


def entry(eid: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "entry", "id": eid, "seq": 1, "created_at": 1.5, "role": "note", "text": text,
            "tags": ["a"], "pinned": False, **extra}  # fmt: skip


def markdown(records: list[dict[str, Any]], meta: dict[str, Any] = META) -> str:
    return "".join(session_markdown(meta, records, {}))


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_keeps_text_that_looks_like_structure(text: str) -> None:
    records = [entry("e1", text), {"kind": "patch", "id": "e1", "pinned": True}]
    parsed = parse(markdown(records))
    assert isinstance(parsed, SessionArchive)
    assert list(parsed.records) == records
    assert parsed.meta == META


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.text(alphabet=st.sampled_from("`#<!->{}\n\r ~xa-\u2028")), max_size=4),
    tag=st.text(min_size=1, max_size=10),
)
def test_markdown_round_trips_any_text(texts: list[str], tag: str) -> None:
    records = [entry(f"e{i}", t, tags=[tag]) for i, t in enumerate(texts)]
    parsed = parse(markdown(records))
    assert isinstance(parsed, SessionArchive)
    assert list(parsed.records) == records


def test_unknown_fields_survive_both_session_formats() -> None:
    records = [
        entry("e1", "x", expires_at=99.0, future={"nested": [1, None, "-->"]}),
        entry("s1", "sum", role="summary", replaces=["e1"], compaction={"method": "llm"}),
        {"kind": "patch", "id": "s1", "deleted": True, "reason": "later field"},
    ]
    meta = {**META, "extra": [1, 2]}
    for text in ("".join(session_jsonl(meta, records)), markdown(records, meta)):
        parsed = parse(text)
        assert isinstance(parsed, SessionArchive)
        assert list(parsed.records) == records and parsed.meta == meta


def test_fence_is_longer_than_any_backtick_run() -> None:
    assert fence_for("no ticks") == "```"
    assert fence_for("a ```` b ` c") == "`````"


SPEC_MD = "# Spec\n\nIntro   \n\n\n```c\nint x;\n\n\nint y;\n```\n\n## Part\t\n\ntext\r\nmore\n\n\n"


@pytest.mark.parametrize("overlap", [0, 8])
def test_document_chunks_rebuild_the_text_with_the_gaps(overlap: int) -> None:
    chunks = chunk_text(SPEC_MD * 5, 32, overlap, 0.27)
    records = [{"index": c.index, "text": c.text, "tokens": c.tokens, "start": c.start,
                "end": c.end, "heading": c.heading} for c in chunks]  # fmt: skip
    text = "".join(document_jsonl({"id": "d"}, SPEC_MD * 5, records))
    lines = [json.loads(line) for line in text.splitlines()]
    assert all({"index", "text", "start", "end", "heading", "tokens"} <= set(r) for r in lines[1:])
    parsed = parse(text)
    assert isinstance(parsed, DocumentArchive) and parsed.text == SPEC_MD * 5


def test_document_markdown_is_the_text_after_one_header_line() -> None:
    text = "".join(document_markdown({"id": "d", "title": "t"}, SPEC_MD))
    assert text.splitlines()[1] == "# Spec"
    parsed = parse(text)
    assert isinstance(parsed, DocumentArchive)
    assert parsed.text == SPEC_MD and parsed.meta == {"id": "d", "title": "t"}


@pytest.mark.parametrize("text", HOSTILE)
def test_an_export_saved_with_crlf_line_ends_reads_back_the_same(text: str) -> None:
    # An editor on Windows, or git's autocrlf, ends every line with \r\n: a person
    # who opened the Markdown export and saved it must still be able to import it.
    records = [entry("e1", text), {"kind": "patch", "id": "e1", "pinned": True}]
    exports = [
        markdown(records),
        "".join(session_jsonl(META, records)),
        "".join(document_markdown({"id": "d"}, text)),
        "".join(document_jsonl({"id": "d"}, text, [])),
    ]
    for export in exports:
        crlf = export.replace("\n", "\r\n")
        assert parse(crlf) == parse(export)


GOOD = "".join(session_jsonl(META, [entry("e1", "x")]))


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("hello\n", "not a context-window export"),
        ('{"format": "other"}\n', "not a context-window export"),
        (GOOD.replace('"version":1', '"version":2'), "version 2"),
        (GOOD + "{oops\n", "line 3 is not valid JSON"),
        (GOOD + "[1]\n", "line 3 is not a JSON object"),
        (GOOD + '{"kind":"patch","id":"nope"}\n', "unknown entry"),
        (GOOD + json.dumps(entry("e1", "again")) + "\n", "second entry"),
        (GOOD + '{"kind":"entry","id":"e2"}\n', "without a string id and text"),
        (GOOD + '{"kind":"mystery","id":"e2"}\n', "unknown record kind"),
        (markdown([entry("e1", "x")]).replace("\n````", "\n```").rsplit("```", 1)[0], "not closed"),
        (markdown([entry("e1", "x")]).split("```")[0], "has no fenced text"),
        (markdown([entry("e1", "x")]).replace('"kind":"entry"', '"kind":"patch"'), "kind"),
        ('{"format":"context-window/document","version":1,"id":"d"}\n'
         '{"index":1,"text":"a","start":0,"end":1}\n', "expected chunk 0"),
        ('{"format":"context-window/document","version":1,"id":"d"}\n'
         '{"index":0,"text":"abc","start":0,"end":1}\n', "does not fit"),
    ],
)  # fmt: skip
def test_malformed_files_name_the_problem(text: str, needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle) as info:
        parse(text, "f.jsonl")
    assert "\n" not in str(info.value)


# ----------------------------------------------------------------------
# Export and import through the command line, round-tripped into a fresh data dir.

SettingsFactory = Callable[..., Settings]
LOGHUB = Path(__file__).resolve().parents[3] / "shared" / "data" / "loghub"
if not LOGHUB.is_dir():
    LOGHUB = Path("/work/shared/data/loghub")

TRICKY = (
    "# Decision: keep the journal\n\n```python\nprint('```')\n```\n\n"
    '<!-- context-window/entry {"kind":"entry","id":"fake","text":null} -->\n'
    "`````\r\nno final newline"
)
SPEC = (
    "# Storage spec\n\nThe journal is append-only.   \n\n\n## Records\n\n"
    '```json\n{"kind": "entry"}\n\n# not a heading inside a fence\n```\n\n'
    "## Locks\t\n\n" + "Every append takes an exclusive lock on the file. " * 40 + "\n\n\n"
)


def build_session(settings: Settings, session_id: str = "work") -> dict[str, str]:
    """A session with every state: pinned, tagged, deleted, unpinned, compacted, raw fields."""
    service = Service(settings)
    session, _ = service.sessions.open(session_id, "Fixing the <!-- build --> `linker`")
    ids: dict[str, str] = {}
    for i in range(6):
        text = f"note {i}: the linker fails on libfoo {i}"
        ids[f"note{i}"] = session.append(text, tags=["build"], now=1000.0 + i).id
    ids["pinned"] = session.append(TRICKY, "decision", ["design", "md"], True, now=1010).id
    ids["deleted"] = session.append("a wrong turn about the linker", "user", now=1011).id
    session.update(ids["deleted"], deleted=True)
    ids["unpinned"] = session.append("pinned, then not", pinned=True, now=1012).id
    session.update(ids["unpinned"], pinned=False)
    compaction = anyio.run(service.compact, session_id, 2, 60)
    assert compaction.entry is not None and compaction.summary is not None
    ids["summary"] = compaction.entry.id
    raw = {"kind": "entry", "id": "e-raw", "seq": 99, "created_at": 1013.0, "role": "note",
           "text": "written by a newer version", "tags": [], "pinned": False,
           "expires_at": 2000.0, "future": {"nested": [1, None]}}  # fmt: skip
    with session.journal.locked():
        session.journal.read_new()
        session.journal.write([raw, {"kind": "patch", "id": "e-raw", "pinned": True, "why": "x"}])
    ids["raw"] = "e-raw"
    return ids


def catalog(settings: Settings) -> Catalog:
    return Catalog(settings.data_dir, TokenCounter(settings.token_ratio))


def all_entries(settings: Settings, session_id: str) -> list[Entry]:
    c = catalog(settings)
    return c.session(session_id).entries(include_hidden=True)


def cli(settings: Settings, *args: str) -> int:
    return main(["--data-dir", str(settings.data_dir), "--no-llm", *args])


@pytest.mark.parametrize("fmt", ["jsonl", "md"])
def test_session_round_trip(
    fmt: str, settings: SettingsFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = settings(), settings(data_dir=tmp_path / "fresh")
    ids = build_session(source)
    out = tmp_path / f"work.{fmt}"
    assert cli(source, "export", "session", "work", "--format", fmt, "-o", str(out)) == 0
    assert cli(target, "import", str(out)) == 0
    assert "imported session work (11 entries)" in capsys.readouterr().out

    before, after = all_entries(source, "work"), all_entries(target, "work")
    assert after == before  # every field and state: pinned, deleted, superseded, replaces
    states = {e.id: e for e in after}
    assert states[ids["pinned"]].text == TRICKY and states[ids["pinned"]].pinned
    assert states[ids["deleted"]].deleted and not states[ids["unpinned"]].pinned
    assert states[ids["note0"]].superseded and states[ids["summary"]].replaces
    old, new = catalog(source).session("work"), catalog(target).session("work")
    assert new.title == old.title and new.meta["created_at"] == old.meta["created_at"]
    assert [e.id for e in new.recall("linker", 4000).entries] == [
        e.id for e in old.recall("linker", 4000).entries
    ]
    records = read_journal(old.journal.path)[0]
    assert read_journal(new.journal.path)[0] == records  # unknown fields kept untouched
    assert records[-2]["expires_at"] == 2000.0 and records[-1]["why"] == "x"


def test_session_markdown_is_readable(settings: SettingsFactory, tmp_path: Path) -> None:
    s = settings()
    ids = build_session(s)
    out = tmp_path / "work.md"
    assert cli(s, "export", "session", "work", "--format", "md", "-o", str(out)) == 0
    text = out.read_bytes().decode("utf-8")  # not read_text: it would turn \r\n into \n
    assert text.splitlines()[1] == "# Fixing the <!-- build --> `linker`"
    assert f"decision · {ids['pinned']} · pinned" in text
    assert f"{ids['deleted']} · deleted" in text and f"{ids['note0']} · superseded" in text
    assert "tags: design, md" in text
    assert "\n``````text\n" + TRICKY + "\n``````\n" in text  # a fence longer than its ```''


def test_export_to_stdout_and_skipped_lines(
    settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = settings()
    build_session(s)
    with (s.data_dir / "sessions" / "work" / "entries.jsonl").open("ab") as f:
        f.write(b"{torn line\n")
    assert cli(s, "export", "session", "work") == 0
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["format"] == "context-window/session" and lines[0]["version"] == 1
    assert lines[0]["id"] == "work" and "created_at" in lines[0]
    assert len(lines) == 1 + 11 + 3  # header, entries, patches (delete, unpin, raw's pin)
    assert "skipped 1 unreadable" in err


def test_export_writes_through_a_symlink_and_into_a_pipe_never_replacing_them(
    settings: SettingsFactory, tmp_path: Path
) -> None:
    s = settings()
    build_session(s)
    real, link, pipe = tmp_path / "real.jsonl", tmp_path / "link.jsonl", tmp_path / "pipe"
    real.write_text("old")
    link.symlink_to(real)
    assert cli(s, "export", "session", "work", "-o", str(link)) == 0
    assert link.is_symlink() and '"context-window/session"' in real.read_text()
    os.mkfifo(pipe)  # as /dev/null or /dev/stdout: root's rename would replace the node
    got: list[bytes] = []

    def read() -> None:
        with pipe.open("rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert cli(s, "export", "session", "work", "-o", str(pipe)) == 0
    reader.join(timeout=10)
    assert stat.S_ISFIFO(pipe.lstat().st_mode)
    assert got and b'"context-window/session"' in got[0]


def test_import_under_a_new_id_and_replace(
    settings: SettingsFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = settings()
    build_session(s)
    out = tmp_path / "work.jsonl"
    assert cli(s, "export", "session", "work", "-o", str(out)) == 0
    journal = s.data_dir / "sessions" / "work" / "entries.jsonl"
    before = journal.read_bytes()
    capsys.readouterr()
    assert cli(s, "import", str(out)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already exists" in err and "--replace" in err
    assert journal.read_bytes() == before
    assert cli(s, "import", str(out), "--session-id", "WORK") == 1  # ids ignore case
    assert "session 'work' already exists" in capsys.readouterr().err
    assert cli(s, "import", str(out), "--session-id", "copy") == 0
    assert all_entries(s, "copy") == all_entries(s, "work")
    assert cli(s, "import", str(out), "--replace") == 0
    assert "replaced session work" in capsys.readouterr().out
    assert journal.read_bytes() == before
    assert not [p for p in (s.data_dir / "sessions").iterdir() if p.name.startswith(".")]


def chunks_of(settings: Settings, doc_id: str) -> list[str]:
    store = catalog(settings).documents_store
    doc = store.get(doc_id)
    return [c.text for c in store.read_chunks(doc, 0, doc.chunks - 1)]


@pytest.mark.parametrize("fmt", ["jsonl", "md"])
@pytest.mark.parametrize("kind", ["log", "spec"])
def test_document_round_trip(
    fmt: str, kind: str, settings: SettingsFactory, tmp_path: Path
) -> None:
    if kind == "log":
        log = LOGHUB / "HDFS" / "HDFS_2k.log"
        if not log.is_file():
            pytest.skip(f"loghub sample not found at {log}")
        path = tmp_path / "HDFS_2k.log"
        shutil.copyfile(log, path)
    else:
        path = tmp_path / "spec.md"
        path.write_bytes(SPEC.encode())
    source = settings(ingest_roots=[tmp_path], chunk_tokens=200, chunk_overlap=20)
    # different chunk settings: an import chunks as the export says, so chunks match
    target = settings(data_dir=tmp_path / "fresh", chunk_tokens=900, chunk_overlap=0)
    done = Service(source).documents.ingest(file_path=str(path), title=f"The {kind}", doc_id="d1")
    assert done.doc.chunks > 1
    out = tmp_path / f"d1.{fmt}"
    assert cli(source, "export", "doc", "d1", "--format", fmt, "-o", str(out)) == 0
    assert cli(target, "import", str(out)) == 0
    old, new = catalog(source).document("d1"), catalog(target).document("d1")
    assert new.sha256 == old.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (new.chunks, new.title, new.source, new.chars) == (
        old.chunks, f"The {kind}", str(path), old.chars
    )  # fmt: skip
    assert chunks_of(target, "d1") == chunks_of(source, "d1")
    stored = target.data_dir / "documents" / "d1" / "source.txt"
    assert stored.read_bytes() == path.read_bytes()


def test_document_jsonl_chunk_records(
    settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = settings(chunk_tokens=64, chunk_overlap=16)
    Service(s).documents.ingest(text=SPEC, title="Spec", doc_id="spec")
    assert cli(s, "export", "doc", "spec") == 0
    header, *chunks = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert header["format"] == "context-window/document" and header["title"] == "Spec"
    assert [c["index"] for c in chunks] == list(range(header["chunks"]))
    for c in chunks:
        assert SPEC[c["start"] : c["end"]] == c["text"]
        assert {"heading", "tokens"} <= set(c)


def test_document_exists_needs_replace(
    settings: SettingsFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = settings()
    Service(s).documents.ingest(text=SPEC, title="Spec", doc_id="spec")
    out = tmp_path / "spec.md"
    assert cli(s, "export", "doc", "spec", "--format", "md", "-o", str(out)) == 0
    capsys.readouterr()
    assert cli(s, "import", str(out)) == 1
    assert "already exists" in capsys.readouterr().err
    assert cli(s, "import", str(out), "--doc-id", "spec2") == 0
    assert "same text" in capsys.readouterr().out  # the duplicate is named
    assert cli(s, "import", str(out), "--replace") == 0
    assert chunks_of(s, "spec") == chunks_of(s, "spec2")
    capsys.readouterr()
    assert cli(s, "import", str(out), "--doc-id", "SPEC") == 1  # ids ignore case
    assert "document 'spec' already exists" in capsys.readouterr().err
    assert cli(s, "import", str(out), "--doc-id", "SPEC", "--replace") == 0
    assert "replaced document spec" in capsys.readouterr().out
    assert sorted(p.name for p in (s.data_dir / "documents").iterdir()) == ["spec", "spec2"]
    assert cli(s, "import", str(out), "--session-id", "x") == 1
    assert "holds a document" in capsys.readouterr().err


def _bad(tmp_path: Path, settings: Settings, kind: str) -> Path:
    """A file that fails validation in one way."""
    good = tmp_path / "good.jsonl"
    if kind == "missing":
        return tmp_path / "nope.jsonl"
    if kind == "latin1":
        good.write_bytes(b"\xe9t\xe9\n")
        return good
    build_session(settings)
    assert cli(settings, "export", "session", "work", "-o", str(good)) == 0
    lines = good.read_text(encoding="utf-8").splitlines(keepends=True)
    shutil.rmtree(settings.data_dir)
    edits: dict[str, Callable[[list[str]], list[str]]] = {
        "truncated": lambda ls: [*ls[:-1], ls[-1][:20]],
        "orphan patch": lambda ls: [ls[0], *[x for x in ls[1:] if '"kind":"patch"' in x]],
        "bad id": lambda ls: [ls[0].replace('"id":"work"', '"id":"../x"'), *ls[1:]],
    }
    good.write_text("".join(edits[kind](lines)), encoding="utf-8")
    return good


@pytest.mark.parametrize(
    ("kind", "needle"),
    [
        ("missing", "no such file"),
        ("latin1", "not valid UTF-8"),
        ("truncated", "not valid JSON"),
        ("orphan patch", "unknown entry"),
        ("bad id", "invalid session id"),
    ],
)
def test_malformed_import_writes_nothing(
    kind: str,
    needle: str,
    settings: SettingsFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    s = settings()
    bad = _bad(tmp_path, s, kind)
    capsys.readouterr()
    assert cli(s, "import", str(bad)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("context-window: error:") and needle in err
    assert not s.data_dir.exists()


def test_edited_document_text_is_refused(
    settings: SettingsFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = settings()
    Service(s).documents.ingest(text=SPEC, title="Spec", doc_id="spec")
    out = tmp_path / "spec.md"
    assert cli(s, "export", "doc", "spec", "--format", "md", "-o", str(out)) == 0
    out.write_text(out.read_text(encoding="utf-8")[:-40], encoding="utf-8")
    fresh = settings(data_dir=tmp_path / "fresh")
    assert cli(fresh, "import", str(out)) == 1
    assert "sha256" in capsys.readouterr().err
    assert not fresh.data_dir.exists()


def test_import_replace_uses_the_exports_chunking(
    settings: SettingsFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replaced document is re-chunked as exported, not as the copy it replaces was."""
    s = settings(chunk_tokens=64, chunk_overlap=0)
    Service(s).documents.ingest(text=SPEC, title="Spec", doc_id="spec")
    out = tmp_path / "spec.jsonl"
    assert cli(s, "export", "doc", "spec", "-o", str(out)) == 0
    exported = chunks_of(s, "spec")
    other = settings(data_dir=tmp_path / "other", chunk_tokens=400, chunk_overlap=40)
    Service(other).documents.ingest(text=SPEC + "\nmore text", doc_id="spec")
    assert chunks_of(other, "spec") != exported
    assert cli(other, "import", str(out), "--replace") == 0
    assert "replaced document spec" in capsys.readouterr().out
    assert chunks_of(other, "spec") == exported
