"""A scripted MCP session against context-window over stdio, as a host like LM Studio runs it.

Starts ``python -m context_window --no-llm`` on a temporary data dir, then opens a
session, appends notes (one with a ttl), recalls them, compacts and undoes the
compaction, ingests a document (a file under the ingest root) and pages through it
with doc_window on the session's own cursor. Prints a short transcript on stdout and
exits non-zero on any failure.

    python examples/scripted_session.py            # temporary data dir, removed after
    python examples/scripted_session.py --keep     # keep it and print where it is
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import mcp
from mcp.types import CallToolResult, TextContent

DOC = """# Release checklist

## Build
SECTION-1: run the test suite, build the wheel with hatch, check the version number
in context_window/__init__.py, and tag the commit.

## Publish
SECTION-2: upload the wheel to the package index, push the Docker image with the
same tag, and update the LM Studio example with the new command line.

## Announce
SECTION-3: write the changelog entry, post the release notes, and close the milestone.
"""
MARKERS = ("SECTION-1", "SECTION-2", "SECTION-3")


class Failure(Exception):
    """A step of the scripted session did not do what it should."""


def text_of(result: CallToolResult) -> str:
    """The text content of a tool result."""
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def first_line(text: str, width: int = 110) -> str:
    """The first line of a result, shortened for the transcript."""
    line = text.strip().splitlines()[0] if text.strip() else "(empty)"
    return line if len(line) <= width else line[: width - 1] + "…"


async def call(client: mcp.Client, tool: str, **args: Any) -> CallToolResult:
    """Call a tool, print one transcript line each way, and fail on an error result."""
    shown = " ".join(
        f"{k}={v!r}" if len(repr(v)) < 40 else f"{k}=<{len(str(v))} chars>" for k, v in args.items()
    )
    print(f"> {tool} {shown}".rstrip())
    result = await client.call_tool(tool, args)
    text = text_of(result)
    print(f"< {first_line(text)}")
    if result.is_error:
        raise Failure(f"{tool} returned an error: {text}")
    return result


async def run(data_dir: Path, docs_dir: Path) -> None:
    """The whole scripted session."""
    params = mcp.StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "context_window",
            "--no-llm",
            "--no-audit",
            "--data-dir",
            str(data_dir),
            "--ingest-root",
            str(docs_dir),
            "--chunk-tokens",
            "64",
            "--chunk-overlap",
            "0",
        ],
    )
    async with mcp.Client(params) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        print(f"# {len(tools)} tools: {', '.join(sorted(tools))}")
        await call(client, "context_open", session_id="demo", title="Scripted demo")
        await call(
            client,
            "context_append",
            session_id="demo",
            role="decision",
            pinned=True,
            text="Ship version 0.1 on Friday; the Docker image is tagged the same.",
        )
        await call(
            client,
            "context_append",
            session_id="demo",
            text="The flaky HTTP test needed a readiness poll on /health.",
        )
        await call(
            client,
            "context_append",
            session_id="demo",
            role="assistant",
            text="Docs: the README gains a Running it section with Windows path advice.",
        )
        recalled = text_of(
            await call(client, "context_recall", session_id="demo", query="readiness poll health")
        )
        if "readiness poll" not in recalled:
            raise Failure("context_recall did not return the appended note")
        await call(
            client,
            "context_append",
            session_id="demo",
            ttl_days=7,
            text="Temporary: CI runner ci-7 is down until Monday.",
        )
        compacted = await call(client, "context_compact", session_id="demo", keep_recent=1)
        compaction = (compacted.structured_content or {}).get("compaction_id")
        if not compaction:
            raise Failure("context_compact folded nothing")
        restored = await call(
            client, "context_uncompact", session_id="demo", compaction_id=compaction
        )
        if len((restored.structured_content or {}).get("restored", [])) != 2:
            raise Failure("context_uncompact did not bring back the two folded notes")

        if not {"doc_ingest", "doc_window"} <= tools:
            print("# doc_ingest/doc_window are not registered by this server; documents skipped")
            return
        path = docs_dir / "checklist.md"
        path.write_text(DOC, encoding="utf-8")
        await call(client, "doc_ingest", file_path=str(path), doc_id="checklist")
        seen: set[str] = set()
        for _ in range(10):
            page = text_of(
                await call(
                    client, "doc_window", doc_id="checklist", session_id="demo", budget_tokens=80
                )
            )
            new = {m for m in MARKERS if m in page} - seen
            if not new:
                break
            seen |= new
            if seen == set(MARKERS):
                break
        if seen != set(MARKERS):
            raise Failure(f"doc_window paged through {sorted(seen)}, expected {list(MARKERS)}")
        print(f"# paged the whole document: {', '.join(sorted(seen))}")


def main() -> int:
    """Run the session in a temporary directory; 0 on success, 1 on any failure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary data dir")
    keep = parser.parse_args().keep
    tmp = Path(tempfile.mkdtemp(prefix="context-window-demo-"))
    docs = tmp / "docs"
    docs.mkdir()
    try:
        anyio.run(run, tmp / "data", docs)
    except Exception as exc:
        inner: list[Exception] = list(getattr(exc, "exceptions", ()))
        while len(inner) == 1:  # anyio wraps what a task raised in a group: show the cause
            exc = inner[0]
            inner = list(getattr(exc, "exceptions", ()))
        print(f"FAILED: {type(exc).__name__}: {exc}")
        return 1
    finally:
        if keep:
            print(f"# data kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("OK")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
