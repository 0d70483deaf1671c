"""The commands for people: sessions, show, docs, search; read-only; errors; old invocations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import client
from helpers import run_cli
from mcp import Client, StdioServerParameters

from context_window import main as cw_main
from context_window.cli.main import build_parser, main, settings_flags
from context_window.config import Settings, load_settings
from context_window.service import Service
from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter

from .test_archive import SPEC, TRICKY, build_session, cli

SettingsFactory = Callable[..., Settings]


@pytest.fixture
def filled(settings: SettingsFactory) -> tuple[Settings, dict[str, str]]:
    """A data dir with a session in every state and two documents."""
    s = settings()
    ids = build_session(s)
    service = Service(s)
    service.sessions.open("other", "Second session")[0].append("the linker again", now=5.0)
    service.documents.ingest(text=SPEC, title="Storage spec", doc_id="spec")
    service.documents.ingest(text="linker flags: -Wl,--as-needed\n" * 30, doc_id="flags")
    return s, ids


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=timeout)


def test_sessions_lists_newest_first_with_counts(
    filled: tuple[Settings, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    s, _ = filled
    os.utime(s.data_dir / "sessions" / "work" / "entries.jsonl", (1, 1))  # make it the oldest
    assert cli(s, "sessions") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "LIVE/ALL", "TOKENS", "UPDATED", "TITLE"]
    assert lines[1].startswith("other ") and lines[2].startswith("work ")
    # live: the kept note5 and unpinned entry, pinned, summary, raw; all: 11
    assert " 5/11 " in lines[2] and "Fixing the" in lines[2]
    assert all(len(line) <= 80 for line in lines)
    assert cli(s, "sessions", "--json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["id"], r["live"], r["total"]) for r in rows] == [("other", 1, 1), ("work", 5, 11)]


def test_show_live_and_all(
    filled: tuple[Settings, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    s, ids = filled
    assert cli(s, "show", "work") == 0
    live = capsys.readouterr().out
    assert ids["pinned"] in live and ids["summary"] in live
    assert ids["deleted"] not in live and ids["note0"] not in live
    assert f"{ids['pinned']}  " in live and "decision  [pinned]  #design #md" in live
    assert "    # Decision: keep the journal" in live  # text indented under its entry
    assert "--all adds superseded, expired and deleted ones" in live
    assert cli(s, "show", "work", "--all") == 0
    everything = capsys.readouterr().out
    assert f"{ids['deleted']}  " in everything and "[deleted]" in everything
    assert "note  [superseded]  #build" in everything
    order = ("note0", "note4", "summary", "note5")  # note0-4 folded, note5 kept
    positions = [everything.index(ids[k] + "  ") for k in order]
    assert positions == sorted(positions)  # the summary stands after the entries it folds
    assert all(len(line) <= 80 for line in everything.splitlines())
    assert cli(s, "show", "work", "--all", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    by_id = {e["id"]: e for e in data["entries"]}
    assert by_id[ids["pinned"]]["text"] == TRICKY
    assert by_id[ids["deleted"]]["flags"] == ["deleted"]
    assert by_id[ids["note0"]]["flags"] == ["superseded"]


def test_docs_lists_every_document(
    filled: tuple[Settings, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    s, _ = filled
    assert cli(s, "docs") == 0
    out = capsys.readouterr().out
    assert "spec  " in out and "Storage spec" in out and "source: inline text" in out
    assert "flags  " in out and " 1 chunk  " in out and " tokens  " in out
    assert all(len(line) <= 80 for line in out.splitlines())
    assert cli(s, "docs", "--json") == 0
    docs = {d["id"]: d for d in json.loads(capsys.readouterr().out)}
    assert docs["spec"]["chars"] == len(SPEC) and docs["spec"]["title"] == "Storage spec"


def test_search_groups_sessions_and_documents(
    filled: tuple[Settings, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    s, ids = filled
    assert cli(s, "search", "linker") == 0
    out = capsys.readouterr().out
    assert "session work: Fixing the" in out and "session other: Second session" in out
    assert "documents: 1 hit, best first" in out and "# flags [0]" in out
    assert "\n# spec [" not in out and "1: linker flags: -Wl,--as-needed (+29 like it" in out
    assert ids["note5"] in out and ids["note0"] not in out  # live entries only
    assert ids["deleted"] not in out
    assert ids["pinned"] not in out  # pinned, but it does not mention the linker
    assert cli(s, "search", "linker", "--session", "work", "--json") == 0
    found = json.loads(capsys.readouterr().out)
    assert found["lines"] == [] and {e["session_id"] for e in found["entries"]} == {"work"}
    assert cli(s, "search", "linker", "--session", "work", "--limit", "1", "--json") == 0
    (hit,) = json.loads(capsys.readouterr().out)["entries"]  # the pinned entry takes no place
    assert "linker" in hit["text"]
    assert cli(s, "search", "append-only journal", "--doc", "spec", "--limit", "1") == 0
    out = capsys.readouterr().out
    assert out.startswith("documents: 1 hit, best first") and out.count("\n# spec [") == 1
    assert cli(s, "search", "zebra") == 0
    assert capsys.readouterr().out == "no matches\n"


def test_search_shows_an_entry_from_its_matching_line(
    settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = settings()
    trace = "\n".join(f"  at app.Module{i}.run(Module{i}.java:{i})" for i in range(300))
    session = Service(s).sessions.open("crash")[0]
    session.append(f"Stack trace of the crash:\n{trace}")
    session.append("a short note on the crash")
    assert cli(s, "search", "Module123") == 0
    out = capsys.readouterr().out.split("\n")
    at = out.index("      at app.Module123.run(Module123.java:123)")  # the line, not the head
    assert out[at - 1] == "    …" and out[at + 3] == "    …"
    assert cli(s, "search", "crash") == 0  # no line stands out: from the start, as before
    out = capsys.readouterr().out.split("\n")
    at = out.index("    Stack trace of the crash:")
    assert out[at + 1] == "      at app.Module0.run(Module0.java:0)"
    assert "    a short note on the crash" in out


def test_search_finds_decisions_by_the_word(
    settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = settings()
    session = Service(s).sessions.open("work")[0]
    chosen = session.append("link with mold", role="decision").id
    session.append("the linker is slow")
    assert cli(s, "search", "decisions", "--json") == 0
    assert [e["id"] for e in json.loads(capsys.readouterr().out)["entries"]] == [chosen]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["show", "nope"], "context-window sessions"),
        (["export", "session", "nope"], "context-window sessions"),
        (["export", "doc", "nope"], "context-window docs"),
        (["search", "linker", "--doc", "nope"], "context-window docs"),
        (["window", "storage SPEC"], "title or file name of spec. Give its id, spec"),
        (["show", "fixing the <!-- BUILD --> `linker`"], "title of work. Give its id, work"),
        (["search", "linker", "--session", "nope"], "context-window sessions"),
        (["search", "the"], "no searchable words"),
        (["search", "linker", "--limit", "0"], "limit"),
        (["show", "../x"], "invalid session_id"),
        (["export", "session", "work", "-o", "/nonexistent/dir/w.jsonl"], "cannot write"),
    ],
)
def test_errors_are_one_line_and_exit_1(
    filled: tuple[Settings, dict[str, str]],
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    needle: str,
) -> None:
    s, _ = filled
    assert cli(s, *args) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("context-window: error:") and needle in err


def snapshot(root: Path) -> dict[str, tuple[bytes, float]]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"", p.stat().st_mtime)
        for p in sorted(root.rglob("*"))
    }


def test_reading_changes_nothing(
    filled: tuple[Settings, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s, _ = filled
    docs = s.data_dir / "documents"
    stale = docs / ".tmp-old-1234"  # a crashed ingest: the server's sweep would delete it
    stale.mkdir()
    os.utime(stale, (time.time() - 7200,) * 2)
    (s.data_dir / "sessions" / "nometa").mkdir()  # SessionStore.open would write meta.json
    before = snapshot(s.data_dir)
    for args in (
        ["sessions"],
        ["show", "work", "--all"],
        ["show", "nometa"],
        ["docs"],
        ["search", "linker"],
        ["export", "session", "work", "--format", "md"],
        ["export", "doc", "spec"],
    ):
        assert cli(s, *args) == 0, args
    capsys.readouterr()
    assert snapshot(s.data_dir) == before


@pytest.mark.parametrize(
    "args",
    [["sessions"], ["docs"], ["show", "x"], ["search", "linker"], ["export", "session", "x"],
     ["import", "missing.jsonl"], ["doctor"]],
)  # fmt: skip
def test_reading_never_creates_the_data_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    data = tmp_path / "absent"
    main(["--data-dir", str(data), *args])
    capsys.readouterr()
    assert not data.exists()


def test_empty_data_dir_views(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "empty"
    data.mkdir()
    assert main(["sessions", "--data-dir", str(data)]) == 0
    assert main(["docs", "--data-dir", str(data)]) == 0
    assert capsys.readouterr().out == "no sessions\nno documents\n"


@pytest.mark.parametrize("command", ["sessions", "docs", "search x", "show s", "export session s"])
def test_a_mistyped_data_dir_is_named_not_read_as_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    typo = tmp_path / "dta"
    assert main([*command.split(), "--data-dir", str(typo)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"the data dir {typo} does not exist: check --data-dir" in captured.err
    assert not typo.exists()
    typo.write_text("x")  # a file where the data dir should be
    assert main([*command.split(), "--data-dir", str(typo)]) == 2
    assert f"the data dir {typo} is not a directory: check" in capsys.readouterr().err
    assert typo.read_text() == "x"


def test_docs_names_a_document_it_skips(
    filled: tuple[Settings, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    s, _ = filled
    (s.data_dir / "documents" / "flags" / "meta.json").write_text("{not json")
    assert cli(s, "docs") == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("spec  1 chunk  ") and "flags" not in captured.out
    assert "skipped document 'flags': damaged meta.json (missing or not a JSON" in captured.err


def test_flags_before_or_after_the_command(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    p = build_parser()
    ns = p.parse_args(
        ["--ingest-root", str(a), "serve", "--ingest-root", str(b), "--budget", "900"]
    )
    s = load_settings(settings_flags(ns), environ={})
    assert s.ingest_roots == (a, b) and s.budget == 900 and ns.command == "serve"
    ns = p.parse_args(["--budget", "700", "--no-llm", "sessions", "--json"])
    assert (ns.command, ns.budget, ns.llm_enabled, ns.json) == ("sessions", 700, False, True)
    ns = p.parse_args(["calibrate", "--http", "--data-dir", str(a)])
    assert (ns.command, ns.transport, ns.data_dir) == ("calibrate", "http", str(a))
    assert p.parse_args(["--no-llm"]).command is None  # no command: serve


def test_subcommand_usage_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["export", "session"])
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("context-window: error:") and "ID" in line
    assert "context-window export --help" in line


def test_round_trip_in_real_processes_without_mcp(
    filled: tuple[Settings, dict[str, str]], tmp_path: Path
) -> None:
    s, ids = filled
    out = tmp_path / "work.md"
    done = run("export", "session", "work", "--format", "md", "-o", str(out), "--data-dir",
               str(s.data_dir))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and "exported session work (14 records)" in done.stderr
    fresh = tmp_path / "fresh"
    done = run("--data-dir", str(fresh), "import", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "imported session work (11 entries): Fixing the <!-- build --> `linker`\n"
    shown = run("--data-dir", str(fresh), "show", "work", "--all")
    assert shown.returncode == 0 and ids["deleted"] in shown.stdout
    code = (
        "import sys; from context_window.cli.main import main; "
        f"rc = main(['--data-dir', {str(fresh)!r}, 'search', 'linker']); "
        "sys.stderr.write(str('mcp' in sys.modules)); raise SystemExit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and ids["note5"] in done.stdout
    assert done.stderr == "False"  # the human commands never import the MCP SDK


def test_ingest_of_a_path_that_cannot_be_read_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    loop = ("Symlink loop", "Too many levels of symbolic links")  # Python < 3.13, 3.13
    for name, whys in (("n" * 300, ("File name too long",)), (str(tmp_path / "a"), loop)):
        assert main(["ingest", name, "--data-dir", str(tmp_path / "data")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("context-window: error: cannot read "), err
        assert any(why in err for why in whys), err
        assert err.count("\n") == 1


def test_ingest_a_file_from_the_shell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    log = tmp_path / "notes" / "deploy.log"
    log.parent.mkdir()
    log.write_text("step 1 ok\nstep 2 failed: disk quota exceeded on /srv/cache\n")
    assert main(["ingest", str(log), "--doc-id", "deploy", "--data-dir", str(data)]) == 0
    assert capsys.readouterr().out.startswith("ingested deploy: deploy.log (1 chunk, ")
    # the same text again; a blank id is no id, as for the tools (and import)
    assert main(["ingest", str(log), "--doc-id", "", "--data-dir", str(data)]) == 0
    kept = capsys.readouterr().out.splitlines()
    assert kept[0].startswith("kept deploy: deploy.log (1 chunk, ") and len(kept) == 2
    assert kept[1] == "note: this text was ingested already; no copy was made"
    assert main(["search", "quota", "--data-dir", str(data)]) == 0
    assert "disk quota exceeded" in capsys.readouterr().out
    assert main(["search", "--disk quota", "--data-dir", str(data)]) == 0  # words, not a flag
    assert "disk quota exceeded" in capsys.readouterr().out
    log.write_text("step 1 ok\nstep 2 ok\n")
    assert main(["ingest", str(log), "--doc-id", "deploy", "--title", "Deploy",
                 "--data-dir", str(data)]) == 0  # fmt: skip
    replaced = capsys.readouterr().out.splitlines()
    assert replaced[0].startswith("replaced deploy: Deploy (1 chunk, ")
    assert replaced[1:] == ["kept 0 of 1 chunk unchanged"]  # as doc_ingest says it
    assert main(["docs", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("deploy  1 chunk  ") and "source: /" in out and "Deploy" in out
    assert main(["window", "deploy", "--from", "5", "--data-dir", str(data)]) == 1
    assert "document 'deploy' has 1 chunk (0-0)" in capsys.readouterr().err
    # --to is whole, not a prefix of --tools or --token-ratio (which made it ambiguous)
    assert main(["window", "deploy", "--to", "0", "--data-dir", str(data)]) == 0
    assert capsys.readouterr().out.startswith("deploy: Deploy · chunks 0-0 of 1")
    out = str(tmp_path / "deploy.md")  # counts of one read as such
    assert main(["export", "doc", "deploy", "--format", "md", "-o", out,
                 "--data-dir", str(data)]) == 0  # fmt: skip
    assert capsys.readouterr().err == f"exported document deploy (1 chunk) to {out}\n"
    assert main(["import", out, "--doc-id", "copy", "--data-dir", str(data)]) == 0
    assert capsys.readouterr().out.startswith("imported document copy (1 chunk): Deploy")
    assert main(["ingest", str(tmp_path / "missing.log"), "--data-dir", str(data)]) == 2
    assert "no such file: " in capsys.readouterr().err
    assert main(["ingest", str(tmp_path), "--data-dir", str(data)]) == 2
    assert "is not a regular file" in capsys.readouterr().err
    log.write_text("step 1 ok\nstep 2 ok\nstep 3 ok\n")  # changed since its ingest
    assert main(["docs", "--data-dir", str(data)]) == 0  # as doc_list flags it
    again = f"context-window ingest {log} --doc-id deploy"
    assert f"    changed since ingest (size 20 -> 30 bytes): {again}\n" in capsys.readouterr().out
    assert main(["docs", "--json", "--data-dir", str(data)]) == 0
    assert {d["id"]: d["source_state"] for d in json.loads(capsys.readouterr().out)} == {
        "deploy": "changed",
        "copy": "unknown",  # an import records no stat of the file
    }
    log.unlink()
    assert main(["docs", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert out.count("    source missing: the file is gone; this copy still works\n") == 1


@pytest.mark.anyio
async def test_entry_counts_have_thousands_separators_in_both_edges(
    settings: SettingsFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """``1,200 live of 1,200 entries``: one count is not written two ways in one line."""
    s = settings()
    session = Service(s).sessions.open("big", None)[0]
    for i in range(1_200):
        session.append(f"note {i}", now=float(i))
    async with client(s) as c:
        answers = [
            await c.call_tool(t, {"session_id": "big"}) for t in ("context_open", "context_status")
        ]
    texts = [a.content[0].text for a in answers]  # type: ignore[union-attr]
    assert "1,200 live of 1,200 entries, 0 pinned" in texts[0]
    assert "1,200 live, 0 superseded" in texts[1]
    assert cli(s, "sessions") == 0 and " 1,200/1,200 " in capsys.readouterr().out
    assert cli(s, "show", "big") == 0 and "1,200 live of 1,200 entries" in capsys.readouterr().out


# ----------------------------------------------------------------------
# `context-window purge`: real erasure from the CLI, beside a live stdio server.

DAY = 86_400.0


def purge(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("purge", *args, "--data-dir", str(data), timeout=60)


def test_purge_erases_and_a_dry_run_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    s = SessionStore(data, TokenCounter(0.27)).open("s")[0]
    doomed = s.append("password hunter2 was pasted here")
    s.update(doomed.id, deleted=True)
    old = s.append("temporary build id 4711", ttl_days=1, now=time.time() - 2 * DAY)
    kept = s.append("keep this decision", pinned=True)
    log = data / "sessions" / "s" / "entries.jsonl"
    before = log.read_bytes()

    assert cw_main(["purge", "s", "--dry-run", "--data-dir", str(data)]) == 0
    assert "would erase 2 deleted or expired entries and 1 patch" in capsys.readouterr().out
    assert log.read_bytes() == before

    assert cw_main(["purge", "s", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("s: erased 2 deleted or expired entries and 1 patch record;")
    raw = log.read_bytes()
    assert b"hunter2" not in raw and b"4711" not in raw
    assert doomed.id.encode() not in raw and old.id.encode() not in raw
    fresh = SessionStore(data, TokenCounter(0.27)).open("s")[0]
    assert [e.id for e in fresh.entries(include_hidden=True)] == [kept.id]
    assert fresh.stats().skipped_lines == 0  # the rewritten log's identity line is no record
    capsys.readouterr()
    assert cw_main(["doctor", "--data-dir", str(data)]) == 0, capsys.readouterr().out


def test_purge_errors_are_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = purge(data, "nosuch")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "does not exist" in done.stderr
    assert not data.exists()  # a purge never creates the data dir
    data.mkdir()
    done = purge(data, "nosuch")
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "no session 'nosuch'" in done.stderr and "context-window sessions" in done.stderr
    done = purge(data, "../x")
    assert done.returncode == 1 and "invalid session_id" in done.stderr


@pytest.mark.anyio
async def test_purge_beside_a_live_stdio_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    args = ["-m", "context_window", "--no-llm", "--no-audit", "--data-dir", str(data)]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=tmp_path)
    async with Client(params) as c:
        await c.call_tool("context_open", {"session_id": "live"})
        ids = []
        for text in ("api key sk-123 leaked", "the deploy target is eu-west-1"):
            r = await c.call_tool("context_append", {"session_id": "live", "text": text})
            assert r.structured_content is not None
            ids.append(r.structured_content["entry_id"])
        r = await c.call_tool(
            "context_update", {"session_id": "live", "entry_id": ids[0], "delete": True}
        )
        assert not r.is_error
        done = purge(data, "live")
        assert done.returncode == 0, done.stderr
        # The server re-reads the rewritten log; its next append lands in the new file.
        r = await c.call_tool("context_append", {"session_id": "live", "text": "after purge"})
        assert not r.is_error
        r = await c.call_tool("context_recall", {"session_id": "live", "budget_tokens": 1000})
        assert r.structured_content is not None
        texts = [e["text"] for e in r.structured_content["entries"]]
        assert texts == ["after purge", "the deploy target is eu-west-1"]  # newest first
        r = await c.call_tool("context_status", {"session_id": "live"})
        assert r.structured_content is not None
        assert (r.structured_content["total"], r.structured_content["deleted"]) == (2, 0)
    raw = (data / "sessions" / "live" / "entries.jsonl").read_bytes()
    assert b"sk-123" not in raw and b"after purge" in raw
