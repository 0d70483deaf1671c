"""The README documents every tool the server registers and every command-line flag."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path

import pytest
import regex
from conftest import client

from context_window.cli.main import build_parser
from context_window.config import Settings

README = Path(__file__).resolve().parents[2] / "README.md"
SettingsFactory = Callable[..., Settings]


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
    text = README.read_text(encoding="utf-8")
    missing = [f for f in flags if not mentioned(f, text)]
    assert not missing, f"README.md does not document: {', '.join(missing)}"


def test_readme_shows_every_command() -> None:
    commands = cli_commands()
    assert {"serve", "doctor", "sessions", "export", "import"} <= set(commands)
    text = README.read_text(encoding="utf-8")
    missing = [c for c in commands if f"context-window {c}" not in text]
    assert not missing, f"README.md has no example of: {', '.join(missing)}"
