"""Export formats on their own: text that looks like structure survives, bad files are refused."""

from __future__ import annotations

import json
from typing import Any

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
from context_window.documents.chunking import chunk_text
from context_window.errors import InvalidInput

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


SPEC = "# Spec\n\nIntro   \n\n\n```c\nint x;\n\n\nint y;\n```\n\n## Part\t\n\ntext\r\nmore\n\n\n"


@pytest.mark.parametrize("overlap", [0, 8])
def test_document_chunks_rebuild_the_text_with_the_gaps(overlap: int) -> None:
    chunks = chunk_text(SPEC * 5, 32, overlap, 0.27)
    records = [{"index": c.index, "text": c.text, "tokens": c.tokens, "start": c.start,
                "end": c.end, "heading": c.heading} for c in chunks]  # fmt: skip
    text = "".join(document_jsonl({"id": "d"}, SPEC * 5, records))
    lines = [json.loads(line) for line in text.splitlines()]
    assert all({"index", "text", "start", "end", "heading", "tokens"} <= set(r) for r in lines[1:])
    parsed = parse(text)
    assert isinstance(parsed, DocumentArchive) and parsed.text == SPEC * 5


def test_document_markdown_is_the_text_after_one_header_line() -> None:
    text = "".join(document_markdown({"id": "d", "title": "t"}, SPEC))
    assert text.splitlines()[1] == "# Spec"
    parsed = parse(text)
    assert isinstance(parsed, DocumentArchive)
    assert parsed.text == SPEC and parsed.meta == {"id": "d", "title": "t"}


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
