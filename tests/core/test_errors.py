"""Core errors state facts; each edge words the remedy: a tool for the model, a command
for a person. No message below the edges names a tool or a command."""

from __future__ import annotations

import ast
import string
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from conftest import SettingsFactory, client

from context_window import errors
from context_window.cli.main import ADVICE as CLI_ADVICE
from context_window.server.adapters import ADVICE as TOOL_ADVICE
from context_window.service import Service

PACKAGE = Path(errors.__file__).parent
EDGES = {PACKAGE / "server", PACKAGE / "cli"}
TOOLS = (
    "context_open context_append context_recall context_compact context_uncompact "
    "context_update context_status context_list_sessions context_guide doc_ingest doc_list "
    "doc_outline doc_search doc_window doc_summarize doc_forget"
).split()


def _messages(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module that are not docstrings, with their lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


def test_no_message_below_the_edges_names_a_tool_or_a_command() -> None:
    below = [p for p in PACKAGE.rglob("*.py") if not any(edge in p.parents for edge in EDGES)]
    assert len(below) > 25
    found = [
        f"{p.relative_to(PACKAGE)}:{line}: {text[:80]!r}"
        for p in below
        if p.name != "calibration.py"  # its sample prompts are text, not messages
        for line, text in _messages(p)
        if any(tool in text for tool in TOOLS) or "context-window " in text
    ]
    assert found == []


@pytest.mark.parametrize("advice", [TOOL_ADVICE, CLI_ADVICE], ids=["server", "cli"])
def test_each_edge_words_every_remedy(advice: dict[str, str]) -> None:
    remedies = {v for k, v in vars(errors).items() if k.isupper() and isinstance(v, str)}
    assert len(remedies) >= 12 and set(advice) == remedies
    for wording in advice.values():
        assert wording[:2] in {"; ", ". ", ": "}, wording
        names = {f for _, f, _, _ in string.Formatter().parse(wording) if f}
        assert names <= {"compaction_id", "name", "id"}, wording


def test_the_model_is_told_which_tool_and_a_person_which_command(
    settings: SettingsFactory,
) -> None:
    """One damaged document, asked about from both edges."""
    s = settings()
    Service(s).documents.ingest(text="# T\n\nalpha beta gamma\n" * 20, doc_id="d1")
    (s.data_dir / "documents" / "d1" / "index" / "doc_len.npy").unlink()
    fact = "document 'd1' has a damaged index"

    async def call() -> str:
        async with client(s) as c:
            res = await c.call_tool("doc_search", {"query": "alpha", "doc_id": "d1"})
            assert res.is_error
            return "".join(getattr(b, "text", "") for b in res.content)

    tool_text = anyio.run(call)
    assert fact in tool_text and tool_text.endswith("; doc_ingest it again or doc_forget it")

    def search(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "context_window", "search", "alpha", *args]
        return subprocess.run(
            [*cmd, "--data-dir", str(s.data_dir)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    named = search("--doc", "d1")
    assert named.returncode == 1 and fact in named.stderr
    advice = "; ingest it again from your MCP client, or forget it there"
    assert named.stderr.rstrip().endswith(advice)
    assert not any(tool in named.stderr for tool in TOOLS)
    # Searching everything serves around the damaged document, and says so.
    everything = search()
    assert everything.returncode == 0, everything.stderr
    assert "skipped document 'd1'" in everything.stderr and fact in everything.stderr


def test_a_remedy_fills_in_its_facts() -> None:
    exc = errors.InvalidInput(
        "entry e1 is folded into s9", remedy=errors.UNCOMPACT_FIRST, compaction_id="s9"
    )
    assert errors.advised(exc, TOOL_ADVICE).endswith(
        "; call context_uncompact(compaction_id='s9') first"
    )
    assert errors.advised(exc, CLI_ADVICE).endswith("; undo compaction s9 first")
    assert errors.advised(errors.NotFound("plain"), TOOL_ADVICE) == "plain"
