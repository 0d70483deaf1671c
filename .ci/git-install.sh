#!/usr/bin/env bash
# Install the package the way the README's git line does, from a git+file:// URL of this
# checkout (its committed HEAD), into a fresh venv, then start it and drive it over stdio.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
python -m venv "$out/venv"
"$out/venv/bin/pip" install --quiet --disable-pip-version-check "git+file://$root"
cd "$out"
"$out/venv/bin/context-window" --version
"$out/venv/bin/python" -c "import context_window, sys; assert context_window.__file__.startswith(sys.prefix), context_window.__file__"
if "$out/venv/bin/python" -c "import numba" 2>/dev/null; then
  echo "ci: the base install carries numba; it belongs to the fast extra" >&2
  exit 1
fi
"$out/venv/bin/python" "$root/examples/scripted_session.py"
