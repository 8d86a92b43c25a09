#!/usr/bin/env bash
# Install the peer proxies that bench/overhead.py compares ctxgate with, each into its own
# virtualenv outside the repo so their (large, pinned) dependency trees never touch .venv.
# Usage: scripts/install-peers.sh [PEERS_DIR]   (default /work/peers; bench/overhead.py --peers-dir)
# A failed install is reported and skipped: the benchmark then runs without that peer.
set -u
PEERS_DIR="${1:-/work/peers}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$PEERS_DIR"

install_peer() {  # install_peer NAME PIP-SPEC...
    local name="$1"; shift
    local venv="$PEERS_DIR/$name-venv"
    echo "== $name -> $venv"
    if [ ! -x "$venv/bin/python" ]; then
        "$PYTHON" -m venv "$venv" || { echo "!! $name: venv creation failed"; return 1; }
    fi
    "$venv/bin/python" -m pip install --quiet --upgrade pip \
        && "$venv/bin/python" -m pip install --quiet "$@" \
        || { echo "!! $name: pip install failed; the benchmark will skip it"; rm -rf "$venv"; return 1; }
    echo "== $name installed: $("$venv/bin/python" -m pip show "${1%%[*}" | grep '^Version')"
}

# Pinned to the versions bench/results were measured with; override to compare another release,
# e.g. LITELLM_SPEC='litellm[proxy]' for the newest.
LITELLM_SPEC="${LITELLM_SPEC:-litellm[proxy]==1.108.7}"
HEADROOM_SPEC="${HEADROOM_SPEC:-headroom-ai[proxy]==0.42.0}"

status=0
install_peer litellm "$LITELLM_SPEC" || status=1
install_peer headroom "$HEADROOM_SPEC" || status=1
exit $status
