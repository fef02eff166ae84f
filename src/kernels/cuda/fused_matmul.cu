/* kernels/cuda/fused_matmul.cu - the _FusedMatMul* ops on GPU devices
 * (passes/fuse_epilogues.c): one cublasLtMatmul with the epilogue
 *
 *   _FusedMatMulBiasRelu  CUBLASLT_EPILOGUE_RELU_BIAS  (bias, then max(x, 0))
 *   _FusedMatMulBias      CUBLASLT_EPILOGUE_BIAS
 *   _FusedMatMulBiasGrad  CUBLASLT_EPILOGUE_BGRADA (bias_input 1: b, not
 *                         transposed) or _BGRADB (bias_input 0: a,
 *                         transposed): the sum over k of that operand
 *
 * float16/bfloat16/float32 accumulating in float (CUBLAS_COMPUTE_32F, or
 * _32F_FAST_TF32 for float32 when the session allows TF32: the same choice
 * as MatMul's, gemm_compute_32f), alpha 1 and beta 0 in float.
 *
 * Layout: ringflow's row-major C (m, n) = op(A) op(B) is cuBLAS's
 * column-major C^T (n x m) = op(B)^T op(A)^T, as in matmul.cu: cuBLASLt's
 * A is our b (stored column-major as (tb ? k : n) x (tb ? n : k), ld ldb,
 * op tb) and its B is our a ((ta ? m : k) x (ta ? k : m), ld lda, op ta);
 * D is n x m with ld n. So the bias, one value per row of D, is one per
 * column of our C (BiasAdd's); BGRADA sums cuBLASLt's A over k (our b
 * (k, n): its rows summed, n values: _BiasAddGrad(b)) and BGRADB its B
 * (our a stored (k, m): m values: _BiasAddGrad(a)). Bias and bias-gradient
 * vectors have D's type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE left at its
 * default).
 *
 * cuBLASLt runs on the device's cuBLAS handle (a cublasHandle_t may be used
 * as a cublasLtHandle_t by a cast), under its lock (blas_lock), on the
 * device's stream, with a workspace of the chosen algorithm's size from the
 * device's allocator (so captured steps record no memory nodes).
 * cublasLtMatmulAlgoGetHeuristic runs once per GPU, op, dtype, compute
 * type, sizes, transposes and pointer alignments (the heuristic assumes
 * 256-byte aligned matrices unless told otherwise, and bucket slices are
 * aligned to 64 bytes only); the answer is kept for the process. Where it
 * offers no algorithm, or the product reports CUBLAS_STATUS_NOT_SUPPORTED,
 * the node runs the unfused kernels (kernels/fused_matmul.h) and says so
 * once through the log sink. Empty products and operands the fast path
 * does not take (a bias of the wrong shape: the unfused BiasAdd's error)
 * go the unfused way too. */
#include <cublasLt.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "kernels/cuda/math_kernels.cuh"
#include "kernels/fused_matmul.h"
#include "kernels/matmul_shape.h"

namespace rf_gpu {
namespace {

enum Kind { kBias, kBiasRelu, kBiasGrad };

using Dims = rf__matmul_dims;

/* All int64, so keys compare as bytes. */
struct Key {
  int64_t ordinal, kind, which, dtype, compute;
  int64_t m, n, k, ta, tb, lda, ldb;
  int64_t align_a, align_b, align_d, align_bias;
  int64_t sms; /* the SM count targeted (0: the whole GPU) */
};
bool operator<(const Key &x, const Key &y) {
  return std::memcmp(&x, &y, sizeof x) < 0;
}

struct Choice {
  bool found;
  cublasLtMatmulAlgo_t algo;
  size_t workspace;
};

std::mutex cache_mu;
std::map<Key, Choice> cache; /* process-wide: plain data, no handles */

/* The most workspace an algorithm may ask for (cuBLAS's recommendation on
 * Hopper); only what the chosen one needs is allocated. */
constexpr uint64_t kMaxWorkspace = uint64_t(32) << 20;
/* What a fused node runs where cuBLASLt does not take it. */
constexpr const char *kUnfused = "MatMul, then its epilogue";

/* The largest power of two up to 256 dividing p's address. */
uint32_t alignment(const void *p) {
  uintptr_t a = (uintptr_t)p;
  uint32_t al = 256;
  while (al > 1 && a % al) al >>= 1;
  return al;
}

/* The descriptors of one product; destroyed with it. */
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

/* What one fused product needs. */
struct Plan {
  Kind kind;
  Dims d;
  cudaDataType_t type;
  cublasComputeType_t compute;
  const void *a, *b; /* ringflow's operands */
  void *out;
  void *bias;   /* the bias (read) or the bias gradient (written) */
  bool bgrad_a; /* kBiasGrad: cuBLASLt's A (our b) is reduced */
  int32_t sms;  /* CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET; 0: the whole GPU */
};

#define LT_TRY(expr)                      \
  do {                                    \
    cublasStatus_t lt_s_ = (expr);        \
    if (lt_s_ != CUBLAS_STATUS_SUCCESS) { \
      *what = #expr;                      \
      return lt_s_;                       \
    }                                     \
  } while (0)

cublasStatus_t describe(Descs &ds, const Plan &p, const char **what) {
  const Dims &d = p.d;
  LT_TRY(cublasLtMatmulDescCreate(&ds.op, p.compute, CUDA_R_32F));
  int32_t opa = d.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int32_t opb = d.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_TRY(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                        &opa, sizeof opa));
  LT_TRY(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                        &opb, sizeof opb));
  cublasLtEpilogue_t epi = p.kind == kBiasRelu ? CUBLASLT_EPILOGUE_RELU_BIAS
                           : p.kind == kBias   ? CUBLASLT_EPILOGUE_BIAS
                           : p.bgrad_a         ? CUBLASLT_EPILOGUE_BGRADA
                                               : CUBLASLT_EPILOGUE_BGRADB;
  LT_TRY(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                        &epi, sizeof epi));
  LT_TRY(cublasLtMatmulDescSetAttribute(
      ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias));
  if (p.sms > 0)
    LT_TRY(cublasLtMatmulDescSetAttribute(
        ds.op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &p.sms, sizeof p.sms));
  LT_TRY(cublasLtMatrixLayoutCreate(&ds.a, p.type, d.tb ? d.k : d.n,
                                    d.tb ? d.n : d.k, d.ldb));
  LT_TRY(cublasLtMatrixLayoutCreate(&ds.b, p.type, d.ta ? d.m : d.k,
                                    d.ta ? d.k : d.m, d.lda));
  LT_TRY(cublasLtMatrixLayoutCreate(&ds.d, p.type, d.n, d.m, d.n));
  return CUBLAS_STATUS_SUCCESS;
}

/* The heuristic's first algorithm for p (found false: none). */
/* RF_CUBLASLT_SPLITK=0 in the environment (read once; for measuring,
 * docs/ARCHITECTURE.md): take the heuristic's first algorithm that does not
 * split the sum over k (one kernel, no separate reduction), where it offers
 * one among its first 16. */
bool no_split_k() {
  static const bool no = [] {
    const char *e = std::getenv("RF_CUBLASLT_SPLITK");
    return e && std::strcmp(e, "0") == 0;
  }();
  return no;
}

cublasStatus_t choose(cublasLtHandle_t h, Descs &ds, const Plan &p, Choice *c,
                      const char **what) {
  LT_TRY(cublasLtMatmulPreferenceCreate(&ds.pref));
  uint64_t ws = kMaxWorkspace;
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(
      ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  uint32_t al_a = alignment(p.b), al_b = alignment(p.a),
           al_d = alignment(p.out);
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(
      ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(
      ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(
      ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(
      ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
  constexpr int kAsk = 16;
  cublasLtMatmulHeuristicResult_t r[kAsk];
  std::memset(r, 0, sizeof r);
  int count = 0;
  LT_TRY(cublasLtMatmulAlgoGetHeuristic(h, ds.op, ds.a, ds.b, ds.d, ds.d,
                                        ds.pref, no_split_k() ? kAsk : 1, r,
                                        &count));
  int pick = 0; /* the heuristic's first, or its first without split-K */
  for (int i = 0; no_split_k() && i < count; i++) {
    int32_t splits = 1;
    size_t got = 0;
    if (r[i].state == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoConfigGetAttribute(
            &r[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits,
            &got) == CUBLAS_STATUS_SUCCESS &&
        splits <= 1) {
      pick = i;
      break;
    }
  }
  c->found = count > 0 && r[pick].state == CUBLAS_STATUS_SUCCESS;
  c->algo = r[pick].algo;
  c->workspace = r[pick].workspaceSize;
  return CUBLAS_STATUS_SUCCESS;
}

#undef LT_TRY

Key key_of(const rf__kernel_ctx *ctx, const Plan &p) {
  const Dims &d = p.d;
  return Key{ctx->device->gpu_ordinal,
             p.kind,
             p.bgrad_a,
             p.type,
             p.compute,
             d.m,
             d.n,
             d.k,
             d.ta,
             d.tb,
             d.lda,
             d.ldb,
             alignment(p.b),
             alignment(p.a),
             alignment(p.out),
             alignment(p.bias),
             p.sms};
}

/* Enqueues p's product; *fallback set (and nothing enqueued) when cuBLASLt
 * cannot run it. */
rf_status *lt_matmul(rf__kernel_ctx *ctx, const Plan &p, bool *fallback) {
  *fallback = false;
  cublasHandle_t blas_h = blas(ctx);
  if (!blas_h)
    return rf__kernel_error(ctx, RF_INTERNAL,
                            "the device has no cuBLAS handle");
  /* A cublasHandle_t is usable as a cublasLtHandle_t. */
  cublasLtHandle_t h = (cublasLtHandle_t)blas_h;
  Key key = key_of(ctx, p);
  Choice c;
  bool known;
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache.find(key);
    known = it != cache.end();
    if (known) c = it->second;
  }
  if (known && !c.found) {
    *fallback = true;
    return NULL;
  }
  Descs ds;
  const char *what = "";
  cublasStatus_t s = describe(ds, p, &what);
  char why[256];
  if (s == CUBLAS_STATUS_SUCCESS && !known) {
    std::lock_guard<std::mutex> lock(blas_lock(blas_h));
    s = choose(h, ds, p, &c, &what);
  }
  if (s != CUBLAS_STATUS_SUCCESS || !c.found) {
    if (s != CUBLAS_STATUS_SUCCESS)
      snprintf(why, sizeof why, "cuBLASLt: %s failed (%s)", what,
               cublasGetStatusName(s));
    else
      snprintf(why, sizeof why,
               "cublasLtMatmulAlgoGetHeuristic offers no algorithm for "
               "(m %lld, n %lld, k %lld%s%s, %s)",
               (long long)p.d.m, (long long)p.d.n, (long long)p.d.k,
               p.d.ta ? ", a transposed" : "", p.d.tb ? ", b transposed" : "",
               rf_dtype_name(ctx->inputs[0]->dtype));
    c.found = false;
    {
      std::lock_guard<std::mutex> lock(cache_mu);
      cache[key] = c;
    }
    rf__kernel_log_unfused(ctx, kUnfused, why);
    *fallback = true;
    return NULL;
  }
  if (!known) {
    std::lock_guard<std::mutex> lock(cache_mu);
    cache[key] = c;
  }
  rf_tensor *ws = NULL;
  if (c.workspace > 0) {
    rf_shape wshape = rf_shape_of(1, (int64_t)c.workspace);
    RF_CHECK(new_tensor(ctx, RF_UINT8, &wshape, &ws));
  }
  const float one = 1.0f, zero = 0.0f;
  {
    std::lock_guard<std::mutex> lock(blas_lock(blas_h));
    s = cublasLtMatmul(h, ds.op, &one, p.b, ds.a, p.a, ds.b, &zero, p.out, ds.d,
                       p.out, ds.d, &c.algo, ws ? ws->data : nullptr,
                       c.workspace, stream(ctx));
  }
  rf_tensor_release(ws); /* later work on the stream only */
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) {
    c.found = false;
    {
      std::lock_guard<std::mutex> lock(cache_mu);
      cache[key] = c;
    }
    rf__kernel_log_unfused(
        ctx, kUnfused,
        "cublasLtMatmul: CUBLAS_STATUS_NOT_SUPPORTED for the algorithm "
        "its heuristic chose");
    *fallback = true;
    return NULL;
  }
  if (s != CUBLAS_STATUS_SUCCESS)
    return rf__kernel_error_at(
        ctx, rf__cublas_status(s, "cublasLtMatmul", __FILE__, __LINE__));
  return NULL;
}

/* The cuBLASLt product unless RF_CUBLASLT_EPILOGUES=0 (then the fused
 * nodes run the unfused kernels: bit-identical to an unfused graph). Its
 * session-10 test failure was the test's per-element tolerance, not the
 * kernel: bench/cublaslt_epilogue_check passed 120 of 120 cases against
 * float64 on the H200 in session 11, and test_gpu_fuse_epilogues passed
 * with tolerances relative to each fetch's scale (docs/PERFORMANCE.md,
 * "Session 11, the lead's H200 calls"). */
bool lt_enabled() {
  static const bool on = [] {
    const char *e = getenv("RF_CUBLASLT_EPILOGUES");
    return !(e && e[0] == '0' && e[1] == 0);
  }();
  return on;
}

rf_status *unfused(rf__kernel_ctx *ctx, Kind kind) {
  return kind == kBiasGrad
             ? rf__fused_matmul_bias_grad_unfused(ctx)
             : rf__fused_matmul_bias_unfused(ctx, kind == kBiasRelu);
}

rf_status *fused_impl(rf__kernel_ctx *ctx, Kind kind) {
  const rf_tensor *a = ctx->inputs[0], *b = ctx->inputs[1];
  Dims d;
  rf_shape cs;
  RF_CHECK(rf__matmul_prepare(ctx, &d, &cs));
  rf_dtype dt = a->dtype;
  int64_t which = 1;
  if (kind == kBiasGrad) {
    rf_status *st = rf__attrs_get_int(&ctx->node->attrs, "bias_input", &which);
    if (st) return rf__kernel_error_at(ctx, st);
  }
  const rf_tensor *bias = kind == kBiasGrad ? NULL : ctx->inputs[2];
  bool usable = d.m > 0 && d.n > 0 && d.k > 0 &&
                (dt == RF_FLOAT32 || dt == RF_FLOAT16 || dt == RF_BFLOAT16);
  if (bias)
    usable = usable && bias->dtype == dt && bias->shape.rank == 1 &&
             bias->shape.dims[0] == d.n;
  else
    usable = usable && (which ? !d.tb : d.ta);
  if (!usable || !lt_enabled()) return unfused(ctx, kind);
  Plan p;
  p.kind = kind;
  p.d = d;
  p.type = dt == RF_FLOAT16    ? CUDA_R_16F
           : dt == RF_BFLOAT16 ? CUDA_R_16BF
                               : CUDA_R_32F;
  p.compute = dt == RF_FLOAT32 ? gemm_compute_32f(ctx) : CUBLAS_COMPUTE_32F;
  p.a = a->data;
  p.b = b->data;
  p.bgrad_a = which == 1;
  p.sms = sm_count_target(ctx);
  rf_tensor *out, *bgrad = NULL;
  RF_CHECK(alloc_output(ctx, 0, dt, &cs, &out));
  if (kind == kBiasGrad) {
    rf_shape bs = rf_shape_of(1, which ? d.n : d.m);
    RF_CHECK(alloc_output(ctx, 1, dt, &bs, &bgrad));
  }
  p.out = out->data;
  p.bias = bgrad ? bgrad->data : bias->data;
  bool fallback = false;
  RF_CHECK(lt_matmul(ctx, p, &fallback));
  if (!fallback) return NULL;
  rf__kernel_drop_outputs(ctx);
  return unfused(ctx, kind);
}

rf_status *fused_compute(rf__kernel_ctx *ctx, Kind kind) {
  RF_CHECK(begin(ctx));
  rf_status *st = fused_impl(ctx, kind);
  if (st) rf__kernel_drop_outputs(ctx); /* nothing half-made leaves it */
  return st;
}

rf_status *bias_compute(rf__kernel_ctx *ctx) {
  return fused_compute(ctx, kBias);
}
rf_status *bias_relu_compute(rf__kernel_ctx *ctx) {
  return fused_compute(ctx, kBiasRelu);
}
rf_status *bias_grad_compute(rf__kernel_ctx *ctx) {
  return fused_compute(ctx, kBiasGrad);
}

const rf__kernel_def defs[] = {
    {.op = "_FusedMatMulBias",
     .device_type = RF_DEVICE_GPU,
     .compute = bias_compute},
    {.op = "_FusedMatMulBiasRelu",
     .device_type = RF_DEVICE_GPU,
     .compute = bias_relu_compute},
    {.op = "_FusedMatMulBiasGrad",
     .device_type = RF_DEVICE_GPU,
     .compute = bias_grad_compute},
};

}  // namespace
}  // namespace rf_gpu

rf_status *rf__register_gpu_fused_matmul_kernels(void) {
  return rf__kernel_register_all(rf_gpu::defs,
                                 sizeof rf_gpu::defs / sizeof *rf_gpu::defs);
}
