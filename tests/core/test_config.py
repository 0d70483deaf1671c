"""Settings: flag > environment > default, validation, and path resolution."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from context_window.config import ENV_VARS, default_data_dir, load_settings
from context_window.errors import ConfigError


def test_defaults_match_the_design() -> None:
    s = load_settings(environ={})
    assert s.data_dir == default_data_dir() and s.data_dir.is_absolute()
    assert "context-window" in str(s.data_dir)
    assert s.ingest_roots == ()
    assert s.llm_base_url == "http://localhost:1234/v1"
    assert (s.llm_model, s.llm_api_key, s.http_token) == ("", "", "")
    assert s.llm_timeout == 120 and s.llm_enabled is True
    assert (s.budget, s.chunk_tokens, s.chunk_overlap, s.token_ratio) == (4000, 800, 80, 0.27)
    assert (s.transport, s.host, s.port, s.audit) == ("stdio", "127.0.0.1", 3001, True)


def test_every_environment_variable_is_read(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    env = {
        "CTX_DATA_DIR": str(tmp_path / "d"),
        "CTX_INGEST_ROOTS": f"{a}{os.pathsep}{b}",
        "CTX_LLM_BASE_URL": "https://llm.example/v1",
        "CTX_LLM_MODEL": "smol",
        "CTX_LLM_API_KEY": "k",
        "CTX_LLM_TIMEOUT": "7.5",
        "CTX_LLM_ENABLED": "0",
        "CTX_BUDGET": "2000",
        "CTX_CHUNK_TOKENS": "400",
        "CTX_CHUNK_OVERLAP": "0",
        "CTX_MAX_FILE_MB": "64",
        "CTX_MAX_QUERY_CHARS": "500",
        "CTX_MAX_QUERY_TERMS": "9",
        "CTX_TOKEN_RATIO": "0.3",
        "CTX_TRANSPORT": "http",
        "CTX_HTTP_HOST": "0.0.0.0",
        "CTX_HTTP_PORT": "8080",
        "CTX_HTTP_TOKEN": "t",
        "CTX_HTTP_SESSION_IDLE": "60",
        "CTX_HTTP_SESSIONS_PER_CLIENT": "5",
        "CTX_AUDIT": "off",
        "CTX_TOOLS": "sessions",
    }
    assert set(env) == set(ENV_VARS.values())
    s = load_settings(environ=env)
    assert s.data_dir == tmp_path / "d"
    assert s.ingest_roots == (a, b)
    assert (s.llm_base_url, s.llm_model, s.llm_api_key) == ("https://llm.example/v1", "smol", "k")
    assert (s.llm_timeout, s.llm_enabled) == (7.5, False)
    assert (s.budget, s.chunk_tokens, s.chunk_overlap, s.token_ratio) == (2000, 400, 0, 0.3)
    assert (s.max_query_chars, s.max_query_terms) == (500, 9)
    assert (s.http_session_idle, s.http_sessions_per_client) == (60.0, 5)
    assert s.max_file_mb == 64 and s.tools == "sessions"
    assert (s.transport, s.host, s.port, s.http_token, s.audit) == (
        "http",
        "0.0.0.0",
        8080,
        "t",
        False,
    )


def test_ingest_roots_may_be_comma_separated(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    s = load_settings(environ={"CTX_INGEST_ROOTS": f"{tmp_path / 'a'}, ,{tmp_path / 'b'}"})
    assert [p.name for p in s.ingest_roots] == ["a", "b"]


def test_flag_beats_environment_beats_default(tmp_path: Path) -> None:
    env = {"CTX_BUDGET": "700", "CTX_LLM_MODEL": "env-model", "CTX_DATA_DIR": str(tmp_path / "e")}
    flags = {"budget": 500, "data_dir": tmp_path / "f", "llm_model": None}
    s = load_settings(flags, environ=env)
    assert s.budget == 500
    assert s.data_dir == tmp_path / "f"
    assert s.llm_model == "env-model"  # None means "flag not given"
    assert load_settings({}, environ=env).budget == 700
    assert load_settings({}, environ={}).budget == 4000
    assert (
        load_settings({"llm_enabled": False}, environ={"CTX_LLM_ENABLED": "1"}).llm_enabled is False
    )
    assert load_settings({"audit": True}, environ={"CTX_AUDIT": "no"}).audit is True


def test_empty_numeric_env_is_ignored_but_empty_strings_are_kept() -> None:
    env = {"CTX_BUDGET": "", "CTX_LLM_MODEL": "", "CTX_HTTP_TOKEN": ""}
    s = load_settings(environ=env)
    assert s.budget == 4000 and s.llm_model == ""


def test_os_environ_is_used_when_no_mapping_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTX_BUDGET", "1500")
    assert load_settings().budget == 1500


def test_relative_data_dir_is_resolved_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    s = load_settings({"data_dir": "rel/state"}, environ={})
    assert s.data_dir.is_absolute()
    assert s.data_dir == tmp_path / "rel" / "state"
    assert load_settings(environ={"CTX_DATA_DIR": "x"}).data_dir == tmp_path / "x"
    (tmp_path / "root").mkdir()
    assert load_settings({"ingest_roots": ["root"]}, environ={}).ingest_roots == (
        tmp_path / "root",
    )


def test_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load_settings({"data_dir": "~/ctx"}, environ={}).data_dir == tmp_path / "ctx"


@pytest.mark.parametrize(
    ("flags", "env", "needle"),
    [
        ({"budget": 0}, {}, "budget must be between"),
        ({"budget": 63}, {}, "budget"),
        ({"chunk_tokens": 100, "chunk_overlap": 100}, {}, "chunk-overlap"),
        ({"chunk_overlap": -1}, {}, "chunk-overlap"),
        ({"chunk_tokens": 10}, {}, "chunk-tokens"),
        ({"transport": "ftp"}, {}, "transport"),
        ({"port": 70000}, {}, "port"),
        ({"token_ratio": 0.0}, {}, "token-ratio"),
        ({"llm_timeout": 0}, {}, "llm-timeout"),
        ({"llm_base_url": "localhost:1234"}, {}, "llm-base-url"),
        ({"ingest_roots": ["/definitely/not/here"]}, {}, "/definitely/not/here"),
        ({}, {"CTX_BUDGET": "abc"}, "CTX_BUDGET='abc'"),
        ({}, {"CTX_LLM_ENABLED": "maybe"}, "CTX_LLM_ENABLED"),
        ({}, {"CTX_HTTP_PORT": "80.5"}, "CTX_HTTP_PORT"),
        ({}, {"CTX_TOKEN_RATIO": "lots"}, "CTX_TOKEN_RATIO"),
        ({}, {"CTX_CHUNK_OVERLAP": "900"}, "chunk-overlap"),
        ({"no_such_setting": 1}, {}, "no_such_setting"),
    ],
)
def test_invalid_settings_raise_config_error_naming_the_problem(
    flags: dict[str, object], env: dict[str, str], needle: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(flags, environ=env)
    message = str(err.value)
    assert needle in message
    assert "\n" not in message


def test_settings_are_frozen_and_changes_are_revalidated(tmp_path: Path) -> None:
    s = load_settings({"data_dir": tmp_path}, environ={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.budget = 10  # type: ignore[misc]
    assert s.with_changes(budget=100).budget == 100
    with pytest.raises(ConfigError):
        s.with_changes(budget=1)


def test_secrets_are_not_in_repr(tmp_path: Path) -> None:
    s = load_settings(
        {"data_dir": tmp_path, "llm_api_key": "sk-XYZ", "http_token": "tok-XYZ"}, environ={}
    )
    assert "XYZ" not in repr(s)
