#!/usr/bin/env bash
# Where a GPU training step's time goes (issue 19 item 1), run from an
# unpacked scripts/gpu_bundle.sh archive on a machine with one GPU: for each
# batch, `ringflow train --bench --devices gpu:0` without the profiler (the
# step time), then under Nsight Compute over a window of kernel launches
# after the warm-up that spans more than one step; bench/ncu_step_table.py
# turns each into a per-kernel table against the H200's ceilings.
#   gpu_step_profile.sh OUTDIR [BATCHES (default "1024 8192")]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/profile}
batches=${2:-1024 8192}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if ! grep -q 'libmpi\.so\.40 ' <<< "$(ldconfig -p 2>/dev/null)"; then
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$here/lib-mpi"
fi
rf="$here/bin/ringflow"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
metrics+=,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum
metrics+=,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum
metrics+=,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum
for b in $batches; do
  line=$(timeout 120 "$rf" train --data "$here/data" --devices gpu:0 --bench --quiet \
         --batch "$b" --warmup 20 --steps 200)
  echo "batch $b: $line"
  sps=$(sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p' <<< "$line")
  step_us=$(awk -v s="$sps" -v b="$b" 'BEGIN { if (s > 0) printf "%.1f", b / s * 1e6 }')
  timeout 240 ncu --clock-control none --csv --page raw --print-units base \
    --metrics "$metrics" --launch-skip 600 --launch-count 160 \
    "$rf" train --data "$here/data" --devices gpu:0 --bench --quiet \
    --batch "$b" --warmup 100 --steps 20 > "$out/ncu_b$b.csv" 2> "$out/ncu_b$b.err"
  echo "ncu batch $b: exit $?"
  python3 "$here/ncu_step_table.py" "$out/ncu_b$b.csv" --step-us "${step_us:-0}" \
    --title "batch $b" | tee "$out/table_b$b.md"
done
