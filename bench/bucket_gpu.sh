#!/usr/bin/env bash
# bench/bucket_gpu.sh - issue 18's bench (item 5) in one run, on one GPU:
#   A. bench_bucket_allreduce, K = 16, 64, 256 float32 gradients of 4 KiB-1
#      MiB on 4 and 8 virtual GPUs: unfused, fused (the default size: 25 MiB
#      on GPUs), one all-reduce of the same total bytes; inputs computed
#      (c + c, written into the bucket by their producers: the zero-copy
#      path) and const (forwarded: the one-copy-in fallback); each with CUDA
#      graphs off and on (RF_GPU_GRAPHS=0|1: without graphs the executor's
#      launches of the K producers dominated the fused step; the log's
#      "gpu graphs: captured" lines are counted); and the computed row on 4
#      virtual CPU devices of the same host (its idle cores: the CPU
#      targets, measured where no one else runs);
#   B. the bucket size on 4 virtual GPUs (computed), graphs off and on:
#      64 KiB, 1 MiB, 4 MiB beside A's 25 MiB, so the default is checked by
#      measurement here too;
#   C. PyTorch DDP with its default buckets over the same K sizes (NCCL, one
#      rank, bench/bucket_vs_ddp.py), beside A's 4-GPU computed rows;
#   D. `ringflow train --bench --model cnn --devices gpu:0-3`, buckets off
#      (--bucket-mb 0), 1 MiB and the default (25 MiB on GPUs), with
#      --gpu-graphs off and on, alternating, twice;
#   E. a Chrome trace of one CNN and one MLP step with buckets, and whether
#      the first bucket met while the backward pass still computed
#      (bench/bucket_trace_overlap.py; host times on GPUs).
# Then one compact table. --cpu runs the same on virtual CPU devices (4 only,
# fewer steps, DDP through gloo with 4 processes, graphs off, D with 0, 1
# and 25 MiB) to check the script where there is no GPU. Parts without
# their tools (no torch, no data set) are reported as skipped. About 4-5
# minutes on the H200 with --graphs both (2-3 with one); every part has a
# time limit.
#
#   bench/bucket_gpu.sh [--cpu] [--graphs off|on|both] [--bin DIR]
#                       [--data DIR] [--out DIR]
# --graphs: CUDA graphs in A, B and D (default both; --cpu: off);
# --bin: the folder holding bench_bucket_allreduce and ringflow (default: the
# bundle's bin/ beside this script, else build/ or build-nc/ of the tree);
# --data: fashion-mnist (default: the bundle's data/, else
# /usr/share/datasets/fashion-mnist); --out: where the logs and the trace go
# (default: a new temporary folder). In a scripts/gpu_bundle.sh bundle:
#   bash DIR/bucket_gpu.sh --out $OUT
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
type=gpu bin='' data='' out='' graphs=''
while [ $# -gt 0 ]; do
  case $1 in
    --cpu) type=cpu ;;
    --graphs) graphs=$2; shift ;;
    --bin) bin=$2; shift ;;
    --data) data=$2; shift ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bucket_gpu.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$bin" ]; then
  for d in "$here/bin" "$here/../build" "$here/../build-gpu" "$here/../build-nc"; do
    if [ -x "$d/bench_bucket_allreduce" ] && [ -x "$d/ringflow" ]; then bin=$d; break; fi
    if [ -x "$d/bench/bench_bucket_allreduce" ] && [ -x "$d/tools/ringflow" ] &&
       { [ $type = cpu ] || [ "$d" != "$here/../build-nc" ]; }; then
      bin=$d; break
    fi
  done
fi
if [ -x "$bin/bench/bench_bucket_allreduce" ]; then
  bench=$bin/bench/bench_bucket_allreduce rf=$bin/tools/ringflow
else
  bench=$bin/bench_bucket_allreduce rf=$bin/ringflow
fi
if [ ! -x "$bench" ] || [ ! -x "$rf" ]; then
  echo "bucket_gpu.sh: no bench_bucket_allreduce and ringflow (give --bin DIR)" >&2
  exit 2
fi
[ -z "$data" ] && for d in "$here/data" /usr/share/datasets/fashion-mnist; do
  [ -f "$d/train-images-idx3-ubyte.gz" ] && { data=$d; break; }
done
out=${out:-$(mktemp -d)}
mkdir -p "$out"
if [ -f "$here/gpu_common.sh" ]; then # a bundle: its libraries, as gpu_common.sh's
  . "$here/gpu_common.sh"               # gpu_setup finds them
  export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
  cudnn=$(gpu_cudnn_lib)
  [ -n "$cudnn" ] && export LD_LIBRARY_PATH="$cudnn:$LD_LIBRARY_PATH"
  if ! grep -q 'libmpi\.so\.40 ' <<< "$(ldconfig -p 2>/dev/null)"; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$here/lib-mpi"
  fi
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
start=$SECONDS

if [ $type = gpu ]; then
  devsets="4 8" steps=20 rounds=3 tsteps=40 twarm=10 tbatch=512 tdevs=gpu:0-3
  sweep="65536 1048576 4194304" blimit=60 dlimit=90 tmbs="0 1 25" graphs=${graphs:-both}
else
  devsets="4" steps=10 rounds=2 tsteps=3 twarm=1 tbatch=64 tdevs=cpu:0-3
  sweep="65536 26214400" blimit=120 dlimit=240 tmbs="0 1 25" graphs=${graphs:-off}
fi
case $graphs in
  off) gmodes="off" ;;
  on) gmodes="on" ;;
  both) gmodes="off on" ;;
  *) echo "bucket_gpu.sh: --graphs off, on or both, not '$graphs'" >&2; exit 2 ;;
esac
# -1: the library's default size by device kind (RF_BUCKET_BYTES_AUTO)
min=4096 max=1048576 bucket=-1

# part NAME LIMIT CMD...: output to $out/NAME.log; a line if it fails.
part() {
  local name=$1 limit=$2 rc
  shift 2
  timeout -k 5 "$limit" "$@" > "$out/$name.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "$name: exit $rc after $((SECONDS - start)) s; its last lines:" >&2
    tail -5 "$out/$name.log" >&2
  fi
  return $rc
}

echo "# bucket_gpu.sh: $type, bench $bench, $(date -u +%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
# A and B (g: CUDA graphs; RF_LOG=info: the buckets made and, with graphs,
# whether each step was captured)
gnum() { [ "$1" = on ] && echo 1 || echo 0; }
for g in $gmodes; do
  for d in $devsets; do
    for inp in computed const; do
      RF_GPU_GRAPHS=$(gnum $g) RF_LOG=info part "A_${d}_${inp}_g$g" 60 \
        "$bench" $d $min $max $steps $rounds $bucket $type $inp
    done
  done
  for b in $sweep; do
    RF_GPU_GRAPHS=$(gnum $g) RF_LOG=info part "B_${b}_g$g" $blimit \
      "$bench" 4 $min $max $steps $rounds $b $type computed
  done
done
g0=${gmodes%% *} # the first mode's rows feed C
# The CPU targets on this host's cores too (4 virtual CPU devices).
[ $type = gpu ] && part A_cpu 60 "$bench" 4 $min $max 10 3 $bucket cpu computed
# C
ddp=skipped
if ! python3 -c "import torch" 2> /dev/null; then
  ddp="skipped (no torch)"
elif [ -s "$out/A_4_computed_g$g0.log" ]; then
  dargs=(--type "$type" --devices 4 --min "$min" --max "$max" --steps "$steps" --rounds "$rounds"
         --rows "$out/A_4_computed_g$g0.log")
  [ $type = cpu ] && dargs+=(--threads 1)
  part C_ddp $dlimit python3 "$here/bucket_vs_ddp.py" "${dargs[@]}" && ddp=ok
fi
# D and E
if [ -z "$data" ]; then
  echo "no fashion-mnist (--data DIR): training skipped" >&2
else
  for rep in 1 2; do
    for g in $gmodes; do
      for mb in $tmbs; do
        gopt=()
        [ $type = gpu ] && gopt=(--gpu-graphs $g)
        RF_LOG=info part "D_mb${mb}_g${g}_$rep" 60 "$rf" train --bench --model cnn \
          --data "$data" --devices $tdevs --batch $tbatch --warmup $twarm --steps $tsteps \
          --bucket-mb $mb "${gopt[@]}"
      done
    done
  done
  for m in cnn mlp; do
    for mb in 1 default; do # 1 MiB, and the default size of the kind
      mopt=()
      [ $mb = 1 ] && mopt=(--bucket-mb 1)
      part "E_trace_${m}_$mb" 60 "$rf" train --model $m --data "$data" --devices $tdevs \
        --batch $tbatch --steps 12 --epochs 1 "${mopt[@]}" --trace "$out/trace_${m}_$mb.json" --quiet
      [ -s "$out/trace_${m}_$mb.json" ] && python3 "$here/bucket_trace_overlap.py" \
        "$out/trace_${m}_$mb.json" > "$out/E_overlap_${m}_$mb.log" 2>&1
    done
  done
fi

# The table.
row() { # LOG LABEL: one line per K of a bench_bucket_allreduce output
  [ -s "$1" ] || { printf '%-26s (no output)\n' "$2"; return; }
  awk -v l="$2" '$1 ~ /^[0-9]+$/ {
    printf "%-26s %4d %9.1f %9.1f %8.1f %8.2f %6.2f %8.2f %8.2f %8.2f\n", l, $1, $3, $4, $5, $8, $9,
      $10, $17, $12 / $13 }' "$1"
}
# Steps captured as CUDA graphs in LOG, and the first reason one was not.
captured() {
  local c n why
  c=$(grep -c 'gpu graphs: captured' "$1" 2> /dev/null)
  n=$(grep -c 'is not captured\|: not captured' "$1" 2> /dev/null)
  why=$(grep -m1 -o 'not captured: .*' "$1" 2> /dev/null | cut -c1-110)
  echo "$2: ${c:-0} step graphs captured, ${n:-0} refused${why:+ (first: $why)}"
}
dflt=$([ $type = gpu ] && echo 25MiB || echo 1MiB)
echo
echo "## all-reduces of K float32 tensors of $min-$max bytes, $type, us per step (best of $rounds rounds of $steps)"
printf '%-26s %4s %9s %9s %8s %8s %6s %8s %8s %8s\n' devices/inputs/bucket/graphs K unfused fused \
  one fused/one net unf/fus cpu:f/o cpu:u/f
for g in $gmodes; do
  for d in $devsets; do
    for inp in computed const; do row "$out/A_${d}_${inp}_g$g.log" "$d $inp $dflt g:$g"; done
  done
  for b in $sweep; do row "$out/B_${b}_g$g.log" "4 computed $((b / 1024))KiB g:$g"; done
done
[ $type = gpu ] && row "$out/A_cpu.log" "4 CPU, computed 1MiB"
echo "(targets, issue 18: fused/one <= 1.3; unf/fus >= 3 at K = 256; net = (fused - inputs) / (one - its input);"
echo " cpu:f/o and cpu:u/f: fused/one and unfused/fused by the process's CPU time)"
if [ $type = gpu ]; then
  for g in $gmodes; do
    for d in $devsets; do captured "$out/A_${d}_computed_g$g.log" "A $d computed g:$g"; done
  done
fi
echo
echo "## PyTorch DDP, default buckets ($( [ $type = gpu ] && echo 'NCCL, one rank' || echo 'gloo, 4 processes')): $ddp"
# the table only: its header and one row per K (the log also holds
# PyTorch's warnings and the session's info lines, which once took the
# place of the rows here)
[ "$ddp" = ok ] && grep -E '^ *(K|[0-9]+) ' "$out/C_ddp.log"
echo
echo "## ringflow train --bench --model cnn --devices $tdevs --batch $tbatch, samples/s"
for g in $gmodes; do
  for mb in $tmbs; do
    v=$(for rep in 1 2; do
          grep -ho 'samples_per_sec=[0-9.]*' "$out/D_mb${mb}_g${g}_$rep.log" 2> /dev/null | cut -d= -f2
        done | tr '\n' ' ')
    n=$(grep -c "^.*bucket '.*#bucket'" "$out/D_mb${mb}_g${g}_1.log" 2> /dev/null)
    c=$(grep -c 'gpu graphs: captured' "$out/D_mb${mb}_g${g}_1.log" 2> /dev/null)
    printf -- '--bucket-mb %s --gpu-graphs %s: %s(%s buckets logged at compile, %s step graphs captured)\n' \
      $mb $g "${v:-none }" "${n:-0}" "${c:-0}"
  done
done
echo
for m in cnn mlp; do
  for mb in 1 default; do
    echo "## trace of one $m step on $tdevs, batch $tbatch, buckets: $mb ($out/trace_${m}_$mb.json)"
    if [ -s "$out/E_overlap_${m}_$mb.log" ]; then cat "$out/E_overlap_${m}_$mb.log"; else echo "none"; fi
  done
done
echo "# done in $((SECONDS - start)) s; logs in $out"
