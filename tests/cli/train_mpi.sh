#!/usr/bin/env bash
# ringflow train across processes (mpirun, tests/mpi/mpirun.sh): 4 processes x
# 2 devices must match one device to float tolerance with bit-identical
# replicas in every process, for every --sync mode (reduce-broadcast on 2
# processes); only task 0 prints. Skipped without mpirun.
set -euo pipefail
ringflow="$1"
mpirun_sh="$(dirname "$0")/../mpi/mpirun.sh"
for run in "4 allreduce" "4 sharded" "2 reduce-broadcast"; do
  set -- $run
  out=$(bash "$mpirun_sh" "$1" "$ringflow" train --devices cpu:0-1 --check \
          --steps 20 --epochs 1 --batch 64 --quiet --sync "$2")
  echo "$out"
  if grep -q "MPI tests skipped" <<< "$out"; then exit 0; fi
  grep -q "on $(( $1 * 2 )) devices ($1 processes x cpu:0-1)" <<< "$out"
  grep -q "replicas bit-identical" <<< "$out"
  [ "$(echo "$out" | grep -c "^ringflow train:")" -eq 1 ] # task 0 alone prints
  diff=$(echo "$out" | sed -n 's/.*largest parameter difference \([^ ]*\).*/\1/p')
  awk -v d="$diff" 'BEGIN { exit !(d < 1e-4) }' ||
    { echo "difference $diff too large"; exit 1; }
done
echo "train_mpi: ok"
