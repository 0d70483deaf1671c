#!/usr/bin/env bash
# Installs the MCP Inspector CLI (npm: @modelcontextprotocol/inspector) into .ci/inspector,
# for tests/integration/test_inspector.py (marked `inspector`), which drive the server through it over
# stdio and Streamable HTTP. Failure is tolerated: those tests skip when it is absent.
# Usage: bash .ci/inspector.sh   (INSPECTOR_VERSION overrides the pinned version)
set -u

VERSION="${INSPECTOR_VERSION:-2.12.0}"
PREFIX="$(cd "$(dirname "$0")" && pwd)/inspector"
BIN="$PREFIX/node_modules/.bin/mcp-inspector"

if ! command -v npm >/dev/null 2>&1; then
    echo "inspector: npm not found; inspector tests will be skipped" >&2
    exit 0
fi
if [ -x "$BIN" ] && [ "$(node -p "require('$PREFIX/node_modules/@modelcontextprotocol/inspector/package.json').version" 2>/dev/null)" = "$VERSION" ]; then
    echo "inspector: $VERSION already installed at $BIN" >&2
    exit 0
fi
started=$(date +%s)
mkdir -p "$PREFIX"
# --ignore-scripts: the package's postinstall only sets up a source checkout; the CLI needs none.
if npm install --prefix "$PREFIX" --no-audit --no-fund --ignore-scripts --loglevel=error \
        "@modelcontextprotocol/inspector@$VERSION" >&2 && [ -x "$BIN" ]; then
    echo "inspector: installed $VERSION at $BIN in $(( $(date +%s) - started ))s" >&2
else
    echo "inspector: install failed; inspector tests will be skipped" >&2
fi
exit 0
