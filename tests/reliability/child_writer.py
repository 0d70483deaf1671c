"""A writer process for the crash and concurrency tests (run as a script, never imported).

It acknowledges each operation on stdout only after the API call returned, so
whatever the parent reads from the pipe was durable in the log when printed.

    child_writer.py append   DATA SESSION SEED          append until killed
    child_writer.py compact  DATA SESSION SEED          append and compact until killed
    child_writer.py purge    DATA SESSION SEED          append, delete some, purge, until killed
    child_writer.py burst    DATA SESSION N TAG         wait for "go" on stdin, append N, exit
    child_writer.py ingest   DATA DOC_ID SEED           ingest the same doc id until killed
    child_writer.py die-at   DATA DOC_ID STAGE          die at one stage of a replace or forget
    child_writer.py import-die DATA SESSION FILE        import --replace, die between renames
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

from context_window.sessions.store import SessionStore
from context_window.tokens import TokenCounter


def ack(line: str) -> None:
    """One acknowledgement line, written in one call and flushed."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def text_for(rng: random.Random, n: int, big_share: float = 0.0) -> str:
    """Mostly short notes; now and then a large multi-byte one, so a kill can tear a write."""
    if rng.random() < big_share:
        return f"big {n} " + "\u00e9\u4e2d\U0001f600 word " * rng.randint(2_000, 8_000)
    words = ("alpha", "beta", "gamma", "delta")
    return f"note {n} " + " ".join(rng.choice(words) for _ in range(20))


def run_append(data: Path, sid: str, seed: int) -> None:
    rng = random.Random(seed)
    session, _ = SessionStore(data, TokenCounter(0.27)).open(sid)
    ack("ready")
    n = 0
    while True:
        entry = session.append(text_for(rng, n, 0.05), tags=[f"s{seed}"])
        ack(f"A {entry.id}")
        n += 1


def run_compact(data: Path, sid: str, seed: int) -> None:
    import anyio

    from context_window.config import load_settings
    from context_window.service import Service

    rng = random.Random(seed)
    settings = load_settings({"data_dir": data, "llm_enabled": False, "audit": False}, environ={})
    service = Service(settings)
    service.sessions.open(sid)
    session = service.sessions.get(sid)
    ack("ready")
    n = 0
    while True:
        for _ in range(rng.randint(4, 12)):
            entry = session.append(text_for(rng, n) + ". Decided to keep going.")
            ack(f"A {entry.id}")
            n += 1
        done = anyio.run(service.compact, sid, rng.randint(0, 3), rng.choice((16, 64, 200)))
        if done.entry is not None:
            ack(f"C {done.entry.id} " + " ".join(e.id for e in done.plan.entries))


def run_purge(data: Path, sid: str, seed: int) -> None:
    rng = random.Random(seed)
    session, _ = SessionStore(data, TokenCounter(0.27)).open(sid)
    ack("ready")
    n = 0
    while True:
        ids = [session.append(text_for(rng, n + i, 0.05)).id for i in range(rng.randint(3, 10))]
        n += len(ids)
        ack("A " + " ".join(ids))
        doomed = rng.sample(ids, rng.randint(1, len(ids) - 1))
        for eid in doomed:
            ack(f"d {eid}")  # the intent: a kill may land the delete before its ack
            session.update(eid, deleted=True)
            ack(f"D {eid}")
        done = session.purge()
        ack("P " + " ".join(done.entries))


def run_burst(data: Path, sid: str, count: int, tag: str) -> None:
    session, _ = SessionStore(data, TokenCounter(0.27)).open(sid)
    ack("ready")
    sys.stdin.readline()
    ids = [session.append(f"{tag} entry {i}", tags=[tag]).id for i in range(count)]
    ack(" ".join(ids))


def run_ingest(data: Path, doc_id: str, seed: int) -> None:
    from context_window.config import load_settings
    from context_window.service import Service

    rng = random.Random(seed)
    roots = data.parent / f"{data.name}-sources"  # every other version comes from a file
    roots.mkdir(exist_ok=True)
    flags = {"data_dir": data, "llm_enabled": False, "audit": False, "ingest_roots": [roots]}
    service = Service(load_settings(flags, environ={}))
    ack("ready")
    n = 0
    while True:
        body = "\n\n".join(
            f"# Part {i}\n\nround {seed} version {n} paragraph {i} " + "lorem ipsum " * 40
            for i in range(rng.randint(20, 200))
        )
        title = f"v{seed}.{n}"
        if n % 2:
            (roots / "doc.md").write_text(body, encoding="utf-8")
            doc = service.documents.ingest(file_path="doc.md", doc_id=doc_id, title=title).doc
        else:
            doc = service.documents.ingest(text=body, doc_id=doc_id, title=title).doc
        ack(f"I {doc.id} v{seed}.{n} {doc.chunks}")
        n += 1


def run_die_at(data: Path, doc_id: str, stage: str) -> None:
    """Ingest v1, then die by SIGKILL at ``stage`` of replacing or forgetting it.

    replace-rename: right after the live version is moved out of the way;
    replace-cleanup / forget-cleanup: at the first file deleted afterwards.
    """
    import os
    import signal

    from context_window.config import load_settings
    from context_window.service import Service

    settings = load_settings({"data_dir": data, "llm_enabled": False, "audit": False}, environ={})
    service = Service(settings)
    doc = service.documents.ingest(text="# One\n\nversion one", doc_id=doc_id, title="v1").doc
    ack(f"I {doc.id} v1 {doc.chunks}")

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if stage == "replace-rename":
        real_rename = Path.rename

        def rename_then_die(self: Path, target: Path | str) -> Path:
            moved = real_rename(self, target)
            if self.name == doc_id:  # the live version was just moved out of the way
                die()
            return moved

        Path.rename = rename_then_die  # type: ignore[method-assign,assignment]
    else:
        real_unlink = os.unlink

        def unlink_then_die(path: Any, *args: Any, **kw: Any) -> None:
            real_unlink(path, *args, **kw)
            die()

        os.unlink = unlink_then_die
    if stage == "forget-cleanup":
        service.documents.forget(doc_id)
    else:
        service.documents.ingest(text="# Two\n\nversion two", doc_id=doc_id, title="v2")
    ack("I survived")


def run_import_die(data: Path, sid: str, export: Path) -> None:
    """Import ``export`` over session ``sid`` and die by SIGKILL between the two renames."""
    import os
    import signal

    from context_window.cli.archive import import_file

    real_rename = Path.rename

    def rename_then_die(self: Path, target: Path | str) -> Path:
        moved = real_rename(self, target)
        if self.name == sid:  # the live session was just moved out of the way
            os.kill(os.getpid(), signal.SIGKILL)
        return moved

    Path.rename = rename_then_die  # type: ignore[method-assign,assignment]
    import_file(export, data, replace=True)
    ack("I survived")


def main() -> None:
    mode, data, name = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    if mode == "append":
        run_append(data, name, int(sys.argv[4]))
    elif mode == "compact":
        run_compact(data, name, int(sys.argv[4]))
    elif mode == "purge":
        run_purge(data, name, int(sys.argv[4]))
    elif mode == "burst":
        run_burst(data, name, int(sys.argv[4]), sys.argv[5])
    elif mode == "die-at":
        run_die_at(data, name, sys.argv[4])
    elif mode == "import-die":
        run_import_die(data, name, Path(sys.argv[4]))
    elif mode == "ingest":
        run_ingest(data, name, int(sys.argv[4]))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
