#!/usr/bin/env bash
# CPU seconds that tasks 0 and 2 of `mpirun -np 3 ringflow train` use over
# 10 s while task 1 is stopped (SIGSTOP): what the communication thread
# costs while nothing can move (docs/PERFORMANCE.md, issue 20).
#   bench/mpi_stopped_cpu.sh build/tools/ringflow
set -euo pipefail
bin="$1"
d=$(mktemp -d)
trap 'kill -9 $(cat "$d"/pid.* 2>/dev/null) 2>/dev/null || true; rm -rf "$d"' EXIT
cat >"$d/rank.sh" <<'R'
#!/usr/bin/env bash
echo $$ >"$RF_D/pid.$OMPI_COMM_WORLD_RANK"
exec "$@" >"$RF_D/out.$OMPI_COMM_WORLD_RANK" 2>&1
R
RF_D="$d" mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3 \
  --mca btl self,vader -x RF_D bash "$d/rank.sh" "$bin" train \
  --devices cpu:0-1 --batch 126 --epochs 100 >/dev/null 2>&1 &
for _ in $(seq 600); do
  grep -q step "$d/out.0" 2>/dev/null && break
  sleep 0.1
done
sleep 2
kill -STOP "$(cat "$d/pid.1")"
sleep 0.5
tick=$(getconf CLK_TCK)
cpu() { awk -v t="$tick" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$1/stat"; }
a0=$(cpu "$(cat "$d/pid.0")")
c0=$(cpu "$(cat "$d/pid.2")")
sleep 10
a1=$(cpu "$(cat "$d/pid.0")")
c1=$(cpu "$(cat "$d/pid.2")")
echo "$bin: CPU s in 10 s with task 1 stopped: task 0" \
  "$(awk -v a="$a0" -v b="$a1" 'BEGIN { print b - a }'), task 2" \
  "$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }');" \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
kill -CONT "$(cat "$d/pid.1")"
