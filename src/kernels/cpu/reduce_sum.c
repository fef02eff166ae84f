/* kernels/cpu/reduce_sum.c - see reduce_sum.h.
 *
 * Each pass reduces one group of axes of a (outer, r, inner) view into a
 * double / uint64 accumulator buffer; the last reduced group goes first, and
 * a final step converts the accumulators to the output dtype. Contiguous rows
 * (inner == 1) add pairwise in 8 lanes; columns (inner > 1) add COL_BLOCK
 * columns at once, a loop over r the compiler vectorises. Few long rows, or
 * few column blocks over many rows, split the rows into fixed chunks whose
 * partial sums are added afterwards, so large reductions use every thread. */
#include "kernels/cpu/reduce_sum.h"

#include <math.h>
#include <string.h>

#include "core/mem.h"
#include "core/status.h"
#include "kernels/cpu/half.h"

enum {
  PAIRWISE_BLOCK = 512, /* rows up to this long add in 8 plain lanes */
  COL_BLOCK = 1024,     /* columns summed together, on the stack (16 KiB) */
  ROW_BLOCK = 64,       /* rows added into a partial before the total */
  SPLIT_CHUNK = 32768,  /* a long single row splits into chunks this long */
};

typedef enum kind {
  K_F16,
  K_BF16,
  K_F32,
  K_F64,
  K_I8,
  K_U8,
  K_I32,
  K_I64
} kind;

/* What one pass does for one input kind; dst is double* or uint64_t*. */
typedef struct kind_ops {
  /* dst[o] = sum of src row o (rows of length r), o in [ob, oe). */
  void (*rows)(const void *src, int64_t r, int64_t ob, int64_t oe, void *dst);
  /* dst[j] = sum over rr < r of src[rr * inner + j], j in [0, len). */
  void (*cols)(const void *src, int64_t r, int64_t inner, int64_t len,
               void *dst);
  size_t size; /* bytes per input element */
} kind_ops;

#define LOAD_F16(p, i) ((double)rf__h2f((p)[i]))
#define LOAD_BF16(p, i) ((double)rf__bf2f((p)[i]))
#define LOAD_PLAIN(p, i) ((double)(p)[i])
#define LOAD_SIGNED(p, i) ((uint64_t)(int64_t)(p)[i])
#define LOAD_UNSIGNED(p, i) ((uint64_t)(p)[i])

/* Float kinds: pairwise sums of rows, two-level sums of columns. */
#define DEFINE_FLOAT_KIND(NAME, T, LOAD)                                      \
  static double rowsum_##NAME(const T *x, int64_t n) {                        \
    if (n > PAIRWISE_BLOCK) {                                                 \
      int64_t h = ((n / 2) + 7) & ~(int64_t)7;                                \
      return rowsum_##NAME(x, h) + rowsum_##NAME(x + h, n - h);               \
    }                                                                         \
    double a[8] = {0};                                                        \
    int64_t i = 0;                                                            \
    for (; i + 8 <= n; i += 8)                                                \
      for (int j = 0; j < 8; j++) a[j] += LOAD(x, i + j);                     \
    for (int j = 0; i + j < n; j++) a[j] += LOAD(x, i + j);                   \
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); \
  }                                                                           \
  static void rows_##NAME(const void *src, int64_t r, int64_t ob, int64_t oe, \
                          void *dst) {                                        \
    const T *x = src;                                                         \
    for (int64_t o = ob; o < oe; o++)                                         \
      ((double *)dst)[o] = rowsum_##NAME(x + o * r, r);                       \
  }                                                                           \
  static void cols_##NAME(const void *src, int64_t r, int64_t inner,          \
                          int64_t len, void *dst) {                           \
    const T *x = src;                                                         \
    double acc[COL_BLOCK] = {0}, part[COL_BLOCK];                             \
    for (int64_t rb = 0; rb < r; rb += ROW_BLOCK) {                           \
      int64_t re = rb + ROW_BLOCK < r ? rb + ROW_BLOCK : r;                   \
      for (int64_t j = 0; j < len; j++) part[j] = 0;                          \
      for (int64_t rr = rb; rr < re; rr++) {                                  \
        const T *row = x + rr * inner;                                        \
        for (int64_t j = 0; j < len; j++) part[j] += LOAD(row, j);            \
      }                                                                       \
      for (int64_t j = 0; j < len; j++) acc[j] += part[j];                    \
    }                                                                         \
    memcpy(dst, acc, (size_t)len * sizeof(double));                           \
  }

/* Integer kinds: uint64 sums wrap, so order does not matter. */
#define DEFINE_INT_KIND(NAME, T, LOAD)                                        \
  static void rows_##NAME(const void *src, int64_t r, int64_t ob, int64_t oe, \
                          void *dst) {                                        \
    const T *x = src;                                                         \
    for (int64_t o = ob; o < oe; o++) {                                       \
      const T *row = x + o * r;                                               \
      uint64_t s = 0;                                                         \
      for (int64_t i = 0; i < r; i++) s += LOAD(row, i);                      \
      ((uint64_t *)dst)[o] = s;                                               \
    }                                                                         \
  }                                                                           \
  static void cols_##NAME(const void *src, int64_t r, int64_t inner,          \
                          int64_t len, void *dst) {                           \
    const T *x = src;                                                         \
    uint64_t acc[COL_BLOCK] = {0};                                            \
    for (int64_t rr = 0; rr < r; rr++) {                                      \
      const T *row = x + rr * inner;                                          \
      for (int64_t j = 0; j < len; j++) acc[j] += LOAD(row, j);               \
    }                                                                         \
    memcpy(dst, acc, (size_t)len * sizeof(uint64_t));                         \
  }

DEFINE_FLOAT_KIND(f16, uint16_t, LOAD_F16)
DEFINE_FLOAT_KIND(bf16, uint16_t, LOAD_BF16)
DEFINE_FLOAT_KIND(f32, float, LOAD_PLAIN)
DEFINE_FLOAT_KIND(f64, double, LOAD_PLAIN)
DEFINE_INT_KIND(i8, int8_t, LOAD_SIGNED)
DEFINE_INT_KIND(u8, uint8_t, LOAD_UNSIGNED)
DEFINE_INT_KIND(i32, int32_t, LOAD_SIGNED)
DEFINE_INT_KIND(i64, int64_t, LOAD_UNSIGNED)

static const kind_ops kinds[] = {
    [K_F16] = {rows_f16, cols_f16, 2}, [K_BF16] = {rows_bf16, cols_bf16, 2},
    [K_F32] = {rows_f32, cols_f32, 4}, [K_F64] = {rows_f64, cols_f64, 8},
    [K_I8] = {rows_i8, cols_i8, 1},    [K_U8] = {rows_u8, cols_u8, 1},
    [K_I32] = {rows_i32, cols_i32, 4}, [K_I64] = {rows_i64, cols_i64, 8},
};

static kind kind_of(rf_dtype d) {
  switch (d) {
    case RF_FLOAT16: return K_F16;
    case RF_BFLOAT16: return K_BF16;
    case RF_FLOAT32: return K_F32;
    case RF_FLOAT64: return K_F64;
    case RF_INT8: return K_I8;
    case RF_UINT8: return K_U8;
    case RF_INT32: return K_I32;
    default: return K_I64;
  }
}

static bool is_float_kind(kind k) { return k <= K_F64; }

/* The kind an accumulator buffer of input kind k is read back as. */
static kind acc_kind(kind k) { return is_float_kind(k) ? K_F64 : K_I64; }

void rf__axis_groups_make(const rf_shape *s, uint32_t mask,
                          rf__axis_groups *g) {
  g->n = 0;
  for (int k = 0; k < s->rank; k++) {
    if (s->dims[k] == 1) continue;
    bool red = (mask >> k) & 1u;
    if (g->n > 0 && g->reduced[g->n - 1] == red) {
      g->d[g->n - 1] *= s->dims[k];
    } else {
      g->d[g->n] = s->dims[k];
      g->reduced[g->n] = red;
      g->n++;
    }
  }
}

/* Removes group j, merging its neighbours when both are kept. */
static void groups_remove(rf__axis_groups *g, int j) {
  for (int k = j; k + 1 < g->n; k++) {
    g->d[k] = g->d[k + 1];
    g->reduced[k] = g->reduced[k + 1];
  }
  g->n--;
  if (j > 0 && j < g->n && g->reduced[j - 1] == g->reduced[j]) {
    g->d[j - 1] *= g->d[j];
    groups_remove(g, j);
  }
}

/* ---- one pass: (outer, r, inner) -> (outer, inner) accumulators ---- */

typedef struct pass {
  const kind_ops *ops;
  const char *src;
  void *dst; /* 8-byte accumulators */
  int64_t r, inner, nblocks, chunks;
  int64_t outer, chunk_rows; /* split columns only */
} pass;

static void run_rows(void *arg, int64_t b, int64_t e) {
  const pass *p = arg;
  p->ops->rows(p->src, p->r, b, e, p->dst);
}

/* Item = (o, block of COL_BLOCK columns). */
static void run_cols(void *arg, int64_t b, int64_t e) {
  const pass *p = arg;
  for (int64_t it = b; it < e; it++) {
    int64_t o = it / p->nblocks, j0 = (it % p->nblocks) * COL_BLOCK;
    int64_t len = p->inner - j0 < COL_BLOCK ? p->inner - j0 : COL_BLOCK;
    const char *src =
        p->src + (size_t)((o * p->r * p->inner + j0) * (int64_t)p->ops->size);
    p->ops->cols(src, p->r, p->inner, len,
                 (char *)p->dst + (size_t)(o * p->inner + j0) * 8);
  }
}

/* Item = (o, chunk of SPLIT_CHUNK elements of row o): one partial sum. */
static void run_chunks(void *arg, int64_t b, int64_t e) {
  const pass *p = arg;
  for (int64_t it = b; it < e; it++) {
    int64_t o = it / p->chunks, c0 = (it % p->chunks) * SPLIT_CHUNK;
    int64_t len = p->r - c0 < SPLIT_CHUNK ? p->r - c0 : SPLIT_CHUNK;
    const char *src =
        p->src + (size_t)((o * p->r + c0) * (int64_t)p->ops->size);
    p->ops->rows(src, len, 0, 1, (char *)p->dst + (size_t)it * 8);
  }
}

/* Item = (chunk of chunk_rows rows, o, block of columns): partial column
 * sums, stored chunk-major: dst[(chunk * outer + o) * inner + j]. */
static void run_col_chunks(void *arg, int64_t b, int64_t e) {
  const pass *p = arg;
  for (int64_t it = b; it < e; it++) {
    int64_t blk = it % p->nblocks, rest = it / p->nblocks;
    int64_t o = rest % p->outer, ch = rest / p->outer;
    int64_t j0 = blk * COL_BLOCK, r0 = ch * p->chunk_rows;
    int64_t len = p->inner - j0 < COL_BLOCK ? p->inner - j0 : COL_BLOCK;
    int64_t nr = p->r - r0 < p->chunk_rows ? p->r - r0 : p->chunk_rows;
    const char *src = p->src + (size_t)(((o * p->r + r0) * p->inner + j0) *
                                        (int64_t)p->ops->size);
    p->ops->cols(src, nr, p->inner, len,
                 (char *)p->dst + (size_t)((rest * p->inner) + j0) * 8);
  }
}

/* Few column blocks over many rows: the rows split into fixed chunks (the
 * same whatever the thread count) summed in parallel, then the chunks'
 * partial sums added in order, column by column. */
static rf_status *split_cols(rf__kernel_ctx *ctx, pass *p, kind k, int64_t w,
                             void *dst) {
  p->chunk_rows = SPLIT_CHUNK / w;
  p->chunks = (p->r + p->chunk_rows - 1) / p->chunk_rows;
  int64_t m = p->outer * p->inner;
  char *partial = rf__malloc((size_t)(p->chunks * m) * 8);
  RF_CHECK_ALLOC(partial);
  p->dst = partial;
  rf__kernel_parallel_for(ctx, p->chunks * p->outer * p->nblocks,
                          p->chunk_rows * w, run_col_chunks, p);
  const kind_ops *acc = &kinds[acc_kind(k)];
  for (int64_t j0 = 0; j0 < m; j0 += COL_BLOCK)
    acc->cols(partial + j0 * 8, p->chunks, m,
              m - j0 < COL_BLOCK ? m - j0 : COL_BLOCK, (char *)dst + j0 * 8);
  rf__free(partial);
  return NULL;
}

static rf_status *run_pass(rf__kernel_ctx *ctx, kind k, const void *src,
                           int64_t outer, int64_t r, int64_t inner, void *dst) {
  pass p = {&kinds[k], src, dst, r, inner, 0, 0, outer, 0};
  if (inner > 1) {
    p.nblocks = (inner + COL_BLOCK - 1) / COL_BLOCK;
    int64_t w = inner < COL_BLOCK ? inner : COL_BLOCK;
    if (outer * p.nblocks < 8 && r * w >= 4 * SPLIT_CHUNK)
      return split_cols(ctx, &p, k, w, dst);
    rf__kernel_parallel_for(ctx, outer * p.nblocks, r * w, run_cols, &p);
    return NULL;
  }
  if (outer >= 8 || r < 4 * SPLIT_CHUNK) {
    rf__kernel_parallel_for(ctx, outer, r, run_rows, &p);
    return NULL;
  }
  /* Few long rows: partial sums of fixed chunks (the same whatever the
   * thread count), then each row's partials added pairwise. */
  p.chunks = (r + SPLIT_CHUNK - 1) / SPLIT_CHUNK;
  void *partial = rf__malloc((size_t)(outer * p.chunks) * 8);
  RF_CHECK_ALLOC(partial);
  p.dst = partial;
  rf__kernel_parallel_for(ctx, outer * p.chunks, SPLIT_CHUNK, run_chunks, &p);
  kinds[acc_kind(k)].rows(partial, p.chunks, 0, outer, dst);
  rf__free(partial);
  return NULL;
}

/* ---- accumulators -> output dtype ---- */

typedef struct finish {
  const void *acc;
  void *out;
  rf_dtype dtype;
  int64_t count;
  bool mean;
} finish;

static int64_t as_signed(uint64_t u) {
  int64_t v;
  memcpy(&v, &u, sizeof v);
  return v;
}

/* Stores the low bits of u as a two's-complement integer of dtype d (no
 * implementation-defined narrowing conversions). */
static void store_int(void *out, int64_t i, rf_dtype d, uint64_t u) {
  switch (d) {
    case RF_INT8: {
      uint8_t b = (uint8_t)u;
      memcpy((int8_t *)out + i, &b, 1);
      break;
    }
    case RF_UINT8: ((uint8_t *)out)[i] = (uint8_t)u; break;
    case RF_INT32: {
      uint32_t b = (uint32_t)u;
      memcpy((int32_t *)out + i, &b, 4);
      break;
    }
    default: memcpy((int64_t *)out + i, &u, 8); break;
  }
}

static void run_finish(void *arg, int64_t b, int64_t e) {
  const finish *f = arg;
  if (rf_dtype_is_float(f->dtype)) {
    const double *acc = f->acc;
    double scale = f->mean ? (double)f->count : 1.0;
    for (int64_t i = b; i < e; i++) {
      double v = f->mean ? acc[i] / scale : acc[i];
      switch (f->dtype) {
        case RF_FLOAT16: ((uint16_t *)f->out)[i] = rf__f2h((float)v); break;
        case RF_BFLOAT16: ((uint16_t *)f->out)[i] = rf__f2bf((float)v); break;
        case RF_FLOAT32: ((float *)f->out)[i] = (float)v; break;
        default: ((double *)f->out)[i] = v; break;
      }
    }
    return;
  }
  const uint64_t *acc = f->acc;
  for (int64_t i = b; i < e; i++) {
    uint64_t u = acc[i];
    /* count >= 1 here, so the division cannot trap. */
    if (f->mean) u = (uint64_t)(as_signed(u) / f->count);
    store_int(f->out, i, f->dtype, u);
  }
}

/* An output of zero-element reductions: 0 for Sum, NaN for a float Mean. */
static rf_status *fill_empty(rf__kernel_ctx *ctx, bool mean, rf_tensor *out) {
  if (!mean) {
    memset(out->data, 0, out->nbytes);
    return NULL;
  }
  if (!rf_dtype_is_float(out->dtype))
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "mean of an empty set of %s values is undefined",
                            rf_dtype_name(out->dtype));
  for (int64_t i = 0; i < out->num_elements; i++) rf_tensor_set(out, i, NAN);
  return NULL;
}

/* Index of the last reduced group, or -1. */
static int last_reduced(const rf__axis_groups *g) {
  for (int j = g->n - 1; j >= 0; j--)
    if (g->reduced[j]) return j;
  return -1;
}

rf_status *rf__cpu_reduce_sum(rf__kernel_ctx *ctx, const rf_tensor *x,
                              uint32_t mask, bool mean, rf_tensor *out) {
  if (out->num_elements == 0) return NULL;
  if (x->num_elements == 0) return fill_empty(ctx, mean, out);
  int64_t count = x->num_elements / out->num_elements;
  rf__axis_groups g;
  rf__axis_groups_make(&x->shape, mask, &g);
  int j = last_reduced(&g);
  if (j < 0) { /* nothing to add up: the values themselves */
    memcpy(out->data, x->data, out->nbytes);
    return NULL;
  }
  kind k = kind_of(x->dtype);
  /* float64 and int64 accumulators already are the output's bits. */
  bool direct = x->dtype == RF_FLOAT64 || x->dtype == RF_INT64;
  const void *src = x->data;
  void *buf = NULL;
  while (j >= 0) {
    int64_t outer = 1, inner = 1, r = g.d[j];
    for (int i = 0; i < j; i++) outer *= g.d[i];
    for (int i = j + 1; i < g.n; i++) inner *= g.d[i];
    groups_remove(&g, j);
    j = last_reduced(&g);
    void *dst =
        j < 0 && direct ? out->data : rf__malloc((size_t)(outer * inner) * 8);
    rf_status *st =
        dst ? run_pass(ctx, k, src, outer, r, inner, dst) : rf__oom();
    rf__free(buf);
    buf = dst == out->data ? NULL : dst;
    if (st) {
      rf__free(buf);
      return st;
    }
    src = dst;
    k = acc_kind(k);
  }
  if (buf || mean) {
    finish f = {src, out->data, out->dtype, count, mean};
    rf__kernel_parallel_for(ctx, out->num_elements, 4, run_finish, &f);
  }
  rf__free(buf);
  return NULL;
}
