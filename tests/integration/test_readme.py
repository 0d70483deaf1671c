"""The README documents every tool the server registers and every command-line flag."""

from __future__ import annotations

import argparse
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


def cli_flags(parser: argparse.ArgumentParser | None = None) -> list[str]:
    """Every long option of the parser and its commands, except --help and --version."""
    flags: list[str] = []
    for action in (parser or build_parser())._actions:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags.extend(f for f in cli_flags(sub) if f not in flags)
        flags.extend(o for o in action.option_strings if o.startswith("--") and o not in flags)
    return flags


def cli_commands() -> list[str]:
    """The names of the parser's commands."""
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


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
