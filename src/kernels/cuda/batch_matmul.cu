/* kernels/cuda/batch_matmul.cu - BatchMatMul on GPU devices through cuBLAS
 * (float16/bfloat16/float32 accumulate in float, never TF32, as MatMul;
 * float64 in double): one cublasGemmStridedBatchedEx when each operand's
 * batch is whole or one matrix for all (kernels/batch_matmul_plan.h), else
 * one cublasGemmEx per output batch. Row-major C = op(X) op(Y) is
 * column-major C^T = op(Y)^T op(X)^T, so y goes first. int32/int64: a
 * thread per output element, summing in the unsigned type (wrapping
 * around as the CPU kernel and MatMul do). */
#include <mutex>

#include "kernels/cuda/gpu_common.cuh" /* first: the C headers in C++ */

#include "kernels/batch_matmul_plan.h"

extern "C" {
#include "kernels/kernel_families.h"
}

namespace rf_gpu {
namespace {

rf_status *blas_error(const rf__kernel_ctx *ctx, cublasStatus_t s,
                      const char *what) {
  return rf__kernel_error_at(ctx,
                             rf__cublas_status(s, what, __FILE__, __LINE__));
}

/* Integer products: element e of the output (batch b, row i, column j)
 * sums op(X)[i, q] op(Y)[q, j] of batch b's matrices (rf__bmm_offsets). */
template <typename T>
__global__ void int_bmm_kernel(rf__bmm_plan p, const T *x, const T *y, T *c) {
  using U = typename Unsigned<T>::type;
  RF_GPU_LOOP(e, p.batch * p.m * p.n) {
    int64_t j = e % p.n, i = (e / p.n) % p.m, b = e / (p.m * p.n);
    int64_t xo = 0, yo = 0;
    for (int d = p.brank - 1; d >= 0; d--) {
      int64_t at = b % p.bdims[d];
      b /= p.bdims[d];
      xo += at * p.xstr[d];
      yo += at * p.ystr[d];
    }
    U s = 0;
    for (int64_t q = 0; q < p.k; q++)
      s += (U)(p.ax ? x[xo + q * p.lda + i] : x[xo + i * p.lda + q]) *
           (U)(p.ay ? y[yo + j * p.ldb + q] : y[yo + q * p.ldb + j]);
    c[e] = (T)s;
  }
}

template <typename T>
rf_status *int_bmm(rf__kernel_ctx *ctx, const rf__bmm_plan &p,
                   const rf_tensor *x, const rf_tensor *y, rf_tensor *out) {
  int_bmm_kernel<T><<<grid(ctx, out->num_elements), kThreads, 0, stream(ctx)>>>(
      p, (const T *)x->data, (const T *)y->data, (T *)out->data);
  RF_GPU_LAUNCHED(ctx);
  return NULL;
}

rf_status *batch_matmul_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(begin(ctx));
  rf__bmm_plan p;
  RF_CHECK(rf__bmm_plan_make(ctx, &p));
  const rf_tensor *x = ctx->inputs[0], *y = ctx->inputs[1];
  rf_dtype dt = x->dtype;
  size_t es = rf_dtype_size(dt);
  rf_tensor *out;
  RF_CHECK(alloc_output(ctx, 0, dt, &p.out, &out));
  if (out->num_elements == 0) return NULL;
  if (p.k == 0) return fill_bits(ctx, out->data, es, out->num_elements, 0);
  if (dt == RF_INT32) return int_bmm<int32_t>(ctx, p, x, y, out);
  if (dt == RF_INT64) return int_bmm<int64_t>(ctx, p, x, y, out);
  cudaDataType_t type = dt == RF_FLOAT16    ? CUDA_R_16F
                        : dt == RF_BFLOAT16 ? CUDA_R_16BF
                        : dt == RF_FLOAT32  ? CUDA_R_32F
                                            : CUDA_R_64F;
  bool f64 = dt == RF_FLOAT64;
  cublasComputeType_t compute = f64                ? CUBLAS_COMPUTE_64F
                                : dt == RF_FLOAT32 ? gemm_compute_32f(ctx)
                                                   : CUBLAS_COMPUTE_32F;
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void *one = f64 ? (const void *)&one_d : &one_f;
  const void *zero = f64 ? (const void *)&zero_d : &zero_f;
  cublasHandle_t h = blas(ctx);
  if (!h)
    return rf__kernel_error(ctx, RF_INTERNAL,
                            "the device has no cuBLAS handle");
  cublasOperation_t oy = p.ay ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t ox = p.ax ? CUBLAS_OP_T : CUBLAS_OP_N;
  std::lock_guard<std::mutex> lock(blas_lock(h));
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  if (p.strided) {
    s = cublasGemmStridedBatchedEx(
        h, oy, ox, (int)p.n, (int)p.m, (int)p.k, one, y->data, type, (int)p.ldb,
        p.ystride, x->data, type, (int)p.lda, p.xstride, zero, out->data, type,
        (int)p.n, p.m * p.n, (int)p.batch, compute, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
      return blas_error(ctx, s, "cublasGemmStridedBatchedEx");
    return NULL;
  }
  for (int64_t b = 0; b < p.batch && s == CUBLAS_STATUS_SUCCESS; b++) {
    int64_t xo, yo;
    rf__bmm_offsets(&p, b, &xo, &yo);
    s = cublasGemmEx(h, oy, ox, (int)p.n, (int)p.m, (int)p.k, one,
                     (const char *)y->data + yo * es, type, (int)p.ldb,
                     (const char *)x->data + xo * es, type, (int)p.lda, zero,
                     (char *)out->data + b * p.m * p.n * es, type, (int)p.n,
                     compute, CUBLAS_GEMM_DEFAULT);
  }
  if (s != CUBLAS_STATUS_SUCCESS) return blas_error(ctx, s, "cublasGemmEx");
  return NULL;
}

const rf__kernel_def defs[] = {{.op = "BatchMatMul",
                                .device_type = RF_DEVICE_GPU,
                                .compute = batch_matmul_compute}};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_linalg_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs, 1);
}
