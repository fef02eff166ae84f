/* kernels/cuda/batch_norm.cu - GPU kernels of BatchNorm, BatchNormInference
 * and their gradients for the float dtypes, x [R, C] (rows = every axis but
 * the last). Statistics in double as on the CPU: one thread per (chunk of
 * 64 rows, channel) sums its rows in order (neighbouring threads read
 * neighbouring channels, so the loads coalesce in NHWC), then one thread per
 * channel sums the chunks in order; then one thread per element. No
 * atomics: every result is deterministic. */
#include "kernels/cuda/gpu_common.cuh" /* first: the C headers in C++ */

extern "C" {
#include "kernels/kernel_families.h"
}

namespace rf_gpu {
namespace {

enum Mode { kTrain, kInfer, kTrainGrad, kInferGrad };

template <typename T>
__device__ __forceinline__ double ld(const T *p, int64_t i) {
  return (double)Num<T>::load(p[i]);
}

template <typename T>
__device__ __forceinline__ T st(double v) {
  return Num<T>::store((typename Num<T>::C)v);
}

template <typename T>
struct Args {
  const T *x, *dy, *gamma, *beta, *mean, *var, *dmean, *dvar;
  T *out, *o1, *o2, *o3, *o4;
  double eps;
  int64_t rows, c;
  double *st; /* per channel: mean, rstd, sum dy, sum dy * xhat */
};

/* Rows per chunk, as on the CPU (kernels/cpu/batch_norm.c): partial sums
 * over fixed chunks of rows, then the chunks in order, whatever the grid. */
constexpr int64_t kChunk = 64;

enum Pass { kSum, kSq, kGrad };

/* One thread per (chunk, channel): its rows in order; neighbouring threads
 * read neighbouring channels. part[k][0][j], part[k][1][j]: x; (x - mean)^2;
 * dy and dy * xhat. */
template <typename T>
__global__ void chunks_kernel(Args<T> a, Pass pass, double *part,
                              int64_t chunks) {
  RF_GPU_LOOP(i, chunks * a.c) {
    int64_t k = i / a.c, j = i % a.c, c = a.c;
    int64_t r1 = (k + 1) * kChunk < a.rows ? (k + 1) * kChunk : a.rows;
    /* the mean is known from the second pass on, rstd in the third */
    double mu = pass == kSum ? 0 : a.st[4 * j];
    double rs = pass == kGrad ? a.st[4 * j + 1] : 0, p0 = 0, p1 = 0;
    for (int64_t r = k * kChunk; r < r1; r++) {
      double xv = ld(a.x, r * c + j);
      if (pass == kSum) {
        p0 += xv;
      } else if (pass == kSq) {
        p0 += (xv - mu) * (xv - mu);
      } else {
        double d = ld(a.dy, r * c + j);
        p0 += d;
        p1 += d * (xv - mu) * rs;
      }
    }
    part[k * 2 * c + j] = p0;
    part[k * 2 * c + c + j] = p1;
  }
}

/* One thread per channel: the pass's totals (chunks in order) and what
 * follows from them, as channel_stats on the CPU. */
template <typename T>
__global__ void totals_kernel(Args<T> a, Mode m, Pass pass, const double *part,
                              int64_t chunks) {
  RF_GPU_LOOP(j, a.c) {
    int64_t c = a.c;
    double s0 = 0, s1 = 0, R = (double)a.rows;
    for (int64_t k = 0; k < chunks; k++) {
      s0 += part[k * 2 * c + j];
      s1 += part[k * 2 * c + c + j];
    }
    if (pass == kSum) {
      a.st[4 * j] = s0 / R; /* NaN for R = 0 */
    } else if (pass == kSq) {
      double v = s0 / R;
      a.st[4 * j + 1] = 1.0 / sqrt(v + a.eps);
      if (m == kTrain) {
        a.o1[j] = st<T>(a.st[4 * j]);
        a.o2[j] = st<T>(v);
      }
    } else {
      a.st[4 * j + 2] = s0;
      a.st[4 * j + 3] = s1;
      a.o1[j] = st<T>(s1); /* dgamma */
      a.o2[j] = st<T>(s0); /* dbeta */
      if (m == kInferGrad) {
        double gm = ld(a.gamma, j), rs = a.st[4 * j + 1];
        a.o3[j] = st<T>(-gm * rs * s0);
        a.o4[j] = st<T>(-0.5 * gm * rs * rs * s1);
      }
    }
  }
}

/* Inference: the given statistics. */
template <typename T>
__global__ void given_kernel(Args<T> a) {
  RF_GPU_LOOP(j, a.c) {
    a.st[4 * j] = ld(a.mean, j);
    a.st[4 * j + 1] = 1.0 / sqrt(ld(a.var, j) + a.eps);
  }
}

/* y or dx per element, as rows_range on CPU. */
template <typename T>
__global__ void elements_kernel(Args<T> a, Mode m, int64_t n) {
  RF_GPU_LOOP(i, n) {
    int64_t j = i % a.c;
    const double *s = a.st + 4 * j;
    double R = (double)a.rows;
    double xc = ld(a.x, i) - s[0], gm = ld(a.gamma, j), v;
    if (m == kTrain || m == kInfer)
      v = xc * s[1] * gm + ld(a.beta, j);
    else if (m == kInferGrad)
      v = ld(a.dy, i) * gm * s[1];
    else
      v = gm * s[1] * (ld(a.dy, i) - s[2] / R - xc * s[1] * s[3] / R) +
          ld(a.dmean, j) / R + ld(a.dvar, j) * 2 * xc / R;
    a.out[i] = st<T>(v);
  }
}

/* Input k's name in the op's signature, for errors. */
const char *input_name(Mode m, int k) {
  static const char *const fwd[] = {"x", "gamma", "beta", "mean", "variance"};
  static const char *const tg[] = {"dy", "x", "gamma", "dmean", "dvariance"};
  static const char *const ig[] = {"dy", "x", "gamma", "mean", "variance"};
  return m == kTrain || m == kInfer ? fwd[k] : m == kTrainGrad ? tg[k] : ig[k];
}

rf_status *run(rf__kernel_ctx *ctx, Mode m) {
  RF_CHECK(begin(ctx));
  double eps;
  RF_CHECK(rf__attrs_get_float(&ctx->node->attrs, "epsilon", &eps));
  bool grad = m == kTrainGrad || m == kInferGrad;
  const rf_tensor *x = ctx->inputs[grad ? 1 : 0];
  if (x->shape.rank < 2)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "x has rank %d, not >= 2 ([..., C])",
                            x->shape.rank);
  int64_t c = x->shape.dims[x->shape.rank - 1];
  int nin = m == kTrain ? 3 : 5;
  for (int k = grad ? 2 : 1; k < nin; k++) {
    const rf_tensor *p = ctx->inputs[k];
    if (p->shape.rank != 1 || p->shape.dims[0] != c)
      return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                              "%s is not [C] for x's last dim C = %lld",
                              input_name(m, k), (long long)c);
  }
  if (grad && !rf_shape_equal(&ctx->inputs[0]->shape, &x->shape))
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "dy and x have different shapes");
  rf_dtype dt = x->dtype;
  rf_tensor *out, *o[4] = {NULL, NULL, NULL, NULL}, *stats, *part;
  RF_CHECK(alloc_output(ctx, 0, dt, &x->shape, &out));
  rf_shape cs = rf_shape_of(1, c);
  int nout = m == kInfer ? 1 : m == kInferGrad ? 5 : 3;
  for (int k = 1; k < nout; k++)
    RF_CHECK(alloc_output(ctx, k, dt, &cs, &o[k - 1]));
  if (c == 0) return NULL;
  int64_t n = x->num_elements, chunks = (n / c + kChunk - 1) / kChunk;
  rf_shape ss = rf_shape_of(1, 4 * c),
           ps = rf_shape_of(1, 2 * c * (chunks ? chunks : 1));
  RF_CHECK(new_tensor(ctx, RF_FLOAT64, &ss, &stats));
  rf_status *pst = new_tensor(ctx, RF_FLOAT64, &ps, &part);
  if (pst) {
    rf_tensor_release(stats);
    return pst;
  }
  rf_status *status = visit_float(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    Args<T> a = {};
    const rf_tensor *const *in = ctx->inputs;
    a.x = (const T *)x->data;
    if (grad) {
      a.dy = (const T *)in[0]->data;
      a.gamma = (const T *)in[2]->data;
      if (m == kTrainGrad) {
        a.dmean = (const T *)in[3]->data;
        a.dvar = (const T *)in[4]->data;
      } else {
        a.mean = (const T *)in[3]->data;
        a.var = (const T *)in[4]->data;
      }
    } else {
      a.gamma = (const T *)in[1]->data;
      a.beta = (const T *)in[2]->data;
      if (m == kInfer) {
        a.mean = (const T *)in[3]->data;
        a.var = (const T *)in[4]->data;
      }
    }
    a.out = (T *)out->data;
    T **os[4] = {&a.o1, &a.o2, &a.o3, &a.o4};
    for (int k = 0; k < 4; k++)
      if (o[k]) *os[k] = (T *)o[k]->data;
    a.eps = eps;
    a.rows = n / c;
    a.c = c;
    a.st = (double *)stats->data;
    double *pp = (double *)part->data;
    auto pass = [&](Pass ps) -> rf_status * {
      if (chunks > 0) {
        chunks_kernel<T><<<grid(ctx, chunks * c), kThreads, 0, stream(ctx)>>>(
            a, ps, pp, chunks);
        RF_GPU_LAUNCHED(ctx);
      }
      totals_kernel<T>
          <<<grid(ctx, c), kThreads, 0, stream(ctx)>>>(a, m, ps, pp, chunks);
      RF_GPU_LAUNCHED(ctx);
      return NULL;
    };
    if (m == kInfer || m == kInferGrad) {
      given_kernel<T><<<grid(ctx, c), kThreads, 0, stream(ctx)>>>(a);
      RF_GPU_LAUNCHED(ctx);
    } else {
      RF_CHECK(pass(kSum));
      RF_CHECK(pass(kSq));
    }
    if (grad) RF_CHECK(pass(kGrad));
    if (n > 0) {
      elements_kernel<T><<<grid(ctx, n), kThreads, 0, stream(ctx)>>>(a, m, n);
      RF_GPU_LAUNCHED(ctx);
    }
    return (rf_status *)NULL;
  });
  rf_tensor_release(stats); /* safe once enqueued: gpu_common.cuh */
  rf_tensor_release(part);
  return status;
}

rf_status *bn_compute(rf__kernel_ctx *ctx) { return run(ctx, kTrain); }
rf_status *bn_infer_compute(rf__kernel_ctx *ctx) { return run(ctx, kInfer); }
rf_status *bn_grad_compute(rf__kernel_ctx *ctx) { return run(ctx, kTrainGrad); }
rf_status *bn_infer_grad_compute(rf__kernel_ctx *ctx) {
  return run(ctx, kInferGrad);
}

const rf__kernel_def defs[] = {
    RF__GPU_KERNEL("BatchNorm", bn_compute, 0, 0, RF_COST_PER_ELEMENT)
        RF__GPU_KERNEL("BatchNormInference", bn_infer_compute, 0, 0,
                       RF_COST_PER_ELEMENT)
            RF__GPU_KERNEL("_BatchNormGrad", bn_grad_compute, 0, 0,
                           RF_COST_PER_ELEMENT)
                RF__GPU_KERNEL("_BatchNormInferenceGrad", bn_infer_grad_compute,
                               0, 0, RF_COST_PER_ELEMENT)};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_batch_norm_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof rf_gpu::defs[0]);
}
