#!/usr/bin/env bash
# The main job: installs what it needs, builds ringflow (Release) and runs
# `ringflow train`, data-parallel Fashion-MNIST training on 4 virtual CPU
# devices. Arguments go to `ringflow train` (e.g. --devices cpu:0-7 --check).
# RF_TRAIN_BUILD=DIR uses an already configured build directory instead of
# build-release/ (CI: build/, whose RelWithDebInfo is Release's -O3 -DNDEBUG
# plus -g, so the library is not compiled a second time).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
build=${RF_TRAIN_BUILD:-build-release}
if [ -z "${RF_TRAIN_BUILD:-}" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DRF_BUILD_TESTS=OFF -DRF_BUILD_BENCH=OFF >/dev/null
elif [ ! -f "$build/build.ninja" ]; then
  echo "train.sh: RF_TRAIN_BUILD=$build is not a configured build directory" >&2
  exit 2
fi
ninja -C "$build" ringflow_tool >/dev/null
exec "$build/tools/ringflow" train "$@"
