"""A file is ingested by copying it block by block: hashed, checked as UTF-8 and scanned
for headings on the way, with the same result as reading it whole."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from context_window.documents.build import _has_structure, copy_source
from context_window.documents.sandbox import decode_utf8
from context_window.documents.store import DocumentStore
from context_window.errors import InvalidInput
from context_window.tokens import TokenCounter

TEXTS = {
    "crlf and multibyte": "ligne une café\r\nzwei 東京 straße\r\n" * 40,
    "heading after a newline": "plain log line\n" * 30 + "## Section\nbody\n",
    "heading first": "# Title\n\nbody text\n",
    "fence": "text\n```\ncode\n```\n",
    "indented marker": "a\n   ### three spaces\n",
    "four spaces is code": "a\n    # not a heading\n",
    "blank": " \n\t\r\n  ",
    "emoji": "😀 " * 100,
    "heading after a byte order mark": "\ufeff# Title\n\nbody text\n",
    "a byte order mark and blanks": "\ufeff \r\n\n",
    "a byte order mark in a blank text": " \ufeff\n",
}


def blocks_of(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("name", list(TEXTS))
@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64, 1 << 20])
def test_copy_source_finds_what_a_whole_read_finds(tmp_path: Path, name: str, size: int) -> None:
    text = TEXTS[name]
    data = text.encode("utf-8")
    dest = tmp_path / "source.txt"
    got = copy_source(blocks_of(data, size), dest, "f")
    assert dest.read_bytes() == data
    assert got.sha256 == hashlib.sha256(data).hexdigest()
    assert (got.bytes, got.chars) == (len(data), len(text))
    assert got.structured == _has_structure(text), name
    assert got.blank == (not text.removeprefix("\ufeff").strip())


def test_a_byte_order_mark_hides_no_heading_and_is_no_text() -> None:
    assert _has_structure("\ufeff# Title\n") and _has_structure("\ufeff```\ncode\n```\n")
    assert TEXTS["a byte order mark and blanks"].strip()  # not blank to str.strip


@pytest.mark.parametrize("size", [1, 3, 4096])
@pytest.mark.parametrize(
    "data",
    [
        "ok café ".encode() * 50 + b"\xff" + b"tail",  # a bad byte in a later block
        b"ok " * 50 + "東".encode()[:2],  # a character cut off at the end
        "é".encode()[:1] + b"rest",  # a bad first byte
    ],
)
def test_copy_source_names_the_first_bad_byte_as_a_whole_read_does(
    tmp_path: Path, data: bytes, size: int
) -> None:
    with pytest.raises(InvalidInput) as whole:
        decode_utf8(data, "f")
    with pytest.raises(InvalidInput) as streamed:
        copy_source(blocks_of(data, size), tmp_path / f"s{size}.txt", "f")
    # The same offset; the bytes shown after it may stop at the block's end.
    head_w, bad_w = str(whole.value).split(" (", 1)
    head_s, bad_s = str(streamed.value).split(" (", 1)
    assert head_s == head_w
    assert bad_w.startswith(bad_s.split(")")[0])


@pytest.mark.parametrize("bom", ["", "\ufeff"])
def test_a_file_ingest_equals_an_inline_one(tmp_path: Path, bom: str) -> None:
    text = bom + "".join(f"{i:04d} naïve café 東京 line\r\n" for i in range(4000))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "log.txt").write_bytes(text.encode())
    store = DocumentStore(
        tmp_path / "data", TokenCounter(0.27), ingest_roots=[tmp_path / "in"], segment_chars=9_000
    )
    from_file = store.ingest(file_path="log.txt", doc_id="f").doc
    inline = store.ingest(text=text, doc_id="t").doc
    assert from_file.sha256 == inline.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert (from_file.chars, from_file.chunks) == (inline.chars, inline.chunks)
    a = store.tables(from_file).read(0, from_file.chunks - 1, styled=True)
    b = store.tables(inline).read(0, inline.chunks - 1, styled=True)
    assert [(c.start, c.end, c.text, c.line) for c in a] == [
        (c.start, c.end, c.text, c.line) for c in b
    ]
    assert all(c.text == text[c.start : c.end] for c in a)  # "\r\n" kept: offsets hold
    shown = store.read_chunks(inline, 0, inline.chunks - 1)  # as answers show them
    assert [c.text for c in shown] == [c.text.replace("\r\n", "\n") for c in a]
    assert a[0].text.startswith("0000 naïve") and a[0].start == len(bom)  # a BOM is no text
    again = store.ingest(file_path="log.txt")  # the same content: reused, nothing left
    assert again.reused and again.duplicate_of in {"f", "t"}
    assert not [p.name for p in store.root.iterdir() if p.name.startswith(".")]


def test_a_bad_or_empty_file_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "bad.txt").write_bytes(b"fine " * 10_000 + b"\xc3\x28")
    (tmp_path / "in" / "empty.txt").write_bytes(b"  \n\n ")
    store = DocumentStore(tmp_path / "data", TokenCounter(0.27), ingest_roots=[tmp_path / "in"])
    with pytest.raises(InvalidInput, match="byte offset 50000"):
        store.ingest(file_path="bad.txt")
    with pytest.raises(InvalidInput, match="is empty"):
        store.ingest(file_path="empty.txt")
    assert store.all() == []
    assert [p.name for p in store.root.iterdir()] == []  # no work directory left


def test_a_structured_file_has_a_lower_limit_than_a_log(tmp_path: Path) -> None:
    # A text with headings is chunked whole, so it has its own limit below the file
    # limit; a log of the same size is chunked a segment at a time and passes.
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "guide.md").write_text("# Guide\n\n" + "Some prose here.\n" * 400)
    (tmp_path / "in" / "app.log").write_text("INFO a log line of prose\n" * 400)
    store = DocumentStore(
        tmp_path / "data",
        TokenCounter(0.27),
        ingest_roots=[tmp_path / "in"],
        max_structured_chars=5_000,
    )
    with pytest.raises(InvalidInput, match=r"6,809 characters with headings .* limit is 5,000"):
        store.ingest(file_path="guide.md")
    assert store.all() == []
    assert [p.name for p in store.root.iterdir()] == []  # no work directory left
    assert store.ingest(file_path="app.log").doc.chars == 10_000


CHILD = """
import logging
import sys
from pathlib import Path
from context_window.retrieval import wordscan
from context_window.documents.store import DocumentStore
from context_window.retrieval.termcount import TermCounter
from context_window.tokens import TokenCounter

def status(key):  # this process's own figures (ru_maxrss would start from the parent's)
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key))

src = Path(sys.argv[1])
store = DocumentStore(Path(sys.argv[2]), TokenCounter(0.27), ingest_roots=[src.parent],
                      max_file_bytes=1 << 30, segment_chars=1_000_000)
if wordscan.available():  # numba's own memory (~120 MB) is a constant, not the file's
    TermCounter(numbers=True, scan=True).count(["loaded 42 times"])
chunker = []  # the chunking process's peak, which it reports in a log record

class Peak(logging.Handler):
    def emit(self, record):
        if hasattr(record, "peak_kb"):
            chunker.append(record.peak_kb)

logging.getLogger("context_window.documents.segments").addHandler(Peak())
logging.getLogger("context_window.documents.segments").setLevel(logging.INFO)
before = status("VmRSS:")
store.ingest(file_path=src.name, doc_id="big")
print(before, status("VmHWM:"), *chunker)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
def test_a_large_file_is_never_held_whole(tmp_path: Path) -> None:
    # 128 MB of one short line repeated: a tiny index, so what the process holds at its
    # peak beyond its start is the copy and one segment at a time. Read whole, the file
    # was two copies (bytes and text): the peak grew by 2-3x the file's size.
    src = tmp_path / "in" / "big.log"
    src.parent.mkdir()
    line = b"the same log line, again and again, with nothing new in it\n"
    with src.open("wb") as f:
        for _ in range(128):
            f.write(line * ((1 << 20) // len(line)))
    size = src.stat().st_size
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(src), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    before_kb, peak_kb, chunker_kb = map(int, out.stdout.split())
    grew = (peak_kb - before_kb) * 1024
    assert grew < size / 2, f"peak RSS grew {grew / 1e6:.0f} MB for a {size / 1e6:.0f} MB file"
    # The process that chunks the segments holds one at a time, too.
    assert 0 < chunker_kb * 1024 < size / 2
