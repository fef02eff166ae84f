#!/usr/bin/env bash
# The main job: installs what it needs, builds ringflow (Release) and runs
# `ringflow train`, data-parallel Fashion-MNIST training on 4 virtual CPU
# devices. Arguments go to `ringflow train` (e.g. --devices cpu:0-7 --check).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DRF_BUILD_TESTS=OFF -DRF_BUILD_BENCH=OFF >/dev/null
ninja -C build-release ringflow_tool >/dev/null
exec build-release/tools/ringflow train "$@"
