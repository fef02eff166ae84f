#!/usr/bin/env bash
# Runs bench/mpi_scaling.c (bench_mpi_scaling) at N = 2, 4, 8 and 16
# processes on this host, each with both paths of docs/MULTIPROCESS.md
# (agree-once, the default, and RF_MPI_AGREE_ONCE=0: READY/GO through task 0
# every step), printing the load average before each run. Shared memory
# only, more processes than cores allowed; each run is a few seconds.
# RF_MPI_ALGORITHM=blocking (or ring) in the environment reaches every
# process: every collective then moves its data by blocking calls, on a
# thread and a second communicator of its own in the steady state.
# docs/SCALING.md holds the figures and the model built on them
# (bench/mpi_scaling_model.py).
#   bash bench/mpi_scaling.sh [BUILD_DIR [STEPS [N...]]]
set -euo pipefail
build="${1:-build-nc}"
steps="${2:-200}"
shift $(( $# < 2 ? $# : 2 ))
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(2 4 8 16)
bin="$build/bench/bench_mpi_scaling"
[ -x "$bin" ] || { echo "no $bin: build it first (needs MPI)"; exit 1; }
for n in "${sizes[@]}"; do
  for once in 1 0; do
    echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
    RF_MPI_AGREE_ONCE=$once timeout 60 mpirun --allow-run-as-root \
      --oversubscribe --bind-to none -np "$n" --mca btl self,vader \
      --mca oob_tcp_if_include lo -x RF_MPI_AGREE_ONCE \
      ${RF_MPI_ALGORITHM:+-x RF_MPI_ALGORITHM} "$bin" "$steps"
  done
done
