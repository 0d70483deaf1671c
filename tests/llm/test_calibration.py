"""Calibration against the real HTTP fake: the math, the cache, and failures that never raise."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai_fake import FakeOpenAI

from context_window.config import load_settings
from context_window.llm.calibration import LONG_SAMPLES, SAMPLES, Calibrator, calibration_prompts
from context_window.llm.client import LLMClient
from context_window.service import Service
from context_window.tokens import TokenCounter


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def expected_ratio(fake: FakeOpenAI) -> float:
    """What the fake's integer prompt counts imply for the calibration prompts, with margin."""
    short, long = calibration_prompts()
    r = fake.state.true_ratio
    return (round(len(long) * r) - round(len(short) * r)) / (len(long) - len(short)) * 1.04


async def calibrate(
    fake: FakeOpenAI, path: Path, force: bool = False, model: str = ""
) -> tuple[TokenCounter, str]:
    """Run one calibration with a fresh counter and client; return the counter and status."""
    counter = TokenCounter(0.27)
    async with LLMClient(fake.base_url, model=model) as client:
        calibrator = Calibrator(client, counter, path, configured_model=model)
        calibrator.load_cached()
        status = await calibrator.run(force=force)
        assert calibrator.status == status
    return counter, status


@pytest.mark.anyio
@pytest.mark.parametrize("true_ratio", [0.22, 0.25, 0.31, 0.5])
async def test_recovers_true_ratio_with_margin(
    fake: FakeOpenAI, tmp_path: Path, true_ratio: float
) -> None:
    fake.state.true_ratio = true_ratio
    fake.state.overhead = 45  # the chat template's fixed cost cancels in the slope
    counter, status = await calibrate(fake, tmp_path / "calibration.json")
    assert counter.ratio == pytest.approx(expected_ratio(fake))
    assert counter.ratio == pytest.approx(true_ratio * 1.04, rel=0.01)
    assert counter.source == "calibrated"
    assert counter.model == "fake-model-a"
    assert status.startswith("calibrated to fake-model-a")


@pytest.mark.anyio
async def test_sends_two_varied_prompts_with_one_token(fake: FakeOpenAI, tmp_path: Path) -> None:
    await calibrate(fake, tmp_path / "calibration.json")
    models, short, long = fake.state.requests
    assert (models.method, models.path) == ("GET", "/v1/models")
    for request in (short, long):
        assert request.body["max_tokens"] == 1
        assert request.body["temperature"] == 0
        assert [m["role"] for m in request.body["messages"]] == ["user"]
        assert "model" not in request.body
    short_text = short.body["messages"][0]["content"]
    long_text = long.body["messages"][0]["content"]
    assert len(long_text) > 5 * len(short_text)
    assert (short_text, long_text) == calibration_prompts()
    assert all(sample in long_text for sample in SAMPLES[:LONG_SAMPLES])
    assert len(set(SAMPLES)) == len(SAMPLES) == LONG_SAMPLES  # varied, not one repeated
    assert "/" in long_text and "def " in long_text and "|" in long_text  # not prose alone


@pytest.mark.anyio
async def test_stores_calibration_atomically(fake: FakeOpenAI, tmp_path: Path) -> None:
    path = tmp_path / "data" / "calibration.json"
    counter, _ = await calibrate(fake, path)
    record = json.loads(path.read_text())
    assert record["ratio"] == counter.ratio
    assert record["model"] == "fake-model-a"
    assert record["source"] == "calibrated"
    assert isinstance(record["measured_at"], float)
    assert [p.name for p in path.parent.iterdir()] == ["calibration.json"]  # no temp files left


@pytest.mark.anyio
async def test_cached_calibration_is_reused_for_the_same_model(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    path = tmp_path / "calibration.json"
    first, _ = await calibrate(fake, path)
    fake.state.requests.clear()
    fake.state.true_ratio = 0.4  # would give a different answer if measured again

    counter = TokenCounter(0.27)
    async with LLMClient(fake.base_url) as client:
        calibrator = Calibrator(client, counter, path)
        assert calibrator.load_cached()
        assert counter.ratio == first.ratio
        assert counter.source == "calibrated"
        status = await calibrator.run()
    assert status.startswith("kept cached calibration for fake-model-a")
    assert [r.path for r in fake.state.requests] == ["/v1/models"]
    assert counter.ratio == first.ratio


@pytest.mark.anyio
async def test_recalibrates_when_the_loaded_model_changes(fake: FakeOpenAI, tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    await calibrate(fake, path)
    fake.state.models = ["fake-model-b", "fake-model-a"]
    fake.state.true_ratio = 0.4
    counter, status = await calibrate(fake, path)
    assert status.startswith("calibrated to fake-model-b")
    assert counter.model == "fake-model-b"
    assert counter.ratio == pytest.approx(0.4 * 1.04, rel=0.01)
    assert json.loads(path.read_text())["model"] == "fake-model-b"
    assert len(fake.state.chats()) == 4


@pytest.mark.anyio
async def test_force_recalibrates(fake: FakeOpenAI, tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    await calibrate(fake, path)
    fake.state.true_ratio = 0.3
    counter, status = await calibrate(fake, path, force=True)
    assert status.startswith("calibrated to fake-model-a")
    assert counter.ratio == pytest.approx(0.3 * 1.04, rel=0.01)
    assert len(fake.state.chats()) == 4


@pytest.mark.anyio
async def test_configured_model_wins_over_the_list(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.state.models = ["other", "mistral-7b"]
    counter, _ = await calibrate(fake, tmp_path / "calibration.json", model="mistral-7b")
    assert counter.model == "mistral-7b"
    assert all(r.body["model"] == "mistral-7b" for r in fake.state.chats())


@pytest.mark.anyio
@pytest.mark.parametrize("true_ratio", [0.01, 3.0])
async def test_rejects_implausible_ratios(
    fake: FakeOpenAI, tmp_path: Path, true_ratio: float
) -> None:
    fake.state.true_ratio = true_ratio
    path = tmp_path / "calibration.json"
    counter, status = await calibrate(fake, path)
    assert "implausible ratio" in status
    assert status.startswith("calibration failed: ")
    assert counter.ratio == 0.27
    assert counter.source == "estimated"
    assert not path.exists()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "reason"),
    [("500", "HTTP 500"), ("nonjson", "not JSON"), ("no_usage", "no usage.prompt_tokens")],
)
async def test_failures_leave_the_estimate_and_never_raise(
    fake: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: str, reason: str
) -> None:
    fake.state.mode = mode
    path = tmp_path / "calibration.json"
    with caplog.at_level(logging.WARNING, logger="context_window"):
        counter, status = await calibrate(fake, path)
    assert status.startswith("calibration failed: ")
    assert reason in status
    assert counter.source == "estimated"
    assert counter.ratio == 0.27
    assert not path.exists()
    assert any(reason in r.getMessage() for r in caplog.records)


@pytest.mark.anyio
async def test_unreachable_endpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    counter = TokenCounter(0.27)
    async with LLMClient("http://127.0.0.1:9/v1") as client:
        status = await Calibrator(client, counter, tmp_path / "c.json").run()
    assert status.startswith("calibration failed: unreachable at http://127.0.0.1:9/v1")
    assert counter.source == "estimated"
    assert capsys.readouterr().out == ""  # logs go to the logger, never stdout


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[]",
        '{"ratio": "0.3", "model": "m"}',
        '{"ratio": 0.001, "model": "m"}',
        '{"ratio": 9.0, "model": "m"}',
        '{"ratio": true, "model": "m"}',
        '{"ratio": 0.3}',
    ],
)
def test_corrupt_cache_is_ignored(tmp_path: Path, content: str) -> None:
    path = tmp_path / "calibration.json"
    path.write_text(content)
    counter = TokenCounter(0.27)
    client = LLMClient("http://127.0.0.1:9/v1")
    assert not Calibrator(client, counter, path).load_cached()
    assert counter.source == "estimated"


def test_missing_cache(tmp_path: Path) -> None:
    counter = TokenCounter(0.27)
    calibrator = Calibrator(LLMClient("http://127.0.0.1:9/v1"), counter, tmp_path / "none.json")
    assert not calibrator.load_cached()
    assert calibrator.status == "not calibrated yet"


@pytest.mark.anyio
async def test_corrupt_cache_is_replaced_by_a_run(fake: FakeOpenAI, tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    path.write_text("{garbage")
    counter, _ = await calibrate(fake, path)
    assert counter.source == "calibrated"
    assert json.loads(path.read_text())["model"] == "fake-model-a"


@pytest.mark.anyio
async def test_unwritable_cache_still_calibrates(fake: FakeOpenAI, tmp_path: Path) -> None:
    blocker = tmp_path / "calibration.json"
    blocker.mkdir()  # a directory where the file should be
    counter, status = await calibrate(fake, blocker)
    assert counter.source == "calibrated"
    assert "(not saved:" in status


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("flags", "level"),
    [({}, logging.INFO), ({"llm_base_url": "http://127.0.0.1:9/v1"}, logging.WARNING)],
)
async def test_a_failed_calibration_warns_only_for_an_endpoint_asked_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, flags: dict[str, str], level: int
) -> None:
    # Every start without a model server would otherwise log a WARNING nobody can act on.
    if flags == {}:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", 1234)) == 0:
                pytest.skip("something listens on the default endpoint's port here")
    service = Service(load_settings({"data_dir": tmp_path / "data", **flags}, environ={}))
    try:
        with caplog.at_level(logging.INFO, logger="context_window"):
            await service.calibrate()
    finally:
        await service.aclose()
    (record,) = [r for r in caplog.records if "token calibration" in r.getMessage()]
    assert "calibration failed" in record.getMessage() and record.levelno == level
