#!/usr/bin/env bash
# Gives each MPI rank of this node its own GPUs before running the program:
# rank r (OMPI_COMM_WORLD_LOCAL_RANK, or SLURM_LOCALID) sees GPUs
# r*K .. r*K+K-1, K = RF_GPUS_PER_TASK (default 4). For the GPU runs of the
# tests across processes, e.g. on one node with 8 GPUs:
#   RF_MPI_TEST_DEVICE=gpu mpirun -np 2 -x RF_MPI_TEST_DEVICE \
#     tests/mpi/gpu_ranks.sh build/tests/test_mpi_collectives
set -euo pipefail
k="${RF_GPUS_PER_TASK:-4}"
r="${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-0}}"
first=$(( r * k ))
CUDA_VISIBLE_DEVICES=$(seq -s, "$first" $(( first + k - 1 )))
export CUDA_VISIBLE_DEVICES
exec "$@"
