#!/usr/bin/env bash
# Makes the Dockerfile buildable here with no registry: installs buildah (a builder with
# no daemon and no BuildKit) from Debian, and, when no python:3.11-slim image is local,
# makes a stand-in of it from Debian bookworm's own packages (its python3 is 3.11) with
# debootstrap. tests/integration/test_docker.py then builds the image with --pull=never,
# so the package index is the build's only network, and talks MCP to it.
# The stand-in trusts this machine's CA bundle, as a local base image would, so pip in
# the build reaches the package index through the same proxy the host uses.
# Failure is tolerated: the image test skips, saying why.
set -u
BASE="docker.io/library/python:3.11-slim"
BUILDAH=(buildah --storage-driver vfs)
started=$(date +%s)

if ! command -v buildah >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "image: buildah is missing and apt-get is not usable here; the image test will skip" >&2
    exit 0
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah debootstrap >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah debootstrap >/dev/null 2>&1; } \
    || { echo "image: could not install buildah; the image test will skip" >&2; exit 0; }
fi
if [ -n "$("${BUILDAH[@]}" images -q "$BASE" 2>/dev/null)" ]; then
  echo "image: $BASE is already local" >&2
  exit 0
fi
rootfs="$(mktemp -d)/rootfs"
if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$rootfs" http://deb.debian.org/debian >/dev/null 2>&1; then
  echo "image: debootstrap failed; the image test will skip" >&2
  exit 0
fi
ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python"
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
ctr=$("${BUILDAH[@]}" from scratch) && mnt=$("${BUILDAH[@]}" mount "$ctr") \
  && cp -a "$rootfs/." "$mnt/" && "${BUILDAH[@]}" umount "$ctr" >/dev/null \
  && "${BUILDAH[@]}" config --cmd python3 \
       --env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr" \
  && "${BUILDAH[@]}" commit --quiet "$ctr" "$BASE" >/dev/null \
  && "${BUILDAH[@]}" rm "$ctr" >/dev/null \
  || { echo "image: could not make the stand-in base image; the image test will skip" >&2; exit 0; }
rm -rf "$(dirname "$rootfs")"
echo "image: buildah ready, stand-in $BASE made in $(( $(date +%s) - started ))s" >&2
exit 0
