"""Settings: CLI flag > environment variable > default, resolved once into a frozen object.

Each setting is declared once, a field of :class:`Settings` with ``setting(...)``; the
flags, the environment parsing and the validation derive from it.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import typing
from collections.abc import Iterator, Mapping
from dataclasses import Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, TypeGuard

import platformdirs

from context_window.errors import ConfigError, InvalidInput

APP_NAME = "context-window"
Transport = Literal["stdio", "http"]
ToolSet = Literal["all", "sessions", "docs"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class Spec:
    """How one setting is given: its variable, its flag(s), its help and its range."""

    env: str
    flag: str | None  # the flag that sets it (None: no such flag)
    metavar: str | None
    help: str
    lo: float | None = None  # the range, both ends allowed
    hi: float | None = None
    off_flag: str | None = None  # a bool's flag that turns it off
    shortcuts: tuple[tuple[str, str], ...] = ()  # flags that set one value (--http)
    default_text: str | None = None  # the default as help shows it, when not the value


def setting(
    default: Any,
    env: str,
    flag: str | None,
    help: str,
    lo: float | None = None,
    hi: float | None = None,
    *,
    off: str | None = None,
    shortcuts: tuple[tuple[str, str], ...] = (),
    shown: str | None = None,
    secret: bool = False,
) -> Any:
    """Declare a field of Settings (``flag``: ``"--name METAVAR"``; a secret stays out of repr)."""
    name, _, metavar = (flag or "").partition(" ")
    spec = Spec(env, name or None, metavar or None, help, lo, hi, off, shortcuts, shown)
    meta = {"spec": spec}
    if default is None:
        return field(metadata=meta)
    return field(default=default, metadata=meta, repr=not secret)


@dataclass(frozen=True)
class Settings:
    """Every setting of one server instance; built by :func:`load_settings`."""

    data_dir: Path = setting(
        None, "CTX_DATA_DIR", "--data-dir DIR", "where all state lives",
        shown="the platform's user data dir for context-window",
    )  # fmt: skip
    ingest_roots: tuple[Path, ...] = setting(
        (), "CTX_INGEST_ROOTS", "--ingest-root DIR",
        "directory whose files may be ingested; repeatable (the variable: separated by the "
        "path separator or commas)",
        shown="none",
    )  # fmt: skip
    llm_base_url: str = setting(
        "http://localhost:1234/v1", "CTX_LLM_BASE_URL", "--llm-base-url URL",
        "OpenAI-compatible endpoint",
    )  # fmt: skip
    llm_model: str = setting(
        "", "CTX_LLM_MODEL", "--llm-model ID",
        "model for summaries and calibration; empty = the loaded model",
    )  # fmt: skip
    llm_api_key: str = setting(
        "", "CTX_LLM_API_KEY", "--llm-api-key KEY", "sent as Authorization: Bearer to the endpoint",
        secret=True,
    )  # fmt: skip
    llm_timeout: float = setting(
        120.0, "CTX_LLM_TIMEOUT", "--llm-timeout SECONDS", "LLM request timeout", 0.1, 3600
    )
    llm_enabled: bool = setting(
        True, "CTX_LLM_ENABLED", None,
        "the local model for summaries and calibration (off: extractive, no network)",
        off="--no-llm",
    )  # fmt: skip
    embed_base_url: str = setting(
        "", "CTX_EMBED_BASE_URL", "--embed-base-url URL",
        "OpenAI-compatible endpoint serving /embeddings; empty = rank by words only",
        shown="empty (off)",
    )  # fmt: skip
    embed_model: str = setting(
        "", "CTX_EMBED_MODEL", "--embed-model ID", "embedding model; empty = the loaded one"
    )
    embed_query_prefix: str = setting(
        "", "CTX_EMBED_QUERY_PREFIX", "--embed-query-prefix TEXT",
        "put before each query embedded (nomic-embed: 'search_query: ', e5: 'query: ')",
    )  # fmt: skip
    embed_passage_prefix: str = setting(
        "", "CTX_EMBED_PASSAGE_PREFIX", "--embed-passage-prefix TEXT",
        "put before each entry or passage embedded ('search_document: ', 'passage: ')",
    )  # fmt: skip
    embed_timeout: float = setting(
        2.0, "CTX_EMBED_TIMEOUT", "--embed-timeout SECONDS",
        "longest wait for a query's vector before ranking by words only", 0.1, 60,
    )  # fmt: skip
    budget: int = setting(
        4000, "CTX_BUDGET", "--budget N", "default recall/window/search budget in tokens",
        64, 1_000_000,
    )  # fmt: skip
    chunk_tokens: int = setting(
        800, "CTX_CHUNK_TOKENS", "--chunk-tokens N", "target document chunk size", 32, 100_000
    )
    chunk_overlap: int = setting(
        80, "CTX_CHUNK_OVERLAP", "--chunk-overlap N", "overlap between chunks, below their size", 0
    )
    max_file_mb: int = setting(
        2048, "CTX_MAX_FILE_MB", "--max-file-mb N", "largest file an ingest reads, in MiB", 1, 4096
    )
    max_query_chars: int = setting(
        2000, "CTX_MAX_QUERY_CHARS", "--max-query-chars N", "longest search query, in characters",
        16, 1_000_000,
    )  # fmt: skip
    max_query_terms: int = setting(
        64, "CTX_MAX_QUERY_TERMS", "--max-query-terms N",
        "most distinct terms one query searches for", 1, 10_000,
    )  # fmt: skip
    token_ratio: float = setting(
        0.27, "CTX_TOKEN_RATIO", "--token-ratio X", "cold-start tokens per character", 0.01, 4.0
    )
    transport: Transport = setting(
        "stdio", "CTX_TRANSPORT", "--transport", "transport",
        shortcuts=(("--stdio", "stdio"), ("--http", "http")),
    )  # fmt: skip
    host: str = setting("127.0.0.1", "CTX_HTTP_HOST", "--host H", "HTTP bind host")
    port: int = setting(3001, "CTX_HTTP_PORT", "--port P", "HTTP port", 0, 65535)
    http_token: str = setting(
        "", "CTX_HTTP_TOKEN", "--http-token T", "require Authorization: Bearer T on HTTP",
        shown="none", secret=True,
    )  # fmt: skip
    http_session_idle: float = setting(
        900.0, "CTX_HTTP_SESSION_IDLE", "--http-session-idle SECONDS",
        "an MCP session with no request for this long is closed", 1, 86_400,
    )  # fmt: skip
    http_sessions_per_client: int = setting(
        32, "CTX_HTTP_SESSIONS_PER_CLIENT", "--http-sessions-per-client N",
        "open MCP sessions per client address; one more closes the least recently used", 1, 1000,
    )  # fmt: skip
    audit: bool = setting(
        True, "CTX_AUDIT", "--audit",
        "one JSON line per tool call on stderr (tool, outcome, ms; no content)", off="--no-audit",
    )  # fmt: skip
    tools: ToolSet = setting(
        "all",
        "CTX_TOOLS",
        "--tools",
        "expose only the session or document tools, for a tiny window",
    )

    def with_changes(self, **changes: Any) -> Settings:
        """Return a copy with some fields replaced and re-validated."""
        return _validated(replace(self, **changes))

    @property
    def max_file_bytes(self) -> int:
        """``max_file_mb`` in bytes, as the document store takes it."""
        return self.max_file_mb * 1024 * 1024


def declared() -> Iterator[tuple[Field[Any], Spec, Any]]:
    """Each setting's field, declaration and resolved type, in declaration order."""
    hints = typing.get_type_hints(Settings)
    for f in fields(Settings):
        yield f, f.metadata["spec"], hints[f.name]


def choices(kind: Any) -> tuple[str, ...] | None:
    """The values a Literal-typed setting allows (None for other types)."""
    return typing.get_args(kind) if typing.get_origin(kind) is Literal else None


def shown_default(f: Field[Any], spec: Spec) -> str:
    """A setting's default as help and the README show it."""
    if spec.default_text is not None:
        return spec.default_text
    if isinstance(f.default, bool):
        return "on" if f.default else "off"
    if f.default == "":
        return "empty"
    return f"{f.default:g}" if isinstance(f.default, float) else str(f.default)


def default_of(name: str) -> Any:
    """A setting's declared default."""
    return Settings.__dataclass_fields__[name].default


def default_data_dir() -> Path:
    """The platform's user data directory for context-window."""
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def load_settings(
    flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Merge flags (None = unset) over environment variables over defaults, and validate."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {k: v for k, v in (flags or {}).items() if v is not None}
    for f, spec, kind in declared():
        raw = env.get(spec.env)
        if f.name in values or raw is None:
            continue  # a flag wins, even over an unparsable variable
        if raw != "" or f.default == "":  # an empty string setting may be set empty
            values[f.name] = _parse(kind, raw, spec.env)
    if "data_dir" not in values:
        values["data_dir"] = default_data_dir()
    values["data_dir"] = _absolute(values["data_dir"])
    values["ingest_roots"] = tuple(_absolute(p) for p in values.get("ingest_roots", ()))
    try:
        settings = Settings(**values)
    except TypeError as exc:  # an unknown key from a caller, not from a user
        raise ConfigError(str(exc)) from exc
    return _validated(settings)


def _absolute(path: str | Path) -> Path:
    """Resolve a path against the working directory, expanding ``~``."""
    return Path(os.path.abspath(Path(path).expanduser()))  # noqa: PTH100 - keep symlinks as given


def _parse(kind: Any, raw: str, var: str) -> Any:
    """Convert one environment variable's text to the setting's type."""
    try:
        if kind == tuple[Path, ...]:
            return [p for p in re.split(rf"[{re.escape(os.pathsep)},]", raw) if p.strip()]
        if kind is bool:
            low = raw.strip().lower()
            if low in _TRUE | _FALSE:
                return low in _TRUE
            raise ValueError(raw)
        if kind in (int, float):
            return kind(raw)
    except ValueError:
        wanted = {int: "a whole number", float: "a number"}.get(kind, "on or off (1/0, yes/no)")
        raise ConfigError(f"{var}={raw!r:.80} is not {wanted}") from None
    return raw


def _validated(s: Settings) -> Settings:
    """Check every declared range and choice, then the relations between settings."""
    for f, spec, kind in declared():
        value, name = getattr(s, f.name), f.name.replace("_", "-")
        allowed = choices(kind)
        if allowed is not None and value not in allowed:
            raise ConfigError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
        if spec.lo is not None and not _in_range(value, spec.lo, spec.hi):
            raise ConfigError(f"{name} must be {_range_text(spec)}, not {value!r}")
    try:
        check_chunk_settings(s.chunk_tokens, s.chunk_overlap, s.token_ratio)
    except InvalidInput as exc:
        raise ConfigError(str(exc)) from None
    if not s.host.strip():  # a bind to '' is every interface, and no log could name it
        raise ConfigError("host is blank: bind 127.0.0.1, or 0.0.0.0 for every interface")
    if s.http_token and not s.http_token.strip():
        raise ConfigError("http-token is blank: give a real secret, or none for no token")
    for name, url in (("llm-base-url", s.llm_base_url), ("embed-base-url", s.embed_base_url)):
        if (url or name == "llm-base-url") and not re.match(r"^https?://", url):
            raise ConfigError(f"{name} must start with http:// or https://, not {url!r}")
    return s  # an ingest root that does not exist is reported at start and by doc_ingest


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A line for each ``CTX_*`` variable that names no setting (so it does nothing),
    with the ones it resembles: a misspelt variable would otherwise go unnoticed."""
    known = {spec.env[4:]: spec.env for _, spec, _ in declared()}  # without "CTX_"
    # Named for an off flag, as CTX_NO_LLM for --no-llm: its setting's variable at 0.
    offs = {
        s.off_flag[2:].upper().replace("-", "_"): f"{s.env}=0"
        for _, s, _ in declared()
        if s.off_flag
    }
    lines = []
    for name in sorted(n for n in environ if n.startswith("CTX_") and n[4:] not in known):
        words = set(name[4:].split("_"))
        near = [v for k, v in known.items() if words <= set(k.split("_"))]
        near = [offs[name[4:]]] if name[4:] in offs else near
        near = near or [known[k] for k in difflib.get_close_matches(name[4:], known, 1, 0.75)]
        hint = f"; did you mean {' or '.join(near[:2])}?" if near else ""
        lines.append(f"{name} names no setting and is ignored{hint}")
    return lines


def bare_host(host: str) -> str:
    """A host without IPv6 brackets."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def url_host(host: str) -> str:
    """A host as a URL or a Host header writes it: an IPv6 literal in brackets."""
    bare = bare_host(host)
    return f"[{bare}]" if ":" in bare else bare


def is_wildcard(host: str) -> bool:
    """Whether a bind host means every interface (0.0.0.0, ::)."""
    return bare_host(host.strip()) in {"", "0.0.0.0", "::", "*"}


def local_url(s: Settings, path: str) -> str:
    """Where a client on this machine reaches the HTTP server: a wildcard bind at loopback
    (IPv6's for ``::``, which binds IPv6 only)."""
    host = ("::1" if ":" in s.host else "127.0.0.1") if is_wildcard(s.host) else s.host
    return f"http://{url_host(host)}:{s.port}{path}"


def missing_roots(s: Settings) -> list[Path]:
    """The ingest roots that are not existing directories on this machine."""
    return [root for root in s.ingest_roots if not root.is_dir()]


def _range_text(spec: Spec) -> str:
    """``between 1 and 10`` or ``at least 0``."""
    lo = _number(spec.lo or 0)
    return f"at least {lo}" if spec.hi is None else f"between {lo} and {_number(spec.hi)}"


def _number(x: float) -> str:
    """``1,000,000`` or ``0.01``, as a person writes it (``:g`` gives ``1e+06``)."""
    return f"{int(x):,}" if x == int(x) else f"{x:g}"


def _in_range(value: object, lo: float, hi: float | None) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and lo <= value <= (math.inf if hi is None else hi)
    )


def _spec(name: str) -> Spec:
    spec: Spec = Settings.__dataclass_fields__[name].metadata["spec"]
    return spec


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def check_chunk_settings(tokens: object, overlap: object, ratio: object) -> tuple[int, int, float]:
    """Chunk size, overlap and ratio, or InvalidInput: one rule for every source of them."""
    size, per_char = _spec("chunk_tokens"), _spec("token_ratio")
    if not _is_int(tokens) or not _in_range(tokens, size.lo or 0, size.hi):
        raise InvalidInput(
            f"chunk-tokens must be an integer {_range_text(size)}, not {tokens!r:.40}"
        )
    if not _is_int(overlap) or not 0 <= overlap < tokens:
        raise InvalidInput(
            f"chunk-overlap must be an integer >= 0 and < chunk-tokens ({tokens}), "
            f"not {overlap!r:.40}"
        )
    if not _in_range(ratio, per_char.lo or 0, per_char.hi):
        raise InvalidInput(
            f"token-ratio must be a number {_range_text(per_char)}, not {ratio!r:.40}"
        )
    assert isinstance(ratio, int | float)
    return tokens, overlap, float(ratio)


def recorded_chunk_settings(meta: dict[str, object]) -> tuple[int, int, float] | None:
    """The (chunk tokens, overlap, ratio) a meta.json or export records, if all are valid."""
    try:
        return check_chunk_settings(
            meta.get("chunk_tokens"), meta.get("chunk_overlap"), meta.get("ratio")
        )
    except InvalidInput:
        return None
