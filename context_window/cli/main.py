"""Command line: parse flags, set up stderr logging, and run a command (serve by default).

Each command is a row of ``commands()``; runners call library functions and print what
they return. ``main`` turns a ``ContextWindowError`` into one ``context-window: error:``
line (exit 1; 2 for a bad setting).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import gc
import io
import logging
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from context_window import errors
from context_window.cli.commands import DATA_COMMANDS, Command
from context_window.config import (
    Settings,
    choices,
    declared,
    load_settings,
    local_url,
    missing_roots,
    shown_default,
    unknown_variables,
    url_host,
)
from context_window.errors import ConfigError, ContextWindowError, advised
from context_window.version import __version__

log = logging.getLogger("context_window")

# What a person at the shell can do about an error (the remedies of ``errors``).
ADVICE = {
    errors.SPLIT_OR_INGEST: ". Split it, or ingest it as a document",
    errors.FIND_ENTRY: "; `context-window show SESSION` lists its entry ids",
    errors.FIND_COMPACTION: "; `context-window show SESSION` lists its summaries",
    errors.UNCOMPACT_FIRST: "; undo compaction {compaction_id} first",
    errors.REDO_COMPACTION: "; restoring its summary redoes it",
    errors.RETRY: ". Run it again",
    errors.OPEN_SESSION: ". `context-window sessions` lists them",
    errors.LIST_DOCUMENTS: ". `context-window docs` lists what there is",
    errors.INGEST_FIRST: ". `context-window docs` lists what there is",
    errors.USE_ID: ". Give its id, {id}",
    errors.REINGEST: "; ingest it again from your MCP client, or forget it there",
    errors.SET_INGEST_ROOT: ": start with --ingest-root DIR, a folder that exists",
}


@dataclass(frozen=True)
class ServerEdge:
    """What the command line needs of the MCP edge, handed in by ``context_window.main``."""

    serve: Callable[[Settings], None]  # serve until stopped, on the configured transport
    tool_set_costs: Callable[[Settings], Awaitable[dict[str, dict[str, int]]]]


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2, and which
    takes a flag only whole: by prefix, ``window --to`` was ambiguous with ``--tools``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"context-window: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: every flag of the design's configuration table, and the commands."""
    p = _Parser(
        prog="context-window",
        description="MCP server giving small local models an external context buffer. "
        "Flags override CTX_* environment variables, which override defaults.",
    )
    p.add_argument("--version", action="version", version=f"context-window {__version__}")
    _add_settings_flags(p)
    sub = p.add_subparsers(
        dest="command",
        metavar="COMMAND",
        parser_class=_Parser,
        title="commands (default: serve)",
    )
    after = _Parser(add_help=False)  # the flags again, as each command's parent
    _add_settings_flags(after, after_command=True)
    for command in commands():
        cp = sub.add_parser(
            command.name,
            help=command.help,
            description=command.help,
            epilog="Configuration flags such as --data-dir may come before or after the\n"
            "command; `context-window --help` lists them.",
            formatter_class=argparse.RawDescriptionHelpFormatter,
            parents=[after],
        )
        command.arguments(cp)
    return p


def _unknown_flag(parser: argparse.ArgumentParser, words: Sequence[str]) -> str | None:
    """Names the first ``--flag`` among ``words`` that neither ``parser`` nor its commands
    take, or that only a command takes but comes before it: argparse would read
    ``--budg 900``'s value as a command."""
    main_flags = set(parser._option_string_actions)
    of: dict[str, list[str]] = {name: [] for name in main_flags}  # flag: the commands taking it
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, p in sub.choices.items():
        for flag in p._option_string_actions:
            of.setdefault(flag, []).append(command)
    first = None  # the first command name: every word before it is the main parser's
    for word in words:
        name = word.split("=", 1)[0]
        if word == "--":  # what follows is not a flag
            return None
        first = first or (word if word in sub.choices else None)
        if not name.startswith("--") or " " in word:
            continue
        if name not in of:
            import difflib

            near = sorted(k for k in of if k.startswith(name)) or [
                f"--{k}" for k in difflib.get_close_matches(name[2:], [k[2:] for k in of], 2)
            ]
            return f"unknown flag {name}" + (f"; did you mean {' or '.join(near)}?" if near else "")
        if first is None and name not in main_flags:
            return f"{name} is a flag of {', '.join(of[name])}: write it after the command"
    return None


def _add_settings_flags(p: argparse.ArgumentParser, *, after_command: bool = False) -> None:
    """A flag for each declared setting, accepted before or after the command."""

    def add(*names: str, **kw: Any) -> None:
        if after_command:
            kw.update(default=argparse.SUPPRESS, help=argparse.SUPPRESS)
            if kw.get("dest") == "ingest_roots":  # appended to what came before the command
                kw["dest"] = "ingest_roots_after"
        p.add_argument(*names, **kw)

    def const(flag: str, dest: str, value: Any, text: str) -> None:
        add(flag, dest=dest, action="store_const", const=value, help=text)

    for f, spec, kind in declared():
        shown = f"(default {shown_default(f, spec)}) [{spec.env}]"
        if kind is bool:
            if spec.flag:
                const(spec.flag, f.name, True, f"{spec.help} {shown}")
            if spec.off_flag:
                off = f"turn off {spec.help} [{spec.env}=0]" if not spec.flag else "turn it off"
                const(spec.off_flag, f.name, False, off)
            continue
        if spec.flag is None:
            continue
        kw: dict[str, Any] = {"dest": f.name, "help": f"{spec.help} {shown}"}
        if kind == tuple[Path, ...]:
            kw["action"] = "append"
        elif kind in (int, float):
            kw["type"] = kind
        allowed = choices(kind)
        if allowed is not None:
            kw["choices"] = list(allowed)
        else:
            kw["metavar"] = spec.metavar
        add(spec.flag, **kw)
        for flag, value in spec.shortcuts:
            const(flag, f.name, value, f"same as {spec.flag} {value}")


def settings_flags(ns: argparse.Namespace) -> dict[str, Any]:
    """The parsed flags that map onto Settings fields (None = not given)."""
    flags = {f.name: getattr(ns, f.name, None) for f, _, _ in declared()}
    roots = [*(ns.ingest_roots or []), *getattr(ns, "ingest_roots_after", [])]
    flags["ingest_roots"] = roots or None
    return flags


MMAP_THRESHOLD = 1 << 20


def tune_process() -> None:
    """The process-wide settings, applied once here (library code never touches them).

    - GC after 100,000 new objects, not 700: a replay's millions of live objects made
      the default ~20% slower at 300k entries.
    - glibc's mmap threshold fixed at 1 MiB (and in the chunking child), so numpy's
      temporaries give their pages back (a 1 GB ingest peaked ~90 MB lower).
    - numba's cache where this user can write.
    """
    gc.set_threshold(100_000, 50, 100)
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(MMAP_THRESHOLD))
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to fix
            ctypes.CDLL(None).mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
    os.environ.setdefault("NUMBA_CACHE_DIR", str(_numba_cache_dir()))


def _numba_cache_dir() -> Path:
    """A folder this user can write for numba's cache (user cache, else temporary)."""
    import platformdirs

    folder = Path(platformdirs.user_cache_dir("context-window", appauthor=False)) / "numba"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK):
            return folder
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / f"context-window-numba-{getattr(os, 'getuid', str)()}"


def setup_logging() -> None:
    """Log to stderr only: stdout belongs to the protocol in stdio mode."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for noisy in ("httpx", "httpcore", "mcp", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def startup_line(settings: Settings) -> str:
    """The one line logged at start: version, transport, absolute data dir, roots, LLM."""
    roots = ", ".join(str(r) for r in settings.ingest_roots) or "none"
    llm = settings.llm_base_url if settings.llm_enabled else "disabled (--no-llm)"
    where = (
        "stdio"
        if settings.transport == "stdio"
        else (f"http://{url_host(settings.host)}:{settings.port}/mcp")
    )
    return (
        f"context-window {__version__} serving on {where}; data dir {settings.data_dir}; "
        f"ingest roots {roots}; llm {llm}"
    )


def main(argv: Sequence[str] | None = None, server: ServerEdge | None = None) -> int:
    """Run the command line; the exit status. ``server`` serves and feeds doctor's report."""
    parser = build_parser()
    words = sys.argv[1:] if argv is None else argv
    if unknown := _unknown_flag(parser, words):
        parser.error(unknown)
    ns = parser.parse_args(words)
    tune_process()
    command = {c.name: c for c in commands(server)}[ns.command or "serve"]
    if command.name != "serve" and threading.current_thread() is threading.main_thread():
        # Ctrl-C stops a command as usual (status 130), not as a starting server does.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if command.name != "serve" and isinstance(sys.stdout, io.TextIOWrapper):
        # UTF-8 whatever the locale, as exports are: Windows gives a redirected stdout its
        # ANSI code page (cp1252), which cannot write most of the world's text.
        sys.stdout.reconfigure(encoding="utf-8")
    try:
        settings = load_settings(settings_flags(ns))
        if command.creates_data_dir:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
    except ConfigError as exc:
        sys.stderr.write(f"context-window: error: {exc}\n")
        return 2
    except OSError as exc:
        from context_window.storage import CHOOSE_ANOTHER

        # "File exists" or "Not a directory" would leave the user guessing which file.
        blocked = isinstance(exc, FileExistsError | NotADirectoryError)
        why = "a file is in the way" if blocked else exc.strerror
        sys.stderr.write(
            f"context-window: error: cannot create data dir {settings.data_dir}: "
            f"{why} ({CHOOSE_ANOTHER})\n"
        )
        return 2
    try:
        return command.run(settings, ns)
    except ContextWindowError as exc:
        sys.stderr.write(f"context-window: error: {advised(exc, ADVICE)}\n")
        return 2 if isinstance(exc, ConfigError) else 1
    except BrokenPipeError:  # `context-window show x | head`: the reader has gone
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def commands(server: ServerEdge | None = None) -> tuple[Command, ...]:
    """Every subcommand, in the order --help lists them."""
    return (
        Command(
            "serve",
            "serve MCP over stdio or HTTP (the default command)",
            functools.partial(_serve, server=server),
            creates_data_dir=True,
        ),
        Command(
            "calibrate",
            "measure the loaded model's tokens per character now",
            _calibrate,
            creates_data_dir=True,
        ),
        Command(
            "doctor",
            "audit the data dir read-only (exit 1 if problems are found); print the tool "
            "schemas' token cost",
            functools.partial(_doctor, server=server),
        ),
        Command(
            "health",
            "exit 0 if the server answers GET /health (HTTP mode; the image's HEALTHCHECK); "
            "a stdio server has nothing to probe",
            _health,
        ),
        *DATA_COMMANDS,
    )


HEALTH_SECONDS = 3.0


def served_settings(own: Settings, pid1: Path = Path("/proc/1/cmdline")) -> Settings:
    """The checked server's settings: the flags after ``context-window`` on PID 1's command
    line (the server's, or its init's), else ``own``."""
    try:
        argv = [a.decode() for a in pid1.read_bytes().split(b"\0") if a]
    except OSError:
        return own
    at = next((i for i, a in enumerate(argv) if Path(a).name == "context-window"), None)
    if at is None:
        return own
    try:
        return load_settings(settings_flags(build_parser().parse_args(argv[at + 1 :])))
    except (SystemExit, ConfigError):
        return own


def _health(settings: Settings, _ns: argparse.Namespace) -> int:
    import urllib.request

    served = served_settings(settings)
    if served.transport != "http":
        _say("stdio server: nothing to probe (healthy while it runs)")
        return 0
    url = local_url(served, "/health")
    try:
        with urllib.request.urlopen(url, timeout=HEALTH_SECONDS) as reply:
            _say(f"{url}: {reply.status}")
            return 0 if reply.status == 200 else 1
    except (OSError, ValueError) as exc:  # ValueError: a host no URL can hold
        sys.stderr.write(f"context-window: unhealthy: {url}: {exc}\n")
        return 1


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")


def _doctor(settings: Settings, _ns: argparse.Namespace, server: ServerEdge | None) -> int:
    import anyio

    from context_window.cli.doctor import run

    status = run(settings.data_dir, sys.stdout)
    sys.stdout.write(scan_report() + "\n")
    if server is not None:
        sys.stdout.write(anyio.run(schema_report, settings, server) + "\n")
    return status


def scan_report() -> str:
    """Which word scan a large ingest uses here: numba's compiled one, or numpy's."""
    from context_window.retrieval import wordscan

    if wordscan.available():
        from importlib.metadata import version

        return f"word scan of large ingests: compiled (numba {version('numba')}, the fast extra)"
    return (
        "word scan of large ingests: numpy (about 2x slower on large logs; "
        "pip install 'context-window[fast]' adds the compiled one)"
    )


def _calibrate(settings: Settings, _ns: argparse.Namespace) -> int:
    import anyio

    setup_logging()
    return anyio.run(_calibrate_async, settings)


async def schema_report(settings: Settings, server: ServerEdge) -> str:
    """What the tool schemas cost the model: estimated tokens of tools/list, per tool set."""
    costs = await server.tool_set_costs(settings)
    total = {tools: sum(per_tool.values()) for tools, per_tool in costs.items()}
    return (
        f"tool schemas (tools/list): ~{total[settings.tools]:,} estimated tokens with "
        f"--tools {settings.tools}; all {total['all']:,} ({len(costs['all'])} tools), "
        f"sessions {total['sessions']:,}, docs {total['docs']:,} (each with context_guide)"
    )


async def _calibrate_async(settings: Settings) -> int:
    from context_window.service import Service

    service = Service(settings)
    try:
        message = await service.calibrate(force=True)
    finally:
        await service.aclose()
    sys.stderr.write(message + "\n")
    return 0 if service.counter.source == "calibrated" else 1


def _serve(settings: Settings, _ns: argparse.Namespace, server: ServerEdge | None) -> int:
    if server is None:
        raise ConfigError("this entry point cannot serve: run context-window (context_window.main)")
    from context_window.storage import unwritable_line, write_access

    setup_logging()
    log.info("%s", startup_line(settings))
    reason = write_access(settings.data_dir)
    if reason is not None:
        log.warning("%s", unwritable_line(settings.data_dir, reason))
    for line in unknown_variables(os.environ):
        log.warning("environment variable %s", line)
    for root in missing_roots(settings):
        log.warning(
            "ingest root %s does not exist on this machine: files cannot be ingested from it "
            "until it does (--ingest-root or CTX_INGEST_ROOTS chooses another)",
            root,
        )
    with contextlib.suppress(KeyboardInterrupt):
        server.serve(settings)
    return 0
