#!/usr/bin/env bash
# Runs a test program under mpirun on this machine: NP processes, loopback
# and shared memory only (btl self,vader), no core binding (ringflow's
# threads share the cores), root allowed, more processes than cores allowed,
# one RF_TEST_SEED for every process. Prints "MPI tests skipped: ..." (ctest
# reports the test as skipped) when mpirun is missing.
#   tests/mpi/mpirun.sh NP PROGRAM [ARGS...]
set -euo pipefail
np="$1"
shift
if ! command -v mpirun >/dev/null 2>&1; then
  echo "MPI tests skipped: mpirun not found"
  exit 0
fi
seed="${RF_TEST_SEED:-$(( ($(date +%s%N) / 1000) % 4000000000 + 1 ))}"
echo "RF_TEST_SEED=$seed (mpirun -np $np)"
exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
  --mca btl self,vader -x RF_TEST_SEED="$seed" "$@"
