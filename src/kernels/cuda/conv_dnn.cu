/* kernels/cuda/conv_dnn.cu - see conv_dnn.cuh. cuDNN takes NHWC data but
 * only KRSC (out, h, w, in) filters: an OHWI filter (filter_format) is one
 * and goes to cuDNN as it is; an HWIO filter, a (kh kw c) x oc matrix, is
 * transposed into a scratch tensor before the forward pass and the input
 * gradient, and its filter gradient is computed in KRSC and transposed
 * back. Descriptors and the chosen algorithm live in a
 * process-wide cache (cuDNN's own state is process-wide too), one entry per
 * GPU, kind, dtype and geometry, found once: cudnnFind*Ex times the
 * algorithms on the device's stream with a workspace from the device's
 * allocator and waits for them (the first step of each shape only); the
 * first search is a warm-up whose times are dropped (under CUDA's lazy
 * module loading the first launch of each cuDNN kernel loads it, which made
 * cold searches pick slow algorithms for small layers), and each algorithm
 * keeps its best time of the timed searches after it. While the stream is
 * being captured into a CUDA graph nothing may wait, so cuDNN's heuristics
 * choose instead, for good (run one step uncaptured first to have the
 * search). The cache is emptied when the last GPU runtime of the process
 * goes (rf__gpu_set_idle_hook). A step itself only enqueues: scratch from
 * the device's allocator, the transposes and the cuDNN call. */
#ifdef RF_HAVE_CUDNN

#include <cudnn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "kernels/cuda/conv_dnn.cuh"

extern "C" {
#include "core/debug_counters.h"
#include "core/hash.h"
#include "kernels/fused_conv.h"
}

namespace rf_gpu {
namespace {

/* The most workspace the search offers the algorithms. */
constexpr size_t kFindWorkspaceCap = size_t(1) << 30;
/* A deterministic algorithm (same bits on every run) is taken over a faster
 * one that is not (cuDNN's filter gradients add with atomics) unless it is
 * slower by more than this factor: a 6x slower filter gradient (seen on the
 * CNN's first layer, docs/PERFORMANCE.md) is not worth the bits. */
constexpr float kDeterministicSlack = 1.1f;
/* Timed searches after the warm-up one; an algorithm's time is its best. */
constexpr int kTimedSearches = 2;

rf_status *dnn_error(const rf__kernel_ctx *ctx, cudnnStatus_t s,
                     const char *expr) {
  rf_code code = s == CUDNN_STATUS_ALLOC_FAILED    ? RF_RESOURCE_EXHAUSTED
                 : s == CUDNN_STATUS_NOT_SUPPORTED ? RF_UNIMPLEMENTED
                                                   : RF_INTERNAL;
  return rf__kernel_error(ctx, code, "cuDNN: %s failed: %s", expr,
                          cudnnGetErrorString(s));
}

/* The status of a CUDA call (NULL: it succeeded). */
#define RF_GPU_STATUS(ctx, expr)                                  \
  ([&](cudaError_t rf__e_) -> rf_status * {                       \
    return rf__e_ == cudaSuccess                                  \
               ? nullptr                                          \
               : error((ctx), rf__e_, #expr, __FILE__, __LINE__); \
  }(expr))

#define RF_DNN_CHECK(ctx, expr)                    \
  do {                                             \
    cudnnStatus_t rf__dnn_st_ = (expr);            \
    if (rf__dnn_st_ != CUDNN_STATUS_SUCCESS)       \
      return dnn_error((ctx), rf__dnn_st_, #expr); \
  } while (0)

/* All int64, so the key has no padding bytes. */
struct Key {
  int64_t ordinal, kind, dtype, tf32;
  int64_t n, h, w, c, kh, kw, oc, sh, sw, dh, dw, pt, pl;
};

struct Entry {
  Key key;
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t f;
  cudnnConvolutionDescriptor_t conv;
  /* Forward entries: the bias (1, oc, 1, 1) and the ReLU of
   * cudnnConvolutionBiasActivationForward (_FusedConv2DBiasRelu). */
  cudnnTensorDescriptor_t bias;
  cudnnActivationDescriptor_t act;
  int algo;         /* the kind's cudnnConvolution*Algo_t */
  size_t workspace; /* bytes the algorithm needs */
  float time;       /* the search's ms for algo (-1: the heuristics chose) */
  bool chosen;      /* algo and workspace are set: the entry is fixed */
  /* The descriptors are NCHW (filter KCRS): each call transposes the
   * activations (and filter) around cuDNN (run_nchw). */
  bool nchw;
  /* cudnnConvolutionBiasActivationForward said NOT_SUPPORTED for algo:
   * the fused node runs the unfused kernels from then on (read without
   * the lock). */
  std::atomic<bool> no_bias_act;
  UT_hash_handle hh;
};

std::mutex cache_mu;
Entry *cache = nullptr; /* process-wide; emptied by cache_clear */

cudnnDataType_t data_type(rf_dtype dt) {
  return dt == RF_FLOAT16    ? CUDNN_DATA_HALF
         : dt == RF_BFLOAT16 ? CUDNN_DATA_BFLOAT16
                             : CUDNN_DATA_FLOAT;
}

void entry_free(Entry *e) {
  if (e->x) cudnnDestroyTensorDescriptor(e->x);
  if (e->y) cudnnDestroyTensorDescriptor(e->y);
  if (e->f) cudnnDestroyFilterDescriptor(e->f);
  if (e->conv) cudnnDestroyConvolutionDescriptor(e->conv);
  if (e->bias) cudnnDestroyTensorDescriptor(e->bias);
  if (e->act) cudnnDestroyActivationDescriptor(e->act);
  delete e;
}

/* The idle hook: no GPU runtime is left, so no kernel uses an entry. */
void cache_clear(void) {
  std::lock_guard<std::mutex> lock(cache_mu);
  Entry *e, *tmp;
  HASH_ITER(hh, cache, e, tmp) {
    HASH_DEL(cache, e);
    entry_free(e);
  }
}

/* Merges one search's results into best[0..*n) (at most cap): an
 * algorithm (with its math type) that ran keeps its lowest time. */
template <typename Perf>
void merge(const Perf *p, int got, Perf *best, int *n, int cap) {
  for (int i = 0; i < got; i++) {
    if (p[i].status != CUDNN_STATUS_SUCCESS) continue;
    int j = 0;
    while (j < *n &&
           (best[j].algo != p[i].algo || best[j].mathType != p[i].mathType))
      j++;
    if (j == *n) {
      if (*n == cap) continue;
      best[(*n)++] = p[i];
    } else if (p[i].time < best[j].time) {
      best[j].time = p[i].time;
    }
  }
}

/* best[0..n) sorted by time, fastest first (stable: ties keep cuDNN's
 * order). */
template <typename Perf>
void sort_by_time(Perf *best, int n) {
  for (int i = 1; i < n; i++) {
    Perf v = best[i];
    int j = i;
    for (; j > 0 && best[j - 1].time > v.time; j--) best[j] = best[j - 1];
    best[j] = v;
  }
}

/* e's descriptors for g in layout NHWC (filter KRSC) or, with e->nchw,
 * NCHW (filter KCRS). */
rf_status *describe(const rf__kernel_ctx *ctx, ConvKind kind,
                    const rf__conv_geom &g, rf_dtype dtype, Entry *e) {
  cudnnDataType_t t = data_type(dtype);
  cudnnTensorFormat_t fmt = e->nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
  RF_DNN_CHECK(ctx, cudnnCreateTensorDescriptor(&e->x));
  RF_DNN_CHECK(ctx, cudnnCreateTensorDescriptor(&e->y));
  RF_DNN_CHECK(ctx, cudnnCreateFilterDescriptor(&e->f));
  RF_DNN_CHECK(ctx, cudnnCreateConvolutionDescriptor(&e->conv));
  RF_DNN_CHECK(ctx, cudnnSetTensor4dDescriptor(e->x, fmt, t, (int)g.n, (int)g.c,
                                               (int)g.h, (int)g.w));
  RF_DNN_CHECK(ctx,
               cudnnSetTensor4dDescriptor(e->y, fmt, t, (int)g.n, (int)g.oc,
                                          (int)g.oh, (int)g.ow));
  RF_DNN_CHECK(ctx, cudnnSetFilter4dDescriptor(e->f, t, fmt, (int)g.oc,
                                               (int)g.c, (int)g.kh, (int)g.kw));
  /* TensorFlow's Conv2D is a cross-correlation; float accumulation for
   * every dtype (float16/bfloat16: cuDNN's pseudo-half configurations). */
  RF_DNN_CHECK(
      ctx, cudnnSetConvolution2dDescriptor(
               e->conv, (int)g.pt, (int)g.pl, (int)g.sh, (int)g.sw, (int)g.dh,
               (int)g.dw, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  /* float32 in plain fp32 unless the session allows TF32 (as MatMul);
   * halves on tensor cores. */
  RF_DNN_CHECK(ctx, cudnnSetConvolutionMathType(
                        e->conv, dtype != RF_FLOAT32 ? CUDNN_TENSOR_OP_MATH
                                 : e->key.tf32       ? CUDNN_DEFAULT_MATH
                                                     : CUDNN_FMA_MATH));
  if (kind != ConvKind::kForward) return NULL;
  RF_DNN_CHECK(ctx, cudnnCreateTensorDescriptor(&e->bias));
  RF_DNN_CHECK(ctx,
               cudnnSetTensor4dDescriptor(e->bias, fmt, t, 1, (int)g.oc, 1, 1));
  RF_DNN_CHECK(ctx, cudnnCreateActivationDescriptor(&e->act));
  /* NaN in, 0 out: as the Relu kernels' x > 0 ? x : 0. */
  RF_DNN_CHECK(ctx, cudnnSetActivationDescriptor(e->act, CUDNN_ACTIVATION_RELU,
                                                 CUDNN_NOT_PROPAGATE_NAN, 0.0));
  return NULL;
}

/* Whether a search result may be used: ran and, for float32, no TF32
 * unless the session allows it (tf32). */
template <typename Perf>
bool usable(const Perf &p, rf_dtype dtype, bool tf32) {
  if (p.status != CUDNN_STATUS_SUCCESS) return false;
  return dtype != RF_FLOAT32 || tf32 || p.mathType == CUDNN_FMA_MATH ||
         p.mathType == CUDNN_DEFAULT_MATH;
}

/* Each kind's cuDNN calls, with one signature across kinds: (a, b, out) as
 * dnn_conv's, the filter in KRSC. */
struct Fwd {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  using Algo = cudnnConvolutionFwdAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  static cudnnStatus_t workspace(cudnnHandle_t h, const Entry *e, int algo,
                                 size_t *bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, e->x, e->f, e->conv, e->y,
                                                   (Algo)algo, bytes);
  }
  static cudnnStatus_t find(cudnnHandle_t h, const Entry *e, const void *a,
                            const void *b, void *out, int *got, Perf *p,
                            void *ws, size_t bytes) {
    return cudnnFindConvolutionForwardAlgorithmEx(
        h, e->x, a, e->f, b, e->conv, e->y, out, kCount, got, p, ws, bytes);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t h, const Entry *e, int *got,
                                  Perf *p) {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, e->x, e->f, e->conv, e->y,
                                                  kCount, got, p);
  }
  static cudnnStatus_t run(cudnnHandle_t h, const Entry *e, const void *a,
                           const void *b, void *out, void *ws) {
    const float one = 1.0f, zero = 0.0f;
    return cudnnConvolutionForward(h, &one, e->x, a, e->f, b, e->conv,
                                   (Algo)e->algo, ws, e->workspace, &zero, e->y,
                                   out);
  }
};

struct BwdData {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  static cudnnStatus_t workspace(cudnnHandle_t h, const Entry *e, int algo,
                                 size_t *bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(
        h, e->f, e->y, e->conv, e->x, (Algo)algo, bytes);
  }
  static cudnnStatus_t find(cudnnHandle_t h, const Entry *e, const void *a,
                            const void *b, void *out, int *got, Perf *p,
                            void *ws, size_t bytes) {
    return cudnnFindConvolutionBackwardDataAlgorithmEx(
        h, e->f, a, e->y, b, e->conv, e->x, out, kCount, got, p, ws, bytes);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t h, const Entry *e, int *got,
                                  Perf *p) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, e->f, e->y, e->conv,
                                                       e->x, kCount, got, p);
  }
  static cudnnStatus_t run(cudnnHandle_t h, const Entry *e, const void *a,
                           const void *b, void *out, void *ws) {
    const float one = 1.0f, zero = 0.0f;
    return cudnnConvolutionBackwardData(h, &one, e->f, a, e->y, b, e->conv,
                                        (Algo)e->algo, ws, e->workspace, &zero,
                                        e->x, out);
  }
};

struct BwdFilter {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  static constexpr int kCount = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  static cudnnStatus_t workspace(cudnnHandle_t h, const Entry *e, int algo,
                                 size_t *bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(
        h, e->x, e->y, e->conv, e->f, (Algo)algo, bytes);
  }
  static cudnnStatus_t find(cudnnHandle_t h, const Entry *e, const void *a,
                            const void *b, void *out, int *got, Perf *p,
                            void *ws, size_t bytes) {
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(
        h, e->x, a, e->y, b, e->conv, e->f, out, kCount, got, p, ws, bytes);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t h, const Entry *e, int *got,
                                  Perf *p) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, e->x, e->y, e->conv,
                                                         e->f, kCount, got, p);
  }
  static cudnnStatus_t run(cudnnHandle_t h, const Entry *e, const void *a,
                           const void *b, void *out, void *ws) {
    const float one = 1.0f, zero = 0.0f;
    return cudnnConvolutionBackwardFilter(h, &one, e->x, a, e->y, b, e->conv,
                                          (Algo)e->algo, ws, e->workspace,
                                          &zero, e->f, out);
  }
};

/* An entry's calls for its kind: each method dispatches to Fwd, BwdData
 * or BwdFilter once. */
struct Ops {
  cudnnHandle_t h;
  Entry *e;
  ConvKind kind;

  template <typename F>
  cudnnStatus_t with_kind(F &&f) const {
    switch (kind) {
      case ConvKind::kForward: return f(Fwd{});
      case ConvKind::kBackwardData: return f(BwdData{});
      default: return f(BwdFilter{});
    }
  }

  /* The most workspace any algorithm asks for. */
  size_t most_workspace() const {
    size_t most = 0;
    (void)with_kind([&](auto k) {
      using K = decltype(k);
      for (int algo = 0; algo < K::kCount; algo++) {
        size_t bytes = 0;
        if (K::workspace(h, e, algo, &bytes) == CUDNN_STATUS_SUCCESS &&
            bytes > most)
          most = bytes;
      }
      return CUDNN_STATUS_SUCCESS;
    });
    return most;
  }

  /* The perf list (best first) of a search or of the heuristics; picks the
   * fastest usable entry into e, or the fastest deterministic one when it
   * is within kDeterministicSlack of that (a search's times; the heuristics'
   * list has none, and their first usable entry is taken). Returns
   * NOT_SUPPORTED when none is usable. */
  template <typename Perf>
  cudnnStatus_t pick(const Perf *p, int got, rf_dtype dtype) const {
    int best = -1, det = -1;
    for (int i = 0; i < got; i++) {
      if (!usable(p[i], dtype, e->key.tf32 != 0)) continue;
      if (best < 0) best = i;
      if (det < 0 && p[i].determinism == CUDNN_DETERMINISTIC) det = i;
    }
    if (best < 0) return CUDNN_STATUS_NOT_SUPPORTED;
    if (det >= 0 && p[det].time <= p[best].time * kDeterministicSlack)
      best = det;
    e->algo = (int)p[best].algo;
    e->workspace = p[best].memory;
    e->time = p[best].time;
    return cudnnSetConvolutionMathType(e->conv, p[best].mathType);
  }

  /* One warm-up search, then kTimedSearches merged (merge, sort_by_time),
   * and the pick. */
  cudnnStatus_t find(const void *a, const void *b, void *out, void *ws,
                     size_t ws_bytes, rf_dtype dtype) const {
    return with_kind([&](auto k) {
      using K = decltype(k);
      typename K::Perf p[K::kCount], best[2 * K::kCount];
      int n = 0;
      for (int round = 0; round <= kTimedSearches; round++) {
        int got = 0;
        cudnnStatus_t s = K::find(h, e, a, b, out, &got, p, ws, ws_bytes);
        if (s != CUDNN_STATUS_SUCCESS) return s;
        if (round > 0) merge(p, got, best, &n, 2 * K::kCount);
      }
      sort_by_time(best, n);
      return pick(best, n, dtype);
    });
  }

  cudnnStatus_t heuristics(rf_dtype dtype) const {
    return with_kind([&](auto k) {
      using K = decltype(k);
      typename K::Perf p[K::kCount];
      int got = 0;
      cudnnStatus_t s = K::heuristics(h, e, &got, p);
      if (s == CUDNN_STATUS_SUCCESS) s = pick(p, got, dtype);
      e->time = -1.0f;
      return s;
    });
  }

  cudnnStatus_t run(const void *a, const void *b, void *out, void *ws) const {
    return with_kind(
        [&](auto k) { return decltype(k)::run(h, e, a, b, out, ws); });
  }
};

/* Runs the search for e in its layout (a, b, out as dnn_conv's, the filter
 * in KRSC, or in KCRS for an NCHW entry: the same size, and the search
 * only times). */
rf_status *search(rf__kernel_ctx *ctx, const Ops &ops, rf_dtype dtype,
                  const void *a, const void *b, void *out) {
  size_t most = ops.most_workspace();
  if (most > kFindWorkspaceCap) most = kFindWorkspaceCap;
  rf_tensor *ws = nullptr;
  if (most > 0) {
    rf_shape s = rf_shape_of(1, (int64_t)most);
    rf_status *st = new_tensor(ctx, RF_UINT8, &s, &ws);
    if (st && rf_status_code(st) != RF_RESOURCE_EXHAUSTED) return st;
    if (st) { /* search within what fits: no workspace at all */
      rf_status_free(st);
      ws = nullptr;
      most = 0;
    }
  }
  cudnnStatus_t s = ops.find(a, b, out, ws ? ws->data : nullptr, most, dtype);
  rf_tensor_release(ws);
  RF_DNN_CHECK(ctx, s);
  return NULL;
}

/* A tile of the transpose: 32 x 32 elements through shared memory, so that
 * both the reads of src's rows and the writes of dst's rows are coalesced
 * (a thread per element wrote dst with a stride of `rows` elements: one
 * 32-byte sector per element). The extra column keeps the column reads of
 * a tile of 4-byte elements free of bank conflicts. */
constexpr int kTile = 32, kTileRows = kThreads / kTile;

template <typename U>
__global__ void transpose(const U *src, U *dst, int64_t batch, int64_t rows,
                          int64_t cols) {
  __shared__ U tile[kTile][kTile + 1];
  int64_t tr = (rows + kTile - 1) / kTile, tc = (cols + kTile - 1) / kTile;
  for (int64_t t = blockIdx.x; t < batch * tr * tc; t += gridDim.x) {
    int64_t m = t / (tr * tc), u = t % (tr * tc);
    const U *s = src + m * rows * cols;
    U *d = dst + m * rows * cols;
    int64_t r0 = u / tc * kTile, c0 = u % tc * kTile;
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      int64_t r = r0 + j, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[j][threadIdx.x] = s[r * cols + c];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      int64_t c = c0 + j, r = r0 + threadIdx.x;
      if (r < rows && c < cols) d[c * rows + r] = tile[threadIdx.x][j];
    }
    __syncthreads(); /* the tile is refilled by the next iteration */
  }
}

/* For each of `batch` matrices: dst (cols x rows) = src (rows x cols)^T,
 * elements of esize bytes. */
rf_status *transpose2d(rf__kernel_ctx *ctx, const void *src, void *dst,
                       int64_t batch, int64_t rows, int64_t cols,
                       size_t esize) {
  int64_t tiles =
      batch * ((rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
  unsigned blocks = grid(ctx, tiles * kThreads);
  dim3 threads(kTile, kTileRows);
  if (esize == 2)
    transpose<uint16_t><<<blocks, threads, 0, stream(ctx)>>>(
        (const uint16_t *)src, (uint16_t *)dst, batch, rows, cols);
  else
    transpose<uint32_t><<<blocks, threads, 0, stream(ctx)>>>(
        (const uint32_t *)src, (uint32_t *)dst, batch, rows, cols);
  RF_GPU_LAUNCHED(ctx);
  return NULL;
}

/* RF_CUDNN_LAYOUT, read once (checked by rf_session_new,
 * runtime/env_knobs.c): the layout of cuDNN's float32 tensors. float16 and
 * bfloat16 stay NHWC, their tensor cores' layout: forced to NCHW, a
 * bfloat16 filter gradient of 6272 terms came back 0.04 off (an algorithm
 * that rounds partial sums to bfloat16; test_gpu_conv's case 9 on an H100,
 * where NHWC is within 8e-3). */
enum class Layout { kAuto, kNhwc, kNchw };

Layout layout_env() {
  static const Layout l = [] {
    const char *v = std::getenv("RF_CUDNN_LAYOUT");
    return v && std::strcmp(v, "nhwc") == 0   ? Layout::kNhwc
           : v && std::strcmp(v, "nchw") == 0 ? Layout::kNchw
                                              : Layout::kAuto;
  }();
  return l;
}

/* The cache entry of (ctx's GPU, kind, dtype, g), made on first use. */
rf_status *lookup(rf__kernel_ctx *ctx, ConvKind kind, const rf__conv_geom &g,
                  rf_dtype dtype, Entry **out) {
  Key k;
  std::memset(&k, 0, sizeof k);
  k = Key{ctx->device->gpu_ordinal,
          (int64_t)kind,
          (int64_t)dtype,
          dtype == RF_FLOAT32 && ctx->device->allow_tf32,
          g.n,
          g.h,
          g.w,
          g.c,
          g.kh,
          g.kw,
          g.oc,
          g.sh,
          g.sw,
          g.dh,
          g.dw,
          g.pt,
          g.pl};
  std::lock_guard<std::mutex> lock(cache_mu);
  Entry *e = nullptr;
  HASH_FIND(hh, cache, &k, sizeof k, e);
  if (!e) {
    e = new (std::nothrow) Entry();
    if (!e)
      return rf__kernel_error(ctx, RF_RESOURCE_EXHAUSTED, "out of memory");
    e->key = k; /* before describe, which reads tf32 */
    e->nchw = layout_env() == Layout::kNchw && dtype == RF_FLOAT32;
    rf_status *st = describe(ctx, kind, g, dtype, e);
    if (st) {
      entry_free(e);
      return st;
    }
    int rf__hash_oom = 0;
    HASH_ADD(hh, cache, key, sizeof(Key), e);
    if (rf__hash_oom) {
      entry_free(e);
      return rf__kernel_error(ctx, RF_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  *out = e;
  return NULL;
}

/* cuDNN's call of e's kind on (fa, fb, fout) in e's layout, with the
 * workspace its algorithm needs; with bias (forward only), relu(conv +
 * bias) in one cudnnConvolutionBiasActivationForward, alpha2 = 0 so z (the
 * output itself) is not read. NOT_SUPPORTED there (for this algorithm or
 * geometry): *fused stays false, nothing is written, and the caller runs the
 * unfused kernels. */
rf_status *run_dnn(rf__kernel_ctx *ctx, const Ops &ops, const void *fa,
                   const void *fb, void *fout, const void *bias, bool *fused) {
  Entry *e = ops.e;
  rf_tensor *ws = nullptr;
  if (e->workspace > 0) {
    rf_shape s = rf_shape_of(1, (int64_t)e->workspace);
    RF_CHECK(new_tensor(ctx, RF_UINT8, &s, &ws));
  }
  void *w = ws ? ws->data : nullptr;
  rf_status *err = nullptr;
  if (bias) {
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t s = cudnnConvolutionBiasActivationForward(
        ops.h, &one, e->x, fa, e->f, fb, e->conv,
        (cudnnConvolutionFwdAlgo_t)e->algo, w, e->workspace, &zero, e->y, fout,
        e->bias, bias, e->act, e->y, fout);
    if (s == CUDNN_STATUS_SUCCESS) {
      *fused = true;
    } else if (s != CUDNN_STATUS_NOT_SUPPORTED) {
      err = dnn_error(ctx, s, "cudnnConvolutionBiasActivationForward");
    } else if (!e->no_bias_act.exchange(true)) { /* said once */
      rf__kernel_log_unfused(ctx, "Conv2D, BiasAdd, Relu",
                             "cuDNN does not take the bias and ReLU with "
                             "the forward search's algorithm");
    }
  } else {
    cudnnStatus_t s = ops.run(fa, fb, fout, w);
    if (s != CUDNN_STATUS_SUCCESS) err = dnn_error(ctx, s, "cudnnConvolution*");
  }
  rf_tensor_release(ws);
  return err;
}

/* Scratch of n elements of dtype from the device's allocator. */
rf_status *scratch(rf__kernel_ctx *ctx, rf_dtype dtype, int64_t n,
                   rf_tensor **t) {
  rf_shape s = rf_shape_of(1, n);
  return new_tensor(ctx, dtype, &s, t);
}

/* The HWIO filter's KRSC copy in *krsc (NULL for an OHWI filter, which is
 * KRSC already); filter: the op's (an input, or NULL for a filter gradient,
 * which is only written). */
rf_status *krsc_copy(rf__kernel_ctx *ctx, const rf__conv_geom &g,
                     rf_dtype dtype, const void *filter, rf_tensor **krsc) {
  *krsc = nullptr;
  if (g.ohwi) return NULL;
  int64_t rows = g.kh * g.kw * g.c; /* HWIO as a (kh kw c) x oc matrix */
  RF_CHECK(scratch(ctx, dtype, rows * g.oc, krsc));
  if (!filter) return NULL;
  return transpose2d(ctx, filter, (*krsc)->data, 1, rows, g.oc,
                     rf_dtype_size(dtype));
}

/* The op's filter input: b of a forward, a of an input gradient; NULL for a
 * filter gradient, whose filter is only written. */
const void *filter_of(ConvKind kind, const void *a, const void *b) {
  return kind == ConvKind::kForward        ? b
         : kind == ConvKind::kBackwardData ? a
                                           : nullptr;
}

/* The op's (a, b, out) with its filter in KRSC: an HWIO filter goes
 * through krsc, a scratch copy the caller releases (NULL for OHWI). */
struct KrscCall {
  rf_tensor *krsc;
  const void *a, *b;
  void *out;
};

rf_status *krsc_call(rf__kernel_ctx *ctx, ConvKind kind, const rf__conv_geom &g,
                     rf_dtype dtype, const void *a, const void *b, void *out,
                     KrscCall *c) {
  rf_status *err = krsc_copy(ctx, g, dtype, filter_of(kind, a, b), &c->krsc);
  if (err) {
    rf_tensor_release(c->krsc);
    return err;
  }
  const void *k = c->krsc ? c->krsc->data : nullptr;
  c->a = kind == ConvKind::kBackwardData && k ? k : a;
  c->b = kind == ConvKind::kForward && k ? k : b;
  c->out = kind == ConvKind::kBackwardFilter && k ? c->krsc->data : out;
  return NULL;
}

/* e's call in NHWC: the filter in KRSC (an HWIO filter transposed to a
 * scratch copy and, for its gradient, back). */
rf_status *run_nhwc(rf__kernel_ctx *ctx, const Ops &ops, ConvKind kind,
                    const rf__conv_geom &g, rf_dtype dtype, const void *a,
                    const void *b, void *out, const void *bias, bool *fused) {
  KrscCall c;
  RF_CHECK(krsc_call(ctx, kind, g, dtype, a, b, out, &c));
  rf_status *err = run_dnn(ctx, ops, c.a, c.b, c.out, bias, fused);
  if (!err && c.krsc && kind == ConvKind::kBackwardFilter)
    err = transpose2d(ctx, c.krsc->data, out, 1, g.oc, g.kh * g.kw * g.c,
                      rf_dtype_size(dtype));
  rf_tensor_release(c.krsc);
  return err;
}

/* e's call in NCHW: the NHWC activations transposed into NCHW scratch,
 * the filter into KCRS (from KRSC: an HWIO filter goes through both), cuDNN
 * on those, and its result transposed back into out. transposes_only: no
 * cuDNN call (what choose times; out gets what the scratch held). */
rf_status *run_nchw(rf__kernel_ctx *ctx, const Ops &ops, ConvKind kind,
                    const rf__conv_geom &g, rf_dtype dtype, const void *a,
                    const void *b, void *out, const void *bias, bool *fused,
                    bool transposes_only) {
  size_t es = rf_dtype_size(dtype);
  int64_t hw = g.h * g.w, ohw = g.oh * g.ow, khw = g.kh * g.kw;
  rf_tensor *krsc = nullptr, *kcrs = nullptr, *in = nullptr, *in2 = nullptr,
            *res = nullptr;
  const void *filter = filter_of(kind, a, b);
  rf_status *err = krsc_copy(ctx, g, dtype, filter, &krsc);
  if (!err) err = scratch(ctx, dtype, khw * g.c * g.oc, &kcrs);
  /* KRSC (oc, khw, c) -> KCRS (oc, c, khw) */
  if (!err && filter)
    err = transpose2d(ctx, krsc ? krsc->data : filter, kcrs->data, g.oc, khw,
                      g.c, es);
  const void *fa = nullptr, *fb = nullptr;
  void *fout = nullptr;
  switch (kind) {
    case ConvKind::kForward: /* x (n, hw, c) -> (n, c, hw) */
      if (!err) err = scratch(ctx, dtype, g.n * hw * g.c, &in);
      if (!err) err = scratch(ctx, dtype, g.n * ohw * g.oc, &res);
      if (!err) err = transpose2d(ctx, a, in->data, g.n, hw, g.c, es);
      if (!err) fa = in->data, fb = kcrs->data, fout = res->data;
      break;
    case ConvKind::kBackwardData: /* dy (n, ohw, oc) -> (n, oc, ohw) */
      if (!err) err = scratch(ctx, dtype, g.n * ohw * g.oc, &in);
      if (!err) err = scratch(ctx, dtype, g.n * hw * g.c, &res);
      if (!err) err = transpose2d(ctx, b, in->data, g.n, ohw, g.oc, es);
      if (!err) fa = kcrs->data, fb = in->data, fout = res->data;
      break;
    default: /* x and dy */
      if (!err) err = scratch(ctx, dtype, g.n * hw * g.c, &in);
      if (!err) err = scratch(ctx, dtype, g.n * ohw * g.oc, &in2);
      if (!err) err = transpose2d(ctx, a, in->data, g.n, hw, g.c, es);
      if (!err) err = transpose2d(ctx, b, in2->data, g.n, ohw, g.oc, es);
      if (!err) fa = in->data, fb = in2->data, fout = kcrs->data;
      break;
  }
  bool ran = false;
  if (!err && !transposes_only) {
    err = run_dnn(ctx, ops, fa, fb, fout, bias, fused);
    ran = !err && (!bias || *fused);
  }
  if (!err && (ran || transposes_only)) {
    switch (kind) {
      case ConvKind::kForward: /* y (n, oc, ohw) -> (n, ohw, oc) */
        err = transpose2d(ctx, res->data, out, g.n, g.oc, ohw, es);
        break;
      case ConvKind::kBackwardData: /* dx (n, c, hw) -> (n, hw, c) */
        err = transpose2d(ctx, res->data, out, g.n, g.c, hw, es);
        break;
      default: /* KCRS -> KRSC, then an HWIO filter's (kh kw c) x oc */
        err = transpose2d(ctx, kcrs->data, krsc ? krsc->data : out, g.oc, g.c,
                          khw, es);
        if (!err && krsc)
          err = transpose2d(ctx, krsc->data, out, 1, g.oc, khw * g.c, es);
        break;
    }
  }
  rf_tensor_release(krsc);
  rf_tensor_release(kcrs);
  rf_tensor_release(in);
  rf_tensor_release(in2);
  rf_tensor_release(res);
  return err;
}

/* GPU ms of run_nchw's transposes for e's kind (the second of two runs:
 * the first loads the kernel), in *ms. */
rf_status *time_transposes(rf__kernel_ctx *ctx, const Ops &ops, ConvKind kind,
                           const rf__conv_geom &g, rf_dtype dtype,
                           const void *a, const void *b, void *out, float *ms) {
  cudaEvent_t ev[2] = {nullptr, nullptr};
  rf_status *err = nullptr;
  for (int i = 0; i < 2 && !err; i++)
    err = RF_GPU_STATUS(ctx, cudaEventCreate(&ev[i]));
  if (!err)
    err = run_nchw(ctx, ops, kind, g, dtype, a, b, out, nullptr, nullptr, true);
  if (!err) err = RF_GPU_STATUS(ctx, cudaEventRecord(ev[0], stream(ctx)));
  if (!err)
    err = run_nchw(ctx, ops, kind, g, dtype, a, b, out, nullptr, nullptr, true);
  if (!err) err = RF_GPU_STATUS(ctx, cudaEventRecord(ev[1], stream(ctx)));
  if (!err) err = RF_GPU_STATUS(ctx, cudaEventSynchronize(ev[1]));
  if (!err) err = RF_GPU_STATUS(ctx, cudaEventElapsedTime(ms, ev[0], ev[1]));
  for (int i = 0; i < 2; i++)
    if (ev[i]) cudaEventDestroy(ev[i]);
  return err;
}

/* Moves n's layout and choice into e (and e's into n, which is freed). */
void take_choice(Entry *e, Entry *n) {
  std::swap(e->x, n->x);
  std::swap(e->y, n->y);
  std::swap(e->f, n->f);
  std::swap(e->conv, n->conv);
  std::swap(e->bias, n->bias);
  std::swap(e->act, n->act);
  std::swap(e->algo, n->algo);
  std::swap(e->workspace, n->workspace);
  std::swap(e->time, n->time);
  std::swap(e->nchw, n->nchw);
}

/* Under RF_CUDNN_LAYOUT=auto, after e's NHWC search: searches NCHW too
 * and takes it when its time plus its transposes' beats NHWC's. The
 * FFT and Winograd algorithms that cuDNN offers only there win for large
 * 5x5 float32 layers (docs/PERFORMANCE.md, session 26). A layout cuDNN
 * has no usable algorithm for stays out. (fa, fb, fout: the search's
 * pointers, the filter in KRSC; a, b, out: the op's.) */
rf_status *try_nchw(rf__kernel_ctx *ctx, const Ops &ops, ConvKind kind,
                    const rf__conv_geom &g, rf_dtype dtype, const void *a,
                    const void *b, void *out, const void *fa, const void *fb,
                    void *fout) {
  Entry *e = ops.e;
  Entry *n = new (std::nothrow) Entry();
  if (!n) return rf__kernel_error(ctx, RF_RESOURCE_EXHAUSTED, "out of memory");
  n->key = e->key;
  n->nchw = true;
  Ops nops{ops.h, n, kind};
  rf_status *err = describe(ctx, kind, g, dtype, n);
  if (!err) err = search(ctx, nops, dtype, fa, fb, fout);
  if (err && rf_status_code(err) == RF_UNIMPLEMENTED) {
    rf_status_free(err); /* no NCHW algorithm: NHWC stays */
    err = nullptr;
  } else if (!err) {
    float t = -1;
    if (n->time < e->time)
      err = time_transposes(ctx, nops, kind, g, dtype, a, b, out, &t);
    bool nchw = !err && t >= 0 && n->time + t < e->time;
    char tt[64] = "";
    if (t >= 0) snprintf(tt, sizeof tt, " + %.3f ms of transposes", (double)t);
    { /* once per geometry: formatted whether or not a sink listens */
      char what[256];
      snprintf(what, sizeof what,
               "cuDNN NHWC algorithm %d %.3f ms, NCHW algorithm %d %.3f ms%s: "
               "%s",
               e->algo, (double)e->time, n->algo, (double)n->time, tt,
               nchw ? "NCHW" : "NHWC");
      rf__kernel_log_info(ctx, what);
    }
    if (nchw) take_choice(e, n);
  }
  entry_free(n);
  return err;
}

/* Chooses e's algorithm once (and, under RF_CUDNN_LAYOUT=auto, its layout):
 * by searching, or by cuDNN's heuristics in e's layout while the stream is
 * being captured into a CUDA graph (nothing may wait then). Under the
 * lock, so two devices never search the same entry at once. */
rf_status *choose(rf__kernel_ctx *ctx, const Ops &ops, ConvKind kind,
                  const rf__conv_geom &g, rf_dtype dtype, const void *a,
                  const void *b, void *out) {
  std::lock_guard<std::mutex> lock(cache_mu);
  Entry *e = ops.e;
  if (e->chosen) return NULL;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream(ctx), &cs) != cudaSuccess) {
    (void)cudaGetLastError();
    cs = cudaStreamCaptureStatusActive;
  }
  rf__debug_count_conv_search();
  if (cs != cudaStreamCaptureStatusNone) {
    cudnnStatus_t s = ops.heuristics(dtype);
    if (s != CUDNN_STATUS_SUCCESS)
      return dnn_error(ctx, s, "cudnnGetConvolution*Algorithm_v7");
    e->chosen = true;
    return NULL;
  }
  /* The search's filter in KRSC (KCRS has its size: the searches only
   * time, on the op's own buffers). */
  KrscCall c;
  RF_CHECK(krsc_call(ctx, kind, g, dtype, a, b, out, &c));
  rf_status *err = search(ctx, ops, dtype, c.a, c.b, c.out);
  if (!err && layout_env() == Layout::kAuto && dtype == RF_FLOAT32)
    err = try_nchw(ctx, ops, kind, g, dtype, a, b, out, c.a, c.b, c.out);
  rf_tensor_release(c.krsc);
  if (!err) e->chosen = true;
  return err;
}

}  // namespace

bool dnn_conv_fits(const rf__conv_geom &g, rf_dtype dtype) {
  if (dtype != RF_FLOAT32 && dtype != RF_FLOAT16 && dtype != RF_BFLOAT16)
    return false;
  const int64_t big = INT32_MAX;
  if (g.n <= 0 || g.h <= 0 || g.w <= 0 || g.c <= 0 || g.oc <= 0 || g.oh <= 0 ||
      g.ow <= 0)
    return false;
  if (g.n * g.h * g.w * g.c > big || g.n * g.oh * g.ow * g.oc > big ||
      g.kh * g.kw * g.c * g.oc > big)
    return false;
  /* The output size cuDNN derives with pt (pl) on both sides must be the
   * op's: then the extra row (column) TensorFlow pads after is never read
   * and both compute the same windows. */
  int64_t eh = g.h + 2 * g.pt - ((g.kh - 1) * g.dh + 1);
  int64_t ew = g.w + 2 * g.pl - ((g.kw - 1) * g.dw + 1);
  return eh >= 0 && ew >= 0 && eh / g.sh + 1 == g.oh && ew / g.sw + 1 == g.ow;
}

rf_status *dnn_conv(rf__kernel_ctx *ctx, ConvKind kind, const rf__conv_geom &g,
                    rf_dtype dtype, const void *a, const void *b, void *out,
                    const void *bias, bool *fused) {
  if (fused) *fused = false;
  (void)stream(ctx); /* counts the enqueue */
  cudnnHandle_t h = (cudnnHandle_t)ctx->device->dnn;
  if (!h)
    return rf__kernel_error(ctx, RF_INTERNAL,
                            "the GPU device has no cuDNN handle");
  static std::once_flag hooked; /* outside cache_mu: the hook takes it */
  std::call_once(hooked, [] { rf__gpu_set_idle_hook(cache_clear); });
  Entry *e;
  RF_CHECK(lookup(ctx, kind, g, dtype, &e));
  if (bias && e->no_bias_act.load()) return NULL; /* *fused stays false */
  Ops ops{h, e, kind};
  RF_CHECK(choose(ctx, ops, kind, g, dtype, a, b, out));
  /* Once chosen, an entry never changes: read without the lock. */
  return e->nchw
             ? run_nchw(ctx, ops, kind, g, dtype, a, b, out, bias, fused, false)
             : run_nhwc(ctx, ops, kind, g, dtype, a, b, out, bias, fused);
}

}  // namespace rf_gpu

#endif /* RF_HAVE_CUDNN */
