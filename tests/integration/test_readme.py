"""The README and docs/ document every tool, flag, command and setting, and their links hold."""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import regex
from conftest import client

from context_window.cli.main import build_parser
from context_window.config import Settings

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
SettingsFactory = Callable[..., Settings]


def documented() -> str:
    """The README and every page of docs/, as one text."""
    return "\n".join(p.read_text(encoding="utf-8") for p in PAGES)


def mentioned(name: str, text: str) -> bool:
    """Whether ``name`` occurs as a whole token (``--http`` is not found in ``--http-token``)."""
    return regex.search(rf"(?<![\w-]){regex.escape(name)}(?![\w-])", text) is not None


def help_text(*command: str) -> str:
    """What ``context-window [COMMAND] --help`` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    return out.getvalue()


def cli_commands() -> list[str]:
    """The commands the main help lists (the lines under "commands")."""
    listing = help_text().split("\ncommands", 1)[1]
    return regex.findall(r"(?m)^    ([a-z][a-z-]*)(?=\s)", listing)


def cli_flags() -> list[str]:
    """Every long option of the program and its commands, except --help and --version."""
    flags: list[str] = []
    for command in ((), *((c,) for c in cli_commands())):
        for flag in regex.findall(r"(?<![\w-])--[a-z][a-z-]*", help_text(*command)):
            if flag not in flags and flag not in ("--help", "--version"):
                flags.append(flag)
    return flags


def test_mentioned_matches_whole_tokens_only() -> None:
    assert mentioned("--http", "use `--http` here")
    assert not mentioned("--http", "use --http-token here")
    assert not mentioned("--audit", "use --no-audit")
    assert not mentioned("doc_list", "doc_listing")


@pytest.mark.anyio
async def test_readme_mentions_every_registered_tool(settings: SettingsFactory) -> None:
    async with client(settings()) as c:
        tools = sorted(t.name for t in (await c.list_tools()).tools)
    assert len(tools) >= 8
    text = README.read_text(encoding="utf-8")
    missing = [t for t in tools if not mentioned(t, text)]
    assert not missing, f"README.md does not document: {', '.join(missing)}"


def test_readme_mentions_every_cli_flag() -> None:
    flags = cli_flags()
    assert {"--data-dir", "--no-llm", "--http", "--no-audit"} <= set(flags)
    assert {"--all", "--json", "--format", "--replace", "--session-id"} <= set(flags)
    text = documented()
    missing = [f for f in flags if not mentioned(f, text)]
    assert not missing, f"README.md and docs/ do not document: {', '.join(missing)}"


def test_readme_shows_every_command() -> None:
    commands = cli_commands()
    assert {"serve", "doctor", "sessions", "export", "import"} <= set(commands)
    text = documented()
    missing = [c for c in commands if f"context-window {c}" not in text]
    assert not missing, f"README.md and docs/ have no example of: {', '.join(missing)}"


def shown_command_lines() -> list[str]:
    """Each ``context-window ...`` line of the README's and docs/' code blocks."""
    lines, inside = [], False
    for line in documented().splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside and line.strip().startswith("context-window "):
            lines.append(line.strip())
    return lines


def test_every_command_line_the_docs_show_parses() -> None:
    lines = shown_command_lines()
    assert len(lines) >= 20 and any("--to" in line for line in lines)
    for line in lines:
        words = shlex.split(line, comments=True)[1:]
        for i, word in enumerate(words):  # up to a redirection or a pipe
            if word in (">", "|", "&&") or word.startswith(">"):
                words = words[:i]
                break
        try:
            build_parser().parse_args(words)
        except SystemExit as exc:
            raise AssertionError(f"the docs show a command that does not parse: {line}") from exc


def test_readme_shows_the_log_lines_a_server_writes(tmp_path: Path) -> None:
    """A real stdio server's stderr, line for line, against "What it logs"."""
    section = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = section.split("## What it logs", 1)[1].split("\n## ", 1)[0]
    script = (
        "import anyio, mcp, sys\n"
        "async def main():\n"
        "    p = mcp.StdioServerParameters(command=sys.executable, args=['-m', "
        "'context_window', '--no-llm', '--data-dir', sys.argv[1]])\n"
        "    async with mcp.Client(p) as c:\n"
        "        await c.call_tool('context_open', {'session_id': 's'})\n"
        "        await anyio.sleep(0.5)\n"
        "anyio.run(main)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTX_")}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 3, lines  # the start line, calibration, one audit line
    shown = regex.findall(r"(?m)^\d{4}-\d\d-\d\d [\d:,]+ (.*)$", section)
    assert len(shown) == 3, shown
    # The start line comes first; calibration and the audit line race (both follow the
    # engine's build), so they are paired by logger.
    head, *rest = shown
    by_logger = {line.split(": ", 1)[0]: line for line in rest}
    assert len(by_logger) == 2, rest
    paired = [(lines[0], head)] + [
        (real, by_logger.get(real.split(" ", 2)[2].split(": ", 1)[0], "")) for real in lines[1:]
    ]
    for real, documented in paired:
        level_logger, message = real.split(" ", 2)[2].split(": ", 1)
        assert documented.startswith(level_logger + ": "), (real, documented)
        # the same words, up to the parts that differ between runs (paths, times)
        stable = regex.sub(r"/\S+|\d+(\.\d+)?", "#", message)
        assert stable == regex.sub(r"/\S+|\d+(\.\d+)?", "#", documented.split(": ", 1)[1])


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = regex.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (outside code blocks)."""
    text = regex.sub(r"(?ms)^```.*?^```", "", page.read_text(encoding="utf-8"))
    return {slug(h) for h in regex.findall(r"(?m)^#{1,6} (.+)$", text)}


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    """Every in-page anchor names a heading; every relative link names a file here, and
    its anchor a heading of that file."""
    text = regex.sub(r"(?ms)^```.*?^```", "", page.read_text(encoding="utf-8"))
    links = regex.findall(r"\]\(([^)\s]+)\)", text)
    for link in links:
        if regex.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.name}: {link}"
        if anchor:
            assert anchor in anchors(target), f"{page.name}: {link}"


def test_the_link_check_sees_links() -> None:
    assert len(regex.findall(r"\]\((docs/[^)\s]+)\)", README.read_text(encoding="utf-8"))) >= 9


def test_the_readme_stays_short() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 300


def test_readme_paths_in_code_are_in_the_repository() -> None:
    """Repository paths the README and docs/ name in backticks (examples/…, tests/…) exist."""
    text = documented()
    named = set(
        regex.findall(r"`((?:examples|tests|benchmarks|\.ci|context_window)/[\w./-]+)`", text)
    )
    assert named
    written = ("benchmarks/results/",)  # where benchmark runs write (ignored by git)
    missing = sorted(p for p in named if not p.startswith(written) and not (ROOT / p).exists())
    assert not missing, missing
