#!/usr/bin/env bash
# Install Codex CLI (npm @openai/codex, pinned) under the repo, for tests/simulator/test_codex.py
# and the Codex-through-ctxgate tests. Idempotent: a second run with the pinned version present
# does nothing. The native binary comes as an optional dependency of the npm package.
# Usage: scripts/install-codex.sh [PREFIX]   (default: <repo>/.agents/codex)
# Afterwards: PREFIX/node_modules/.bin/codex (tests/agents/codex.py finds it there).
set -euo pipefail
CODEX_VERSION="${CODEX_VERSION:-0.171.0}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="${1:-$ROOT/.agents/codex}"
BIN="$PREFIX/node_modules/.bin/codex"

if [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -q "$CODEX_VERSION"; then
    echo "codex $CODEX_VERSION already installed: $BIN"
    exit 0
fi
command -v npm >/dev/null || { echo "npm is required (apt-get install nodejs npm)" >&2; exit 1; }
mkdir -p "$PREFIX"
# --prefix with a local install keeps everything (package + native optional dependency) in PREFIX.
npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error \
    "@openai/codex@$CODEX_VERSION"
"$BIN" --version
echo "codex installed: $BIN"
