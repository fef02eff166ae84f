#!/usr/bin/env bash
# Training throughput of `ringflow train` against PyTorch (docs/PERFORMANCE.md):
# installs what it needs (Debian packages; PyTorch and NumPy from PyPI into a
# virtual environment, once: about 5 GB, since PyPI's Linux wheel brings its
# CUDA libraries, which this CPU run never loads), builds ringflow (Release)
# and runs bench/train_vs_pytorch.py. Arguments go to the script, e.g.
# --repeats 5. RF_TORCH_VENV overrides where the environment lives.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
venv=${RF_TORCH_VENV:-$HOME/.cache/ringflow-bench/torch-venv}
if ! "$venv/bin/python" -c 'import torch, numpy' 2>/dev/null; then
  echo "ringflow: installing PyTorch into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --progress-bar off torch numpy
fi
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DRF_BUILD_TESTS=OFF -DRF_BUILD_BENCH=OFF >/dev/null
ninja -C build-release ringflow_tool >/dev/null
exec "$venv/bin/python" bench/train_vs_pytorch.py \
  --ringflow build-release/tools/ringflow "$@"
