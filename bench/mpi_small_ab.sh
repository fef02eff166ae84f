#!/usr/bin/env bash
# Small collectives across processes, A/B in one go (issue 21,
# docs/PERFORMANCE.md "Small collectives across processes"): `ringflow
# bench` at 1 and 4 KiB and `ringflow train --devices cpu:0 --bench`, with
# 2 and 4 processes, the variants alternating in every repetition:
#   direct  NEW with RF_MPI_DIRECT=1, its default (agreed collectives on
#           the executor thread)
#   engine  NEW with RF_MPI_DIRECT=0 (the communication thread runs them)
#   old     OLD, when given (e.g. a build of main before this work)
#   single  (train only) NEW in one process, `--devices cpu:0-<NP-1>`, the
#           same global batch: what training across processes is held to
#           (issue 21: at least 0.9x its samples/s)
# Prints one line per run (with the load average at its start), then for
# each variant the best and the median over the repetitions of ringflow's
# time / MPI's own in the same run (target: at most 1.5) and of samples/s.
#   bench/mpi_small_ab.sh NEW_RINGFLOW [OLD_RINGFLOW]
# Environment: REPS (default 5), NPS ("2 4"), ROUNDS (3), MIN_TIME (0.1),
# STEPS (train --steps, 40; 0: no training runs), MPIRUN (default
# "mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl
# self,vader").
set -euo pipefail
new="$1"
old="${2:-}"
reps="${REPS:-5}"
nps="${NPS:-2 4}"
rounds="${ROUNDS:-3}"
min_time="${MIN_TIME:-0.1}"
steps="${STEPS:-40}"
mpirun_cmd="${MPIRUN:-mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader}"
variants="direct engine"
[ -n "$old" ] && variants="$variants old"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() { # variant np: prints "bench VARIANT NP LOAD COLL BYTES RF_US MPI_US"
  local v="$1" np="$2" bin="$new" direct=1 load
  [ "$v" = old ] && bin="$old"
  [ "$v" = engine ] && direct=0
  load=$(cut -d' ' -f1 /proc/loadavg)
  RF_MPI_DIRECT=$direct $mpirun_cmd -np "$np" -x RF_MPI_DIRECT "$bin" bench \
    --min 1K --max 4K --no-gloo --rounds "$rounds" --min-time "$min_time" \
    --csv 2>/dev/null |
    awk -F, -v v="$v" -v np="$np" -v load="$load" \
      '$1 ~ /^(all_reduce|reduce|broadcast|all_gather|reduce_scatter)$/ {
         printf "bench %s %s %s %s %s %s %s\n", v, np, load, $1, $4, $7, $8 }'
  if [ "$steps" -gt 0 ]; then
    load=$(cut -d' ' -f1 /proc/loadavg)
    RF_MPI_DIRECT=$direct $mpirun_cmd -np "$np" -x RF_MPI_DIRECT "$bin" train \
      --devices cpu:0 --bench --steps "$steps" 2>/dev/null |
      sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p' | head -1 |
      awk -v v="$v" -v np="$np" -v load="$load" \
        '{ printf "train %s %s %s samples_per_sec %s\n", v, np, load, $1 }'
  fi
}

single() { # np: one process with np devices, the same global batch
  local np="$1" load
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$new" train --devices "cpu:0-$((np - 1))" --bench --steps "$steps" \
    2>/dev/null | sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p' | head -1 |
    awk -v np="$np" -v load="$load" \
      '{ printf "train single %s %s samples_per_sec %s\n", np, load, $1 }'
}

for rep in $(seq "$reps"); do
  for np in $nps; do
    for v in $variants; do
      run "$v" "$np" | tee -a "$out"
    done
    if [ "$steps" -gt 0 ]; then single "$np" | tee -a "$out"; fi
  done
done

echo
echo "summary: ringflow time / MPI's own time (best, median over $reps repetitions; loaded machine?"
echo "see the load column above); train: samples/s (best, median)"
# "key value" lines, sorted by key then value: best and median per key
# (POSIX awk: no asort).
awk '$1 == "bench" { printf "%s_np%s_%s_%s %.4f\n", $2, $3, $5, $6, ($8 > 0 ? $7 / $8 : 0) }
     $1 == "train" { printf "%s_np%s_train %s\n", $2, $3, $6 }' "$out" |
  sort -k1,1 -k2,2g | awk '
  function flush() {
    if (key == "") return
    best = key ~ /_train$/ ? v[n] : v[1]
    printf "%-40s best %10.2f  median %10.2f  (n=%d)\n", key, best, \
      v[int((n + 1) / 2)], n
  }
  { if ($1 != key) { flush(); key = $1; n = 0 } v[++n] = $2 }
  END { flush() }'
