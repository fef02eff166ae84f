#!/usr/bin/env bash
# Issue 6's whole list in one call, on a machine with several GPUs (the
# device tool's nvidia-h200-x2/-x4/-x8), from an unpacked scripts/gpu_bundle.sh
# archive. gpu:i runs on physical GPU i % G, so with G GPUs:
#   - the GPU tests: test_gpu_collectives' reference matrix over the device
#     sets {1,2,0}, {1,0} and gpu:0..7 (NCCL wherever a set's devices are on
#     distinct GPUs, the CUDA-kernel backend over peer access where they
#     share), its gradients, test_gpu_collective_errors' faults and
#     concurrent steps, and the rest of the GPU suite;
#   - `ringflow bench` 8 B..8 GiB on gpu:0..G-1 (NCCL, one rank per GPU)
#     against raw NCCL calls on the same buffers (nccl-tests' algbw/busbw),
#     then on 2G devices (two per GPU: CUDA kernels over peer access);
#   - `ringflow train --devices gpu:0-(N-1) --check` for N = 1, 2, 4, 8
#     (N > G puts several devices on a GPU), then 5 epochs on all G GPUs.
# Logs are packed into OUT/logs.tgz, the benchmark tables copied beside it.
#   [MAX=8G] gpu_multi_run.sh OUT [BUDGET_SECONDS (default 570)]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/out}
budget=${2:-570}
. "$here/gpu_common.sh"
gpu_setup
G=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
echo "physical GPUs: $G"
if [ "$G" -lt 2 ]; then
  echo "gpu_multi_run.sh needs several GPUs (found $G); scripts/gpu_run.sh is for one"
fi
last=$((G - 1))

gpu_tests 240

max=${MAX:-8G}
part bench_nccl 240 "$rf" bench --devices "gpu:0-$last" --min 8 --max "$max" --min-time 0.1 --no-executor
part bench_peer 90 "$rf" bench --devices "gpu:0-$((2 * G - 1))" --min 8 --max "${MAX:-1G}" --min-time 0.05 --no-executor

if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  for N in 1 2 4 8; do
    devs=gpu:0
    [ "$N" -gt 1 ] && devs="gpu:0-$((N - 1))"
    part "train_check_$N" 90 "$rf" train --data "$data" --devices "$devs" --check --steps 100 --quiet
  done
  part train_all 120 "$rf" train --data "$data" --devices "gpu:0-$last" --epochs 5 --quiet
fi

gpu_finish +bench_nccl +bench_peer
