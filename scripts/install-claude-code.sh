#!/usr/bin/env bash
# Install Claude Code (npm @anthropic-ai/claude-code) into .agents/ under the repo, for the tests
# that run it as a real client (tests/agents/claude_code.py). Idempotent: does nothing when the
# pinned version is already there. Everything comes from the npm registry: the package's native
# binary is its optional dependency @anthropic-ai/claude-code-<platform>, and its postinstall
# step only links that binary into place (it downloads nothing).
# Usage: scripts/install-claude-code.sh [PREFIX]   (default: <repo>/.agents)
set -euo pipefail
VERSION="${CLAUDE_CODE_VERSION:-2.1.332}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="${1:-$REPO/.agents}"
BIN="$PREFIX/node_modules/.bin/claude"
PKG="$PREFIX/node_modules/@anthropic-ai/claude-code"

installed() { [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -q "^$VERSION "; }

if installed; then
    echo "claude-code $VERSION already installed: $BIN"
    exit 0
fi
command -v npm >/dev/null || { echo "!! npm is not installed" >&2; exit 1; }
mkdir -p "$PREFIX"
# The package declares engines.node >= 22; its native binary does not use the local node.
npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error --engine-strict=false \
    --include=optional "@anthropic-ai/claude-code@$VERSION"
# Newer npm releases may skip install scripts: link the native binary the way postinstall does.
if ! installed && [ -f "$PKG/install.cjs" ]; then
    (cd "$PKG" && node install.cjs)
fi
installed || { echo "!! claude-code $VERSION did not install a working binary" >&2; exit 1; }
echo "claude-code installed: $BIN ($("$BIN" --version))"
