"""doc_ingest's file sandbox: every refusal, through a real MCP client, and nothing written."""

from __future__ import annotations

import gzip
import io
import lzma
import os
import zipfile
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from opens import watching_opens

from context_window.config import load_settings
from context_window.documents.sandbox import open_file
from context_window.errors import AccessDenied
from context_window.server.app import build_server
from context_window.service import Service


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "sub").mkdir(parents=True)
    (r / "ok.txt").write_text("fine text inside the root\n")
    (r / "sub" / "deep.txt").write_text("deeper text\n")
    return r


@asynccontextmanager
async def serve(tmp_path: Path, roots: list[Path]) -> AsyncIterator[Client]:
    settings = load_settings(
        {"data_dir": tmp_path / "data", "llm_enabled": False, "ingest_roots": roots}, environ={}
    )
    async with Client(build_server(Service(settings))) as c:
        yield c


async def refused(c: Client, **args: Any) -> str:
    res = await c.call_tool("doc_ingest", args)
    assert res.is_error, res.content
    text = res.content[0].text  # type: ignore[union-attr]
    assert isinstance(text, str)
    return text


def nothing_written(tmp_path: Path) -> None:
    docs = tmp_path / "data" / "documents"
    assert not docs.exists() or list(docs.iterdir()) == []


@pytest.mark.anyio
async def test_a_file_inside_the_root_is_read(tmp_path: Path, root: Path) -> None:
    async with serve(tmp_path, [root]) as c:
        for path in ("ok.txt", "sub/deep.txt", str(root / "ok.txt"), "sub/../ok.txt"):
            res = await c.call_tool("doc_ingest", {"file_path": path})
            assert not res.is_error, res.content


@pytest.mark.anyio
async def test_traversal_is_refused(tmp_path: Path, root: Path) -> None:
    (tmp_path / "secret.txt").write_text("secret")
    async with serve(tmp_path, [root]) as c:
        msg = await refused(c, file_path="../secret.txt")
    assert "outside the ingest roots" in msg
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_symlinked_file_escaping_the_root_is_refused(tmp_path: Path, root: Path) -> None:
    (tmp_path / "secret.txt").write_text("secret")
    (root / "link.txt").symlink_to(tmp_path / "secret.txt")
    async with serve(tmp_path, [root]) as c:
        msg = await refused(c, file_path="link.txt")
    assert "outside the ingest roots" in msg
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_symlinked_directory_escaping_the_root_is_refused(tmp_path: Path, root: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.txt").write_text("outside data")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    async with serve(tmp_path, [root]) as c:
        msg = await refused(c, file_path="linkdir/data.txt")
    assert "outside the ingest roots" in msg
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_sibling_with_the_same_prefix_is_refused(tmp_path: Path, root: Path) -> None:
    sibling = tmp_path / "root2"
    sibling.mkdir()
    (sibling / "x.txt").write_text("sibling")
    async with serve(tmp_path, [root]) as c:
        msg = await refused(c, file_path=str(sibling / "x.txt"))
        msg2 = await refused(c, file_path="../root2/x.txt")
    assert "outside the ingest roots" in msg and "outside the ingest roots" in msg2
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_absolute_path_outside_is_refused(tmp_path: Path, root: Path) -> None:
    async with serve(tmp_path, [root]) as c:
        msg = await refused(c, file_path="/etc/hostname")
    assert "outside the ingest roots" in msg or "no file" in msg
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_nul_byte_is_refused(tmp_path: Path, root: Path) -> None:
    async with serve(tmp_path, [root]) as c:
        msg = await refused(c, file_path="ok.txt\x00.png")
    assert "NUL" in msg
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_a_name_no_file_system_can_hold_is_missing(tmp_path: Path, root: Path) -> None:
    # JSON can carry a lone surrogate; a path cannot: the answer is "missing", not a crash.
    async with serve(tmp_path, [root]) as c:
        msg = await refused(c, file_path="ok\ud800.txt")
    assert "no readable file" in msg and "internal" not in msg
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_directory_is_refused_with_its_files_named(tmp_path: Path, root: Path) -> None:
    for i in range(8):
        (root / "sub" / f"part{i}.log").write_text("x\n")
    (root / "sub" / "inner").mkdir()
    async with serve(tmp_path, [root]) as c:
        msg = await refused(c, file_path="sub")
        assert msg.endswith(
            f"is a directory; only regular files can be read; ingest its files each by its "
            f"path, as {str(root.resolve() / 'sub' / 'deep.txt')!r} (deep.txt, part0.log, "
            "part1.log, part2.log, part3.log, part4.log and 3 more)"
        )
        assert (await refused(c, file_path="sub/inner")).endswith("can be read")  # no files
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_a_missing_file_names_the_files_beside_it_with_a_near_name(
    tmp_path: Path, root: Path
) -> None:
    (tmp_path / "Secret.txt").write_text("outside")
    (root / "OK.txt.bak").symlink_to(tmp_path / "Secret.txt")  # a link: never offered
    async with serve(tmp_path, [root]) as c:
        for path, near in [
            ("OK.txt", "ok.txt"),
            ("sub/Deep.text", "deep.txt"),
            ("ok.tx", "ok.txt"),
        ]:
            for given in (path, str(root / path)):
                said = await refused(c, file_path=given)
                assert said.endswith(f"; did you mean {near}?"), given
        for path in ("zebra.txt", "../secret.txt", str(tmp_path / "Secret.tx")):  # far, outside
            assert "did you mean" not in await refused(c, file_path=path)
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_fifo_is_refused_without_blocking(tmp_path: Path, root: Path) -> None:
    os.mkfifo(root / "pipe")
    async with serve(tmp_path, [root]) as c:
        msg = await refused(c, file_path="pipe")
    assert "FIFO" in msg
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_device_is_refused(tmp_path: Path) -> None:
    async with serve(tmp_path, [Path("/dev")]) as c:
        msg = await refused(c, file_path="/dev/null")
    assert "device" in msg
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_invalid_utf8_names_the_byte_offset(tmp_path: Path, root: Path) -> None:
    (root / "latin1.txt").write_bytes(b"caf\xe9 au lait")
    async with serve(tmp_path, [root]) as c:
        msg = await refused(c, file_path="latin1.txt")
    assert "not valid UTF-8" in msg and "byte offset 3" in msg and "iconv" in msg
    nothing_written(tmp_path)


@pytest.mark.anyio
@pytest.mark.parametrize("lines", [3, 40_000])  # read whole, and block by block
async def test_a_file_cut_inside_a_character_is_named_as_such(
    tmp_path: Path, root: Path, lines: int
) -> None:
    # A CI log cut at a byte limit, or one still being written: UTF-8 but for its end.
    (root / "cut.log").write_bytes("step ✓ done\n".encode() * lines + "step ✓".encode()[:-1])
    (root / "ascii.log").write_bytes(b"step done\n" * lines + b"caf\xe9")  # may be Latin-1
    async with serve(tmp_path, [root]) as c:
        msg = await refused(c, file_path="cut.log")
        latin1 = await refused(c, file_path="ascii.log")
    assert "ends inside a character (2 bytes of a UTF-8 character" in msg
    assert "head -c -2 cut.log > whole-cut.log" in msg and "iconv" not in msg  # latin1: garbled
    assert "not valid UTF-8" in latin1 and "iconv -f latin1" in latin1
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_a_binary_file_is_named_as_such_without_the_iconv_advice(
    tmp_path: Path, root: Path
) -> None:
    (root / "app.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)
    async with serve(tmp_path, [root]) as c:
        msg = await refused(c, file_path="app.bin")
    assert "is not text" in msg and "binary" in msg and "iconv" not in msg
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_a_leading_tilde_is_the_home_directory(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "secret.txt").write_text("beside the root, not in it\n")
    async with serve(tmp_path, [root]) as c:
        ok = await c.call_tool("doc_ingest", {"file_path": "~/root/sub/deep.txt"})
        outside = await refused(c, file_path="~/secret.txt")
    assert not ok.is_error, ok.content
    assert "deep.txt" in ok.content[0].text  # type: ignore[union-attr]
    assert "no readable file '~/secret.txt'" in outside  # the roots still bound it


@pytest.mark.anyio
async def test_a_path_as_a_model_writes_it_is_read(tmp_path: Path, root: Path) -> None:
    (root / "my notes.md").write_text("# Notes\nthe spaced one\n")
    (tmp_path / "secret.txt").write_text("beside the root, not in it\n")
    (root / " padded.txt").write_text("a name that starts with a space\n")
    written = [
        f"file://{root}/my%20notes.md",  # as MCP names roots
        f'"{root}/sub/deep.txt"',  # Windows' "Copy as path"
        f"  '{root}/ok.txt' \n",
    ]
    async with serve(tmp_path, [root]) as c:
        answers = [await c.call_tool("doc_ingest", {"file_path": p}) for p in written]
        exact = await c.call_tool("doc_ingest", {"file_path": " padded.txt"})
        outside = await refused(c, file_path=f"file://{tmp_path}/secret.txt")
        quoted_outside = await refused(c, file_path=f'"{tmp_path}/secret.txt"')
    texts = [a.content[0].text for a in [*answers, exact]]  # type: ignore[union-attr]
    assert not any(a.is_error for a in answers) and not exact.is_error, texts
    assert [t.split(": ")[0].split(" (")[1] for t in texts] == [
        "my notes.md)",
        "deep.txt)",
        "ok.txt)",
        "padded.txt)",  # a name with a leading space, as written, is still read
    ]
    assert "no readable file 'file://" in outside and "no readable file '\"" in quoted_outside


LOG = "".join(f"step {i}: compiled module_{i} ok\n" for i in range(300)) + "ERROR: link failed\n"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("encoding", "advice"),
    [  # Windows PowerShell's ">" writes the first; without a mark, iconv needs the order
        ("utf-16", "iconv -f utf-16 -t utf-8"),
        ("utf-16-be", "iconv -f utf-16be -t utf-8"),
        ("utf-16-le", "iconv -f utf-16le -t utf-8"),
    ],
)
async def test_utf16_is_named_with_the_conversion(
    tmp_path: Path, root: Path, encoding: str, advice: str
) -> None:
    (root / "build.log").write_bytes(LOG.encode(encoding))
    (root / "cjk.log").write_text("日本語のログ。" * 300, encoding=encoding)
    async with serve(tmp_path, [root]) as c:
        msg = await refused(c, file_path="build.log")
        cjk = await refused(c, file_path="cjk.log")
    assert "is UTF-16 text" in msg and advice in msg and "binary" not in msg
    if encoding == "utf-16":  # no zero bytes to go by without the mark
        assert "is UTF-16 text" in cjk and advice in cjk
    nothing_written(tmp_path)


def packed(kind: str, name: str, data: bytes) -> bytes:
    """``data`` as a file of ``kind`` holds it, made by the standard library."""
    if kind == "zip":
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(name, data)
        return buffer.getvalue()
    if kind == "pdf":  # a PDF's text is in compressed streams
        return b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\nstream\n" + zlib.compress(data)
    return {"gz": gzip.compress, "xz": lzma.compress}[kind](data)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("kind", "advice"),
    [
        ("gz", "is gzip-compressed: decompress it first (e.g. gunzip -k build.log.gz)"),
        ("xz", "is xz-compressed: decompress it first (e.g. unxz -k build.log.xz)"),
        ("zip", "is a zip archive: extract it (e.g. unzip build.log.zip), then ingest"),
        ("pdf", "is a PDF: extract its text first (e.g. pdftotext -layout build.log.pdf)"),
    ],
)
async def test_a_compressed_file_or_a_pdf_is_named_with_what_to_run(
    tmp_path: Path, root: Path, kind: str, advice: str
) -> None:
    (root / f"build.log.{kind}").write_bytes(packed(kind, "build.log", LOG.encode() * 40))
    async with serve(tmp_path, [root]) as c:
        msg = await refused(c, file_path=f"build.log.{kind}")
    assert advice in msg, msg
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_a_log_with_a_block_of_zero_bytes_is_still_text(tmp_path: Path, root: Path) -> None:
    (root / "crashed.log").write_bytes(bytes(8192) + LOG.encode())  # as a crash can leave it
    async with serve(tmp_path, [root]) as c:
        res = await c.call_tool("doc_ingest", {"file_path": "crashed.log"})
        assert not res.is_error, res.content
        hit = await c.call_tool("doc_search", {"query": "link failed"})
    assert "ERROR: link failed" in hit.content[0].text  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_over_the_size_limit_is_refused_before_reading(tmp_path: Path, root: Path) -> None:
    (root / "big.txt").write_text("word " * 200)
    settings = load_settings(
        {"data_dir": tmp_path / "data", "llm_enabled": False, "ingest_roots": [root]}, environ={}
    )
    service = Service(settings)
    service.documents.max_chars = 100
    service.documents.max_file_bytes = 100
    async with Client(build_server(service)) as c:
        msg = await refused(c, file_path="big.txt")
        msg2 = await refused(c, text="x" * 101)
    assert "the limit is" in msg and "the limit is" in msg2
    nothing_written(tmp_path)


@pytest.mark.anyio
async def test_no_roots_configured(tmp_path: Path) -> None:
    async with serve(tmp_path, []) as c:
        msg = await refused(c, file_path="anything.txt")
        ok = await c.call_tool("doc_ingest", {"text": "inline text still works"})
    assert "none is configured: pass text instead" in msg
    assert not ok.is_error


@pytest.mark.anyio
async def test_exactly_one_source(tmp_path: Path, root: Path) -> None:
    async with serve(tmp_path, [root]) as c:
        both = await refused(c, text="hello there", file_path="ok.txt")
        neither = await refused(c, title="nothing")
    assert "exactly one source" in both and "exactly one source" in neither
    nothing_written(tmp_path)


def test_file_swapped_for_a_symlink_after_the_check_is_refused(tmp_path: Path, root: Path) -> None:
    """Between resolving and opening, the file becomes a symlink: O_NOFOLLOW refuses it."""
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    target = root / "ok.txt"
    swapped: list[str] = []

    def swap_before_open(path: str) -> None:
        if Path(path).name == "ok.txt" and not swapped:
            swapped.append(path)
            target.unlink()
            target.symlink_to(secret)

    with (
        watching_opens(swap_before_open),
        pytest.raises(AccessDenied),
        open_file("ok.txt", [root], 1000),
    ):
        pass
    assert swapped, "the sandbox never opened ok.txt"
