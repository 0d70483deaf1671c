#!/usr/bin/env bash
# The oldest and the newest supported Python: a fresh venv each, the package with its
# dev extras, and the tests. Run once, under `make check`, and not here: tests/reliability
# (it exercises the OS rather than the language), the image builds, buildah's and the
# engine's (the image has its own Python), and the quick benchmark (make check runs it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
find_python() {  # a python$1 that runs (a pyenv shim may exist for a version not enabled)
  local candidate
  for candidate in "$(command -v "python$1" 2>/dev/null)" \
      $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python 2>/dev/null | sort -V); do
    if [ -n "$candidate" ] && "$candidate" -c \
        "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$1'.split('.'))))" \
        2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "ci: python$1 not found; install it (e.g. pyenv install $1)" >&2
  return 1
}
one() {  # install and test on Python $1
  local python venv
  python="$(find_python "$1")" || return 1
  venv="$(mktemp -d)/venv"
  echo "== Python $1 ($python)"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -e "$root[dev]"
  (cd "$root" && "$venv/bin/python" -m pytest -q -p no:cacheprovider --ignore=tests/reliability \
     --ignore=tests/integration/test_benchmarks_quick.py -k "not builds_offline and not engine_builds")
}
# Both at once, one per CPU (each is one pytest process; tests/reliability, the most
# timing-bound, is not among them), each logged whole, then printed in turn.
logs="$(mktemp -d)"
one 3.10 > "$logs/3.10" 2>&1 & first=$!
one 3.13 > "$logs/3.13" 2>&1 & second=$!
status=0
wait "$first" || status=1
wait "$second" || status=1
cat "$logs/3.10" "$logs/3.13"
exit "$status"
