"""Benchmark inputs built from the loghub samples: a large log, session entries, queries.

The large log repeats the eight 2k-line loghub samples; each repetition runs the
digits through a different permutation (``str.translate``, so building 100 MB takes
seconds), so block ids, IPs, timestamps and counters differ between repetitions
and the vocabulary keeps growing as it does in a real log. It is cached under
/tmp, keyed by its size, never in the repository.
"""

from __future__ import annotations

import csv
import os
import random
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

_BESIDE = Path(__file__).resolve().parents[2] / "shared" / "data" / "loghub"
LOGHUB = Path(
    os.environ.get("CTX_BENCH_LOGHUB", _BESIDE if _BESIDE.is_dir() else "/work/shared/data/loghub")
)
CACHE = Path(tempfile.gettempdir()) / "context-window-bench"
_DIGITS = "0123456789"


@dataclass(frozen=True)
class Template:
    """One loghub event template and the line where it first occurs."""

    system: str
    event_id: str
    template: str
    line_id: int  # 1-based line number in <system>_2k.log of the first occurrence
    lines: tuple[int, ...]  # every line of this event

    @property
    def query(self) -> str:
        """The template's text without its ``<*>`` wildcards."""
        return " ".join(self.template.replace("<*>", " ").split())


def systems() -> list[str]:
    """Names of the loghub systems present (those with a 2k log and structured CSV)."""
    if not LOGHUB.is_dir():
        raise SystemExit(f"loghub samples not found at {LOGHUB} (set CTX_BENCH_LOGHUB)")
    return sorted(
        p.name for p in LOGHUB.iterdir() if (p / f"{p.name}_2k.log_structured.csv").is_file()
    )


def log_path(system: str) -> Path:
    """The 2k-line log of ``system``."""
    return LOGHUB / system / f"{system}_2k.log"


def log_text(system: str) -> str:
    """A system's log with newlines normalised to ``\\n``."""
    return log_path(system).read_text(encoding="utf-8", errors="replace")


def templates(system: str) -> list[Template]:
    """Every event template of ``system`` with the LineId of its first structured row."""
    lines: dict[str, list[int]] = {}
    text: dict[str, str] = {}
    with (LOGHUB / system / f"{system}_2k.log_structured.csv").open(
        encoding="utf-8", newline=""
    ) as f:
        for row in csv.DictReader(f):
            eid = row["EventId"]
            lines.setdefault(eid, []).append(int(row["LineId"]))
            text.setdefault(eid, row["EventTemplate"])
    with (LOGHUB / system / f"{system}_2k.log_templates.csv").open(
        encoding="utf-8", newline=""
    ) as f:
        order = [row["EventId"] for row in csv.DictReader(f)]
    return [Template(system, e, text[e], lines[e][0], tuple(lines[e])) for e in order if e in lines]


def _permutations(count: int, seed: int = 7) -> list[dict[int, int]]:
    rng = random.Random(seed)
    tables = [str.maketrans(_DIGITS, _DIGITS)]  # the first repetition is the original
    while len(tables) < count:
        perm = list(_DIGITS)
        rng.shuffle(perm)
        tables.append(str.maketrans(_DIGITS, "".join(perm)))
    return tables


def big_log(megabytes: int) -> Path:
    """A log of about ``megabytes`` MB (10^6 bytes) built from loghub, cached under /tmp."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"loghub-{megabytes}mb.log"
    if path.is_file():
        return path
    base = "".join(log_text(s) for s in systems())
    size = len(base.encode())
    reps = max(1, -(-megabytes * 1_000_000 // size))
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8", newline="\n") as out:
        for table in _permutations(reps):
            out.write(base.translate(table))
    tmp.replace(path)
    return path


def session_texts(count: int, seed: int = 11) -> list[str]:
    """``count`` note-like texts: one to three loghub lines each, digits varied."""
    lines = [ln for s in systems() for ln in log_text(s).splitlines() if ln.strip()]
    rng = random.Random(seed)
    tables = _permutations(64, seed)
    out = []
    for i in range(count):
        k = rng.randint(1, 3)
        start = rng.randrange(len(lines) - k)
        body = "\n".join(lines[start : start + k]).translate(tables[i % len(tables)])
        out.append(body)
    return out


def session_queries(count: int, seed: int = 13) -> list[str]:
    """Queries for recall: two to four words taken from loghub templates."""
    rng = random.Random(seed)
    words = [
        w
        for s in systems()
        for t in templates(s)
        for w in re.findall(r"[A-Za-z][A-Za-z_]{2,}", t.query)
    ]
    return [" ".join(rng.sample(words, rng.randint(2, 4))) for _ in range(count)]


def doc_queries(count: int, seed: int = 17) -> list[str]:
    """Search queries for the large log: template texts, plus a few identifier lookups."""
    rng = random.Random(seed)
    pool = [t.query for s in systems() for t in templates(s) if len(t.query.split()) >= 2]
    n_ids = max(1, count // 5)
    chosen = rng.sample(pool, min(len(pool), count - n_ids))
    ids = []
    for s in systems():
        ids.extend(re.findall(r"\bblk_-?\d{6,}|\b\d+\.\d+\.\d+\.\d+\b", log_text(s)))
    chosen.extend(rng.sample(sorted(set(ids)), n_ids))
    rng.shuffle(chosen)
    return chosen
