"""The package's metadata agrees with itself: pyproject, server.json (the MCP
registry's entry), the README's mcp-name line and the image's labels."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from context_window.version import __version__

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def project() -> dict[str, Any]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return dict(data["project"])


def registry_entry() -> dict[str, Any]:
    return dict(json.loads((ROOT / "server.json").read_text(encoding="utf-8")))


def test_server_json_names_this_package_and_image_at_this_version() -> None:
    entry = registry_entry()
    assert entry["$schema"].startswith("https://static.modelcontextprotocol.io/schemas/")
    assert re.fullmatch(r"io\.github\.[\w-]+/[\w-]+", entry["name"])
    assert 0 < len(entry["description"]) <= 100  # the registry's limit
    assert entry["version"] == __version__
    kinds = {p["registryType"]: p for p in entry["packages"]}
    assert set(kinds) == {"pypi", "oci"}
    assert kinds["pypi"]["identifier"] == project()["name"]
    assert kinds["pypi"]["version"] == __version__
    assert kinds["oci"]["identifier"].endswith(f":{__version__}")
    assert all(p["transport"]["type"] == "stdio" for p in entry["packages"])
    documented = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for variable in kinds["pypi"]["environmentVariables"]:
        assert variable["name"] in documented, variable["name"]


def test_the_registry_name_is_claimed_by_the_readme_and_the_image() -> None:
    name = registry_entry()["name"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"mcp-name: {name}" in readme.split("\n## ", 1)[0]  # on the first screen
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert f'io.modelcontextprotocol.server.name="{name}"' in dockerfile


def test_the_package_metadata_is_complete() -> None:
    meta = project()
    assert meta["license"] == "MIT" and (ROOT / "LICENSE").is_file()
    assert meta["readme"] == "README.md" and meta["authors"] and meta["keywords"]
    urls = meta["urls"]
    assert registry_entry()["repository"]["url"] in urls.values()
    assert meta["requires-python"] == ">=3.10"
    versions = {c.rsplit(" :: ", 1)[1] for c in meta["classifiers"] if "Python :: 3." in c}
    assert versions == {"3.10", "3.11", "3.12", "3.13"}
