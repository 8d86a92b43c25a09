#!/usr/bin/env bash
# Install OpenCode (npm opencode-ai, pinned) under the repo, for the OpenCode-through-ctxgate
# tests. Idempotent: a second run with the pinned version present does nothing.
# The CLI is a native binary from an optional dependency (opencode-linux-x64 and its kin) that
# the package's postinstall links to bin/opencode.exe; npm and node only run that postinstall,
# which uses nothing newer than Node 18 (Debian 12's), so no Node of its own is needed.
# Usage: scripts/install-opencode.sh [PREFIX]   (default: <repo>/.agents/opencode)
# Afterwards: PREFIX/node_modules/.bin/opencode (tests/agents/opencode.py finds it there).
set -euo pipefail
OPENCODE_VERSION="${OPENCODE_VERSION:-1.18.33}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="${1:-$ROOT/.agents/opencode}"
BIN="$PREFIX/node_modules/.bin/opencode"

if [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -q "$OPENCODE_VERSION"; then
    echo "opencode $OPENCODE_VERSION already installed: $BIN"
    exit 0
fi
command -v npm >/dev/null || { echo "npm is required (apt-get install nodejs npm)" >&2; exit 1; }
mkdir -p "$PREFIX"
# --prefix with a local install keeps everything (package + native optional dependency) in PREFIX.
npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "opencode-ai@$OPENCODE_VERSION"
"$BIN" --version
echo "opencode installed: $BIN"
