#!/usr/bin/env bash
# bench/mpi_copies.sh - what ringflow copies in memory beyond MPI's own call
# for each collective across processes: `ringflow bench` under mpirun with
# bench/memcpy_count.c preloaded (memcpy/memmove calls of 4 KiB and more,
# summed per calling object). The executable is ringflow (library and
# bench); libopen-pal, libmpi and the MCA components are MPI (in both
# ringflow's and the baseline's calls). Per process and collective it
# prints the MiB each object copied, and the executable's per ringflow
# operation, with the bench's own op counts: per window size k (the CSV's
# iters) ringflow runs 2 (warm-up) + 2k - 1 (finding k) + ROUNDS x k, MPI's
# baseline 2 + ROUNDS x k. Kernel copies (OpenMPI's CMA single copy) and
# libc's internal ones are not seen.
#   bash bench/mpi_copies.sh RINGFLOW
# Environment: NP (2), SIZE (16M), DEVICES (1: devices per process),
# COLLECTIVES ("all_reduce reduce broadcast all_gather reduce_scatter").
set -euo pipefail
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 RINGFLOW" >&2
  exit 2
fi
RF=$(readlink -f "$1")
NP=${NP:-2} SIZE=${SIZE:-16M} DEVICES=${DEVICES:-1} ROUNDS=3
COLLECTIVES=${COLLECTIVES:-"all_reduce reduce broadcast all_gather reduce_scatter"}
dir=$(mktemp -d /tmp/mpi_copies.XXXXXX)
cc -O2 -shared -fPIC -o "$dir/memcpy_count.so" \
  "$(dirname "$0")/memcpy_count.c" -ldl -lpthread
echo "np $NP, $SIZE, $DEVICES device(s) a process"
for c in $COLLECTIVES; do
  rm -f "$dir"/mc.*
  row=$(mpirun --allow-run-as-root --oversubscribe --bind-to none \
    --mca btl self,vader -np "$NP" env MEMCPY_COUNT_DIR="$dir" \
    LD_PRELOAD="$dir/memcpy_count.so" "$RF" bench --min "$SIZE" \
    --max "$SIZE" --collective "$c" --devices "$DEVICES" --no-gloo \
    --min-time 0.001 --rounds $ROUNDS --csv 2>/dev/null | grep "^$c,")
  k=$(echo "$row" | cut -d, -f5)
  rf_ops=$((2 + 2 * k - 1 + ROUNDS * k)) mpi_ops=$((2 + ROUNDS * k))
  echo "$c: ringflow ops $rf_ops, MPI baseline ops $mpi_ops"
  for f in "$dir"/mc.*; do
    awk -v pid="${f##*.}" -v exe="$(basename "$RF")" -v rf="$rf_ops" '
      $1 ~ /pmix|^ld-linux/ {next}
      {printf "  pid %s %-20s %8.1f MiB in all", pid, $1, $2 / 1048576
       if ($1 == exe) printf ", %.2f MiB a ringflow op", $2 / rf / 1048576
       printf "\n"}' "$f"
  done
done
rm -rf "$dir"
