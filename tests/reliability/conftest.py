"""Fixtures for the reliability suite and the figures summary printed at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .support import FIGURES


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """An empty data dir."""
    d = tmp_path / "data"
    d.mkdir()
    yield d


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print what the suite survived: rounds of kills, bad inputs tried, bytes lost."""
    if not FIGURES:
        return
    terminalreporter.section("reliability figures")
    for name in sorted(FIGURES):
        terminalreporter.write_line(f"{name}: {FIGURES[name]}")
