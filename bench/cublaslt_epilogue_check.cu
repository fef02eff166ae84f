/* bench/cublaslt_epilogue_check.cu - cuBLASLt's RELU_BIAS/BIAS/BGRADA/BGRADB
 * products, set up as kernels/cuda/fused_matmul.cu sets them up (a copy of
 * its describe/choose: the library's are file-local), and in variants that
 * each change one thing, against a float64 host reference; a diagnostic for
 * the fused kernel's failed H200 test (issue 19), not a benchmark.
 *
 *   bench_cublaslt_epilogue_check [-v]
 *
 * One line per case (epilogue, dtype, m x n x k, transposes the fuse pass
 * makes), one column per variant: "ok", or D's and the bias gradient's worst
 * errors when one is over the dtype's tolerance; "-" no algorithm offered
 * (the kernel falls back), "E" an error status (-v prints it). An error is
 * |got - want| / scale, scale = 1 + the sum of the magnitudes of the terms
 * summed (1 + sum_p |a_ip b_pj| + |bias_j| for D, 1 + sum_p |x_p| for a bias
 * gradient): whatever the order of the sums, float32 rounding stays under
 * k 2^-24 of it and an output rounded to float16 (bfloat16) under 2^-11
 * (2^-8) more. Tolerances: float32 1e-5 (TF32's 2^-11 steps show), float16
 * 2e-3, bfloat16 1.6e-2. Every output buffer is filled with 0x41 bytes
 * (finite garbage) before each run, so an epilogue that accumulates into its
 * output shows. Variants:
 *
 *   kernel  as fused_matmul.cu: a cublasHandle_t cast to cublasLtHandle_t,
 *           the heuristic's first algorithm (alignments told), a workspace of
 *           its size overwritten on the stream right after the enqueue (what
 *           the caching allocator allows: reuse by later work on the stream)
 *   wsheld  the same with the workspace left alone until after the sync
 *   ws0     no workspace (max workspace 0 told to the heuristic)
 *   lth     a fresh cublasLtCreate handle instead of the cast
 *   alg2    the heuristic's second algorithm (of 8 asked for)
 *   alg3    its third
 *   zeroed  kernel, with the outputs zeroed first instead of 0x41
 *   off64   kernel, with A, B and D 64 bytes past a 256-byte boundary (bucket
 *           slices), alignments told
 *   gemm    EPILOGUE_DEFAULT (D checked against the bare product): whether
 *           the product itself or the epilogue is wrong
 *
 * Exit status 0 when every ran case is within tolerance. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

enum Epi { kBias, kBiasRelu, kBgradA, kBgradB };
const char *epi_name[] = {"BIAS", "RELU_BIAS", "BGRADA", "BGRADB"};
enum Dt { kF32, kF16, kBF16 };
const char *dt_name[] = {"f32", "f16", "bf16"};
const size_t dt_size[] = {4, 2, 2};
const double dt_tol[] = {1e-5, 2e-3, 1.6e-2};

enum Var {
  kKernel,
  kWsHeld,
  kWs0,
  kLtHandle,
  kAlg2,
  kAlg3,
  kZeroed,
  kOff64,
  kGemm,
  kNumVars
};
const char *var_name[] = {"kernel", "wsheld", "ws0",   "lth", "alg2",
                          "alg3",   "zeroed", "off64", "gemm"};

bool verbose = false;

#define CK(x)                                                   \
  do {                                                          \
    cudaError_t e_ = (x);                                       \
    if (e_ != cudaSuccess) {                                    \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, \
              cudaGetErrorString(e_));                          \
      exit(2);                                                  \
    }                                                           \
  } while (0)

/* One problem in ringflow's terms: row-major C (m, n) = op(a) op(b); a
 * stored (ta ? k x m : m x k), b stored (tb ? n x k : k x n). */
struct Case {
  Epi epi;
  Dt dt;
  int64_t m, n, k;
  bool ta, tb;
};

double to_double(Dt dt, const void *p, size_t i) {
  if (dt == kF32) return ((const float *)p)[i];
  if (dt == kF16) return (double)__half2float(((const __half *)p)[i]);
  return (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

void from_double(Dt dt, void *p, size_t i, double v) {
  if (dt == kF32)
    ((float *)p)[i] = (float)v;
  else if (dt == kF16)
    ((__half *)p)[i] = __float2half((float)v);
  else
    ((__nv_bfloat16 *)p)[i] = __float2bfloat16((float)v);
}

uint64_t rng = 0x9E3779B97F4A7C15ull;
double uniform() { /* [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / (double)(1ull << 52) - 1.0;
}

/* Host data (stored in the dtype) and the float64 reference. */
struct Host {
  std::vector<unsigned char> a, b, bias;
  std::vector<double> ref_d, ref_gemm, ref_bg;
  /* each reference value's scale: the sum of its terms' magnitudes (1 +
   * sum |a b| + |bias|, 1 + sum |x|), which bounds any order's rounding */
  std::vector<double> scale_d, scale_bg;
  int64_t bias_len;
};

void make_host(const Case &c, Host *h) {
  size_t es = dt_size[c.dt];
  int64_t m = c.m, n = c.n, k = c.k;
  h->a.assign(m * k * es, 0), h->b.assign(k * n * es, 0);
  h->bias_len = c.epi == kBgradB ? m : n;
  h->bias.assign(h->bias_len * es, 0);
  for (int64_t i = 0; i < m * k; i++)
    from_double(c.dt, h->a.data(), i, uniform());
  for (int64_t i = 0; i < k * n; i++)
    from_double(c.dt, h->b.data(), i, uniform());
  for (int64_t i = 0; i < h->bias_len; i++)
    from_double(c.dt, h->bias.data(), i, uniform());
  /* op(a) as m x k and op(b) as n x k, both row-major, in double */
  std::vector<double> A(m * k), Bt(n * k);
  for (int64_t i = 0; i < m; i++)
    for (int64_t p = 0; p < k; p++)
      A[i * k + p] = to_double(c.dt, h->a.data(), c.ta ? p * m + i : i * k + p);
  for (int64_t j = 0; j < n; j++)
    for (int64_t p = 0; p < k; p++)
      Bt[j * k + p] =
          to_double(c.dt, h->b.data(), c.tb ? j * k + p : p * n + j);
  h->ref_gemm.assign(m * n, 0);
  h->scale_d.assign(m * n, 0);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      const double *x = &A[i * k], *y = &Bt[j * k];
      double s = 0, t = 1;
      for (int64_t p = 0; p < k; p++)
        s += x[p] * y[p], t += std::fabs(x[p] * y[p]);
      h->ref_gemm[i * n + j] = s;
      h->scale_d[i * n + j] = t;
    }
  h->ref_d = h->ref_gemm;
  if (c.epi == kBias || c.epi == kBiasRelu)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double bj = to_double(c.dt, h->bias.data(), j);
        double v = h->ref_gemm[i * n + j] + bj;
        h->ref_d[i * n + j] = c.epi == kBiasRelu && v < 0 ? 0 : v;
        h->scale_d[i * n + j] += std::fabs(bj);
      }
  h->ref_bg.assign(h->bias_len, 0);
  h->scale_bg.assign(h->bias_len, 1);
  if (c.epi == kBgradA) /* our b's rows summed over k: n values */
    for (int64_t j = 0; j < n; j++)
      for (int64_t p = 0; p < k; p++)
        h->ref_bg[j] += Bt[j * k + p],
            h->scale_bg[j] += std::fabs(Bt[j * k + p]);
  if (c.epi == kBgradB) /* op(a) summed over k: m values */
    for (int64_t i = 0; i < m; i++)
      for (int64_t p = 0; p < k; p++)
        h->ref_bg[i] += A[i * k + p], h->scale_bg[i] += std::fabs(A[i * k + p]);
}

/* Device buffers, each 256-byte aligned plus `off` bytes. */
struct Dev {
  unsigned char *a = nullptr, *b = nullptr, *d = nullptr, *bias = nullptr;
  unsigned char *ws = nullptr;
  size_t ws_cap = 0;
};

/* ---- the product, as fused_matmul.cu's describe() and choose() ---- */

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

uint32_t alignment(const void *p) {
  uintptr_t a = (uintptr_t)p;
  uint32_t al = 256;
  while (al > 1 && a % al) al >>= 1;
  return al;
}

struct Result {
  bool ran = false, none = false;
  const char *what = "";
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  size_t ws = 0;
  double err_d = 0, err_bg = 0;
};

#define LT(x)                          \
  do {                                 \
    cublasStatus_t s_ = (x);           \
    if (s_ != CUBLAS_STATUS_SUCCESS) { \
      r.st = s_, r.what = #x;          \
      return r;                        \
    }                                  \
  } while (0)

Result run_lt(const Case &c, Var v, cublasLtHandle_t h, cudaStream_t s,
              const Dev &dv, const void *pa, const void *pb, void *pd) {
  Result r;
  cudaDataType_t type = c.dt == kF16    ? CUDA_R_16F
                        : c.dt == kBF16 ? CUDA_R_16BF
                                        : CUDA_R_32F;
  int64_t m = c.m, n = c.n, k = c.k;
  int64_t lda = c.ta ? m : k, ldb = c.tb ? k : n;
  Descs ds;
  LT(cublasLtMatmulDescCreate(&ds.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  int32_t opa = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int32_t opb = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa,
                                    sizeof opa));
  LT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb,
                                    sizeof opb));
  cublasLtEpilogue_t epi = v == kGemm           ? CUBLASLT_EPILOGUE_DEFAULT
                           : c.epi == kBiasRelu ? CUBLASLT_EPILOGUE_RELU_BIAS
                           : c.epi == kBias     ? CUBLASLT_EPILOGUE_BIAS
                           : c.epi == kBgradA   ? CUBLASLT_EPILOGUE_BGRADA
                                                : CUBLASLT_EPILOGUE_BGRADB;
  LT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                    sizeof epi));
  void *bias = dv.bias;
  if (v != kGemm)
    LT(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                      &bias, sizeof bias));
  LT(cublasLtMatrixLayoutCreate(&ds.a, type, c.tb ? k : n, c.tb ? n : k, ldb));
  LT(cublasLtMatrixLayoutCreate(&ds.b, type, c.ta ? m : k, c.ta ? k : m, lda));
  LT(cublasLtMatrixLayoutCreate(&ds.d, type, n, m, n));
  LT(cublasLtMatmulPreferenceCreate(&ds.pref));
  uint64_t max_ws = v == kWs0 ? 0 : uint64_t(32) << 20;
  LT(cublasLtMatmulPreferenceSetAttribute(
      ds.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
      sizeof max_ws));
  uint32_t al_a = alignment(pb), al_b = alignment(pa), al_d = alignment(pd);
  LT(cublasLtMatmulPreferenceSetAttribute(
      ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
  LT(cublasLtMatmulPreferenceSetAttribute(
      ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
  LT(cublasLtMatmulPreferenceSetAttribute(
      ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
  LT(cublasLtMatmulPreferenceSetAttribute(
      ds.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
  int want = v == kAlg2 ? 1 : v == kAlg3 ? 2 : 0;
  cublasLtMatmulHeuristicResult_t res[8];
  std::memset(res, 0, sizeof res);
  int count = 0;
  LT(cublasLtMatmulAlgoGetHeuristic(h, ds.op, ds.a, ds.b, ds.d, ds.d, ds.pref,
                                    want ? 8 : 1, res, &count));
  if (count <= want || res[want].state != CUBLAS_STATUS_SUCCESS) {
    r.none = true;
    return r;
  }
  r.ws = res[want].workspaceSize;
  if (r.ws > dv.ws_cap) {
    r.st = CUBLAS_STATUS_ALLOC_FAILED, r.what = "workspace over 32 MiB";
    return r;
  }
  const float one = 1.0f, zero = 0.0f;
  void *ws = r.ws ? dv.ws : nullptr;
  LT(cublasLtMatmul(h, ds.op, &one, pb, ds.a, pa, ds.b, &zero, pd, ds.d, pd,
                    ds.d, &res[want].algo, ws, r.ws, s));
  /* The caching allocator may hand the workspace to the next kernel on the
   * stream as soon as the product is enqueued. */
  if (ws && v != kWsHeld) CK(cudaMemsetAsync(ws, 0x5A, r.ws, s));
  r.ran = true;
  return r;
}

#undef LT

double worst(Dt dt, const std::vector<unsigned char> &got,
             const std::vector<double> &want,
             const std::vector<double> &scale) {
  double e = 0;
  for (size_t i = 0; i < want.size(); i++) {
    double g = to_double(dt, got.data(), i);
    double d = std::fabs(g - want[i]) / scale[i];
    if (!(d <= e)) e = std::isnan(d) ? INFINITY : d;
  }
  return e;
}

struct Ctx {
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  cudaStream_t s;
  Dev dv;
  unsigned char *base[4]; /* a, b, d, bias allocations (+ 256 slack) */
};

Result run_case(Ctx &x, const Case &c, const Host &h, Var v) {
  size_t es = dt_size[c.dt];
  size_t off = v == kOff64 ? 64 : 0;
  Dev dv = x.dv;
  dv.a = x.base[0] + off, dv.b = x.base[1] + off, dv.d = x.base[2] + off;
  dv.bias = x.base[3];
  size_t nd = (size_t)(c.m * c.n) * es, nbias = h.bias.size();
  CK(cudaMemcpyAsync(dv.a, h.a.data(), h.a.size(), cudaMemcpyHostToDevice,
                     x.s));
  CK(cudaMemcpyAsync(dv.b, h.b.data(), h.b.size(), cudaMemcpyHostToDevice,
                     x.s));
  bool grad = c.epi == kBgradA || c.epi == kBgradB;
  int fill = v == kZeroed ? 0 : 0x41;
  CK(cudaMemsetAsync(dv.d, fill, nd, x.s));
  if (grad)
    CK(cudaMemsetAsync(dv.bias, fill, nbias, x.s));
  else
    CK(cudaMemcpyAsync(dv.bias, h.bias.data(), nbias, cudaMemcpyHostToDevice,
                       x.s));
  cublasLtHandle_t lt = v == kLtHandle ? x.lt : (cublasLtHandle_t)x.blas;
  Result r = run_lt(c, v, lt, x.s, dv, dv.a, dv.b, dv.d);
  CK(cudaStreamSynchronize(x.s));
  CK(cudaGetLastError());
  if (!r.ran) return r;
  std::vector<unsigned char> d(nd), bg(nbias);
  CK(cudaMemcpy(d.data(), dv.d, nd, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(bg.data(), dv.bias, nbias, cudaMemcpyDeviceToHost));
  r.err_d = worst(c.dt, d, v == kGemm ? h.ref_gemm : h.ref_d, h.scale_d);
  if (grad && v != kGemm) r.err_bg = worst(c.dt, bg, h.ref_bg, h.scale_bg);
  return r;
}

}  // namespace

int main(int argc, char **argv) {
  verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no GPU: nothing checked\n");
    return 0;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, cuBLASLt %zu; err = |got-want|/(1+sum|terms|), D/bias grad\n",
         prop.name, cublasLtGetVersion());
  Ctx x;
  CK(cudaStreamCreateWithFlags(&x.s, cudaStreamNonBlocking));
  if (cublasCreate(&x.blas) != CUBLAS_STATUS_SUCCESS ||
      cublasSetStream(x.blas, x.s) != CUBLAS_STATUS_SUCCESS ||
      cublasLtCreate(&x.lt) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "cublasCreate/cublasLtCreate failed\n");
    return 2;
  }
  const int64_t big = 1024 * 1024 * 4 + 256;
  for (auto &b : x.base) CK(cudaMalloc((void **)&b, big));
  x.dv.ws_cap = size_t(32) << 20;
  CK(cudaMalloc((void **)&x.dv.ws, x.dv.ws_cap));

  /* m x n x k: odd; the MLP's first layer at batch 128 (forward: m batch, k
   * 784 in, n 512 out; bias gradient: m 784, n 512, k the batch) and a
   * batch-1024 layer. */
  const int64_t shapes[][3] = {{37, 13, 7},
                               {128, 512, 784},
                               {784, 512, 128},
                               {1024, 256, 512},
                               {512, 256, 1024}};
  /* The transposes the fuse pass makes: forward any (x W, x W^T); BGRADA
   * needs b untransposed (bias_input 1), BGRADB a transposed (input 0). */
  const struct {
    Epi epi;
    bool ta, tb;
  } kinds[] = {{kBiasRelu, 0, 0}, {kBiasRelu, 0, 1}, {kBias, 0, 0},
               {kBias, 0, 1},     {kBgradA, 1, 0},   {kBgradA, 0, 0},
               {kBgradB, 1, 0},   {kBgradB, 1, 1}};
  int fails[kNumVars] = {0}, ran[kNumVars] = {0}, none[kNumVars] = {0},
      errs[kNumVars] = {0};
  printf("%-9s %-4s %-14s %-2s", "epilogue", "dt", "m x n x k", "ab");
  for (int v = 0; v < kNumVars; v++) printf(" %-11s", var_name[v]);
  printf("\n");
  for (const auto &kd : kinds)
    for (int dt = 0; dt < 3; dt++)
      for (const auto &sh : shapes) {
        Case c{kd.epi, (Dt)dt, sh[0], sh[1], sh[2], kd.ta, kd.tb};
        Host h;
        make_host(c, &h);
        char dims[32];
        snprintf(dims, sizeof dims, "%lldx%lldx%lld", (long long)c.m,
                 (long long)c.n, (long long)c.k);
        printf("%-9s %-4s %-14s %c%c", epi_name[c.epi], dt_name[c.dt], dims,
               c.ta ? 'T' : 'N', c.tb ? 'T' : 'N');
        char detail[1024] = "";
        size_t dl = 0;
        for (int v = 0; v < kNumVars; v++) {
          Result r = run_case(x, c, h, (Var)v);
          char cell[32];
          if (r.none) {
            snprintf(cell, sizeof cell, "-");
            none[v]++;
          } else if (!r.ran) {
            snprintf(cell, sizeof cell, "E");
            errs[v]++;
            dl += snprintf(detail + dl, sizeof detail - dl, "  [%s: %s %s]\n",
                           var_name[v], r.what, cublasGetStatusName(r.st));
          } else {
            ran[v]++;
            double tol = dt_tol[c.dt];
            bool ok = r.err_d <= tol && r.err_bg <= tol;
            if (ok)
              snprintf(cell, sizeof cell, "ok");
            else {
              fails[v]++;
              snprintf(cell, sizeof cell, "%.0e/%.0e", r.err_d, r.err_bg);
            }
            if (verbose)
              dl += snprintf(detail + dl, sizeof detail - dl,
                             "  [%s: ws %zu err %.2e/%.2e]\n", var_name[v],
                             r.ws, r.err_d, r.err_bg);
          }
          printf(" %-11s", cell);
          if (dl >= sizeof detail) dl = sizeof detail - 1;
        }
        printf("\n%s", detail);
        fflush(stdout);
      }
  int total = 0;
  printf("summary (failed/ran, no algorithm, error):");
  for (int v = 0; v < kNumVars; v++) {
    printf(" %s %d/%d,%d,%d", var_name[v], fails[v], ran[v], none[v], errs[v]);
    total += fails[v] + errs[v];
  }
  printf("\n%s\n", total ? "FAIL" : "PASS");
  return total ? 1 : 0;
}
