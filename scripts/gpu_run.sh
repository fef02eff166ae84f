#!/usr/bin/env bash
# Runs an unpacked scripts/gpu_bundle.sh archive on a GPU machine: every GPU
# test, then `ringflow train` on virtual GPU devices and the benchmarks.
# Logs go to $1 (a folder). NVLink multicast stays off.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
logs=${1:-$here/logs}
mkdir -p "$logs"
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$logs/gpu.txt" 2>&1
pass=0 fail=0
for t in "$here"/bin/test_*; do
  name=$(basename "$t")
  if timeout 600 "$t" > "$logs/$name.log" 2>&1; then
    pass=$((pass + 1)); echo "PASS $name"
  else
    fail=$((fail + 1)); echo "FAIL $name (exit $?)"; tail -20 "$logs/$name.log"
  fi
done
echo "gpu tests: $pass passed, $fail failed"
# The main job on virtual GPU devices (all on one physical GPU when there is one).
rf="$here/bin/ringflow"
data="$here/data"
if [ -x "$rf" ] && [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  echo "== ringflow train --devices gpu:0-3 --epochs 1"
  timeout 600 "$rf" train --data "$data" --devices gpu:0-3 --epochs 1 --quiet 2>&1 | tail -3
  echo "== ringflow train --devices gpu:0-3 --check --steps 50"
  timeout 600 "$rf" train --data "$data" --devices gpu:0-3 --check --steps 50 --quiet 2>&1 | tail -2
fi
