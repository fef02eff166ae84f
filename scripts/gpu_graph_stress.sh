#!/usr/bin/env bash
# The CUDA-graph fault on virtual GPUs (issue 19; docs/PERFORMANCE.md, "CUDA
# graphs of steps"), counted: `ringflow train --bench --gpu-graphs on` on
# gpu:0-3 and gpu:0-7 at batch 512/1024/2048, gradient buckets on (1 MiB) and
# off, once per configuration and mode, from an unpacked scripts/gpu_bundle.sh
# archive on a machine with one GPU. A mode is RF_GPU_GRAPH_DEBUG's value
# (runtime/step_graph.h): "on" (none), "sync" (the host waits for every
# launch: a fault names its launch, 1 being the capture's own), "serial" (a
# capture enqueues one kernel at a time across all devices), "workspace"
# (cuBLAS handles with workspaces of their own: no memory nodes in the
# graph); "off" is --gpu-graphs off on gpu:0-7 (the control: never faulted).
# Prints a line per run, then pass/fail counts per mode and device set, and
# the node counts of one capture per mode (RF_LOG=info).
#   gpu_graph_stress.sh [OUT (default ./graph_stress)] [REPEATS (default 1)]
# Environment: MODES (default "off on sync serial workspace"), BATCHES
# (default "512 1024 2048"), WARMUP (10), STEPS (40), BUDGET (seconds for all
# runs, default 220: runs left when it is spent are reported as skipped).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$PWD/graph_stress}
repeats=${2:-1}
modes=${MODES:-off on sync serial workspace}
batches=${BATCHES:-512 1024 2048}
warmup=${WARMUP:-10}
steps=${STEPS:-40}
budget=${BUDGET:-220}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if ! grep -q 'libmpi\.so\.40 ' <<< "$(ldconfig -p 2>/dev/null)"; then
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$here/lib-mpi"
fi
rf="$here/bin/ringflow"
data="$here/data"
if [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then
  echo "no data set in $data (the bundle carries fashion-mnist)" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
start=$SECONDS
summary="$out/summary.txt"
: > "$summary"

# run MODE DEVICES BATCH BUCKET_MB REPEAT: one bench, one line in summary.
run() {
  local mode=$1 devs=$2 batch=$3 mb=$4 k=$5 graphs=on dbg=
  local log="$out/${mode}_${devs//[:-]/_}_b${batch}_mb${mb}_${k}.log"
  case $mode in
    off) graphs=off ;;
    on) ;;
    *) dbg=$mode ;;
  esac
  if [ $((SECONDS - start)) -ge "$budget" ]; then
    echo "$mode $devs $batch $mb skip" >> "$summary"
    return
  fi
  RF_LOG=info RF_GPU_GRAPH_DEBUG=$dbg timeout -k 5 60 "$rf" train --bench \
    --data "$data" --devices "$devs" --batch "$batch" --bucket-mb "$mb" \
    --gpu-graphs "$graphs" --warmup "$warmup" --steps "$steps" > "$log" 2>&1
  local rc=$? verdict=pass why=
  if [ $rc -ne 0 ] || ! grep -q samples_per_sec "$log"; then
    verdict=fail
    why=$(grep -o -m1 -E "cudaError[A-Za-z]+|launch [0-9]+ of the step's CUDA graph[^:]*" "$log" |
      head -2 | tr '\n' ' ')
    [ $rc -eq 124 ] && why="timeout $why"
  fi
  local sps
  sps=$(sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p' "$log")
  echo "$mode $devs $batch $mb $verdict rc=$rc ${sps:+sps=$sps} $why" | tee -a "$summary"
}

for mode in $modes; do
  for devs in gpu:0-3 gpu:0-7; do
    [ "$mode" = off ] && [ "$devs" = gpu:0-3 ] && continue
    for batch in $batches; do
      for mb in 1 0; do
        [ "$mode" = off ] && [ "$mb" = 0 ] && continue
        for k in $(seq "$repeats"); do run "$mode" "$devs" "$batch" "$mb" "$k"; done
      done
    done
  done
done

echo "== pass/fail by mode and devices (of $(wc -l < "$summary") runs, $((SECONDS - start)) s)"
awk '{ key = $1 " " $2; if ($5 == "pass") p[key]++; else if ($5 == "fail") f[key]++;
       else s[key]++; seen[key] = 1 }
     END { for (k in seen) printf "%-22s pass %2d  fail %2d  skipped %d\n", k, p[k], f[k], s[k] }' \
  "$summary" | sort
echo "== one capture per mode (RF_LOG=info)"
for mode in $modes; do
  [ "$mode" = off ] && continue
  f=
  for f in "$out/${mode}"_gpu_0_7_*.log; do break; done
  [ -f "$f" ] || continue
  echo "$mode: $(grep -m1 -o "captured the step.*" "$f" | sed -E "s/of plan '.*' on ([0-9]+ GPU)/of plan ... on \1/" | cut -c1-400)"
done
