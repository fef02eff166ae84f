#!/usr/bin/env bash
# Packs the GPU tests, the `ringflow` tool and the benchmarks with the shared
# libraries they need (OpenBLAS, jansson, cmocka; CUDA, cuBLAS and NCCL come
# from the GPU machine, and cuDNN 9 from its nvidia-cudnn-cu13 wheel, which
# gpu_common.sh puts on LD_LIBRARY_PATH: cuDNN is too large to carry) into one archive, for a GPU machine that cannot build
# ringflow itself (no Debian packages there). On that machine,
# scripts/gpu_run.sh (one GPU) or scripts/gpu_multi_run.sh (several) runs it:
#   tar -xzf OUT.tar.gz -C DIR && bash DIR/gpu_run.sh LOGDIR
# An OUT ending in .xz is packed with xz -9 instead: its 64 MiB window finds
# the library that every statically linked test binary repeats, which makes
# the archive about half as large (the device tool carries at most 64 MiB);
# unpack it with `tar -xJf`, or where xz is missing:
#   python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" OUT.tar.xz DIR
# Built for Hopper only (sm_90: the H100/H200 the device tool lends) unless
# CUDA_ARCHS says otherwise.
#   scripts/gpu_bundle.sh OUT.tar.gz
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "$1")
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DRF_WITH_CUDA=ON \
  -DRF_BUILD_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90-real}" >/dev/null
ninja -C build-gpu -j "${JOBS:-2}" >/dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/data"
for t in build-gpu/tests/test_gpu_* build-gpu/tests/test_collectives \
         build-gpu/tests/test_bucketing build-gpu/tests/test_external_tensor \
         build-gpu/tests/test_group_updates build-gpu/tests/test_tf32 \
         build-gpu/tools/ringflow build-gpu/bench/bench_*; do
  [ -x "$t" ] && cp "$t" "$stage/bin/"
done
# MPI builds: the reference matrix across processes, for gpu_multi_run.sh
# (not in bin/: gpu_tests runs every bin/test_* as one process).
if [ -x build-gpu/tests/test_mpi_collectives ]; then
  mkdir -p "$stage/bin-mpi"
  cp build-gpu/tests/test_mpi_collectives "$stage/bin-mpi/"
  cp tests/mpi/gpu_ranks.sh "$stage/"
fi
strip "$stage"/bin/* "$stage"/bin-mpi/* 2>/dev/null || true
for lib in libopenblas.so.0 libjansson.so.4 libcmocka.so.0 libgfortran.so.5 libquadmath.so.0 \
           libgloo.so.0 libhiredis.so.0.14 libibverbs.so.1 libdnnl.so.2 libgomp.so.1; do
  path=$(ldd build-gpu/tools/ringflow build-gpu/tests/test_gpu_runtime 2>/dev/null |
         awk -v l="$lib" '$1 == l {print $3; exit}')
  [ -n "$path" ] && cp -L "$path" "$stage/lib/"
done
# Builds with MPI: libmpi and what it loads, for a machine without OpenMPI
# (gpu_common.sh uses them only then).
mkdir -p "$stage/lib-mpi"
ldd build-gpu/tools/ringflow 2>/dev/null |
  awk '$1 ~ /^lib(mpi|open-rte|open-pal|hwloc|event_core|event_pthreads|udev)[.-]/ {print $3}' |
  while read -r path; do cp -L "$path" "$stage/lib-mpi/"; done
# The CUPTI tracer (bench/cupti_trace.c) and CUPTI itself, for a GPU
# timeline where there is no Nsight Systems.
if [ -f build-gpu/bench/libcupti_trace.so ]; then
  cp build-gpu/bench/libcupti_trace.so "$stage/lib/"
  cupti=$(ldd build-gpu/bench/libcupti_trace.so | awk '$1 ~ /^libcupti/ {print $3; exit}')
  [ -n "$cupti" ] && cp -L "$cupti" "$stage/lib/"
fi
cp /usr/share/datasets/fashion-mnist/*.gz "$stage/data/" 2>/dev/null || true
cp scripts/gpu_run.sh scripts/gpu_multi_run.sh scripts/gpu_common.sh \
  scripts/gpu_step_profile.sh scripts/gpu_graph_stress.sh \
  bench/torch_nccl_overhead.py bench/bucket_gpu.sh bench/bucket_vs_ddp.py \
  bench/bucket_trace_overlap.py bench/bucket_trace_ops.py \
  bench/gpu_train_vs_pytorch.py bench/ncu_step_table.py bench/cupti_trace_table.py "$stage/"
case $out in
  *.xz) XZ_OPT=-9 tar -C "$stage" -cJf "$out" . ;;
  *) tar -C "$stage" -czf "$out" . ;;
esac
ls -la "$out"
