"""Bad input on every tool: a clear tool error, never an internal one, and no byte changed.

Tools are listed from the server, and wrong types, missing required arguments,
bounds (min-1, max+1) and malformed ids are generated from each input schema,
so a tool added later is covered without touching this file. Hand-written cases
add what a schema cannot say: empty or oversized text, unknown ids, reversed
ranges, path tricks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import text_of
from mcp import Client
from mcp.types import CallToolResult

from context_window.server.app import build_server

from .support import record, service_for, snapshot

SESSION = "s1"
DOC = "d1"
HUGE_APPEND = 200_001
HUGE_DOC = 20_000_001
BAD_IDS = ["../x", "a/b", "a\\b", "a\x00b", "x" * 200, " ", ".", "..", "-lead", "a b", "é"]
# Control characters, a trailing newline above all ("$" in a pattern lets one through).
BAD_IDS += ["abc\n", "abc\r", "abc\r\n", "a\tb", "a\x1fb", "abc\x7f", "\nabc"]
# What an argument error must not show the model: pydantic's raw report.
RAW_REPORT = ("validation error", "input_value", "errors.pydantic.dev", "Error executing tool")
# Arguments whose unknown-but-well-formed value creates something instead of failing.
# (doc_window's session_id need not name an open session: it starts that session's cursor.)
CREATES = {
    ("context_open", "session_id"),
    ("doc_ingest", "doc_id"),
    ("doc_window", "session_id"),
}
# A blank string for an optional argument means "not given" (documented, not an error);
# for a required one it is bad input.
BLANK = {"", " "}


@dataclass
class Case:
    """One bad call: the tool, its arguments and what makes them bad."""

    tool: str
    args: dict[str, Any]
    why: str


def allowed_types(schema: dict[str, Any]) -> set[str]:
    """The JSON types a property schema admits."""
    if "anyOf" in schema:
        return set().union(*(allowed_types(s) for s in schema["anyOf"]))
    t = schema.get("type")
    if isinstance(t, list):
        return set(t)
    return {t} if t else {"string", "integer", "number", "boolean", "array", "object", "null"}


def bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    """(minimum, maximum) of an integer property, looking inside anyOf."""
    for s in [schema, *schema.get("anyOf", [])]:
        if s.get("type") == "integer" and ("minimum" in s or "maximum" in s):
            return s.get("minimum"), s.get("maximum")
    return None, None


# Candidate values and the JSON types pydantic's lax mode would accept them as.
CANDIDATES: list[tuple[Any, set[str]]] = [
    (5, {"integer", "number"}),
    (1.5, {"number"}),
    (True, {"boolean", "integer", "number"}),
    ("ten", {"string"}),
    (["x"], {"array"}),
    ({"k": "v"}, {"object"}),
    (None, {"null"}),
]
# Arrays of strings additionally refuse these.
BAD_STRING_LISTS: list[Any] = [[1], [None], [["x"]], [{"k": "v"}]]


def wrong_values(schema: dict[str, Any]) -> list[Any]:
    """Values no type of the property admits, even with lax coercion."""
    types = allowed_types(schema)
    out = [v for v, accepted in CANDIDATES if not accepted & types]
    items = [s.get("items", {}) for s in [schema, *schema.get("anyOf", [])]]
    if any(i.get("type") == "string" for i in items):
        out += BAD_STRING_LISTS
    return out


class Fixture:
    """The data dir the bad calls run against: one session, one entry, one document."""

    def __init__(self, root: Path) -> None:
        self.data = root / "data"
        self.ingest = root / "ingest"
        self.outside = root / "outside"
        for d in (self.data, self.ingest, self.outside):
            d.mkdir()
        (self.ingest / "ok.md").write_text("# Title\n\nhello world\n")
        (self.ingest / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
        (self.ingest / "empty.txt").write_text("")
        (self.ingest / "sub").mkdir()
        (self.outside / "secret.txt").write_text("outside secret")
        self.entry_id = ""
        self.compaction_id = ""

    def valid(self, tool: str, name: str, schema: dict[str, Any]) -> Any:
        """A valid value for a required argument."""
        known = {
            "session_id": SESSION,
            "entry_id": self.entry_id,
            "compaction_id": self.compaction_id,
            "doc_id": DOC,
            "text": "hello world",
            "query": "hello",
            "file_path": str(self.ingest / "ok.md"),
            "title": "T",
        }
        if name in known:
            return known[name]
        types = allowed_types(schema)
        for t, v in (("string", "x"), ("integer", 1), ("boolean", True), ("array", [])):
            if t in types:
                return v
        return None

    def base(self, tool: dict[str, Any]) -> dict[str, Any]:
        """Arguments that make a valid call of ``tool`` (required ones only)."""
        props = tool["inputSchema"].get("properties", {})
        args = {
            n: self.valid(tool["name"], n, props[n])
            for n in tool["inputSchema"].get("required", [])
        }
        if tool["name"] == "context_update":
            args["pinned"] = True
        if tool["name"] == "context_compact":
            args["dry_run"] = True  # keep the one compaction context_uncompact's base call undoes
        if tool["name"] == "doc_window":
            args["reset"] = True  # the cursor moves on every call; start from chunk 0
        if tool["name"] == "doc_ingest" and "text" not in args and "file_path" not in args:
            args["text"] = "# Heading\n\nsome text to ingest"
        return args


def generated_cases(fx: Fixture, tool: dict[str, Any]) -> list[Case]:
    """Bad calls derived from one tool's input schema."""
    name = tool["name"]
    schema = tool["inputSchema"]
    props: dict[str, Any] = schema.get("properties", {})
    base = fx.base(tool)
    cases: list[Case] = []
    for req in schema.get("required", []):
        args = {k: v for k, v in base.items() if k != req}
        cases.append(Case(name, args, f"missing {req}"))
    for prop, ps in props.items():
        types = allowed_types(ps)
        optional = prop not in schema.get("required", [])
        for v in wrong_values(ps):
            if v is None and prop not in schema.get("required", []):
                continue  # tools/list publishes T for T | None: an explicit null means omitted
            cases.append(Case(name, {**base, prop: v}, f"{prop}: wrong type {v!r:.20}"))
        lo, hi = bounds(ps)
        if lo is not None:
            cases.append(Case(name, {**base, prop: lo - 1}, f"{prop}: min-1"))
            cases.append(Case(name, {**base, prop: -(10**12)}, f"{prop}: very negative"))
        if hi is not None:
            cases.append(Case(name, {**base, prop: hi + 1}, f"{prop}: max+1"))
            cases.append(Case(name, {**base, prop: 10**15}, f"{prop}: huge"))
        if prop.endswith("_id") and "string" in types:
            for bad in [b for b in BAD_IDS if not (optional and b in BLANK)]:
                cases.append(Case(name, {**base, prop: bad}, f"{prop}: malformed id {bad!r:.20}"))
            if not optional:
                cases.append(Case(name, {**base, prop: ""}, f"{prop}: empty id"))
            if (name, prop) not in CREATES:
                cases.append(Case(name, {**base, prop: "nosuch"}, f"{prop}: unknown id"))
        elif (
            "string" in types
            and not (optional and (name, prop) != ("doc_ingest", "text"))
            and prop
            in (
                "text",
                "file_path",
                "role",
            )
        ):
            cases.append(Case(name, {**base, prop: ""}, f"{prop}: empty"))
            cases.append(Case(name, {**base, prop: "   \n\t"}, f"{prop}: blank"))
    return cases


def written_cases(fx: Fixture) -> list[Case]:
    """Bad calls a schema cannot describe."""
    s = {"session_id": SESSION}
    tags_11 = [f"t{i}" for i in range(11)]
    return [
        Case("context_append", {**s, "text": "x" * HUGE_APPEND}, "text over the limit"),
        Case("context_append", {**s, "text": "a\x00b"}, "NUL in text"),
        Case("context_append", {**s, "text": "a\ud800b"}, "unpaired surrogate"),
        Case("context_append", {**s, "text": "x", "tags": ["a\udc00"]}, "surrogate in tag"),
        Case("context_open", {"session_id": "fresh", "title": "a\ud800"}, "surrogate in title"),
        Case("context_append", {**s, "text": "x", "role": "boss"}, "unknown role"),
        Case("context_append", {**s, "text": "x", "role": "summary"}, "reserved role"),
        Case("context_append", {**s, "text": "x", "tags": tags_11}, "11 tags"),
        Case("context_append", {**s, "text": "x", "tags": ["t" * 41]}, "tag too long"),
        Case("context_append", {**s, "text": "x", "tags": [""]}, "empty tag"),
        Case("context_append", {**s, "text": "x", "tags": ["a\nb"]}, "tag with newline"),
        Case("context_open", {"session_id": "fresh", "title": "t" * 201}, "title too long"),
        Case("context_open", {"session_id": "fresh", "title": "a\nb"}, "title with newline"),
        Case("context_open", {"session_id": SESSION, "title": "a\x00b"}, "NUL in title"),
        Case("context_recall", {**s, "tags": tags_11}, "11 tags"),
        Case("context_update", {**s, "entry_id": fx.entry_id}, "nothing to change"),
        Case("context_update", {**s, "entry_id": "nosuch", "delete": True}, "unknown entry"),
        Case(
            "context_update",
            {"session_id": "nosuch", "entry_id": fx.entry_id, "pinned": True},
            "entry in unknown session",
        ),
        Case("doc_ingest", {"text": "x" * HUGE_DOC}, "text over the limit"),
        Case("doc_ingest", {}, "no source"),
        Case("doc_ingest", {"text": "x", "file_path": str(fx.ingest / "ok.md")}, "two sources"),
        Case("doc_ingest", {"text": "   \n "}, "blank text"),
        Case("doc_ingest", {"text": "a\ud800b"}, "unpaired surrogate"),
        Case("doc_ingest", {"file_path": str(fx.outside / "secret.txt")}, "outside the roots"),
        Case(
            "doc_ingest",
            {"file_path": str(fx.ingest / ".." / "outside" / "secret.txt")},
            "traversal",
        ),
        Case("doc_ingest", {"file_path": "../outside/secret.txt"}, "relative traversal"),
        Case("doc_ingest", {"file_path": str(fx.ingest / "sub")}, "a directory"),
        Case("doc_ingest", {"file_path": str(fx.ingest / "missing.txt")}, "missing file"),
        Case("doc_ingest", {"file_path": str(fx.ingest / "latin1.txt")}, "not UTF-8"),
        Case("doc_ingest", {"file_path": str(fx.ingest / "empty.txt")}, "empty file"),
        Case("doc_ingest", {"file_path": "/etc/passwd"}, "absolute path outside"),
        Case("doc_ingest", {"file_path": str(fx.ingest) + "\x00/ok.md"}, "NUL in path"),
        Case("doc_ingest", {"text": "x", "title": "t" * 10_000}, "title too long"),
        Case("doc_window", {"doc_id": DOC, "from": 3, "to": 1}, "reversed range"),
        Case("doc_window", {"doc_id": DOC, "from": -1}, "negative from"),
        Case("doc_window", {"doc_id": DOC, "from": 10**6}, "from past the end"),
        Case("doc_summarize", {"doc_id": DOC, "from": 3, "to": 1}, "reversed range"),
        Case("doc_summarize", {"doc_id": DOC, "from": -1}, "negative from"),
        Case("doc_summarize", {"doc_id": DOC, "from": 10**6}, "from past the end"),
        Case("doc_search", {"query": "hello", "doc_id": "nosuch"}, "unknown document"),
        Case("doc_outline", {"doc_id": "nosuch"}, "unknown document"),
        Case("doc_forget", {"doc_id": "nosuch"}, "unknown document"),
    ]


def check_readable(r: CallToolResult, case: Case) -> str:
    """The error text of a bad call, asserting it is a clear tool error."""
    text = text_of(r)
    where = f"{case.tool} ({case.why}): {text[:300]!r}"
    assert r.is_error, f"accepted bad input: {where}"
    assert "internal error" not in text and "Traceback" not in text, where
    assert len(text) >= 15, where
    assert not any(raw in text for raw in RAW_REPORT), where
    for line in text.splitlines():  # one short line per problem
        assert len(line) <= 400, where
    return text


async def sweep(root: Path) -> dict[str, Any]:
    """Run every bad call against a prepared data dir; return the counts."""
    fx = Fixture(root)
    service = service_for(fx.data, ingest_roots=[fx.ingest], budget=4000)
    tried: dict[str, int] = {}
    bounds_ok = 0
    async with Client(build_server(service)) as client:
        opened = await client.call_tool("context_open", {"session_id": SESSION})
        assert not opened.is_error
        app = await client.call_tool("context_append", {"session_id": SESSION, "text": "hello"})
        assert app.structured_content is not None
        fx.entry_id = app.structured_content["entry_id"]
        for text in ("first note to fold", "second note to fold"):
            await client.call_tool("context_append", {"session_id": SESSION, "text": text})
        compacted = await client.call_tool(
            "context_compact", {"session_id": SESSION, "keep_recent": 1}
        )
        assert compacted.structured_content is not None, compacted.content
        fx.compaction_id = compacted.structured_content["compaction_id"]
        listed = (await client.list_tools()).tools
        tools: dict[str, dict[str, Any]] = {
            t.name: {"name": t.name, "inputSchema": t.input_schema} for t in listed
        }
        if "doc_ingest" in tools:
            ingested = await client.call_tool("doc_ingest", {"text": "# A\n\nhello", "doc_id": DOC})
            assert not ingested.is_error, ingested.content
        cases = [c for t in tools.values() for c in generated_cases(fx, t)]
        cases += [c for c in written_cases(fx) if c.tool in tools]
        for case in cases:
            before = snapshot(fx.data)
            r = await client.call_tool(case.tool, case.args)
            check_readable(r, case)
            assert snapshot(fx.data) == before, f"{case.tool} ({case.why}) changed the data dir"
            tried[case.tool] = tried.get(case.tool, 0) + 1
        # At the bounds themselves (min, max) a call is valid: never an error.
        for tool in tools.values():
            for prop, ps in tool["inputSchema"].get("properties", {}).items():
                for edge in bounds(ps):
                    if edge is None:
                        continue
                    args = {**fx.base(tool), prop: edge}
                    r = await client.call_tool(tool["name"], args)
                    assert not r.is_error, f"{tool['name']} {prop}={edge}: {r.content}"
                    bounds_ok += 1
        # The base calls are valid, so each bad case failed because of what it changed.
        for tool in tools.values():
            r = await client.call_tool(tool["name"], fx.base(tool))
            assert not r.is_error, f"base call of {tool['name']} failed: {r.content}"
    await service.aclose()
    return {"tried": tried, "tools": sorted(tools), "bounds_ok": bounds_ok}


def test_every_tool_rejects_bad_input_and_writes_nothing(tmp_path: Path) -> None:
    out = anyio.run(sweep, tmp_path)
    with_params = [
        t for t in out["tools"] if t not in ("context_list_sessions", "context_guide", "doc_list")
    ]
    for tool in with_params:
        assert out["tried"].get(tool, 0) >= 5, f"{tool}: too few bad inputs tried"
    total = sum(out["tried"].values())
    record("bad inputs tried (all rejected, no byte changed)", total)
    record("tools covered by the bad-input sweep", len(out["tried"]))
    record("valid calls at parameter bounds (min, max)", out["bounds_ok"])


@pytest.mark.parametrize("tool", ["context_list_sessions", "context_guide"])
def test_argument_free_tools_ignore_junk(tmp_path: Path, tool: str) -> None:
    async def go() -> None:
        service = service_for(tmp_path)
        async with Client(build_server(service)) as client:
            before = snapshot(tmp_path)
            r = await client.call_tool(tool, {"junk": "../../x", "n": -1})
            assert not r.is_error
            assert snapshot(tmp_path) == before
        await service.aclose()

    anyio.run(go)


def test_argument_errors_name_each_argument_and_its_rule_on_one_line(tmp_path: Path) -> None:
    service = service_for(tmp_path / "data")

    async def main() -> dict[str, str]:
        async with Client(build_server(service)) as client:
            calls = {
                "bounds": ("context_recall", {"session_id": "s", "budget_tokens": 5}),
                "types": ("context_recall", {"session_id": "s", "budget_tokens": "many"}),
                "whole": ("context_recall", {"session_id": "s", "budget_tokens": 1500.5}),
                "two": ("doc_search", {"query": 5, "limit": 0}),
                "missing": ("context_recall", {}),
                "item": ("context_append", {"session_id": "s", "text": "t", "tags": [1]}),
                "word": ("context_recall", {"session_id": "s", "tags": "decision"}),
                "open": ("context_append", {"session_id": "s", "text": "t", "ttl_days": 0}),
                "words": ("context_append", {"session_id": "s", "text": "t", "tags": "a, b c"}),
            }
            out = {}
            for key, (tool, args) in calls.items():
                r = await client.call_tool(tool, args)
                assert r.is_error
                out[key] = text_of(r)
            return out

    got = anyio.run(main)
    assert got["bounds"] == "budget_tokens must be between 64 and 1,000,000"
    assert got["types"] == got["whole"] == "budget_tokens must be an integer"
    assert got["two"].splitlines() == ["query must be a string", "limit must be between 1 and 100"]
    assert got["missing"] == "session_id is required"
    assert got["item"] == "tags.0 must be a string"
    assert got["word"] == 'tags must be a list, as ["decision"]'  # what to send instead
    assert got["open"] == "ttl_days must be more than 0 and at most 36,500"  # 0 is out
    assert got["words"] == 'tags must be a list, as ["a", "b c"]'
