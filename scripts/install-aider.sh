#!/usr/bin/env bash
# Install aider (PyPI aider-chat, pinned) in a venv of its own under the repo, for the tests that
# run it as a real client of ctxgate (tests/agents/aider.py). Its own venv because aider-chat
# pins about a hundred dependencies exactly (openai, litellm, numpy, ...), which would fight the
# project's .venv. Idempotent: does nothing when the pinned version is already there.
# aider-chat supports Python 3.10 to 3.12: the first of python3.12, python3.11, python3.10,
# python3 within that range builds the venv (AIDER_PYTHON=/path/to/python overrides).
# Usage: scripts/install-aider.sh [PREFIX]   (default: <repo>/.agents/aider)
# Afterwards: PREFIX/bin/aider (tests/agents/aider.py finds it there).
set -euo pipefail
VERSION="${AIDER_VERSION:-0.86.2}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="${1:-$REPO/.agents/aider}"
BIN="$PREFIX/bin/aider"

installed() {
    [ -x "$BIN" ] && [ "$("$PREFIX/bin/python" -c \
        'import importlib.metadata as m; print(m.version("aider-chat"))' 2>/dev/null)" = "$VERSION" ]
}

supported() {  # a Python interpreter aider-chat installs on
    "$1" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 12))' 2>/dev/null
}

if installed; then
    echo "aider-chat $VERSION already installed: $BIN"
    exit 0
fi
PYTHON="${AIDER_PYTHON:-}"
if [ -z "$PYTHON" ]; then
    for candidate in python3.12 python3.11 python3.10 python3; do
        if command -v "$candidate" >/dev/null && supported "$candidate"; then
            PYTHON="$candidate"
            break
        fi
    done
fi
[ -n "$PYTHON" ] && supported "$PYTHON" || {
    echo "!! aider-chat needs Python 3.10-3.12 (set AIDER_PYTHON)" >&2
    exit 1
}
"$PYTHON" -m venv --clear "$PREFIX"
"$PREFIX/bin/python" -m pip install --quiet --disable-pip-version-check "aider-chat==$VERSION"
installed || { echo "!! aider-chat $VERSION did not install a working aider" >&2; exit 1; }
echo "aider-chat installed: $BIN ($("$PREFIX/bin/python" --version))"
