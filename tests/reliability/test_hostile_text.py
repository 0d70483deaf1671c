"""Crafted notes at the entry limit finish in bounded work: no quadratic text paths.

Each case runs in a real child process whose CPU time is capped with RLIMIT_CPU.
The cap is about a hundred times what the linear code needs (see
``python -m benchmarks``, "hostile"), and a small fraction of what the quadratic
code took: a 200,000-character dotted token took minutes in fact extraction, and
200,000 characters of short sentences took most of a minute to split. A child
over its cap gets SIGXCPU (the soft limit; the hard one, 10 s later, is a SIGKILL that
cannot be caught), and the test fails saying so.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

CPU_SECONDS = 30
CHARS = 200_000

CHILD = """
import json, resource, sys
import anyio
resource.setrlimit(resource.RLIMIT_CPU, ({cpu}, {cpu} + 10))  # SIGXCPU, then SIGKILL
from context_window.config import Settings
from context_window.sessions.facts import extract
from context_window.service import Service
from context_window.llm.summaries import split_sentences
from pathlib import Path
unit, chars, data_dir = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
text = (unit * (chars // len(unit) + 1))[:chars]
facts = extract(text)
sentences = split_sentences(text)
service = Service(Settings(data_dir=data_dir, llm_enabled=False, audit=False))
session, _ = service.sessions.open("hostile")
session.append(text)
session.append("a second note")
done = anyio.run(service.compact, "hostile", 0, 400)
print(json.dumps({{"facts": len(facts), "sentences": len(sentences),
                  "folded": len(done.plan.entries), "summary": done.summary is not None}}))
"""


@pytest.mark.parametrize(
    ("unit", "sentences"),
    [
        ("a.", 1),  # one dotted token: the fact extractor retried every label to the end
        ("a-", 1),
        ("a@", 1),
        ("Go. ", CHARS // 4),  # short sentences: the splitter copied the rest at every stop
    ],
)
def test_a_crafted_note_at_the_limit_is_compacted_in_bounded_cpu(
    tmp_path: Path, unit: str, sentences: int
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(cpu=CPU_SECONDS), unit, str(CHARS), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=10 * CPU_SECONDS,
        check=False,
    )
    over = (-signal.SIGXCPU, -signal.SIGKILL)
    assert proc.returncode not in over, f"{unit!r} x {CHARS:,}: over {CPU_SECONDS} s CPU"
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["sentences"] == sentences
    assert out["folded"] == 2 and out["summary"]
