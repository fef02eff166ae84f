#!/usr/bin/env bash
# A process of an MPI job dies (SIGKILL) or stops (SIGSTOP) in the middle of
# `ringflow train`, under an mpirun that lets the job go on (OpenMPI 4:
# --mca orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0; Slurm
# does the same): every other process must print an error naming a task
# that did not come and exit nonzero within the collective timeout plus a
# few seconds, not hang. Skipped without mpirun.
#   tests/cli/train_mpi_dead_rank.sh RINGFLOW
set -euo pipefail
ringflow="$1"
if ! command -v mpirun >/dev/null 2>&1; then
  echo "MPI tests skipped: mpirun not found"
  exit 0
fi
timeout_s=4
bound_s=$((timeout_s + 12)) # the timeout, 2 s grace, 3 s exit wait; slack for
                             # sanitizer builds on a loaded machine
np=3
work=$(mktemp -d)
trap 'kill -9 $(cat "$work"/pid.* 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT

# One rank: the victim execs ringflow (mpirun sees it die); the others run it
# as a child and record its exit status and end time.
cat >"$work/rank.sh" <<'RANK'
#!/usr/bin/env bash
d="$RF_DEAD_DIR"; r="$OMPI_COMM_WORLD_RANK"
if [ "$r" = "$RF_DEAD_RANK" ]; then
  echo $$ >"$d/pid.$r"
  exec "$@" >"$d/out.$r" 2>"$d/err.$r"
fi
"$@" >"$d/out.$r" 2>"$d/err.$r" &
echo $! >"$d/pid.$r"
wait $! && rc=0 || rc=$?
date +%s.%N >"$d/end.$r"
echo "$rc" >"$d/rc.$r"
RANK

scenario() { # victim signal
  local victim="$1" sig="$2"
  rm -f "$work"/{out,err,pid,rc,end}.*
  RF_DEAD_DIR="$work" RF_DEAD_RANK="$victim" \
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
    --mca btl self,vader --mca orte_enable_recovery 1 \
    --mca orte_abort_on_non_zero_status 0 -x RF_DEAD_DIR -x RF_DEAD_RANK \
    bash "$work/rank.sh" "$ringflow" train --devices cpu:0-1 --batch 126 \
    --epochs 100 --collective-timeout "$timeout_s" \
    >"$work/mpirun.out" 2>&1 &
  local mpirun_pid=$!
  # training has started: task 0 printed its first progress line
  for _ in $(seq 600); do
    grep -q "step" "$work/out.0" 2>/dev/null && break
    sleep 0.1
  done
  if ! grep -q "step" "$work/out.0"; then
    cat "$work"/err.* "$work/mpirun.out"
    # The processes must meet in rf_session_new within the timeout (4 s): on
    # a heavily loaded machine start-up alone can take longer. That is not
    # what this test is about: the caller runs the scenario again.
    if grep -q "rf_session_new: not every process" "$work"/err.*; then
      kill -9 $(cat "$work"/pid.* 2>/dev/null) 2>/dev/null || true
      wait "$mpirun_pid" || true
      return 2
    fi
    exit 1
  fi
  sleep 1
  kill -"$sig" "$(cat "$work/pid.$victim")"
  local t0
  t0=$(date +%s.%N)
  for r in $(seq 0 $((np - 1))); do
    [ "$r" = "$victim" ] && continue
    for _ in $(seq $((bound_s * 10 + 100))); do
      [ -e "$work/rc.$r" ] && break
      sleep 0.1
    done
    echo "--- task $r:"
    cat "$work/err.$r"
    [ -e "$work/rc.$r" ] || { echo "task $r still running $bound_s s after the $sig of task $victim"; exit 1; }
    local rc took
    rc=$(cat "$work/rc.$r")
    took=$(awk -v a="$t0" -v b="$(cat "$work/end.$r")" 'BEGIN { printf "%.1f", b - a }')
    echo "task $r: exit status $rc, $took s after the $sig of task $victim"
    [ "$rc" != 0 ] || { echo "task $r exited 0"; exit 1; }
    awk -v t="$took" -v b="$bound_s" 'BEGIN { exit !(t <= b) }' ||
      { echo "task $r took $took s (bound $bound_s s)"; exit 1; }
    grep -q "error (DEADLINE_EXCEEDED).*task $victim" "$work/err.$r" ||
      { echo "task $r's error does not name task $victim"; exit 1; }
  done
  kill -9 "$(cat "$work/pid.$victim")" 2>/dev/null || true # a stopped one
  wait "$mpirun_pid" || true
}

# scenario, again (up to 3 times) while start-up alone exceeds the timeout
run_scenario() {
  local try rc
  for try in 1 2 3; do
    rc=0
    scenario "$@" || rc=$?
    [ "$rc" = 2 ] || return "$rc"
    echo "(start-up took longer than ${timeout_s} s on this machine: again)"
  done
  echo "start-up took longer than ${timeout_s} s three times"
  return 1
}
run_scenario 2 KILL  # a member
run_scenario 0 KILL  # task 0, the job's coordinator
run_scenario 1 STOP  # a member that stops answering
echo "train_mpi_dead_rank: ok"
