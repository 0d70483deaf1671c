"""Settings: flag > environment > default, validation, and path resolution."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from context_window.cli.main import build_parser
from context_window.config import (
    declared,
    default_data_dir,
    load_settings,
    missing_roots,
    shown_default,
)
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
        "CTX_EMBED_BASE_URL": "http://127.0.0.1:1234/v1",
        "CTX_EMBED_MODEL": "nomic-embed-text",
        "CTX_EMBED_QUERY_PREFIX": "search_query: ",
        "CTX_EMBED_PASSAGE_PREFIX": "search_document: ",
        "CTX_EMBED_TIMEOUT": "4",
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
    assert set(env) == {spec.env for _, spec, _ in declared()}  # every variable is set
    s = load_settings(environ=env)
    assert s.data_dir == tmp_path / "d"
    assert s.ingest_roots == (a, b)
    assert (s.llm_base_url, s.llm_model, s.llm_api_key) == ("https://llm.example/v1", "smol", "k")
    assert (s.llm_timeout, s.llm_enabled) == (7.5, False)
    assert (s.embed_base_url, s.embed_model) == ("http://127.0.0.1:1234/v1", "nomic-embed-text")
    assert (s.embed_query_prefix, s.embed_passage_prefix) == ("search_query: ", "search_document: ")
    assert s.embed_timeout == 4.0
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
        ({}, {"CTX_BUDGET": "abc"}, "CTX_BUDGET='abc' is not a whole number"),
        (
            {},
            {"CTX_LLM_ENABLED": "maybe"},
            "CTX_LLM_ENABLED='maybe' is not on or off (1/0, yes/no)",
        ),
        ({}, {"CTX_HTTP_PORT": "80.5"}, "CTX_HTTP_PORT='80.5' is not a whole number"),
        ({}, {"CTX_TOKEN_RATIO": "lots"}, "CTX_TOKEN_RATIO='lots' is not a number"),
        ({"budget": 10}, {}, "budget must be between 64 and 1,000,000, not 10"),
        ({"chunk_tokens": 10**6}, {}, "chunk-tokens must be between 32 and 100,000"),
        ({"llm_timeout": 0.05}, {}, "llm-timeout must be between 0.1 and 3,600, not 0.05"),
        ({}, {"CTX_CHUNK_OVERLAP": "900"}, "chunk-overlap"),
        ({"no_such_setting": 1}, {}, "no_such_setting"),
        ({"http_token": " "}, {}, "http-token is blank"),
        ({}, {"CTX_HTTP_TOKEN": "  "}, "http-token is blank"),
        ({"host": ""}, {}, "host is blank: bind 127.0.0.1, or 0.0.0.0"),
        ({"host": " "}, {}, "host is blank"),
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


ROOT = Path(__file__).resolve().parents[2]


def table_rows(path: Path) -> list[list[str]]:
    """The cells of the first table that has a ``| flag | env | default`` header."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| flag | env | default"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        rows.append([c.strip().replace("`", "").replace("\\|", "|") for c in cells])
    return rows


def declarations() -> dict[str, tuple[set[str], str]]:
    """Per environment variable: the flags that set it and the default as shown."""
    out = {}
    for f, spec, _ in declared():
        flags = {spec.flag, spec.off_flag, *(s for s, _ in spec.shortcuts)} - {None}
        out[spec.env] = ({str(x) for x in flags}, shown_default(f, spec))
    return out


def test_the_configuration_page_lists_every_setting_as_declared() -> None:
    rows = table_rows(ROOT / "docs" / "configuration.md")
    want = declarations()
    assert sorted(row[1] for row in rows) == sorted(want)
    for flags, env, default, *_ in rows:
        assert set(re.findall(r"--[a-z-]+", flags)) == want[env][0], env
        assert default == want[env][1], env


def test_the_readme_table_agrees_with_the_declarations() -> None:
    rows = table_rows(ROOT / "README.md")
    want = declarations()
    assert len(rows) >= 5
    for flags, envs, defaults, *_ in rows:
        names = re.findall(r"CTX_[A-Z_]+", envs)
        shown = defaults.split(", ") if len(names) > 1 else [defaults]
        assert len(shown) == len(names), envs
        for env, default in zip(names, shown, strict=True):
            assert default == want[env][1], env
        for flag in re.findall(r"--[a-z-]+", flags):
            assert any(flag in want[env][0] for env in names), flag


def test_server_json_describes_variables_as_declared() -> None:
    server = json.loads((ROOT / "server.json").read_text(encoding="utf-8"))
    variables = server["packages"][0]["environmentVariables"]
    assert len(variables) >= 4
    specs = {spec.env: (f, spec) for f, spec, _ in declared()}
    for var in variables:
        f, spec = specs[var["name"]]
        help_text = spec.help[0].upper() + spec.help[1:]
        assert var["description"] == f"{help_text} (default {shown_default(f, spec)})"


def test_every_declared_setting_has_a_flag_and_parses_from_its_variable() -> None:
    parser = build_parser()
    for f, spec, _ in declared():
        flag = spec.flag or spec.off_flag
        assert flag is not None and spec.env.startswith("CTX_"), f.name
        assert flag in parser.format_help(), flag


def test_a_missing_ingest_root_is_kept_and_named_not_fatal(tmp_path: Path) -> None:
    # A config copied from another machine names a folder that is not here: the server
    # must still start (it says so once), so the root is kept and reported.
    (tmp_path / "here").mkdir()
    s = load_settings({"ingest_roots": [tmp_path / "here", "/definitely/not/here"]}, environ={})
    assert s.ingest_roots == (tmp_path / "here", Path("/definitely/not/here"))
    assert missing_roots(s) == [Path("/definitely/not/here")]


def test_an_embeddings_endpoint_must_be_an_http_url_and_is_off_when_empty(tmp_path: Path) -> None:
    base = {"data_dir": tmp_path}
    assert load_settings(base, environ={}).embed_base_url == ""  # off: words only
    with pytest.raises(ConfigError, match="embed-base-url must start with http"):
        load_settings({**base, "embed_base_url": "localhost:1234/v1"}, environ={})
    with pytest.raises(ConfigError, match=r"embed-timeout must be between 0\.1 and 60"):
        load_settings(base, environ={"CTX_EMBED_TIMEOUT": "0"})
