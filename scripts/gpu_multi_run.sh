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
#     (N > G puts several devices on a GPU), then 5 epochs on all G GPUs;
#   - across 2 processes under mpirun (issue 7's NCCL path): the reference
#     matrix (G >= 8) and `ringflow train --check`, each process on G/2 GPUs.
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

# Issue 7's GPU half: NCCL communicators across 2 processes (ncclCommInitRank,
# the unique id over MPI), each process with half the GPUs (gpu_ranks.sh). The
# reference matrix needs 4 GPUs a process (its 8 devices), the training one.
half=$((G / 2))
if [ "$half" -ge 1 ] && command -v mpirun > /dev/null && [ -x "$here/bin-mpi/test_mpi_collectives" ]; then
  mpi=(mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH
       -x NCCL_NVLS_ENABLE -x RF_GPUS_PER_TASK)
  export RF_GPUS_PER_TASK=$half
  if [ "$half" -ge 4 ]; then
    export RF_MPI_TEST_DEVICE=gpu
    part mpi_gpu_matrix 180 "${mpi[@]}" -x RF_MPI_TEST_DEVICE -x RF_TEST_SEED=1 \
      "$here/gpu_ranks.sh" "$here/bin-mpi/test_mpi_collectives"
    unset RF_MPI_TEST_DEVICE
  fi
  if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
    part mpi_gpu_train 120 "${mpi[@]}" "$here/gpu_ranks.sh" "$rf" train --data "$data" \
      --devices "gpu:0-$((half - 1))" --check --steps 100 --quiet
  fi
fi

gpu_finish +bench_nccl +bench_peer
