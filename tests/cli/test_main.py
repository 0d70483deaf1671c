"""The command line as a real process: help, exit status 2 with one line, path resolution."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import free_port, http_server, run_cli, server_command

from context_window import __version__
from context_window.cli.main import (
    _unknown_flag,
    build_parser,
    served_settings,
    settings_flags,
    startup_line,
)
from context_window.config import load_settings

FLAGS = (
    "--data-dir --ingest-root --llm-base-url --llm-model --llm-api-key --llm-timeout --no-llm "
    "--budget --chunk-tokens --chunk-overlap --max-file-mb --token-ratio --transport --stdio "
    "--http --host --port --http-token --audit --no-audit"
).split()


def run(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """``python -m context_window ARGS`` with no CTX_* variables except ``env``; stdin at EOF."""
    return run_cli(*args, cwd=cwd, env=env, timeout=timeout)


def test_help_lists_every_flag_of_the_design() -> None:
    p = run("--help")
    assert p.returncode == 0
    for flag in FLAGS:
        assert flag in p.stdout, flag
    assert "CTX_BUDGET" in p.stdout and "CTX_DATA_DIR" in p.stdout


def test_version() -> None:
    p = run("--version")
    assert p.returncode == 0
    assert p.stdout.strip() == f"context-window {__version__}"


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--bogus"], {}, "unknown flag --bogus (see"),
        # flags are taken only whole; the one meant is named, not the value as a command
        (["--budg", "900"], {}, "unknown flag --budg; did you mean --budget?"),
        (["sessions", "--budg=900"], {}, "unknown flag --budg; did you mean --budget?"),
        (["--dat-dir", "x"], {}, "unknown flag --dat-dir; did you mean --data-dir?"),
        # a command's flag before the command: argparse would take its value as the command
        (["--to", "3", "window", "d"], {}, "--to is a flag of window: write it after the command"),
        (["--budget", "abc"], {}, "--budget"),
        (["--budget", "0"], {}, "budget must be between"),
        (["--chunk-tokens", "100", "--chunk-overlap", "100"], {}, "chunk-overlap"),
        (["--chunk-overlap", "900"], {}, "chunk-overlap"),
        (["--transport", "ftp"], {}, "--transport"),
        (["--port", "99999"], {}, "port"),
        (["--llm-base-url", "localhost"], {}, "llm-base-url"),
        ([], {"CTX_BUDGET": "abc"}, "CTX_BUDGET"),
        ([], {"CTX_TRANSPORT": "pigeon"}, "transport"),
        ([], {"CTX_AUDIT": "sometimes"}, "CTX_AUDIT"),
        (["frobnicate"], {}, "frobnicate"),
    ],
)
def test_invalid_configuration_exits_2_with_one_line(
    tmp_path: Path, args: list[str], env: dict[str, str], needle: str
) -> None:
    p = run("--data-dir", str(tmp_path / "data"), *args, env=env)
    assert p.returncode == 2
    assert p.stdout == ""
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("context-window: error:")
    assert needle in lines[0]
    assert "Traceback" not in p.stderr


def test_the_flag_check_refuses_only_lines_argparse_refuses() -> None:
    """3,000 random lines (any words, a command, then mostly its own flags; no --help or
    --version): a line the pre-scan names never parses, and many of each kind exist."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    flags = {f for p in [parser, *sub.choices.values()] for f in p._option_string_actions}
    values = ["3", "x", "0.5", "md", "a b", "--", "--bogus", "--to=3", "--limit=2"]
    words = sorted(flags - {"-h", "--help", "--version"}) + list(sub.choices) + values
    rng = random.Random(7)
    named = parsed = 0
    for _ in range(3000):
        command = rng.choice(list(sub.choices))
        own = [f for f in sub.choices[command]._option_string_actions if f.startswith("--")]
        after = [f for f in own if f != "--help"] + values
        line = [rng.choice(words) for _ in range(rng.randint(0, 3))] + [command]
        line += [rng.choice(after) for _ in range(rng.randint(0, 4))]
        message = _unknown_flag(parser, line)
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                parser.parse_args(line)
            except SystemExit:
                named += message is not None
                continue
        assert message is None, (line, message)
        parsed += 1
    assert named > 500 and parsed > 100, (named, parsed)


@pytest.mark.parametrize("under", ["", "sub"])
def test_data_dir_that_is_a_file_exits_2(tmp_path: Path, under: str) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = run("--data-dir", str(blocker / under))
    assert p.returncode == 2
    (line,) = p.stderr.splitlines()
    assert f"cannot create data dir {blocker / under}: a file is in the way" in line
    assert blocker.read_text() == "x"


def test_an_import_says_a_file_is_in_the_way_of_the_data_dir(tmp_path: Path) -> None:
    blocker, export = tmp_path / "file", tmp_path / "s.jsonl"
    blocker.write_text("x")
    export.write_text('{"format":"context-window/session","version":1,"id":"s"}\n')
    p = run("import", str(export), "--data-dir", str(blocker))
    assert p.returncode == 1, p.stderr
    assert "cannot write session 's': a file is in the way (--data-dir" in p.stderr
    assert blocker.read_text() == "x"


def test_relative_data_dir_is_created_and_logged_absolute(tmp_path: Path) -> None:
    p = run("--no-llm", "--data-dir", "rel/state", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""  # stdin was at EOF: the server stopped without writing a message
    assert (tmp_path / "rel" / "state").is_dir()
    assert f"data dir {tmp_path / 'rel' / 'state'};" in p.stderr
    assert "llm disabled (--no-llm)" in p.stderr


def test_a_misspelt_variable_is_named_with_the_setting_it_resembles(tmp_path: Path) -> None:
    """A variable that names no setting does nothing: an LM Studio config with
    CTX_DATADIR would keep its sessions in the default data dir, silently."""
    env = {"CTX_DATADIR": str(tmp_path / "meant"), "CTX_PORT": "4000", "CTX_OTHER_TOOL": "1"}
    env["CTX_NO_LLM"] = "1"  # named for the flag --no-llm
    p = run_cli("--no-llm", "--data-dir", str(tmp_path / "data"), env=env)
    assert p.returncode == 0, p.stderr
    warned = [line.split(" WARNING context_window: ")[1] for line in p.stderr.splitlines()
              if " WARNING context_window: environment variable " in line]  # fmt: skip
    assert warned == [
        "environment variable CTX_DATADIR names no setting and is ignored; "
        "did you mean CTX_DATA_DIR?",
        "environment variable CTX_NO_LLM names no setting and is ignored; "
        "did you mean CTX_LLM_ENABLED=0?",
        "environment variable CTX_OTHER_TOOL names no setting and is ignored",
        "environment variable CTX_PORT names no setting and is ignored; "
        "did you mean CTX_HTTP_PORT?",
    ]
    assert not (tmp_path / "meant").exists()
    quiet = run_cli("--no-llm", "--data-dir", str(tmp_path / "data"), env={"CTX_BUDGET": "900"})
    assert quiet.returncode == 0 and "environment variable" not in quiet.stderr


def test_calibrate_without_llm_says_why_and_fails(tmp_path: Path) -> None:
    p = run("calibrate", "--no-llm", "--data-dir", str(tmp_path))
    assert p.returncode == 1
    assert "LLM disabled" in p.stderr
    assert p.stdout == ""


def test_flags_map_onto_settings(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    ns = build_parser().parse_args(
        [
            "--data-dir", str(tmp_path), "--ingest-root", str(root), "--ingest-root", str(tmp_path),
            "--llm-base-url", "http://h:1/v1", "--llm-model", "m", "--llm-api-key", "k",
            "--llm-timeout", "3", "--no-llm", "--budget", "900", "--chunk-tokens", "300",
            "--chunk-overlap", "30", "--token-ratio", "0.5", "--http", "--host", "0.0.0.0",
            "--port", "9", "--http-token", "t", "--no-audit",
        ]
    )  # fmt: skip
    s = load_settings(settings_flags(ns), environ={"CTX_BUDGET": "1234", "CTX_AUDIT": "1"})
    assert s.data_dir == tmp_path and s.ingest_roots == (root, tmp_path)
    assert (s.llm_base_url, s.llm_model, s.llm_api_key, s.llm_timeout) == (
        "http://h:1/v1",
        "m",
        "k",
        3,
    )
    assert s.llm_enabled is False and s.audit is False
    assert (s.budget, s.chunk_tokens, s.chunk_overlap, s.token_ratio) == (900, 300, 30, 0.5)
    assert (s.transport, s.host, s.port, s.http_token) == ("http", "0.0.0.0", 9, "t")


def test_unset_flags_leave_environment_values(tmp_path: Path) -> None:
    flags = settings_flags(build_parser().parse_args([]))
    assert all(v is None for v in flags.values())
    env = {
        "CTX_DATA_DIR": str(tmp_path),
        "CTX_BUDGET": "1234",
        "CTX_AUDIT": "0",
        "CTX_TRANSPORT": "http",
    }
    s = load_settings(flags, environ=env)
    assert (s.budget, s.audit, s.transport) == (1234, False, "http")


@pytest.mark.parametrize(
    ("args", "transport"),
    [([], None), (["--stdio"], "stdio"), (["--http"], "http"), (["--transport", "http"], "http")],
)
def test_transport_shortcuts(args: list[str], transport: str | None) -> None:
    assert build_parser().parse_args(args).transport == transport


def test_startup_line_names_everything_needed_to_debug_a_launch(tmp_path: Path) -> None:
    s = load_settings({"data_dir": tmp_path, "transport": "http", "port": 4000}, environ={})
    line = startup_line(s)
    assert f"data dir {tmp_path};" in line
    assert "http://127.0.0.1:4000/mcp" in line
    assert "llm http://localhost:1234/v1" in line
    assert "\n" not in line


def test_startup_line_brackets_an_ipv6_bind(tmp_path: Path) -> None:
    s = load_settings(
        {"host": "::1", "transport": "http", "port": 4000, "data_dir": tmp_path}, environ={}
    )
    assert "http://[::1]:4000/mcp" in startup_line(s)


def test_doctor_says_which_word_scan_runs(tmp_path: Path) -> None:
    # As a base install: numba cannot be imported, and doctor names the numpy path.
    script = (
        "import sys; sys.modules['numba'] = None\n"
        "from context_window import main\n"
        "raise SystemExit(main(['doctor', '--data-dir', sys.argv[1]]))\n"
    )
    base = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert base.returncode == 0, base.stderr
    assert "word scan of large ingests: numpy" in base.stdout
    assert "context-window[fast]" in base.stdout
    if importlib.util.find_spec("numba") is not None:  # the fast extra, as CI installs it
        fast = run("doctor", "--data-dir", str(tmp_path / "d"), timeout=120)
        assert "word scan of large ingests: compiled (numba" in fast.stdout


def test_output_is_utf8_whatever_encoding_the_locale_gives_stdout(tmp_path: Path) -> None:
    data, source = tmp_path / "data", tmp_path / "ops.md"
    source.write_text("# 运维\n\n数据库连接超时 → retry 🚀\n", encoding="utf-8")
    assert run_cli("ingest", str(source), "--doc-id", "ops", data=data).returncode == 0
    for args in (("window", "ops"), ("search", "数据库"), ("export", "doc", "ops")):
        # cp1252: what Windows gives a redirected stdout (`context-window export … > file`)
        done = run_cli(*args, data=data, env={"PYTHONIOENCODING": "cp1252"}, encoding="utf-8")
        assert done.returncode == 0 and "数据库连接超时 → retry 🚀" in done.stdout, done.stderr


# ----------------------------------------------------------------------
# `context-window health`: the image's HEALTHCHECK, run against real servers.

ROOT = Path(__file__).resolve().parents[2]


def health(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTX_")}
    return subprocess.run(
        server_command("health", *args), capture_output=True, text=True, timeout=30, env=env
    )


def test_a_running_http_server_is_healthy_and_a_missing_one_is_not(tmp_path: Path) -> None:
    with http_server(tmp_path) as running:
        port = running.base.rsplit(":", 1)[1]
        done = health("--http", "--port", port)
        assert done.returncode == 0, done.stderr
        assert f"127.0.0.1:{port}/health: 200" in done.stdout
    gone = health("--http", "--port", str(free_port()))
    assert gone.returncode == 1
    assert "unhealthy" in gone.stderr and "/health" in gone.stderr


def _ipv6() -> bool:
    try:
        free_port("::1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6(), reason="no IPv6 loopback here")
@pytest.mark.parametrize("host", ["[::1]", "::1", "::", "[::]"])
def test_an_ipv6_bind_is_probed_at_its_own_loopback(tmp_path: Path, host: str) -> None:
    """A bracketed literal was put in brackets again (a traceback), and a wildcard ``::``
    binds IPv6 only, so probing 127.0.0.1 called a healthy server unhealthy."""
    with http_server(tmp_path, host=host) as running:
        port = running.base.rsplit(":", 1)[1]
        done = health("--http", "--host", host, "--port", port)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"http://[::1]:{port}/health: 200\n"


def test_a_stdio_server_has_nothing_to_probe() -> None:
    done = health()
    assert done.returncode == 0 and "nothing to probe" in done.stdout


def test_the_served_flags_are_read_from_process_1(tmp_path: Path) -> None:
    """In a container the server, or the init that runs it, is process 1: the server's
    flags on its command line say where to probe."""
    own = load_settings({"data_dir": tmp_path}, environ={})
    cmdline = tmp_path / "cmdline"
    argv = ["/opt/context-window/bin/python", "/opt/context-window/bin/context-window"]
    cmdline.write_bytes(b"\0".join(a.encode() for a in [*argv, "--http", "--port", "4123"]) + b"\0")
    served = served_settings(own, cmdline)
    assert served.transport == "http" and served.port == 4123
    init = ["dumb-init", "--single-child", "--", "context-window"]  # the image's process 1
    cmdline.write_bytes(b"\0".join(a.encode() for a in [*init, "--http", "--port", "4124"]))
    assert served_settings(own, cmdline).port == 4124
    cmdline.write_bytes(b"/sbin/init\0splash\0")  # not a server: our own settings
    assert served_settings(own, cmdline) is own
    assert served_settings(own, tmp_path / "no-such-file") is own


def test_the_image_checks_its_health_with_this_command() -> None:
    lines = (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()
    check = [line for line in lines if line.startswith("HEALTHCHECK")]
    assert len(check) == 1 and check[0].endswith('CMD ["context-window", "health"]')
