#!/usr/bin/env bash
# Under mpirun, task 0 checks the --save and --trace paths at start-up; when
# the check fails task 0 exits, and the other tasks must fail at once too,
# saying that task 0 refused its start-up, not wait for it in their first
# session until the collective timeout (30 s here). Run under an mpirun that
# lets the job go on after a process exits nonzero (as Slurm does), so that
# nothing but ringflow ends the other processes. Skipped without mpirun.
#   tests/cli/train_mpi_bad_start.sh RINGFLOW
set -euo pipefail
ringflow="$1"
if ! command -v mpirun >/dev/null 2>&1; then
  echo "MPI tests skipped: mpirun not found"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bound_s=20 # well under the 30 s timeout: start-up, the exchange, exit

cat >"$work/rank.sh" <<'RANK'
#!/usr/bin/env bash
d="$RF_OUT_DIR"; r="$OMPI_COMM_WORLD_RANK"
"$@" >"$d/out.$r" 2>"$d/err.$r" && rc=0 || rc=$?
echo "$rc" >"$d/rc.$r"
RANK

scenario() { # option value what-task-0-says
  rm -f "$work"/{out,err,rc}.*
  local start end
  start=$(date +%s)
  RF_OUT_DIR="$work" timeout 120 mpirun --allow-run-as-root --oversubscribe \
    --bind-to none -np 3 --mca btl self,vader --mca orte_enable_recovery 1 \
    --mca orte_abort_on_non_zero_status 0 -x RF_OUT_DIR \
    bash "$work/rank.sh" "$ringflow" train --devices cpu:0 --batch 126 --epochs 1 \
    --collective-timeout 30 "$1" "$2" >"$work/mpirun.out" 2>&1 || true
  end=$(date +%s)
  for r in 0 1 2; do
    if [ ! -f "$work/rc.$r" ] || [ "$(cat "$work/rc.$r")" = 0 ]; then
      echo "FAIL ($1 $2): task $r did not fail"
      cat "$work"/err.* "$work/mpirun.out"
      exit 1
    fi
  done
  if ! grep -q -- "$3" "$work/err.0"; then
    echo "FAIL ($1 $2): task 0 does not say '$3'"; cat "$work/err.0"; exit 1
  fi
  for r in 1 2; do
    if ! grep -q "task 0 refused its start-up" "$work/err.$r"; then
      echo "FAIL ($1 $2): task $r does not say that task 0 refused"
      cat "$work/err.$r"
      exit 1
    fi
  done
  if [ $((end - start)) -gt "$bound_s" ]; then
    echo "FAIL ($1 $2): took $((end - start)) s (bound $bound_s s)"
    exit 1
  fi
  echo "ok ($1 $2): every task failed in $((end - start)) s"
  head -n1 "$work/err.1"
}

scenario --save "$work/no/such/dir/model.safetensors" "checkpoint"
scenario --trace "$work/no/such/dir/trace.json" "--trace"
