"""Facts a summary must not lose: what counts as one, and when a summary still holds it."""

from __future__ import annotations

import pytest

from context_window.sessions.facts import extract, lost_facts

NOTE = (
    "Build failed: see /var/log/build.log and src/app/main.py line 42. "
    "The runner at https://ci.example.com/job/17?tab=log, listening on port 8080, "
    "was started with --max-file-mb 256. parse_config() calls loadSettings and "
    "HTTPServer.serve_forever; commit a1b2c3d, ticket CW-102, release 1.2.3, "
    "3 retries, ratio 0.27, 95% done. Mail bob@example.org. Windows: C:\\Users\\me\\x.txt. "
    "The user-facing text, e.g. this one, has plain words."
)


def test_extract_finds_every_kind_of_fact_once_in_order() -> None:
    facts = extract(NOTE + " Again port 8080.")
    assert facts == [
        "/var/log/build.log",
        "src/app/main.py",
        "42",
        "https://ci.example.com/job/17?tab=log",
        "8080",
        "--max-file-mb",
        "256",
        "parse_config",
        "loadSettings",
        "HTTPServer.serve_forever",
        "a1b2c3d",
        "CW-102",
        "1.2.3",
        "3",
        "0.27",
        "95%",
        "bob@example.org",
        "C:\\Users\\me\\x.txt",
    ]


@pytest.mark.parametrize(
    "prose",
    [
        "The user-facing text has plain words.",
        "e.g. this, i.e. that.",
        "Hello, World!",
        "\x1b[1;31merror\x1b[0m: it \x1b[33mfailed\x1b[0m",  # a terminal's colours
    ],
)
def test_plain_prose_has_no_facts(prose: str) -> None:
    assert extract(prose) == []


def test_lost_facts_are_those_the_summary_does_not_hold_as_whole_tokens() -> None:
    summary = "Build failed at line 42 of main.py; port 80800 and CW-1020 were seen."
    lost = lost_facts(NOTE, summary)
    assert "42" not in lost  # kept verbatim
    assert "src/app/main.py" in lost  # only the file name survived, not the path
    assert "8080" in lost and "CW-102" in lost  # inside a longer number or id is not kept
    # URLs and addresses, then paths, identifiers, numbers; each in order of appearance.
    order = [f for f in extract(NOTE) if f in lost]
    urls = [f for f in order if "://" in f or "@" in f]
    numbers = [f for f in order if f.rstrip("%").replace(".", "").isdigit()]
    assert lost[: len(urls)] == urls and lost[len(lost) - len(numbers) :] == numbers
    assert lost.index("src/app/main.py") < lost.index("CW-102") < lost.index("8080")


def test_a_summary_that_keeps_everything_loses_nothing() -> None:
    assert lost_facts(NOTE, NOTE) == []
    assert lost_facts("no facts here at all", "") == []


def test_hyphenated_file_names_stay_whole() -> None:
    facts = extract("Set dfs.replication in hdfs-site.xml; my-app.config.yaml too.")
    assert facts == ["dfs.replication", "hdfs-site.xml", "my-app.config.yaml"]
    assert lost_facts("edit hdfs-site.xml", "edited the site.xml") == ["hdfs-site.xml"]
