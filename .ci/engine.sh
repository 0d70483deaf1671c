#!/usr/bin/env bash
# Makes a Docker engine answer here, so tests/integration/test_docker.py builds the image
# with it and times `docker stop`: installs Debian's docker.io when no engine answers,
# starts dockerd (its pid goes to the file named by $1, for the caller to stop it), and
# copies in the python:3.11-slim that .ci/image.sh made with buildah (no registry is
# reachable here). Failure is tolerated: the engine test skips, saying why.
set -u
pid_file="${1:-/dev/null}"
BASE="python:3.11-slim"
started=$(date +%s)

if ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "engine: no Docker engine and apt-get is not usable here; the engine test will skip" >&2
    exit 0
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null 2>&1 \
      || { echo "engine: could not install docker.io; the engine test will skip" >&2; exit 0; }
  fi
  setsid dockerd >"$(mktemp)" 2>&1 </dev/null &
  echo $! >"$pid_file"
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 \
    || { echo "engine: dockerd did not answer; the engine test will skip" >&2; exit 0; }
fi
if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  buildah --storage-driver vfs push --quiet "docker.io/library/$BASE" "docker-daemon:$BASE" \
    >/dev/null 2>&1 \
    || { echo "engine: no local $BASE to copy in; the engine test will skip" >&2; exit 0; }
fi
echo "engine: Docker answers with $BASE local in $(( $(date +%s) - started ))s" >&2
exit 0
