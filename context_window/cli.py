"""Command line: parse flags, set up stderr logging, and serve (or run an admin command)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import anyio

from context_window import __version__
from context_window.config import Settings, load_settings
from context_window.errors import ConfigError

log = logging.getLogger("context_window")


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; every flag of the design's configuration table."""
    p = _Parser(
        prog="context-window",
        description="MCP server giving small local models an external context buffer. "
        "Flags override CTX_* environment variables, which override defaults.",
    )
    p.add_argument(
        "command",
        nargs="?",
        default="serve",
        choices=["serve", "calibrate", "doctor"],
        help="serve (default); calibrate: measure the loaded model's tokens/char; "
        "doctor: audit the data dir read-only (exit 1 if problems are found)",
    )
    p.add_argument("--version", action="version", version=f"context-window {__version__}")
    p.add_argument("--data-dir", metavar="DIR", help="where all state lives [CTX_DATA_DIR]")
    p.add_argument(
        "--ingest-root",
        metavar="DIR",
        action="append",
        dest="ingest_roots",
        help="directory doc_ingest may read files from; repeatable [CTX_INGEST_ROOTS]",
    )
    p.add_argument(
        "--llm-base-url",
        metavar="URL",
        help="OpenAI-compatible endpoint (default http://localhost:1234/v1) [CTX_LLM_BASE_URL]",
    )
    p.add_argument(
        "--llm-model", metavar="ID", help="model id; empty = loaded model [CTX_LLM_MODEL]"
    )
    p.add_argument(
        "--llm-api-key", metavar="KEY", help="Bearer key for the endpoint [CTX_LLM_API_KEY]"
    )
    p.add_argument(
        "--llm-timeout",
        metavar="SECONDS",
        type=float,
        help="LLM request timeout (default 120) [CTX_LLM_TIMEOUT]",
    )
    p.add_argument(
        "--no-llm",
        dest="llm_enabled",
        action="store_const",
        const=False,
        help="extractive summaries only, no calibration, no network [CTX_LLM_ENABLED=0]",
    )
    p.add_argument(
        "--budget",
        metavar="N",
        type=int,
        help="default recall/window/search budget in tokens (default 4000) [CTX_BUDGET]",
    )
    p.add_argument(
        "--chunk-tokens",
        metavar="N",
        type=int,
        help="target document chunk size (default 800) [CTX_CHUNK_TOKENS]",
    )
    p.add_argument(
        "--chunk-overlap",
        metavar="N",
        type=int,
        help="overlap between chunks, < chunk size (default 80) [CTX_CHUNK_OVERLAP]",
    )
    p.add_argument(
        "--max-file-mb",
        metavar="N",
        type=int,
        help="largest file doc_ingest reads, in MiB (default 256) [CTX_MAX_FILE_MB]",
    )
    p.add_argument(
        "--token-ratio",
        metavar="X",
        type=float,
        help="cold-start tokens per character (default 0.27) [CTX_TOKEN_RATIO]",
    )
    p.add_argument(
        "--transport", choices=["stdio", "http"], help="transport (default stdio) [CTX_TRANSPORT]"
    )
    p.add_argument(
        "--stdio",
        dest="transport",
        action="store_const",
        const="stdio",
        help="same as --transport stdio",
    )
    p.add_argument(
        "--http",
        dest="transport",
        action="store_const",
        const="http",
        help="same as --transport http",
    )
    p.add_argument("--host", metavar="H", help="HTTP bind host (default 127.0.0.1) [CTX_HTTP_HOST]")
    p.add_argument("--port", metavar="P", type=int, help="HTTP port (default 3001) [CTX_HTTP_PORT]")
    p.add_argument(
        "--http-token", metavar="T", help="require Authorization: Bearer T on HTTP [CTX_HTTP_TOKEN]"
    )
    p.add_argument(
        "--tools",
        choices=["all", "sessions", "docs"],
        help="expose only the session or document tools, for a tiny window (default all) "
        "[CTX_TOOLS]",
    )
    p.add_argument(
        "--audit",
        dest="audit",
        action="store_const",
        const=True,
        help="one JSON line per tool call on stderr (default on) [CTX_AUDIT]",
    )
    p.add_argument(
        "--no-audit",
        dest="audit",
        action="store_const",
        const=False,
        help="no per-call audit lines",
    )
    return p


def _flags(ns: argparse.Namespace) -> dict[str, Any]:
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
        "token_ratio",
        "transport",
        "host",
        "port",
        "http_token",
        "audit",
        "tools",
    )
    return {n: getattr(ns, n) for n in names}


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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        settings = load_settings(_flags(ns))
        if ns.command != "doctor":  # the doctor only reads; it must not create the dir
            settings.data_dir.mkdir(parents=True, exist_ok=True)
    except ConfigError as exc:
        sys.stderr.write(f"context-window: error: {exc}\n")
        return 2
    except OSError as exc:
        sys.stderr.write(
            f"context-window: error: cannot create data dir {settings.data_dir}: {exc.strerror}\n"
        )
        return 2
    if ns.command == "doctor":
        from context_window.doctor import run

        status = run(settings.data_dir, sys.stdout)
        sys.stdout.write(anyio.run(schema_report, settings) + "\n")
        return status
    setup_logging()
    if ns.command == "calibrate":
        return anyio.run(_calibrate, settings)
    log.info("%s", startup_line(settings))
    return _serve(settings)


async def schema_report(settings: Settings) -> str:
    """What the tool schemas cost the model: estimated tokens of tools/list, per tool set."""
    from context_window.server import build_server, tool_costs
    from context_window.service import Service

    offline = settings.with_changes(llm_enabled=False, tools="all")  # no client, no network
    costs = await tool_costs(build_server(Service(offline)), offline.token_ratio)
    sessions = sum(n for name, n in costs.items() if name.startswith("context_"))
    docs = sum(n for name, n in costs.items() if name.startswith("doc_"))
    guide = costs.get("context_guide", 0)
    exposed = {"all": sum(costs.values()), "sessions": sessions, "docs": docs + guide}
    return (
        f"tool schemas (tools/list): ~{exposed[settings.tools]} estimated tokens with "
        f"--tools {settings.tools}; all {exposed['all']} ({len(costs)} tools), "
        f"sessions {sessions}, docs {docs + guide} (each with context_guide)"
    )


async def _calibrate(settings: Settings) -> int:
    from context_window.service import Service

    service = Service(settings)
    try:
        message = await service.calibrate(force=True)
    finally:
        await service.aclose()
    sys.stderr.write(message + "\n")
    return 0 if service.counter.source == "calibrated" else 1


def _serve(settings: Settings) -> int:
    from context_window.server import build_server
    from context_window.service import Service

    service = Service(settings)
    app = build_server(service)
    try:
        if settings.transport == "http":
            from context_window.http import serve_http

            serve_http(app, service)
        else:
            app.run("stdio")
    except KeyboardInterrupt:
        pass
    return 0
