#!/usr/bin/env bash
# The oldest and the newest supported Python: a fresh venv each, the package with its
# dev extras, and the tests. Run once, under `make check`, and not here: tests/reliability
# (it exercises the OS rather than the language), the image builds, buildah's and the
# engine's (the image has its own Python), and the quick benchmark (CI runs it on its own).
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
for version in 3.10 3.13; do
  python="$(find_python "$version")"
  venv="$(mktemp -d)/venv"
  echo "== Python $version ($python)"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -e "$root[dev]"
  (cd "$root" && "$venv/bin/python" -m pytest -q -p no:cacheprovider --ignore=tests/reliability \
     --ignore=tests/integration/test_benchmarks_quick.py -k "not builds_offline and not engine_builds")
done
