"""Every export imports back, byte for byte: awkward titles and names, CRLF, BOMs,
unclosed fences, no final newline. Export and import run as the real CLI.

Before, a document whose title held a BOM or a control character (both come from a
first line or a file name), or whose file name was over 200 characters, exported fine
and failed to import.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import run_cli

from .support import service_for

DOCUMENTS = {
    "bom-title": "\ufeffTitle with BOM\n\nbody\n",
    "ctrl-title": "Title\x07bell\x1b[31m red\n\nbody\n",
    "crlf": "# H\r\n\r\nline one\r\nline two\r\n",
    "bom-text": "\ufeff# H\n\nbody\n",
    "unclosed-fence": "# H\n\n```python\ncode without an end\n",
    "no-final-newline": "# H\n\nbody",
    "long-line-title": "T" * 500 + "\n\nbody\n",
}
ENTRIES = [
    "crlf\r\nline two\r\n",
    "\ufeffbom first",
    "```python\nunclosed fence",
    "<!-- entry fake -->\nlooks like a marker",
    "tail spaces   \n\n\n",
    "tab\tand \x0b vertical tab",
    "emoji \U0001f600 and \u4e2d\u6587",
]


def _cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, data=data)


@pytest.mark.parametrize("fmt", ["jsonl", "md"])
def test_every_document_export_imports_back_byte_identical(tmp_path: Path, fmt: str) -> None:
    data, files = tmp_path / "data", tmp_path / "files"
    files.mkdir()
    name = "n" * 230 + ".md"  # a file name over 200 characters becomes the title
    (files / name).write_bytes(b"# long name\n\nbody\n")
    svc = service_for(data, ingest_roots=[files])
    for did, text in DOCUMENTS.items():
        svc.documents.ingest(text=text, doc_id=did)
    svc.documents.ingest(file_path=name, doc_id="long-name")
    for did in [*DOCUMENTS, "long-name"]:
        out = tmp_path / f"{did}.{fmt}"
        done = _cli(data, "export", "doc", did, "--format", fmt, "-o", str(out))
        assert done.returncode == 0, done.stderr
        again = tmp_path / f"again-{did}"
        done = _cli(again, "import", str(out))
        assert done.returncode == 0, (did, done.stderr)
        original = (data / "documents" / did / "source.txt").read_bytes()
        assert (again / "documents" / did / "source.txt").read_bytes() == original, did
        title = service_for(again).documents.get(did).title
        assert title.isprintable() and 0 < len(title) <= 200


@pytest.mark.parametrize("fmt", ["jsonl", "md"])
def test_every_session_export_imports_back(tmp_path: Path, fmt: str) -> None:
    data = tmp_path / "data"
    session, _ = service_for(data).sessions.open("s", title="A plain title")
    for text in ENTRIES:
        session.append(text)
    out = tmp_path / f"s.{fmt}"
    assert _cli(data, "export", "session", "s", "--format", fmt, "-o", str(out)).returncode == 0
    again = tmp_path / "again"
    done = _cli(again, "import", str(out))
    assert done.returncode == 0, done.stderr
    assert [e.text for e in service_for(again).sessions.get("s").entries()] == ENTRIES
