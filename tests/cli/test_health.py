"""`context-window health`: the image's HEALTHCHECK, run against real servers."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers import free_port, http_server, server_command

from context_window.cli.main import served_settings
from context_window.config import load_settings

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
