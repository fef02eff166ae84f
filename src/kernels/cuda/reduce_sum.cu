/* kernels/cuda/reduce_sum.cu - see reduce_sum.cuh.
 *
 * x's shape is seen as groups of axes (size-1 axes dropped, neighbours both
 * reduced or both kept merged); an output element o and a reduced index r
 * (both row-major over their groups) give the input offset kept(o) + red(r).
 * When the last group is reduced (rows), a warp adds each output: lane l
 * takes r = l, l + 32, ... in order, then a fixed xor butterfly adds the
 * lanes. When it is kept (columns), eight threads add each output: thread
 * j of the eight takes r = j, j + 8, ... in order, and the eight partial sums
 * are then added in order; 32 neighbouring outputs share a block, so
 * neighbouring threads read neighbouring elements. Long reductions over few
 * outputs first add fixed chunks of r into partial sums (a (K, C) or (C, K)
 * accumulator tensor), then reduce those the same way. Every split depends
 * on the shape alone, so the order of the additions does too. */
#include "kernels/cuda/reduce_sum.cuh"

#include <utility>

namespace rf_gpu {
namespace {

enum : int64_t {
  kRowChunk = 8192,   /* r per warp item once rows are split */
  kRowSplitR = 16384, /* rows split when longer than this ... */
  kRowSplitK = 2048,  /* ... and there are fewer outputs than this */
  /* Columns: a block of kColTile outputs x kColWays threads each. Columns
   * longer than kColChunk are split into chunks of at least kColChunk when
   * that brings the items (output x chunk) towards kColItems, enough to
   * fill the GPU (a column of 1024 over 512 outputs was one thread each
   * adding 1024 values: 100 us for a 2 MB read). */
  kColTile = 32,
  kColWays = 8,
  kColChunk = 512,
  kColItems = 8192,
};
static_assert(kColTile * kColWays == kThreads, "one column tile per block");

struct Layout {
  int nk, nr;                               /* kept / reduced groups */
  int64_t kd[RF_MAX_RANK], ks[RF_MAX_RANK]; /* extent, input stride */
  int64_t rd[RF_MAX_RANK], rs[RF_MAX_RANK];
  int64_t K, R; /* outputs, reduced count */
  bool rows;    /* last group reduced */
};

/* Groups of s under mask; false when nothing is reduced (x is the result). */
bool layout_make(const rf_shape *s, uint32_t mask, Layout *L) {
  int n = 0;
  int64_t d[RF_MAX_RANK];
  bool red[RF_MAX_RANK];
  for (int k = 0; k < s->rank; k++) {
    if (s->dims[k] == 1) continue;
    bool r = (mask >> k) & 1u;
    if (n > 0 && red[n - 1] == r) {
      d[n - 1] *= s->dims[k];
    } else {
      d[n] = s->dims[k];
      red[n] = r;
      n++;
    }
  }
  L->nk = L->nr = 0;
  L->K = L->R = 1;
  int64_t stride = 1;
  for (int g = n - 1; g >= 0; g--) { /* inner to outer, then reversed */
    if (red[g]) {
      L->rd[L->nr] = d[g];
      L->rs[L->nr++] = stride;
      L->R *= d[g];
    } else {
      L->kd[L->nk] = d[g];
      L->ks[L->nk++] = stride;
      L->K *= d[g];
    }
    stride *= d[g];
  }
  for (int i = 0; i < L->nk / 2; i++) {
    std::swap(L->kd[i], L->kd[L->nk - 1 - i]);
    std::swap(L->ks[i], L->ks[L->nk - 1 - i]);
  }
  for (int i = 0; i < L->nr / 2; i++) {
    std::swap(L->rd[i], L->rd[L->nr - 1 - i]);
    std::swap(L->rs[i], L->rs[L->nr - 1 - i]);
  }
  L->rows = n > 0 && red[n - 1];
  return L->nr > 0;
}

/* Offset of a row-major index over `n` groups of extents d and strides s. */
__device__ __forceinline__ int64_t offset(int n, const int64_t *d,
                                          const int64_t *s, int64_t i) {
  if (n == 1) return i * s[0];
  int64_t off = 0;
  for (int g = n - 1; g >= 0; g--) {
    int64_t q = i / d[g];
    off += (i - q * d[g]) * s[g];
    i = q;
  }
  return off;
}

/* The accumulator of T: double for floats, uint64 for integers. */
template <typename T>
using Acc = typename std::conditional<is_float_v<T>, double, uint64_t>::type;

template <typename T>
__device__ __forceinline__ Acc<T> acc_load(T x) {
  if constexpr (is_float_v<T>)
    return (double)Num<T>::load(x);
  else
    return (uint64_t)x; /* signed values sign-extend (modular) */
}

/* Turns a finished sum into an output element: the mean's division, then
 * one rounding (16-bit floats through float, as the CPU does). */
struct Finish {
  int64_t count;
  bool mean;
  template <typename O>
  __device__ O operator()(double acc) const {
    double v = mean ? acc / (double)count : acc;
    if constexpr (std::is_same<O, double>::value)
      return v;
    else
      return Num<O>::store((float)v);
  }
  template <typename O>
  __device__ O operator()(uint64_t acc) const {
    if (mean) acc = (uint64_t)((int64_t)acc / count);
    return (O)(typename Unsigned<O>::type)acc;
  }
};

/* Chunk c of item w's r range. */
__device__ __forceinline__ void chunk(int64_t R, int64_t CH, int64_t c,
                                      int64_t *r0, int64_t *r1) {
  *r0 = c * CH;
  *r1 = *r0 + CH < R ? *r0 + CH : R;
}

/* Rows: warp item w = o * C + c writes out[w] (C == 1: out[o]). */
template <typename T, typename O, bool FINAL>
__global__ void rows_kernel(Layout L, int64_t C, int64_t CH, const T *x, O *out,
                            Finish fin) {
  using A = Acc<T>;
  int lane = threadIdx.x % 32;
  int64_t items = L.K * C, warps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
       w < items; w += warps) {
    int64_t o = w / C, r0, r1;
    chunk(L.R, CH, w - o * C, &r0, &r1);
    const T *base = x + offset(L.nk, L.kd, L.ks, o);
    A acc = 0;
    for (int64_t r = r0 + lane; r < r1; r += 32)
      acc += acc_load(base[offset(L.nr, L.rd, L.rs, r)]);
    for (int m = 16; m > 0; m /= 2) acc += __shfl_xor_sync(~0u, acc, m);
    if (lane == 0) {
      if constexpr (FINAL)
        out[w] = fin.template operator()<O>(acc);
      else
        out[w] = acc;
    }
  }
}

/* Columns: item t = c * K + o writes out[t] (C == 1: out[o]); a block takes
 * kColTile consecutive items at a time, kColWays threads per item. */
template <typename T, typename O, bool FINAL>
__global__ void cols_kernel(Layout L, int64_t C, int64_t CH, const T *x, O *out,
                            Finish fin) {
  using A = Acc<T>;
  __shared__ A part[kColWays][kColTile];
  int lane = threadIdx.x % kColTile, way = threadIdx.x / kColTile;
  int64_t items = L.K * C, tiles = (items + kColTile - 1) / kColTile;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int64_t t = tile * kColTile + lane;
    A acc = 0;
    if (t < items) {
      int64_t c = t / L.K, o = t - c * L.K, r0, r1;
      chunk(L.R, CH, c, &r0, &r1);
      const T *base = x + offset(L.nk, L.kd, L.ks, o);
      for (int64_t r = r0 + way; r < r1; r += kColWays)
        acc += acc_load(base[offset(L.nr, L.rd, L.rs, r)]);
    }
    part[way][lane] = acc;
    __syncthreads();
    if (way == 0 && t < items) {
      for (int j = 1; j < kColWays; j++) acc += part[j][lane];
      if constexpr (FINAL)
        out[t] = fin.template operator()<O>(acc);
      else
        out[t] = acc;
    }
    __syncthreads(); /* part is reused by the next tile */
  }
}

template <typename T, typename O, bool FINAL>
rf_status *launch(rf__kernel_ctx *ctx, const Layout &L, int64_t C, int64_t CH,
                  const T *x, O *out, Finish fin) {
  if (L.rows)
    rows_kernel<T, O, FINAL>
        <<<grid(ctx, L.K * C * 32), kThreads, 0, stream(ctx)>>>(L, C, CH, x,
                                                                out, fin);
  else
    cols_kernel<T, O, FINAL>
        <<<grid(ctx, L.K * C * kColWays), kThreads, 0, stream(ctx)>>>(
            L, C, CH, x, out, fin);
  RF_GPU_LAUNCHED(ctx);
  return NULL;
}

/* Reduces x (shape xs, nothing empty) over mask into out, splitting long
 * reductions into chunks whose partial sums are reduced again. */
template <typename T, typename O>
rf_status *reduce_pass(rf__kernel_ctx *ctx, const T *x, const rf_shape &xs,
                       uint32_t mask, O *out, Finish fin) {
  using A = Acc<T>;
  Layout L;
  layout_make(&xs, mask, &L);
  int64_t CH = L.R;
  if (L.rows && L.R > kRowSplitR && L.K < kRowSplitK) CH = kRowChunk;
  if (!L.rows && L.R > kColChunk && L.K < kColItems) {
    int64_t want = (kColItems + L.K - 1) / L.K; /* chunks per column */
    CH = (L.R + want - 1) / want;
    if (CH < kColChunk) CH = kColChunk;
  }
  if (CH == L.R) return launch<T, O, true>(ctx, L, 1, CH, x, out, fin);
  int64_t C = (L.R + CH - 1) / CH;
  /* Partials: (K, C) for rows, (C, K) for columns; reduce the C axis. */
  int64_t dims[2] = {L.rows ? L.K : C, L.rows ? C : L.K};
  rf_shape ps = rf_shape_make(2, dims);
  rf_tensor *partial;
  RF_CHECK(
      new_tensor(ctx, is_float_v<T> ? RF_FLOAT64 : RF_INT64, &ps, &partial));
  rf_status *st =
      launch<T, A, false>(ctx, L, C, CH, x, (A *)partial->data, fin);
  if (!st)
    st = reduce_pass<A, O>(ctx, (const A *)partial->data, ps, L.rows ? 2u : 1u,
                           out, fin);
  rf_tensor_release(partial); /* stream-ordered: reused after the readers */
  return st;
}

/* out's elements all NaN, in its float dtype. */
uint64_t nan_bits(rf_dtype d) {
  switch (d) {
    case RF_FLOAT16: return 0x7e00u;
    case RF_BFLOAT16: return 0x7fc0u;
    case RF_FLOAT32: return 0x7fc00000u;
    default: return 0x7ff8000000000000ull;
  }
}

}  // namespace

rf_status *reduce_sum(rf__kernel_ctx *ctx, const rf_tensor *x, uint32_t mask,
                      bool mean, rf_tensor *out) {
  if (out->num_elements == 0) return NULL;
  size_t es = rf_dtype_size(out->dtype);
  if (x->num_elements == 0) { /* 0 for a sum, NaN for a float mean */
    if (!mean) return fill_bits(ctx, out->data, es, out->num_elements, 0);
    if (!rf_dtype_is_float(out->dtype))
      return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                              "mean of an empty set of %s values is undefined",
                              rf_dtype_name(out->dtype));
    return fill_bits(ctx, out->data, es, out->num_elements,
                     nan_bits(out->dtype));
  }
  Layout L;
  if (!layout_make(&x->shape, mask, &L)) { /* nothing to add up */
    RF_GPU_CHECK(ctx, cudaMemcpyAsync(out->data, x->data, out->nbytes,
                                      cudaMemcpyDeviceToDevice, stream(ctx)));
    return NULL;
  }
  Finish fin = {x->num_elements / out->num_elements, mean};
  return visit_numeric(x->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return reduce_pass<T, T>(ctx, (const T *)x->data, x->shape, mask,
                             (T *)out->data, fin);
  });
}

}  // namespace rf_gpu
