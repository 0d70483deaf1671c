"""Command line: parse flags, set up stderr logging, and run a command (serve by default).

Every command is one row of ``commands()``: a name, a line of help, a function that
adds its own arguments and one that runs it. Runners only call library functions,
print what they return, and leave errors to ``main``, which turns any
``ContextWindowError`` into one ``context-window: error:`` line (exit 1; 2 for a
bad setting). The configuration flags are accepted before or after the command.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from context_window import errors
from context_window.cli.commands import DATA_COMMANDS, Command
from context_window.config import Settings, load_settings
from context_window.errors import ConfigError, ContextWindowError, advised
from context_window.version import __version__

log = logging.getLogger("context_window")

# What a person at the shell can do about an error (see ``errors.REMEDIES``).
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
    errors.REINGEST: "; ingest it again from your MCP client, or forget it there",
    errors.SET_INGEST_ROOT: ": start with --ingest-root DIR (or CTX_INGEST_ROOTS)",
}


@dataclass(frozen=True)
class ServerEdge:
    """What the command line needs of the MCP edge, handed in by ``context_window.main``
    (the two edges do not import each other)."""

    serve: Callable[[Settings], None]  # serve until stopped, on the configured transport
    tool_set_costs: Callable[[Settings], Awaitable[dict[str, dict[str, int]]]]


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

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
    for command in commands():
        cp = sub.add_parser(
            command.name,
            help=command.help,
            description=command.help,
            epilog="Configuration flags such as --data-dir may come before or after the\n"
            "command; `context-window --help` lists them.",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.arguments(cp)
        _add_settings_flags(cp, after_command=True)
    return p


def _add_settings_flags(p: argparse.ArgumentParser, *, after_command: bool = False) -> None:
    """Add the configuration flags; after a command they keep what was given before it."""

    def add(*names: str, **kw: Any) -> None:
        if after_command:
            kw.update(default=argparse.SUPPRESS, help=argparse.SUPPRESS)
            if kw.get("dest") == "ingest_roots":  # appended to what came before the command
                kw["dest"] = "ingest_roots_after"
        p.add_argument(*names, **kw)

    add("--data-dir", metavar="DIR", help="where all state lives [CTX_DATA_DIR]")
    add(
        "--ingest-root",
        metavar="DIR",
        action="append",
        dest="ingest_roots",
        help="directory doc_ingest may read files from; repeatable [CTX_INGEST_ROOTS]",
    )
    add(
        "--llm-base-url",
        metavar="URL",
        help="OpenAI-compatible endpoint (default http://localhost:1234/v1) [CTX_LLM_BASE_URL]",
    )
    add("--llm-model", metavar="ID", help="model id; empty = loaded model [CTX_LLM_MODEL]")
    add("--llm-api-key", metavar="KEY", help="Bearer key for the endpoint [CTX_LLM_API_KEY]")
    add(
        "--llm-timeout",
        metavar="SECONDS",
        type=float,
        help="LLM request timeout (default 120) [CTX_LLM_TIMEOUT]",
    )
    add(
        "--no-llm",
        dest="llm_enabled",
        action="store_const",
        const=False,
        help="extractive summaries only, no calibration, no network [CTX_LLM_ENABLED=0]",
    )
    add(
        "--budget",
        metavar="N",
        type=int,
        help="default recall/window/search budget in tokens (default 4000) [CTX_BUDGET]",
    )
    add(
        "--chunk-tokens",
        metavar="N",
        type=int,
        help="target document chunk size (default 800) [CTX_CHUNK_TOKENS]",
    )
    add(
        "--chunk-overlap",
        metavar="N",
        type=int,
        help="overlap between chunks, < chunk size (default 80) [CTX_CHUNK_OVERLAP]",
    )
    add(
        "--max-file-mb",
        metavar="N",
        type=int,
        help="largest file doc_ingest reads, in MiB (default 2048) [CTX_MAX_FILE_MB]",
    )
    add(
        "--max-query-chars",
        metavar="N",
        type=int,
        help="longest search query, in characters (default 2000) [CTX_MAX_QUERY_CHARS]",
    )
    add(
        "--max-query-terms",
        metavar="N",
        type=int,
        help="most distinct terms one query searches for (default 64) [CTX_MAX_QUERY_TERMS]",
    )
    add(
        "--token-ratio",
        metavar="X",
        type=float,
        help="cold-start tokens per character (default 0.27) [CTX_TOKEN_RATIO]",
    )
    add("--transport", choices=["stdio", "http"], help="transport (default stdio) [CTX_TRANSPORT]")
    add(
        "--stdio",
        dest="transport",
        action="store_const",
        const="stdio",
        help="same as --transport stdio",
    )
    add(
        "--http",
        dest="transport",
        action="store_const",
        const="http",
        help="same as --transport http",
    )
    add("--host", metavar="H", help="HTTP bind host (default 127.0.0.1) [CTX_HTTP_HOST]")
    add("--port", metavar="P", type=int, help="HTTP port (default 3001) [CTX_HTTP_PORT]")
    add(
        "--http-token", metavar="T", help="require Authorization: Bearer T on HTTP [CTX_HTTP_TOKEN]"
    )
    add(
        "--http-session-idle",
        metavar="SECONDS",
        type=float,
        help="an MCP session with no request for this long is closed (default 900) "
        "[CTX_HTTP_SESSION_IDLE]",
    )
    add(
        "--http-sessions-per-client",
        metavar="N",
        type=int,
        help="open MCP sessions per client address; a new one closes its least recently "
        "used (default 32) [CTX_HTTP_SESSIONS_PER_CLIENT]",
    )
    add(
        "--tools",
        choices=["all", "sessions", "docs"],
        help="expose only the session or document tools, for a tiny window (default all) "
        "[CTX_TOOLS]",
    )
    add(
        "--audit",
        dest="audit",
        action="store_const",
        const=True,
        help="one JSON line per tool call on stderr (default on) [CTX_AUDIT]",
    )
    add(
        "--no-audit",
        dest="audit",
        action="store_const",
        const=False,
        help="no per-call audit lines",
    )


def settings_flags(ns: argparse.Namespace) -> dict[str, Any]:
    """The parsed flags that map onto Settings fields (None = not given)."""
    names = (
        "data_dir",
        "ingest_roots",
        "llm_base_url",
        "llm_model",
        "llm_api_key",
        "llm_timeout",
        "llm_enabled",
        "budget",
        "chunk_tokens",
        "chunk_overlap",
        "max_file_mb",
        "max_query_chars",
        "max_query_terms",
        "token_ratio",
        "transport",
        "host",
        "port",
        "http_token",
        "http_session_idle",
        "http_sessions_per_client",
        "audit",
        "tools",
    )
    flags = {n: getattr(ns, n, None) for n in names}
    roots = [*(ns.ingest_roots or []), *getattr(ns, "ingest_roots_after", [])]
    flags["ingest_roots"] = roots or None
    return flags


def setup_logging() -> None:
    """Log to stderr only: stdout belongs to the protocol in stdio mode."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for noisy in ("httpx", "httpcore", "mcp", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _url_host(host: str) -> str:
    """An IPv6 literal in brackets, as URLs write it."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def startup_line(settings: Settings) -> str:
    """The one line logged at start: version, transport, absolute data dir, roots, LLM."""
    roots = ", ".join(str(r) for r in settings.ingest_roots) or "none"
    llm = settings.llm_base_url if settings.llm_enabled else "disabled (--no-llm)"
    where = (
        "stdio"
        if settings.transport == "stdio"
        else (f"http://{_url_host(settings.host)}:{settings.port}/mcp")
    )
    return (
        f"context-window {__version__} serving on {where}; data dir {settings.data_dir}; "
        f"ingest roots {roots}; llm {llm}"
    )


def main(argv: Sequence[str] | None = None, server: ServerEdge | None = None) -> int:
    """Run the command line; returns the process exit status. ``server`` is needed to
    serve and by doctor's schema report (``context_window.main`` passes it)."""
    ns = build_parser().parse_args(argv)
    command = {c.name: c for c in commands(server)}[ns.command or "serve"]
    try:
        settings = load_settings(settings_flags(ns))
        if command.creates_data_dir:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
    except ConfigError as exc:
        sys.stderr.write(f"context-window: error: {exc}\n")
        return 2
    except OSError as exc:
        from context_window.cli.doctor import CHOOSE_ANOTHER

        sys.stderr.write(
            f"context-window: error: cannot create data dir {settings.data_dir}: "
            f"{exc.strerror} ({CHOOSE_ANOTHER})\n"
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
    """The settings of the server this check is about: when process 1 (as in a container)
    is ``context-window``, its flags over the environment; else ``own``."""
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
    import urllib.error
    import urllib.request

    served = served_settings(settings)
    if served.transport != "http":
        _say("stdio server: nothing to probe (healthy while it runs)")
        return 0
    host = "127.0.0.1" if served.host in ("0.0.0.0", "::", "") else served.host
    url = f"http://{'[' + host + ']' if ':' in host else host}:{served.port}/health"
    try:
        with urllib.request.urlopen(url, timeout=HEALTH_SECONDS) as reply:
            _say(f"{url}: {reply.status}")
            return 0 if reply.status == 200 else 1
    except (OSError, urllib.error.URLError) as exc:
        sys.stderr.write(f"context-window: unhealthy: {url}: {exc}\n")
        return 1


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")


def _doctor(settings: Settings, _ns: argparse.Namespace, server: ServerEdge | None) -> int:
    import anyio

    from context_window.cli.doctor import run

    status = run(settings.data_dir, sys.stdout)
    if server is not None:
        sys.stdout.write(anyio.run(schema_report, settings, server) + "\n")
    return status


def _calibrate(settings: Settings, _ns: argparse.Namespace) -> int:
    import anyio

    setup_logging()
    return anyio.run(_calibrate_async, settings)


async def schema_report(settings: Settings, server: ServerEdge) -> str:
    """What the tool schemas cost the model: estimated tokens of tools/list, per tool set."""
    costs = await server.tool_set_costs(settings)
    total = {tools: sum(per_tool.values()) for tools, per_tool in costs.items()}
    return (
        f"tool schemas (tools/list): ~{total[settings.tools]} estimated tokens with "
        f"--tools {settings.tools}; all {total['all']} ({len(costs['all'])} tools), "
        f"sessions {total['sessions']}, docs {total['docs']} (each with context_guide)"
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
    from context_window.cli.doctor import unwritable
    from context_window.storage import write_access

    setup_logging()
    log.info("%s", startup_line(settings))
    reason = write_access(settings.data_dir)
    if reason is not None:
        log.warning("%s", unwritable(settings.data_dir, reason))
    with contextlib.suppress(KeyboardInterrupt):
        server.serve(settings)
    return 0
