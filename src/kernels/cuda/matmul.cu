/* kernels/cuda/matmul.cu - MatMul on GPU devices: C (m,n) = op(A) op(B),
 * op transposing when transpose_a/transpose_b say so.
 *
 * float16/bfloat16/float32/float64 go to cublasGemmEx, accumulating in float
 * (float16/bfloat16/float32: CUBLAS_COMPUTE_32F, so results match the CPU's
 * sgemm to float tolerance; float32 on TF32 tensor cores only when the
 * session allows it: gemm_compute_32f) or double. Row-major C = op(A) op(B) is
 * column-major C^T = op(B)^T op(A)^T, so B goes first. int32/int64 use a
 * 16x16 shared-memory tiled kernel in unsigned arithmetic (wraps, as on the
 * CPU).
 *
 * cuBLAS runs on the device's handle (rf__device.blas, bound to its stream
 * by the GPU runtime). */
#include <cublas_v2.h>

#include <mutex>

#include "kernels/cuda/math_kernels.cuh"
#include "kernels/matmul_shape.h"

namespace rf_gpu {
namespace {

rf_status *blas_error(const rf__kernel_ctx *ctx, cublasStatus_t s,
                      const char *what) {
  rf_status *st = rf__cublas_status(s, what, __FILE__, __LINE__);
  return rf__kernel_error_at(ctx, st);
}

/* The product's sizes (kernels/matmul_shape.h); passed to the integer
 * kernel by value. */
using Dims = rf__matmul_dims;

/* ---- floats: cublasGemmEx ---- */

rf_status *gemm(rf__kernel_ctx *ctx, const Dims &d, const rf_tensor *a,
                const rf_tensor *b, rf_tensor *c) {
  cudaDataType_t type;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  switch (a->dtype) {
    case RF_FLOAT16: type = CUDA_R_16F; break;
    case RF_BFLOAT16: type = CUDA_R_16BF; break;
    case RF_FLOAT32:
      type = CUDA_R_32F;
      compute = gemm_compute_32f(ctx);
      break;
    default:
      type = CUDA_R_64F;
      compute = CUBLAS_COMPUTE_64F;
      break;
  }
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  bool f64 = compute == CUBLAS_COMPUTE_64F;
  cublasHandle_t h = blas(ctx);
  if (!h)
    return rf__kernel_error(ctx, RF_INTERNAL,
                            "the device has no cuBLAS handle");
  cublasStatus_t s;
  {
    std::lock_guard<std::mutex> lock(blas_lock(h));
    s = cublasGemmEx(h, d.tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                     d.ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)d.n, (int)d.m,
                     (int)d.k, f64 ? (const void *)&one_d : &one_f, b->data,
                     type, (int)d.ldb, a->data, type, (int)d.lda,
                     f64 ? (const void *)&zero_d : &zero_f, c->data, type,
                     (int)d.n, compute, CUBLAS_GEMM_DEFAULT);
  }
  if (s != CUBLAS_STATUS_SUCCESS) return blas_error(ctx, s, "cublasGemmEx");
  return NULL;
}

/* ---- integers: tiled kernel ---- */

constexpr int kTile = 16; /* kTile * kTile == kThreads */

/* Each block computes 16x16 tiles of C, tile after tile (grid-stride over
 * tiles; the loop bounds are the block's own, so __syncthreads is safe). */
template <typename T>
__global__ void int_gemm_kernel(Dims d, const T *a, const T *b, T *c) {
  using U = typename Unsigned<T>::type;
  __shared__ U as[kTile][kTile], bs[kTile][kTile];
  int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  int64_t tiles_n = (d.n + kTile - 1) / kTile;
  int64_t tiles = ((d.m + kTile - 1) / kTile) * tiles_n;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    int64_t row = (t / tiles_n) * kTile + ty, col = (t % tiles_n) * kTile + tx;
    U acc = 0;
    for (int64_t k0 = 0; k0 < d.k; k0 += kTile) {
      int64_t ka = k0 + tx, kb = k0 + ty; /* A's column, B's row */
      as[ty][tx] = row < d.m && ka < d.k
                       ? (U)(d.ta ? a[ka * d.lda + row] : a[row * d.lda + ka])
                       : (U)0;
      bs[ty][tx] = kb < d.k && col < d.n
                       ? (U)(d.tb ? b[col * d.ldb + kb] : b[kb * d.ldb + col])
                       : (U)0;
      __syncthreads();
      for (int q = 0; q < kTile; q++) acc += as[ty][q] * bs[q][tx];
      __syncthreads();
    }
    if (row < d.m && col < d.n) c[row * d.n + col] = (T)acc;
  }
}

template <typename T>
rf_status *int_gemm(rf__kernel_ctx *ctx, const Dims &d, const rf_tensor *a,
                    const rf_tensor *b, rf_tensor *c) {
  int64_t tiles = ((d.m + kTile - 1) / kTile) * ((d.n + kTile - 1) / kTile);
  int_gemm_kernel<T><<<grid(ctx, tiles * kThreads), kThreads, 0, stream(ctx)>>>(
      d, (const T *)a->data, (const T *)b->data, (T *)c->data);
  RF_GPU_LAUNCHED(ctx);
  return NULL;
}

/* ---- the kernel ---- */

rf_status *matmul_impl(rf__kernel_ctx *ctx) {
  const rf_tensor *a = ctx->inputs[0], *b = ctx->inputs[1];
  Dims d;
  rf_shape cs;
  RF_CHECK(rf__matmul_prepare(ctx, &d, &cs));
  rf_dtype dt = a->dtype;
  rf_tensor *c;
  RF_CHECK(alloc_output(ctx, 0, dt, &cs, &c));
  if (d.m == 0 || d.n == 0) return NULL;
  if (d.k == 0) /* an empty sum is 0: all-zero bits in every dtype */
    return fill_bits(ctx, c->data, rf_dtype_size(dt), c->num_elements, 0);
  if (dt == RF_INT32) return int_gemm<int32_t>(ctx, d, a, b, c);
  if (dt == RF_INT64) return int_gemm<int64_t>(ctx, d, a, b, c);
  return gemm(ctx, d, a, b, c);
}

rf_status *matmul_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  rf_status *st = matmul_impl(ctx);
  if (st) rf__kernel_drop_outputs(ctx); /* nothing half-made leaves it */
  return st;
}

const rf__kernel_def matmul_kernel_def = {
    .op = "MatMul", .device_type = RF_DEVICE_GPU, .compute = matmul_compute};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_matmul_kernels(void) {
  return rf__kernel_register(&rf_gpu::matmul_kernel_def);
}
