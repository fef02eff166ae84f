#!/usr/bin/env bash
# Makes the Python virtual environment .venv (at the repository root, ignored
# by git) with what the package builds and tests with, and installs ringflow
# into it from this tree (docs/PYTHON.md).
#   scripts/python_env.sh                 pip install . (a wheel, as users get)
#   scripts/python_env.sh --editable      pip install -e . (for development)
# Arguments after the option go to pip (e.g. -C cmake.define.RF_WITH_CUDA=OFF).
# PYTHON names the interpreter (default python3); VENV the environment's
# folder (default .venv; scripts/test.sh --sanitize address,undefined uses
# .venv-asan). Compiles through ccache when it is installed and
# CMAKE_C_COMPILER_LAUNCHER is not set.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
editable=()
if [ "${1:-}" = "--editable" ]; then
  editable=(-e)
  shift
fi
venv=${VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$venv"
fi
# Build requirements too: the install below runs without build isolation,
# so it needs no download and reuses build-py/ from the last build.
"$venv/bin/pip" install -q --disable-pip-version-check \
  "scikit-build-core>=0.10" "cffi>=1.15" "numpy>=1.22" "ml_dtypes>=0.2" \
  "pytest>=7" "ruff>=0.4" "safetensors>=0.4"
if [ -z "${CMAKE_C_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CMAKE_CUDA_COMPILER_LAUNCHER=ccache
fi
"$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation \
  "${editable[@]}" . "$@"
