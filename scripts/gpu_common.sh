# scripts/gpu_common.sh - what scripts/gpu_run.sh (one GPU) and
# scripts/gpu_multi_run.sh (several GPUs) share, sourced from an unpacked
# scripts/gpu_bundle.sh archive: the environment, parts run under a time limit
# within the caller's budget, the test loop, and packing the logs into OUT.
# The caller sets here (the bundle), out and budget (seconds).

# The lib folder of the nvidia-cudnn-cu13 wheel of the machine's python3
# (nvidia.cudnn may be a namespace package: no __file__), or nothing.
gpu_cudnn_lib() {
  python3 - 2>/dev/null <<'PY' || true
import os
import nvidia.cudnn as m
for d in ([os.path.dirname(m.__file__)] if getattr(m, "__file__", None) else []) + list(getattr(m, "__path__", [])):
    if os.path.isdir(os.path.join(d, "lib")):
        print(os.path.join(d, "lib"))
        break
PY
}

gpu_setup() {
  start=$SECONDS
  logs=$(mktemp -d)
  mkdir -p "$out"
  # NVLink multicast can put a shared host's GPUs out of service: keep it off.
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
  # cuDNN 9 (GPU convolutions) is not in the bundle (too large for the
  # device tool's 64 MiB): the GPU machine's nvidia-cudnn-cu13 wheel has it.
  local cudnn
  cudnn=$(gpu_cudnn_lib)
  [ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:$LD_LIBRARY_PATH"
  # Builds with MPI link libmpi: the machine's own when it has one (its
  # plugins match it), else the copy the bundle carries.
  if ! grep -q 'libmpi\.so\.40 ' <<< "$(ldconfig -p 2>/dev/null)"; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$here/lib-mpi"
  fi
  rf="$here/bin/ringflow"
  data="$here/data"
  {
    date -u +"%Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=index,name,memory.total,driver_version,clocks.max.sm --format=csv
    nvidia-smi topo -m
    nproc
    cat /proc/loadavg
  } > "$logs/machine.txt" 2>&1
  cat "$logs/machine.txt"
  # Clocks, power and utilisation once a second beside the measurements.
  dmon_pid=
  if nvidia-smi dmon -h > /dev/null 2>&1; then
    nvidia-smi dmon -s pucm -d 1 > "$logs/dmon.log" 2>&1 &
    dmon_pid=$!
  fi
  trap gpu_pack EXIT
}

gpu_left() { echo $((budget - (SECONDS - start))); }

# part NAME LIMIT CMD...: CMD's output goes to $logs/NAME.log; it gets LIMIT
# seconds, or what is left of the budget; prints one line with the exit code.
part() {
  local name=$1 limit=$2 left
  shift 2
  left=$(gpu_left)
  if [ "$left" -lt 15 ]; then
    echo "SKIP $name (budget spent)"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0 rc
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" > "$logs/$name.log" 2>&1
  rc=$?
  echo "$name: exit $rc in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
  [ $rc -ne 0 ] && tail -15 "$logs/$name.log"
  return $rc
}

# gpu_tests LIMIT: every test binary of the bundle, LIMIT seconds each.
gpu_tests() {
  local pass=0 fail=0 t
  for t in "$here"/bin/test_*; do
    if part "$(basename "$t")" "$1" "$t"; then
      pass=$((pass + 1))
      grep -m1 "GPU tests skipped" "$logs/$(basename "$t").log" || true
    else
      fail=$((fail + 1))
    fi
  done
  echo "tests: $pass passed, $fail failed"
}

gpu_pack() {
  if [ -n "${dmon_pid:-}" ]; then
    kill "$dmon_pid" 2>/dev/null
    wait "$dmon_pid" 2>/dev/null
    dmon_pid=
  fi
  tar -C "$logs" -czf "$out/logs.tgz" . 2>/dev/null
}

# gpu_finish NAME...: prints the summaries of the named logs (benchmark
# tables) last (the device tool returns the output's tail); names marked
# with a leading + are also copied into OUT as NAME.txt.
gpu_finish() {
  local n
  for n in "$@"; do
    case $n in +*) n=${n#+}; [ -f "$logs/$n.log" ] && cp "$logs/$n.log" "$out/$n.txt" ;; esac
    [ -f "$logs/$n.log" ] || continue
    echo "== $n"
    if grep -q "^# summary" "$logs/$n.log"; then
      sed -n '/^# summary/,$p' "$logs/$n.log"
    else
      head -40 "$logs/$n.log"
    fi
  done
  for n in "$logs"/train_*.log; do
    [ -f "$n" ] || continue
    echo "== $(basename "$n" .log)"
    tail -3 "$n"
  done
  gpu_pack
  echo "done in $((SECONDS - start)) s"
}
