#!/usr/bin/env bash
# Runs an unpacked scripts/gpu_bundle.sh archive on a machine with one GPU
# (issue 4): every GPU test, `ringflow bench` on GPU devices (each collective
# through a session against the raw backend call, and the executor's cost per
# GPU node), then `ringflow train` on virtual GPU devices. Each part has a time
# limit inside a total budget, so the run ends by itself; the logs are packed
# into OUT/logs.tgz and the benchmark tables copied beside it (the device tool
# returns at most 8 files). NVLink multicast stays off.
#   gpu_run.sh OUT [BUDGET_SECONDS (default 540)]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/out}
budget=${2:-540}
. "$here/gpu_common.sh"
gpu_setup

# 1. The tests (each its own process; the GPU ones skip without a GPU).
gpu_tests 120

# 2. Collectives and executor overhead. Four virtual devices on the GPU run
# the CUDA-kernel backend; one device with --backend nccl runs a one-rank
# NCCL communicator (NCCL refuses two ranks on one GPU), the only raw NCCL
# comparison one GPU allows; PyTorch's one-rank all-reduce on the same sizes
# beside it (bench/torch_nccl_overhead.py). Each once with one collective
# per step (a step then waits for the GPU at its end, so nothing hides its
# host work), and once with 8 independent all-reduces per step against 8 raw
# calls then one wait (how a training step's gradient all-reduces run, and
# how nccl-tests and PyTorch time back-to-back calls).
bench=("$rf" bench --min 8 --max 512M --min-time 0.05)
part bench_gpu4 150 "${bench[@]}" --devices gpu:0-3 --trace "$logs/trace_gpu4"
part bench_gpu4_k8 60 "${bench[@]}" --devices gpu:0-3 --per-step 8 --collective all_reduce --no-executor
part bench_nccl1 100 "${bench[@]}" --devices gpu:0 --backend nccl --no-executor --trace "$logs/trace_nccl1"
part bench_nccl1_k8 50 "${bench[@]}" --devices gpu:0 --backend nccl --per-step 8 --collective all_reduce --no-executor
part torch_nccl1 60 python3 "$here/torch_nccl_overhead.py" --max $((512 << 20)) --min-time 0.05
part torch_nccl1_k8 60 python3 "$here/torch_nccl_overhead.py" --max $((512 << 20)) --min-time 0.05 --per-step 8
part bench_gpu8 70 "$rf" bench --devices gpu:0-7 --min 8 --max 128M --min-time 0.05 --no-executor

# 3. The main job on virtual GPU devices (all on the one physical GPU).
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  part train_gpu4_check 120 "$rf" train --data "$data" --devices gpu:0-3 --check --steps 50 --quiet
  # the defaults (5 epochs, batch 128); the part's line gives the wall time
  part train_gpu1 120 "$rf" train --data "$data" --devices gpu:0 --quiet
  part train_gpu4 120 "$rf" train --data "$data" --devices gpu:0-3 --quiet
  part train_gpu8 120 "$rf" train --data "$data" --devices gpu:0-7 --quiet
fi

# 3b. Convolutions (issue 17): Conv2D and its gradients against cuDNN called
# directly, and the CNN against PyTorch eager at batch 128 and 1024.
part conv_vs_cudnn 120 "$here/bin/bench_conv_gpu_vs_cudnn"
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  part cnn_vs_torch 240 python3 "$here/gpu_train_vs_pytorch.py" --ringflow "$rf" \
    --data "$data" --model cnn --batches 128,1024 --repeats 2 --steps 100
fi

# 4. With SMOKE_MULTI=1: scripts/gpu_multi_run.sh's flow on this one GPU
# (small sizes), so issue 6's script has run once before several GPUs are
# lent; its files go to OUT/multi.
if [ "${SMOKE_MULTI:-0}" = 1 ] && [ "$(gpu_left)" -gt 60 ]; then
  MAX=32M bash "$here/gpu_multi_run.sh" "$out/multi" $(($(gpu_left) - 20)) \
    > "$logs/multi_smoke.log" 2>&1
  echo "multi smoke: exit $?"
  grep -E "exit|tests:|physical" "$logs/multi_smoke.log"
fi

gpu_finish +bench_gpu4 +bench_gpu4_k8 +bench_nccl1 +bench_nccl1_k8 +torch_nccl1 +torch_nccl1_k8 bench_gpu8 conv_vs_cudnn cnn_vs_torch
