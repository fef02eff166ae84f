#!/usr/bin/env bash
# bench/mpi_large_ab.sh - ringflow's collectives across processes from 1 MiB
# up against MPI's own call, per algorithm (src/comm/mpi/algorithm.c): the
# table's choice ("auto") and each algorithm forced by RF_MPI_ALGORITHM
# (nbc, blocking, ring, shm), and optionally the same "auto" of a second
# binary
# (the A of an A/B: an older build). For np 2 and 4, REPS repetitions; in
# each the variants run one after the other in a rotated order, so a
# change of load hits them alike. Each run is
#   mpirun --bind-to none --mca btl self,vader -np N \
#     env RF_MPI_ALGORITHM=ALG RINGFLOW bench --min 1M --max 64M --no-gloo \
#     --min-time MIN_TIME --rounds ROUNDS --csv
# and its ratio is MPI's time / ringflow's (>= 1: ringflow as fast). The
# summary: per np, collective and size, the median ratio of each variant
# over the repetitions, and the fastest variant (what the table should
# choose there). The load average is printed before and after.
#   bash bench/mpi_large_ab.sh build-nc/tools/ringflow [OLD_RINGFLOW]
# Environment: NPS (default "2 4"), REPS (3), MIN_TIME (0.01: a window of
# the bench lasts at least this long), ROUNDS (3: rounds of ringflow's and
# MPI's windows per size), SIZES ("--min 1M --max 64M": 1, 4, 16, 64 MiB),
# VARIANTS (default "auto nbc blocking ring shm"; "old" is added with a second
# binary), BENCH_ARGS (more bench options, e.g. "--collective broadcast"),
# CPUS (a taskset list for the ranks, e.g. 8-15), OUT (a folder for the raw
# CSV; default a temporary one). With the defaults, 30 runs of mpirun (36
# with an old binary); the script prints how long it took. Estimated from
# the number of calls at about 125 s on a quiet 16-core host with
# CPUS=8-15, 150 s with an old binary (docs/PERFORMANCE.md, "Session 10",
# for four variants;
# on the loaded 2-core VM one run of np 2 took 60-80 s). A threshold
# moves only where the summary's `wins` is every repetition.
set -euo pipefail
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 RINGFLOW [OLD_RINGFLOW]" >&2
  exit 2
fi
RF=$(readlink -f "$1")
OLD=${2:+$(readlink -f "$2")}
NPS=${NPS:-"2 4"}
REPS=${REPS:-3}
MIN_TIME=${MIN_TIME:-0.01}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-"--min 1M --max 64M"}
OUT=${OUT:-$(mktemp -d /tmp/mpi_large_ab.XXXXXX)}
mkdir -p "$OUT"
PIN=()
[ -n "${CPUS:-}" ] && PIN=(taskset -c "$CPUS")
read -r -a variants <<<"${VARIANTS:-auto nbc blocking ring shm}"
[ -n "$OLD" ] && variants+=(old)

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
start=$SECONDS
raw="$OUT/raw.csv"
echo "np,variant,rep,collective,tasks,devices,bytes,iters,rounds,ringflow_us,mpi_us,gloo_us,rf_bw,mpi_bw,gloo_bw,ratio_vs_mpi,ratio_vs_gloo" >"$raw"
for rep in $(seq 1 "$REPS"); do
  for np in $NPS; do
    n=${#variants[@]}
    for k in $(seq 0 $((n - 1))); do
      v=${variants[$(((k + rep + np) % n))]}
      bin=$RF alg=$v
      [ "$v" = old ] && bin=$OLD alg=auto
      # shellcheck disable=SC2086
      "${PIN[@]}" mpirun --allow-run-as-root --oversubscribe --bind-to none \
        --mca btl self,vader -np "$np" env RF_MPI_ALGORITHM="$alg" \
        "$bin" bench $SIZES ${BENCH_ARGS:-} --no-gloo --min-time "$MIN_TIME" --rounds "$ROUNDS" \
        --csv 2>"$OUT/err.$np.$v.$rep" |
        awk -v p="$np,$v,$rep," -F, 'NR > 1 && NF > 5 {print p $0}' >>"$raw"
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); $((SECONDS - start)) s"
echo "raw CSV: $raw"
python3 - "$raw" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cells = {}
for r in rows:
    key = (int(r["np"]), r["collective"], float(r["bytes"]))
    cells.setdefault(key, {}).setdefault(r["variant"], []).append(
        (float(r["ratio_vs_mpi"]), float(r["ringflow_us"]), float(r["mpi_us"]),
         r["rep"]))
order = ["auto", "nbc", "blocking", "ring", "shm", "old"]
seen = [v for v in order if any(v in c for c in cells.values())]
print("median MPI/ringflow ratio (>= 1: ringflow as fast); best = fastest "
      "variant; wins = repetitions in which best beat auto (same repetition)")
print("%-3s %-15s %9s " % ("np", "collective", "MiB") +
      " ".join("%9s" % v for v in seen) + "  best    wins   auto_us    mpi_us")
for key in sorted(cells):
    c = cells[key]
    med = {v: statistics.median(x[0] for x in c[v]) for v in c}
    best = max(med, key=med.get)
    au = c.get("auto", [(0, 0, 0, "")])
    auto_by_rep = {x[3]: x[0] for x in au}
    paired = [x[0] > auto_by_rep[x[3]] for x in c[best] if x[3] in auto_by_rep]
    wins = "-" if best == "auto" else "%d/%d" % (sum(paired), len(paired))
    print("%-3d %-15s %9.0f " % (key[0], key[1], key[2] / 2**20) +
          " ".join("%9s" % ("%.2f" % med[v] if v in med else "-") for v in seen) +
          "  %-6s %5s %8.0f %9.0f" % (best, wins,
                                      statistics.median(x[1] for x in au),
                                      statistics.median(x[2] for x in au)))
EOF
