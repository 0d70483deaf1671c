#!/usr/bin/env bash
# Build the sdist and the wheel, install the wheel alone into a fresh venv, and drive
# it over stdio: an MCP handshake and tool calls (examples/scripted_session.py), run
# from outside the source tree so only the installed package can be imported.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
python -m build --sdist --wheel --outdir "$out/dist" "$root" > "$out/build.log" 2>&1 \
  || { cat "$out/build.log"; exit 1; }
ls "$out/dist"
python -m venv "$out/venv"
"$out/venv/bin/pip" install --quiet "$out"/dist/context_window-*.whl
cd "$out"
"$out/venv/bin/context-window" --version
"$out/venv/bin/python" -c "import context_window, sys; assert context_window.__file__.startswith(sys.prefix), context_window.__file__"
"$out/venv/bin/python" "$root/examples/scripted_session.py"
