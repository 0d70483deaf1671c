"""Every doc_* tool through a real in-memory mcp.Client, including restarts and progress."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult

from context_window.config import load_settings
from context_window.documents.ranking import CANDIDATE_CHUNKS
from context_window.server.app import build_server
from context_window.service import Service
from context_window.tokens import TokenCounter
from tests.helpers import fullwidth

DOCS = Path(__file__).parents[1] / "data" / "docs"
DOC_TOOLS = {
    "doc_ingest",
    "doc_outline",
    "doc_search",
    "doc_window",
    "doc_summarize",
    "doc_list",
    "doc_forget",
}


@asynccontextmanager
async def serve(tmp_path: Path, **flags: Any) -> AsyncIterator[Client]:
    """A fresh Service and server on ``tmp_path/data``: calling it twice is a restart."""
    base: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "llm_enabled": False,
        "ingest_roots": [DOCS],
        "chunk_tokens": 200,
        "chunk_overlap": 20,
    }
    service = Service(load_settings({**base, **flags}, environ={}))
    try:
        async with Client(build_server(service)) as c:
            yield c
    finally:
        await service.aclose()


def text_of(res: CallToolResult) -> str:
    out = res.content[0].text  # type: ignore[union-attr]
    assert isinstance(out, str)
    return out


async def ok(c: Client, tool: str, **args: Any) -> tuple[str, dict[str, Any]]:
    res = await c.call_tool(tool, args)
    assert not res.is_error, text_of(res)
    return text_of(res), res.structured_content or {}


async def error(c: Client, tool: str, **args: Any) -> str:
    res = await c.call_tool(tool, args)
    assert res.is_error
    return text_of(res)


@pytest.mark.anyio
async def test_every_document_tool(tmp_path: Path) -> None:
    async with serve(tmp_path) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert names >= DOC_TOOLS
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert tools["doc_forget"].annotations.destructive_hint  # type: ignore[union-attr]
        assert tools["doc_search"].annotations.read_only_hint  # type: ignore[union-attr]

        text, data = await ok(c, "doc_ingest", file_path="build.log", doc_id="build")
        assert "next: doc_outline / doc_search" in text.replace(
            "(doc_id='build') / doc_search(query, doc_id='build')", " / doc_search"
        )
        assert data["chunks"] > 10 and data["tokens"] > 0 and data["chars"] > 0
        note = "# Notes\n\nThe cache lives in /var/cache/app."
        text, data = await ok(c, "doc_ingest", text=note, title="n")
        assert data["chunks"] == 1 and ", 1 chunk in " in text  # counts read as people say them

        text, data = await ok(c, "doc_outline", doc_id="build")
        assert "(no heading)" in text and data["outline"][0]["index"] == 0
        text, data = await ok(c, "doc_outline", doc_id="build", summarize=True, max_chunks=3)
        assert text.count("\n[") == 3 and "tokens:" in text

        text, data = await ok(c, "doc_search", query="maxConnections", doc_id="build")
        top = data["hits"][0]
        assert text.splitlines()[3].startswith(f"# build [{top['chunk']}] · lines ")
        line = "1719: [01717] src/net/socket_pool.c:212: error: 'struct pool' has no member"
        assert line in text  # the matching line, with its number in the source
        assert top["passages"][0]["first_line"] <= 1719 <= top["last_line"]
        assert any("maxConnections" in p["text"] for p in top["passages"])
        failing = top["chunk"]
        text, data = await ok(c, "doc_search", query="cache")  # every document
        assert data["hits"][0]["doc_id"] != "build"
        text, _ = await ok(c, "doc_search", query="zyzzyva quux")
        assert "Try other" in text
        text, data = await ok(c, "doc_search", query="src module", limit=2, budget_tokens=300)
        # Every compile line has one shape: the first stands for the rest of those read.
        assert "1: [00000] CC src/module_0/file_0.o ok (+" in text and len(data["hits"]) <= 2

        text, data = await ok(
            c, "doc_window", doc_id="build", **{"from": failing - 1, "to": failing}
        )
        assert [ch["index"] for ch in data["chunks"]] == [failing - 1, failing]
        assert "maxConnections" in text

        text, data = await ok(c, "doc_summarize", doc_id="build", target_tokens=80)
        assert data["method"] == "extractive" and "LLM disabled" in text and not data["cached"]
        _, again = await ok(c, "doc_summarize", doc_id="build", target_tokens=80)
        assert again["cached"] and again["text"] == data["text"]
        _, fresh = await ok(c, "doc_summarize", doc_id="build", target_tokens=80, refresh=True)
        assert not fresh["cached"]
        _, part = await ok(c, "doc_summarize", doc_id="build", **{"from": 1, "to": 2})
        assert not part["whole"] and part["from"] == 1

        text, data = await ok(c, "doc_list")
        assert {d["id"] for d in data["documents"]} >= {"build"} and len(data["documents"]) == 2
        await ok(
            c, "doc_forget", doc_id=next(d["id"] for d in data["documents"] if d["id"] != "build")
        )
        text, _ = await ok(c, "doc_list")
        assert text.startswith("1 document (newest first):")

        assert "no document 'nope'" in await error(c, "doc_window", doc_id="nope")
        await ok(c, "doc_forget", doc_id="build")
        assert not (tmp_path / "data" / "documents" / "build").exists()
        assert "doc_list" in await error(c, "doc_search", query="x1", doc_id="build")


@pytest.mark.anyio
async def test_cursor_survives_a_restart(tmp_path: Path) -> None:
    async with serve(tmp_path) as c:
        _, doc = await ok(c, "doc_ingest", file_path="build.log", doc_id="log")
        _, first = await ok(c, "doc_window", doc_id="log", budget_tokens=500)
    index_dir = tmp_path / "data" / "documents" / "log" / "index"
    assert (index_dir / "terms.bin").is_file() and (index_dir / "post_chunks.npy").is_file()
    async with serve(tmp_path) as c:  # a new Service on the same data dir
        _, second = await ok(c, "doc_window", doc_id="log", budget_tokens=500)
        assert second["chunks"][0]["index"] == first["cursor"]
        _, hits = await ok(c, "doc_search", query="maxConnections", doc_id="log")
        assert hits["hits"]
        last = doc["chunks"] - 1
        _, tail = await ok(c, "doc_window", doc_id="log", **{"from": last})
        assert tail["at_end"] and tail["cursor"] == doc["chunks"]
        text, end = await ok(c, "doc_window", doc_id="log")
        assert "end of document; reset=true to start over" in text and not end["chunks"]
        _, again = await ok(c, "doc_window", doc_id="log", reset=True, budget_tokens=200)
        assert again["chunks"][0]["index"] == 0
        assert "before from" in await error(c, "doc_window", doc_id="log", **{"from": 5, "to": 2})
        msg = await error(c, "doc_window", doc_id="log", **{"from": doc["chunks"]})
        assert f"has {doc['chunks']} chunks" in msg


@pytest.mark.anyio
async def test_ingest_reports_progress(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    line = "2024-01-01 12:00:00 INFO worker_{i} processed job {i} in {i} ms\n"
    (root / "big.log").write_text("".join(line.format(i=i) for i in range(60_000)))
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, total, message))

    async with serve(tmp_path, ingest_roots=[root]) as c:
        res = await c.call_tool("doc_ingest", {"file_path": "big.log"}, progress_callback=progress)
        assert not res.is_error, text_of(res)
        dup = await c.call_tool("doc_ingest", {"file_path": "big.log"})
        assert "Same content as doc" in text_of(dup)
    assert len(seen) >= 2 and seen[-1][0] == 100.0 and seen[-1][1] == 100.0
    assert seen[-1][2] == f"done: {res.structured_content['chunks']:,} chunks"  # type: ignore[index]
    values = [v for v, _, _ in seen]
    assert values == sorted(values)


@pytest.mark.anyio
async def test_a_file_that_starts_with_a_byte_order_mark_keeps_its_first_heading(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    run, port = "Run the installer first. " * 8, "Set the port it listens on. " * 8
    guide = f"# Install guide\r\n\r\n{run}\r\n\r\n## Configure\r\n\r\n{port}\r\n"
    (root / "guide.md").write_text(guide, encoding="utf-8-sig", newline="")  # as Windows writes
    (root / "blank.md").write_bytes(b"\xef\xbb\xbf\r\n")
    async with serve(tmp_path, ingest_roots=[root], chunk_tokens=40, chunk_overlap=0) as c:
        await ok(c, "doc_ingest", file_path="guide.md", doc_id="guide")
        _, data = await ok(c, "doc_outline", doc_id="guide")
        headings = list(dict.fromkeys(e["heading"] for e in data["outline"]))
        assert headings == ["Install guide", "Install guide > Configure"]
        _, data = await ok(c, "doc_search", query="installer", doc_id="guide")
        assert data["hits"][0]["heading"] == "Install guide"
        empty = await c.call_tool("doc_ingest", {"file_path": "blank.md"})
        assert empty.is_error and "is empty: nothing to ingest" in text_of(empty)


@pytest.mark.anyio
async def test_search_with_a_budget_below_one_chunk_still_shows_the_best_hit(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path, chunk_tokens=800, chunk_overlap=0) as c:
        log = "\n".join(
            f"081109 2035{i:02d} INFO block blk_{i} served to 10.0.0.{i}" for i in range(400)
        )
        await ok(c, "doc_ingest", text=log + "\nFATAL disk quota exceeded on node7\n", doc_id="big")
        text, data = await ok(c, "doc_search", query="quota exceeded", budget_tokens=100)
        assert len(data["hits"]) == 1 and data["used_tokens"] <= 100
        assert text.startswith("1 hit, best first")
        assert "401: FATAL disk quota exceeded on node7" in text  # the line, numbered


@pytest.mark.anyio
async def test_search_finds_words_in_any_unicode_form(tmp_path: Path) -> None:
    lines = log_lines(600)
    lines[100] = "2024-05-02 10:40:00 WARN conﬁguration ﬁle for cafe\u0301 not found"  # PDF, macOS
    lines[500] = "2024-05-06 10:20:00 INFO configuration file reloaded"
    async with serve(tmp_path, chunk_tokens=200, chunk_overlap=0) as c:
        await ok(c, "doc_ingest", text="\n".join(lines), doc_id="log")
        for query in ("configuration file", "conﬁguration ﬁle", fullwidth("Configuration")):
            text, _ = await ok(c, "doc_search", query=query, doc_id="log", budget_tokens=1000)
            assert f"101: {lines[100]}" in text and f"501: {lines[500]}" in text, query
        text, _ = await ok(c, "doc_search", query="caf\u00e9", doc_id="log")
        assert f"101: {lines[100]}" in text


@pytest.mark.anyio
async def test_a_log_in_colour_is_searched_by_its_words_and_shown_without_codes(
    tmp_path: Path,
) -> None:
    """A CI log downloaded raw keeps its ANSI colours: words for the index, noise to a model
    (each code costs tokens), so answers show the text without them; the copy keeps them."""
    lines = [f"\x1b[36m[{i:04d}]\x1b[0m \x1b[32mPASS\x1b[0m test_{i}" for i in range(600)]
    lines[100] = "\x1b[1m\x1b[31merror\x1b[0m: linker failed for target \x1b[36mpayments\x1b[0m"
    shown = "error: linker failed for target payments"
    async with serve(tmp_path, chunk_tokens=200, chunk_overlap=20) as c:
        await ok(c, "doc_ingest", text="\n".join(lines), doc_id="ci")
        answers = [
            await ok(c, "doc_search", query="error payments", doc_id="ci"),
            await ok(c, "doc_window", doc_id="ci", line=101),
            await ok(c, "doc_summarize", doc_id="ci", target_tokens=2000),
            await ok(c, "doc_list"),
        ]
        assert answers[0][0].startswith("1 hit, best first") and f"101: {shown}" in answers[0][0]
        assert f"\n{shown}\n[0101] PASS test_101\n" in answers[1][0]
        assert "read chunks 0-" in answers[2][0] and "\n[0000] PASS test_0\n" in answers[2][0]
        assert "[0000] PASS test_0" in answers[3][0]  # its title, from its first line
        assert not any("\x1b" in json.dumps(a) for a in answers)
    source = next((tmp_path / "data" / "documents").glob("*/source.txt")).read_text()
    assert source == "\n".join(lines)


@pytest.mark.anyio
async def test_a_block_of_zero_bytes_in_a_log_is_named_not_sent(tmp_path: Path) -> None:
    """A crash leaves a block of zero bytes in a log, and the next line is written after
    it: answers name the block by its size; the stored copy keeps every byte."""
    lines = [f"Dec 10 06:{i // 60:02d}:{i % 60:02d} kernel: event {i} ok" for i in range(300)]
    lines[150] = "\x00" * 20_000 + lines[150]
    async with serve(tmp_path, chunk_tokens=200, chunk_overlap=0) as c:
        await ok(c, "doc_ingest", text="\n".join(lines), doc_id="crash")
        said = [
            (await ok(c, "doc_search", query="event 150", doc_id="crash"))[0],
            *[(await ok(c, "doc_window", doc_id="crash", budget_tokens=4000))[0] for _ in range(9)],
        ]
        assert (
            "\n151: [" in said[0] and " zero bytes]Dec 10 06:02:30 kernel: event 150 ok" in said[0]
        )
        windows = "".join(said[1:])
        assert "event 299 ok" in windows and not any("\x00" in t for t in said)
        blocks = [int(n.replace(",", "")) for n in re.findall(r"\[([\d,]+) zero bytes\]", windows)]
        assert sum(blocks) == 20_000  # each chunk names its part of the block
    source = next((tmp_path / "data" / "documents").glob("*/source.txt")).read_text()
    assert source == "\n".join(lines)


@pytest.mark.anyio
async def test_search_finds_a_word_inside_a_run_of_chinese_or_japanese(tmp_path: Path) -> None:
    lines = log_lines(600)
    lines[100] = "2024-05-02 10:40:00 WARN 数据库连接超时、已经重试三次"  # no space between words
    lines[300] = "2024-05-04 10:00:00 ERROR 設定ファイルが見つかりません"
    async with serve(tmp_path, chunk_tokens=200, chunk_overlap=0) as c:
        await ok(c, "doc_ingest", text="\n".join(lines), doc_id="log")
        for query, line in (("数据库", 101), ("连接超时", 101), ("設定ファイル", 301)):
            text, _ = await ok(c, "doc_search", query=query, doc_id="log")
            assert text.startswith("1 hit, best first") and f"{line}: {lines[line - 1]}" in text
        # A long paragraph on one line: the sentence that matches is shown, found by its 。
        said = [f"第{i}句话没有什么特别的内容。" for i in range(60)]
        said[45] = "数据库连接超时已经重试三次。"
        await ok(c, "doc_ingest", text="# 运维\n\n" + "".join(said), doc_id="zh")
        text, _ = await ok(c, "doc_search", query="连接超时", doc_id="zh", budget_tokens=200)
        assert f"{said[44]}{said[45]}{said[46]}" in text  # as written: no space put between


@pytest.mark.anyio
async def test_search_shows_the_matching_part_of_a_long_line(tmp_path: Path) -> None:
    users = [
        {"id": i, "name": f"user{i}", "role": "admin" if i == 777 else "member"}
        for i in range(2000)
    ]
    said = " ".join(f"Retrying connection to host-{i} after a timeout." for i in range(60))
    async with serve(tmp_path) as c:
        # JSON on one line, no sentence in it: with spaces, and minified without any.
        for doc_id, dump in (
            ("spaced", json.dumps(users)),
            ("tight", json.dumps(users, separators=(",", ":"))),
        ):
            await ok(c, "doc_ingest", text=dump, doc_id=doc_id)  # a JSON text stays text
            for query in ("admin", "user777"):
                text, _ = await ok(c, "doc_search", query=query, doc_id=doc_id, budget_tokens=200)
                shown = [line for line in text.split("\n") if line.startswith("1: ")]
                assert any(f'"{query}"' in line for line in shown), (doc_id, query, text)
        # Sentences of one shape on one line: each stands alone, none hides the others.
        await ok(
            c, "doc_ingest", text=f"# Ops\n\n{said} The disk quota was exceeded.", doc_id="ops"
        )
        text, data = await ok(
            c, "doc_search", query="retrying connection", doc_id="ops", budget_tokens=300
        )
        assert data["hits"] and "3: Retrying connection to host-" in text, text


@pytest.mark.anyio
async def test_records_in_lower_case_are_lines_and_wrapped_prose_is_a_paragraph(
    tmp_path: Path,
) -> None:
    build = [f"cc -O2 -c src/mod{i}.c -o build/mod{i}.o" for i in range(16)]
    build[8:8] = ["src/parser.c:88:5: error: implicit declaration of function 'yylex'"]
    build += ["error: ld returned 1 exit status"]  # a label, as git and cargo start lines
    build += [f"sshd[{800 + i}]: session opened for user deploy{i}" for i in range(8)]
    prose = [
        "The parser reads the grammar in two passes, and",
        "the second pass resolves every forward reference",
        "before the code generator runs.",
    ]
    async with serve(tmp_path, chunk_tokens=800) as c:
        await ok(c, "doc_ingest", text="\n".join([*build, "", *prose]), doc_id="build")
        for query, first, last in (
            ("yylex", 9, 9),
            ("mod3", 4, 4),
            ("returned", 18, 18),
            ("deploy5", 24, 24),
            ("forward reference", 28, 30),
        ):
            _, data = await ok(c, "doc_search", query=query, doc_id="build", budget_tokens=1500)
            shown = [p for h in data["hits"] for p in h["passages"]]
            hit = next(p for p in shown if query.split()[0] in p["text"])
            assert (hit["first_line"], hit["last_line"]) == (first, last), (query, hit)


@pytest.mark.anyio
async def test_an_extractive_summary_of_russian_text_is_not_empty(tmp_path: Path) -> None:
    said = ["Сервер перезагрузился ночью.", "База данных не отвечала.", "Погода хорошая."]
    async with serve(tmp_path) as c:
        await ok(c, "doc_ingest", text="# Журнал\n\n" + " ".join(said * 20), doc_id="ru")
        text, data = await ok(c, "doc_summarize", doc_id="ru", target_tokens=60)
    assert data["method"] == "extractive" and 0 < data["tokens"] <= 60
    assert any(sentence in text.split("\n", 2)[2] for sentence in said)


def log_lines(n: int) -> list[str]:
    """A log where every fifth line is a timeout of the same shape, the rest noise."""
    out = []
    for i in range(n):
        if i % 5 == 3:
            out.append(
                f"2024-05-0{i % 9 + 1} 10:{i % 60:02d}:00 WARN rpc timeout after {i} ms on node-{i}"
            )
        else:
            out.append(f"2024-05-0{i % 9 + 1} 10:{i % 60:02d}:00 INFO worker {i} heartbeat ok")
    return out


@pytest.mark.anyio
async def test_search_shows_numbered_lines_and_collapses_same_shaped_ones(tmp_path: Path) -> None:
    lines = log_lines(600)
    async with serve(tmp_path, chunk_tokens=200, chunk_overlap=0) as c:
        await ok(c, "doc_ingest", text="\n".join(lines), doc_id="log")
        text, data = await ok(
            c, "doc_search", query="rpc timeout", doc_id="log", limit=3, budget_tokens=400
        )
    # The first timeout is shown once, with its line number; the others are listed by number.
    assert f"4: {lines[3]} (+" in text
    assert "like it: lines 9, 14, " in text
    shown = [p for h in data["hits"] for p in h["passages"]]
    first = next(p for p in shown if p["first_line"] == 4)
    # Those of the chunks read (each holds two or more), each a timeout line, in order.
    like = first["like_lines"]
    assert like[:2] == [9, 14] and len(like) > 2 * CANDIDATE_CHUNKS and like == sorted(like)
    assert all(n % 5 == 4 for n in like)
    assert sum("rpc timeout" in p["text"] for p in shown) == 1
    # The neighbours of the collapsed lines open no hits of their own.
    assert [h["chunk"] for h in data["hits"]] == [0]
    for h in data["hits"]:
        assert h["doc_id"] == "log" and h["first_line"] <= h["last_line"]
        assert all(h["first_line"] <= p["first_line"] <= h["last_line"] for p in h["passages"])


@pytest.mark.anyio
async def test_search_fills_the_budget_with_hits_up_to_the_limit(tmp_path: Path) -> None:
    notes = [f"Note {i}: the parser handles case {i} of the grammar." for i in range(300)]
    notes[40] = "The tokenizer crashed on a tab character in the grammar file."
    notes[200] = "The tokenizer was rewritten to accept tabs."
    async with serve(tmp_path, chunk_tokens=200, chunk_overlap=0) as c:
        await ok(c, "doc_ingest", text="\n\n".join(notes), doc_id="notes")
        _, data = await ok(c, "doc_search", query="tokenizer tab", doc_id="notes", limit=5)
        assert [p["text"] for p in data["hits"][0]["passages"] if "tokenizer" in p["text"]]
        assert (
            sum(
                notes[40] in p["text"] or notes[200] in p["text"]
                for h in data["hits"]
                for p in h["passages"]
            )
            == 2
        )
        assert len(data["hits"]) == 2  # limit is a ceiling: only two chunks match
        tools = ["parser", "lexer", "checker", "printer", "linker", "formatter", "loader"]
        rules = ["if", "loop", "call", "return", "class", "match", "import", "yield", "raise"]
        varied = [
            f"The {tools[i % 7]} handles the {rules[i % 9]} rule of the grammar {chr(97 + i % 26)}."
            for i in range(400)
        ]
        await ok(c, "doc_ingest", text="\n\n".join(varied), doc_id="varied")
        args = {"query": "grammar rule", "doc_id": "varied", "budget_tokens": 1500}
        _, wide = await ok(c, "doc_search", limit=10, **args)
        one_text, one = await ok(c, "doc_search", limit=1, **args)
        assert len(one["hits"]) == 1 < len(wide["hits"]) <= 10
        assert one["omitted"] > 0 and "more matching lines not shown" in one_text
        assert wide["used_tokens"] > 0.8 * 1500  # the budget is used, not left empty


@pytest.mark.anyio
async def test_search_reads_more_chunks_while_most_of_those_read_are_shown(tmp_path: Path) -> None:
    animals = ["elk", "bison", "moose", "caribou", "yak", "ibex", "oryx", "kudu", "eland", "gnu"]
    animals += ["okapi", "tapir", "zebu", "gaur", "saiga", "takin", "bongo", "nyala", "dik", "roan"]
    animals.insert(2, animals[0])  # a chunk whose line repeats an earlier one's
    lines = []
    for k, animal in enumerate(animals):  # one matching line in each chunk of ~200 tokens
        lines += [f"{k:02d}:{i:02d} INFO worker heartbeat ok, queue empty" for i in range(25)]
        lines.append(f"{k:02d}:25 WARN the {animal} herd crossed the frozen river")
    async with serve(tmp_path, chunk_tokens=200, chunk_overlap=0) as c:
        await ok(c, "doc_ingest", text="\n".join(lines), doc_id="herds")
        args = {"query": "herd crossed frozen river", "doc_id": "herds", "budget_tokens": 8000}
        _, data = await ok(c, "doc_search", limit=16, **args)
        # 16 chunks read, each a hit but the one whose line stands under the first's.
        assert len(data["hits"]) == 15 > CANDIDATE_CHUNKS
        herds = [p for h in data["hits"] for p in h["passages"] if " herd " in p["text"]]
        assert len({p["text"] for p in herds}) == 15
        assert [p["like_lines"] for p in herds if " elk " in p["text"]] == [[3 * 26]]
        _, few = await ok(c, "doc_search", limit=3, **args)
        assert len(few["hits"]) == 3


@pytest.mark.anyio
async def test_search_reads_every_chunk_ranked_when_they_fit_the_budget_together(
    tmp_path: Path,
) -> None:
    # Eight short chunks hold lines of one shape (they collapse into one hit), two more
    # rank below them with lines of their own. The first six read would stop the search
    # (most earn no hit of their own); but all ten fit a large budget together, so they
    # are read at once and the two others shown. A budget they do not fit keeps the rule.
    same = [f"disk full on node {k}: disk full again, retry at {k}0 s" for k in range(8)]
    other = [f"disk {a} full, said the {a} keeper, and the shed too" for a in ("yak", "elk")]
    text = "\n\n".join(same + other)
    async with serve(tmp_path, chunk_tokens=32, chunk_overlap=0) as c:
        await ok(c, "doc_ingest", text=text, doc_id="disks")
        args = {"query": "disk full", "doc_id": "disks", "limit": 10}
        _, wide = await ok(c, "doc_search", budget_tokens=4000, **args)
        _, tight = await ok(c, "doc_search", budget_tokens=120, **args)
    shown = [p["text"] for h in wide["hits"] for p in h["passages"]]
    assert any("yak keeper" in t for t in shown) and any("elk keeper" in t for t in shown)
    assert sum("disk full on node" in t for t in shown) == 1  # the eight as one, collapsed
    narrow = [p["text"] for h in tight["hits"] for p in h["passages"]]
    assert not any("keeper" in t for t in narrow)


@pytest.mark.anyio
async def test_search_without_searchable_words_shows_the_outline(tmp_path: Path) -> None:
    async with serve(tmp_path) as c:
        await ok(c, "doc_ingest", file_path="guide.md", doc_id="guide")
        text, data = await ok(c, "doc_search", query="the of ??", doc_id="guide")
        assert text.startswith("No searchable words in the query")
        assert "Outline of guide:" in text and "[0]" in text
        assert data["searchable"] is False and data["hits"] == []
        text, _ = await ok(c, "doc_search", query="!!")
        assert "Documents:" in text and "guide:" in text


@pytest.mark.anyio
async def test_window_opens_at_a_line_with_context_above(tmp_path: Path) -> None:
    lines = log_lines(600)
    async with serve(tmp_path, chunk_tokens=200, chunk_overlap=0) as c:
        await ok(c, "doc_ingest", text="\n".join(lines), doc_id="log")
        text, data = await ok(c, "doc_window", doc_id="log", line=300, budget_tokens=300)
        body = text.split("\n", 2)[2]
        assert body.split("\n", 1)[1].startswith(lines[296])  # three lines above line 300
        assert data["chunks"][0]["line"] == 297
        assert lines[299] in text
        _, more = await ok(c, "doc_window", doc_id="log", budget_tokens=300)
        assert more["chunks"][0]["index"] == data["cursor"]  # the cursor moved on from there
        assert "out of range" in await error(c, "doc_window", doc_id="log", line=601)
        assert "not both" in await error(c, "doc_window", doc_id="log", line=5, **{"from": 0})


@pytest.mark.anyio
@pytest.mark.parametrize("budget", [64, 100, 300, 2000])
async def test_every_budgeted_document_answer_fits_its_budget(tmp_path: Path, budget: int) -> None:
    from context_window.tokens import TokenCounter

    count = TokenCounter(0.27).count
    async with serve(tmp_path) as c:
        await ok(c, "doc_ingest", file_path="build.log", doc_id="build")
        await ok(c, "doc_ingest", file_path="guide.md", doc_id="guide")
        for args in (
            {"query": "error socket pool"},
            {"query": "maxConnections", "doc_id": "build", "limit": 1},
            {"query": "install configure", "doc_id": "guide"},
            {"query": "the of", "doc_id": "build"},
        ):
            text, data = await ok(c, "doc_search", budget_tokens=budget, **args)
            assert count(text) <= budget, (args, text)
            if data["hits"]:  # the header states the answer's own size
                assert count(text) <= data["used_tokens"] <= budget
        for args in (
            {"doc_id": "build"},
            {"doc_id": "guide", "line": 12},
            {"doc_id": "build", "from": 3},
        ):
            text, data = await ok(c, "doc_window", budget_tokens=budget, **args)
            assert count(text) <= budget, (args, text)
            assert count(text) <= data["used_tokens"] <= budget
    if budget >= 100:  # doc_outline takes the server's --budget
        async with serve(tmp_path, budget=budget) as c:
            for doc in ("build", "guide"):
                text, _ = await ok(c, "doc_outline", doc_id=doc)
                assert count(text) <= budget, text


@pytest.mark.anyio
async def test_lines_collapse_only_when_they_match_the_same_query_terms(tmp_path: Path) -> None:
    lines = [
        f"2024-01-01 10:00:{i % 60:02d} ERROR disk {i} failed on sda{i % 3}" for i in range(90)
    ]
    async with serve(tmp_path, chunk_tokens=200, chunk_overlap=0) as c:
        await ok(c, "doc_ingest", text="\r\n".join(lines), doc_id="disks")
        text, data = await ok(c, "doc_search", query="failed sda2", doc_id="disks", limit=3)
    # The query names sda2: its lines are not folded into the first sda0 line.
    assert f"3: {lines[2]} (+" in text and f"1: {lines[0]} (+" in text
    shown = {p["first_line"]: p["like_lines"] for h in data["hits"] for p in h["passages"]}
    assert shown[3] and all(n % 3 == 0 for n in shown[3])  # sda2 is on lines 3, 6, 9, ...
    assert not any(n % 3 == 0 for n in shown[1])


@pytest.mark.anyio
async def test_window_at_a_line_cut_into_many_chunks_opens_at_its_start(tmp_path: Path) -> None:
    one_line = " ".join(f"word{i}" for i in range(6000))
    async with serve(tmp_path, chunk_tokens=200, chunk_overlap=0) as c:
        _, doc = await ok(c, "doc_ingest", text=one_line + "\nsecond line", doc_id="long")
        assert doc["chunks"] > 5
        _, data = await ok(c, "doc_window", doc_id="long", line=1, budget_tokens=300)
        assert data["chunks"][0]["index"] == 0 and data["chunks"][0]["text"].startswith("word0 ")
        _, data = await ok(c, "doc_window", doc_id="long", line=2, budget_tokens=300)
        assert data["chunks"][0]["line"] == 1  # three lines above line 2 is line 1


@pytest.mark.anyio
async def test_doc_list_shows_the_newest_that_fit_the_budget(tmp_path: Path) -> None:
    async with serve(tmp_path, budget=600) as c:
        for i in range(60):
            await ok(c, "doc_ingest", text=f"deploy note for module{i:02}\n", doc_id=f"d{i:02}")
        text, data = await ok(c, "doc_list")
        searched, _ = await ok(c, "doc_search", query="module03")
    counter = TokenCounter(load_settings({"data_dir": tmp_path}, environ={}).token_ratio)
    lines = text.splitlines()
    assert counter.count(text) <= 600 and lines[0] == "60 documents (newest first):"
    shown = [line.split(":")[0].strip() for line in lines[1:-1]]
    assert 5 < len(shown) < 60 and shown == [f"d{i:02}" for i in range(59, 59 - len(shown), -1)]
    assert (
        lines[-1]
        == f"{60 - len(shown)} more did not fit: doc_search without doc_id searches every document"
    )
    assert data["cut"] and 0 < len(data["documents"]) < 60  # the structured list is fitted too
    assert "# d03 [0]" in searched  # the oldest are still found


@pytest.mark.anyio
async def test_an_id_in_another_case_names_the_same_document(tmp_path: Path) -> None:
    async with serve(tmp_path) as c:
        await ok(c, "doc_ingest", text="# Spec\nalpha beta gamma\n", doc_id="Spec")
        searched, _ = await ok(c, "doc_search", query="gamma", doc_id="spec")
        await ok(c, "context_open", session_id="Reader")
        paged, _ = await ok(c, "doc_window", doc_id="SPEC", session_id="reader")
        outline, _ = await ok(c, "doc_outline", doc_id="spec")
        listed_text, cursors = await ok(c, "doc_list")
        replaced, _ = await ok(c, "doc_ingest", text="# Spec\nalpha beta delta\n", doc_id="SPEC")
        _, listed = await ok(c, "doc_list")
        forgot, _ = await ok(c, "doc_forget", doc_id="sPeC")
        _, after = await ok(c, "doc_list")
    assert "# Spec [0]" in searched and "alpha beta gamma" in paged
    assert outline.startswith("Spec (Spec): chunks 0-0 of 1")
    assert (
        replaced.startswith("Replaced doc Spec (Spec)")
        and "kept 0 of 1 chunk unchanged" in replaced
    )
    assert "(+1 session cursor)" in listed_text
    assert [d["id"] for d in listed["documents"]] == ["Spec"]
    assert cursors["documents"][0]["session_cursors"] == {"Reader": 1}
    assert forgot.startswith("Forgot doc Spec") and after["documents"] == []


@pytest.mark.anyio
async def test_a_title_or_file_name_given_as_an_id_is_answered_with_the_id(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path) as c:
        _, log = await ok(c, "doc_ingest", file_path="build.log")
        _, spec = await ok(c, "doc_ingest", text="# Storage spec\nalpha beta gamma\n")
        await ok(c, "doc_ingest", text="# Twin\none\n")
        await ok(c, "doc_ingest", text="# Twin\ntwo\n")
        by_name = await error(c, "doc_search", query="error", doc_id="build.log")
        by_stem = await error(c, "doc_outline", doc_id="BUILD")
        by_title = await error(c, "doc_window", doc_id="storage spec")
        twins = await error(c, "doc_forget", doc_id="twin")
        unknown = await error(c, "doc_window", doc_id="no such title")
        # A new id that is another document's title makes a new document.
        _, made = await ok(c, "doc_ingest", text="fresh text\n", doc_id="build")
        await error(c, "doc_ingest", text="more\n", doc_id="storage spec")
        _, listed = await ok(c, "doc_list")
    the_log = f"that is the title or file name of {log['doc_id']}. Call again with doc_id="
    assert by_name.startswith("no document 'build.log': " + the_log) and the_log in by_stem
    assert by_title.endswith(f"of {spec['doc_id']}. Call again with doc_id={spec['doc_id']!r}")
    assert "title or file name of d" in twins and twins.endswith("; call doc_list")
    assert unknown.startswith("invalid doc_id 'no such title'")
    assert made["doc_id"] == "build" and len(listed["documents"]) == 5
