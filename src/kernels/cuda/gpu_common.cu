/* kernels/cuda/gpu_common.cu - see gpu_common.cuh: launch geometry (from
 * the multiprocessor count the GPU runtime read once), allocation helpers
 * and the fill kernel shared by the families. */
#include <string.h>

#include "kernels/cuda/gpu_common.cuh"

namespace rf_gpu {

namespace {
std::mutex blas_locks[16];
}  // namespace

std::mutex &blas_lock(const void *handle) {
  return blas_locks[((uintptr_t)handle >> 4) % 16];
}

enum { kBlocksPerSm = 8 }; /* 8 x 256 threads: a full multiprocessor */

rf_status *error(const rf__kernel_ctx *ctx, cudaError_t err, const char *expr,
                 const char *file, int line) {
  rf_status *st = rf__cuda_status(err, expr, file, line);
  if (!st) return NULL;
  return rf__kernel_error_at(ctx, st);
}

rf_status *begin(const rf__kernel_ctx *ctx) {
  if (!ctx->device || ctx->device->gpu_ordinal < 0 || !ctx->device->stream)
    return rf__kernel_error(ctx, RF_INTERNAL,
                            "a GPU kernel ran on a device without a GPU");
  /* The executor has made the device's GPU current (rf__device.enter). A
   * stale error of an earlier call on this thread must not be taken for
   * this kernel's launch error. */
  (void)cudaGetLastError();
  return NULL;
}

unsigned grid(const rf__kernel_ctx *ctx, int64_t n) {
  /* The device's share of the GPU: virtual devices on one GPU run their
   * kernels side by side (rf__device.gpu_sms). */
  int sms = ctx->device->gpu_sms > 0 ? ctx->device->gpu_sms : 32;
  int64_t cap = (int64_t)sms * kBlocksPerSm;
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > cap) blocks = cap;
  return blocks < 1 ? 1u : (unsigned)blocks;
}

int sm_count_target(const rf__kernel_ctx *ctx) {
  const rf__gpu_context *g = (const rf__gpu_context *)ctx->device->gpu;
  int share = ctx->device->gpu_sms;
  return g && share > 0 && share < g->multiprocessors ? share : 0;
}

rf_status *alloc_output(rf__kernel_ctx *ctx, int i, rf_dtype dtype,
                        const rf_shape *shape, rf_tensor **out) {
  /* On a GPU device this is device memory (on_gpu) unless the kernel
   * declares output i host memory. */
  return rf__kernel_alloc_output(ctx, i, dtype, shape, out);
}

rf_status *new_tensor(rf__kernel_ctx *ctx, rf_dtype dtype,
                      const rf_shape *shape, rf_tensor **out) {
  rf_status *st =
      rf__tensor_new_device(dtype, shape, ctx->device->allocator, out);
  if (!st || rf_status_code(st) != RF_RESOURCE_EXHAUSTED) return st;
  return rf__kernel_error_at(ctx, st);
}

template <typename U>
__global__ void fill_kernel(U *dst, int64_t n, U v) {
  RF_GPU_LOOP(i, n) dst[i] = v;
}

rf_status *fill_bits(rf__kernel_ctx *ctx, void *dst, size_t esize, int64_t n,
                     uint64_t bits) {
  if (n <= 0) return NULL;
  if (esize == 1 || bits == 0) {
    RF_GPU_CHECK(ctx, cudaMemsetAsync(dst, (int)(bits & 0xff),
                                      (size_t)n * esize, stream(ctx)));
    return NULL;
  }
  return visit_bits(esize, [&](auto tag) -> rf_status * {
    using U = typename decltype(tag)::type;
    fill_kernel<U>
        <<<grid(ctx, n), kThreads, 0, stream(ctx)>>>((U *)dst, n, (U)bits);
    RF_GPU_LAUNCHED(ctx);
    return NULL;
  });
}

}  // namespace rf_gpu
