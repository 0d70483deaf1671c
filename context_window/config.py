"""Settings: CLI flag > environment variable > default, resolved once into a frozen object."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import platformdirs

from context_window.chunking import check_chunk_settings
from context_window.errors import ConfigError, InvalidInput

APP_NAME = "context-window"
Transport = Literal["stdio", "http"]
ToolSet = Literal["all", "sessions", "docs"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class Settings:
    """Every setting of one server instance; built by :func:`load_settings`."""

    data_dir: Path
    ingest_roots: tuple[Path, ...] = ()
    llm_base_url: str = "http://localhost:1234/v1"
    llm_model: str = ""
    llm_api_key: str = field(default="", repr=False)
    llm_timeout: float = 120.0
    llm_enabled: bool = True
    budget: int = 4000
    chunk_tokens: int = 800
    chunk_overlap: int = 80
    max_file_mb: int = 2048
    max_query_chars: int = 2000
    max_query_terms: int = 64
    token_ratio: float = 0.27
    transport: Transport = "stdio"
    host: str = "127.0.0.1"
    port: int = 3001
    http_token: str = field(default="", repr=False)
    http_session_idle: float = 900.0
    http_sessions_per_client: int = 32
    audit: bool = True
    tools: ToolSet = "all"

    def with_changes(self, **changes: Any) -> Settings:
        """Return a copy with some fields replaced and re-validated."""
        return _validated(replace(self, **changes))


# (field, env var, parser) for every setting an environment variable can set.
_ENV: tuple[tuple[str, str], ...] = (
    ("data_dir", "CTX_DATA_DIR"),
    ("ingest_roots", "CTX_INGEST_ROOTS"),
    ("llm_base_url", "CTX_LLM_BASE_URL"),
    ("llm_model", "CTX_LLM_MODEL"),
    ("llm_api_key", "CTX_LLM_API_KEY"),
    ("llm_timeout", "CTX_LLM_TIMEOUT"),
    ("llm_enabled", "CTX_LLM_ENABLED"),
    ("budget", "CTX_BUDGET"),
    ("chunk_tokens", "CTX_CHUNK_TOKENS"),
    ("chunk_overlap", "CTX_CHUNK_OVERLAP"),
    ("max_file_mb", "CTX_MAX_FILE_MB"),
    ("max_query_chars", "CTX_MAX_QUERY_CHARS"),
    ("max_query_terms", "CTX_MAX_QUERY_TERMS"),
    ("token_ratio", "CTX_TOKEN_RATIO"),
    ("transport", "CTX_TRANSPORT"),
    ("host", "CTX_HTTP_HOST"),
    ("port", "CTX_HTTP_PORT"),
    ("http_token", "CTX_HTTP_TOKEN"),
    ("http_session_idle", "CTX_HTTP_SESSION_IDLE"),
    ("http_sessions_per_client", "CTX_HTTP_SESSIONS_PER_CLIENT"),
    ("audit", "CTX_AUDIT"),
    ("tools", "CTX_TOOLS"),
)
ENV_VARS: dict[str, str] = dict(_ENV)


def default_data_dir() -> Path:
    """The platform's user data directory for context-window."""
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def load_settings(
    flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Merge flags (None = unset) over environment variables over defaults, and validate."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {k: v for k, v in (flags or {}).items() if v is not None}
    for name, var in _ENV:
        raw = env.get(var)
        if name in values or raw is None:
            continue  # a flag wins, even over an unparsable variable
        if raw != "" or name in {"llm_model", "llm_api_key", "http_token"}:
            values[name] = _parse(name, raw, var)
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


def _parse(name: str, raw: str, var: str) -> Any:
    """Convert one environment variable's text to the field's type."""
    try:
        if name == "ingest_roots":
            return [p for p in re.split(rf"[{re.escape(os.pathsep)},]", raw) if p.strip()]
        if name in {"llm_enabled", "audit"}:
            low = raw.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError(raw)
        if name in {
            "budget",
            "chunk_tokens",
            "chunk_overlap",
            "max_file_mb",
            "max_query_chars",
            "max_query_terms",
            "http_sessions_per_client",
            "port",
        }:
            return int(raw)
        if name in {"llm_timeout", "token_ratio", "http_session_idle"}:
            return float(raw)
    except ValueError:
        raise ConfigError(f"{var}={raw!r} is not a valid value") from None
    return raw


def _validated(s: Settings) -> Settings:
    """Check ranges and relations between settings; raise ConfigError naming the problem."""
    if s.transport not in ("stdio", "http"):
        raise ConfigError(f"transport must be 'stdio' or 'http', not {s.transport!r}")
    if s.tools not in ("all", "sessions", "docs"):
        raise ConfigError(f"tools must be 'all', 'sessions' or 'docs', not {s.tools!r}")
    if not 64 <= s.budget <= 1_000_000:
        raise ConfigError(f"budget must be between 64 and 1000000 tokens, not {s.budget}")
    try:
        check_chunk_settings(s.chunk_tokens, s.chunk_overlap, s.token_ratio)
    except InvalidInput as exc:
        raise ConfigError(str(exc)) from None
    if not 1 <= s.max_file_mb <= 4096:
        raise ConfigError(f"max-file-mb must be between 1 and 4096, not {s.max_file_mb}")
    if not 16 <= s.max_query_chars <= 1_000_000:
        raise ConfigError(
            f"max-query-chars must be between 16 and 1000000, not {s.max_query_chars}"
        )
    if not 1 <= s.max_query_terms <= 10_000:
        raise ConfigError(f"max-query-terms must be between 1 and 10000, not {s.max_query_terms}")
    if not 0 < s.llm_timeout <= 3600:
        raise ConfigError(f"llm-timeout must be between 0 and 3600 seconds, not {s.llm_timeout}")
    if not (math.isfinite(s.http_session_idle) and 1 <= s.http_session_idle <= 86_400):
        raise ConfigError(
            f"http-session-idle must be between 1 and 86400 seconds, not {s.http_session_idle}"
        )
    if not 1 <= s.http_sessions_per_client <= 1000:
        raise ConfigError(
            f"http-sessions-per-client must be between 1 and 1000, not {s.http_sessions_per_client}"
        )
    if not 0 <= s.port <= 65535:
        raise ConfigError(f"port must be between 0 and 65535, not {s.port}")
    if not re.match(r"^https?://", s.llm_base_url):
        raise ConfigError(
            f"llm-base-url must start with http:// or https://, not {s.llm_base_url!r}"
        )
    for root in s.ingest_roots:
        if not root.is_dir():
            raise ConfigError(f"ingest root {str(root)!r} is not an existing directory")
    return s
