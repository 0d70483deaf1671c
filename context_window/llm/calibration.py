"""Measure the loaded model's tokens per character and remember it per model.

Two prompts of different lengths (``max_tokens: 1``): the slope ``Δprompt_tokens /
Δchars`` cancels the chat template. The prompts mix prose with technical notes, which
tokenize worse. The ratio (with a margin, ``tokens.calibrated_ratio``) is cached in
``calibration.json`` per model.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from context_window.errors import UpstreamError
from context_window.llm.client import LLMClient
from context_window.storage import write_json_atomic
from context_window.tokens import TokenCounter, calibrated_ratio

log = logging.getLogger(__name__)

SHORT_SAMPLES = 2
LONG_SAMPLES = 20
_MIN_RATIO, _MAX_RATIO = 0.05, 2.0 * 1.04  # calibrated_ratio's bounds, margin included

# Varied prose on unrelated topics, so no tokenizer sees an unusually easy pattern.
PROSE: tuple[str, ...] = (
    "The harbour was quiet that morning, and the fishing boats rocked gently against the pier.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen in leaves.",
    "She counted 37 steps from the gate to the front door, then knocked twice and waited.",
    "Interest rates rose by half a percentage point, which made mortgages more expensive.",
    "A good bread dough needs time: the yeast works slowly, and the gluten relaxes as it rests.",
    "The committee postponed its decision until the auditors had reviewed the spring accounts.",
    "Migrating birds navigate using the sun, the stars and, some think, magnetic fields.",
    "He forgot his umbrella on the train and arrived at the interview soaked to the skin.",
    "Glaciers carve valleys over thousands of years, leaving lakes and loose rock behind them.",
    "Children learn languages quickly when they hear them every day from people they trust.",
)
# Prose alone tokenizes better than notes, code and JSON (SmolLM2: 4.9 chars/token, 3.2-3.7).
TECHNICAL: tuple[str, ...] = (
    "Decision: keep entries.jsonl append-only; compaction writes one summary plus patches.",
    "Bug #1432: load_settings() ignored CTX_LLM_TIMEOUT=30 when --llm-timeout was unset (v0.4.2).",
    "Moved the lock helper from src/store/lock.py to context_window/storage.py (commit 9f3c2ab).",
    "Open question: should doc_window() reset the cursor when a doc_id is re-ingested?",
    "Recall over 10,000 entries took 41 ms p50 and 97 ms p95 with BM25 (k1=1.2, b=0.75).",
    "TODO(sam): retry POST /v1/chat/completions once on HTTP 503, then fall back to extractive.",
    "## Configuration\n\n| flag | default |\n|---|---|\n| `--budget N` | 4000 |",
    "def pack(items: list[int], cap: int) -> int:\n    return sum(i for i in items if i <= cap)",
    "- [x] ingest README.md\n- [ ] summarize chapter 3\n- [ ] ask Dr. Patel about 2024-03-18",
    '{"id": "s1k2j3", "role": "decision", "tokens": 57, "tags": ["storage"], "pinned": true}',
)
# Interleaved, so the short prompt and the slope both see both kinds of text.
SAMPLES: tuple[str, ...] = tuple(s for pair in zip(PROSE, TECHNICAL, strict=True) for s in pair)


def calibration_prompts() -> tuple[str, str]:
    """The short and the long calibration prompt: the first 2 and the first 20 samples."""
    return "\n".join(SAMPLES[:SHORT_SAMPLES]), "\n".join(SAMPLES[:LONG_SAMPLES])


class Calibrator:
    """Calibrates a TokenCounter against the model an LLMClient reaches, with a cache file."""

    def __init__(
        self,
        client: LLMClient,
        counter: TokenCounter,
        path: Path,
        configured_model: str = "",
        *,
        failure_level: int = logging.WARNING,
    ) -> None:
        """``failure_level``: INFO when nobody asked for this endpoint (no fault then)."""
        self._client = client
        self._failure_level = failure_level
        self._counter = counter
        self._path = path
        self._configured = configured_model
        self._status = "not calibrated yet"

    @property
    def status(self) -> str:
        """The outcome of the last load or run, for status output."""
        return self._status

    def load_cached(self) -> bool:
        """Apply a stored calibration if ``calibration.json`` holds a valid one."""
        record = self._read()
        if record is None:
            return False
        self._counter.calibrate(record["ratio"], record["model"])
        self._status = f"cached calibration for {record['model'] or 'the loaded model'}"
        return True

    async def run(self, force: bool = False) -> str:
        """Calibrate (or confirm the cache for) the loaded model; never raises; says how it went."""
        try:
            self._status = await self._run(force)
            log.info("token calibration: %s", self._status)
        except UpstreamError as exc:
            self._status = f"calibration failed: {exc}; keeping {self._counter.describe()}"
            log.log(self._failure_level, "token calibration: %s", self._status)
        except Exception as exc:  # a bug must not take the server down from a background task
            self._status = f"calibration failed unexpectedly: {type(exc).__name__}: {exc}"
            log.exception("token calibration: %s", self._status)
        return self._status

    async def _run(self, force: bool) -> str:
        """The calibration itself; raises UpstreamError when the endpoint fails."""
        listed = await self._client.list_models()
        model = self._configured or (listed[0] if listed else "")
        cached = self._read()
        if cached is not None and cached["model"] == model and not force:
            self._counter.calibrate(cached["ratio"], model)
            name = model or "the loaded model"
            return f"kept cached calibration for {name} ({cached['ratio']:.3f} tokens/char)"
        short, long = calibration_prompts()
        short_tokens, answered = await self._prompt_tokens(short)
        long_tokens, _ = await self._prompt_tokens(long)
        model = model or answered
        ratio = calibrated_ratio(len(short), short_tokens, len(long), long_tokens)
        if ratio is None:
            slope = (long_tokens - short_tokens) / (len(long) - len(short))
            raise UpstreamError(
                f"implausible ratio {slope:.3f} tokens/char from {model or 'the model'} "
                f"({short_tokens} and {long_tokens} prompt tokens); rejected"
            )
        self._counter.calibrate(ratio, model)
        outcome = f"calibrated to {model or 'the loaded model'}: {ratio:.3f} tokens/char"
        try:
            self._write(
                {"ratio": ratio, "model": model, "measured_at": time.time(), "source": "calibrated"}
            )
        except OSError as exc:
            return f"{outcome} (not saved: {exc})"
        return outcome

    async def _prompt_tokens(self, text: str) -> tuple[int, str]:
        """Prompt tokens the server counts for ``text`` as one user message, and its model id."""
        result = await self._client.chat(
            [{"role": "user", "content": text}], max_tokens=1, temperature=0.0, allow_empty=True
        )
        if result.prompt_tokens is None:
            raise UpstreamError("the endpoint reported no usage.prompt_tokens")
        return result.prompt_tokens, result.model

    def _read(self) -> dict[str, Any] | None:
        """The stored calibration if the file exists and is valid; a bad file is logged."""
        try:
            raw = self._path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read %s: %s", self._path, exc)
            return None
        try:
            record = json.loads(raw)
        except ValueError:
            log.warning("ignoring %s: not valid JSON", self._path)
            return None
        ratio = record.get("ratio") if isinstance(record, dict) else None
        model = record.get("model") if isinstance(record, dict) else None
        if (
            not isinstance(ratio, int | float)
            or isinstance(ratio, bool)
            or not _MIN_RATIO <= ratio <= _MAX_RATIO
            or not isinstance(model, str)
        ):
            log.warning("ignoring %s: no plausible ratio and model", self._path)
            return None
        return {"ratio": float(ratio), "model": model}

    def _write(self, record: dict[str, Any]) -> None:
        """Store ``record`` atomically (temp file, fsync, rename)."""
        write_json_atomic(self._path, record)
