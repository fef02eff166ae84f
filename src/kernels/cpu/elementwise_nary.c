/* kernels/cpu/elementwise_nary.c - Neg and AddN on the CPU: flat loops over
 * tensors of one shape. AddN accumulates blocks of RF_MATH_BLOCK elements on
 * the stack in the compute type (float for float16/bfloat16, the unsigned
 * type for integers, which wraps) and rounds once per element. */
#include "kernels/cpu/math_kernels.h"
#include "kernels/math_prepare.h"

#define ID(v) (v)

/* ---- Neg ---- */

typedef void (*neg_fn)(const void *x, void *y, int64_t n);

/* Negating a 16-bit float flips its sign bit: exact, NaN stays NaN. */
static void neg_16(const void *vx, void *vy, int64_t n) {
  const uint16_t *restrict x = vx;
  uint16_t *restrict y = vy;
  for (int64_t i = 0; i < n; i++) y[i] = (uint16_t)(x[i] ^ 0x8000u);
}

/* Integers negate in the unsigned type: -INT_MIN wraps to INT_MIN. */
#define NEG_FN(sfx, T, UT)                                     \
  static void neg_##sfx(const void *vx, void *vy, int64_t n) { \
    const T *restrict x = vx;                                  \
    T *restrict y = vy;                                        \
    for (int64_t i = 0; i < n; i++) y[i] = (T)(0 - (UT)x[i]);  \
  }
NEG_FN(i8, int8_t, uint8_t)
NEG_FN(i32, int32_t, uint32_t)
NEG_FN(i64, int64_t, uint64_t)

/* -x, not 0 - x: the negation of +0 is -0. */
#define NEG_FLOAT_FN(sfx, T)                                   \
  static void neg_##sfx(const void *vx, void *vy, int64_t n) { \
    const T *restrict x = vx;                                  \
    T *restrict y = vy;                                        \
    for (int64_t i = 0; i < n; i++) y[i] = -x[i];              \
  }
NEG_FLOAT_FN(f32, float)
NEG_FLOAT_FN(f64, double)

static const neg_fn neg_fns[RF_DTYPE_COUNT] = {
    [RF_FLOAT16] = neg_16,  [RF_BFLOAT16] = neg_16, [RF_FLOAT32] = neg_f32,
    [RF_FLOAT64] = neg_f64, [RF_INT8] = neg_i8,     [RF_INT32] = neg_i32,
    [RF_INT64] = neg_i64};

typedef struct neg_job {
  neg_fn fn;
  const char *x;
  char *y;
  size_t esize;
} neg_job;

static void run_neg(void *arg, int64_t begin, int64_t end) {
  const neg_job *j = arg;
  size_t off = (size_t)begin * j->esize;
  j->fn(j->x + off, j->y + off, end - begin);
}

static rf_status *neg_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *x = ctx->inputs[0];
  RF_CHECK(rf__neg_prepare(ctx));
  neg_fn fn = neg_fns[x->dtype]; /* the table has every dtype admitted */
  rf_tensor *y;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, x->dtype, &x->shape, &y));
  neg_job job = {fn, x->data, y->data, rf_dtype_size(x->dtype)};
  rf__kernel_parallel_for(ctx, x->num_elements, 1, run_neg, &job);
  return NULL;
}

/* ---- AddN ---- */

typedef void (*add_n_fn)(rf_tensor *const *in, int k, void *out, int64_t begin,
                         int64_t end);

#define ADD_N_FN(sfx, T, CT, LOAD, STORE)                            \
  static void add_n_##sfx(rf_tensor *const *in, int k, void *vo,     \
                          int64_t begin, int64_t end) {              \
    T *restrict o = vo;                                              \
    CT acc[RF_MATH_BLOCK];                                           \
    for (int64_t s = begin; s < end; s += RF_MATH_BLOCK) {           \
      int64_t n = end - s < RF_MATH_BLOCK ? end - s : RF_MATH_BLOCK; \
      const T *restrict x0 = (const T *)in[0]->data + s;             \
      for (int64_t i = 0; i < n; i++) acc[i] = LOAD(x0[i]);          \
      for (int j = 1; j < k; j++) {                                  \
        const T *restrict xj = (const T *)in[j]->data + s;           \
        for (int64_t i = 0; i < n; i++) acc[i] += LOAD(xj[i]);       \
      }                                                              \
      for (int64_t i = 0; i < n; i++) o[s + i] = STORE(acc[i]);      \
    }                                                                \
  }
ADD_N_FN(f16, uint16_t, float, rf__h2f, rf__f2h)
ADD_N_FN(bf16, uint16_t, float, rf__bf2f, rf__f2bf)
ADD_N_FN(f32, float, float, ID, ID)
ADD_N_FN(f64, double, double, ID, ID)
ADD_N_FN(i8, int8_t, uint8_t, (uint8_t), (int8_t))
ADD_N_FN(u8, uint8_t, uint8_t, ID, ID)
ADD_N_FN(i32, int32_t, uint32_t, (uint32_t), (int32_t))
ADD_N_FN(i64, int64_t, uint64_t, (uint64_t), (int64_t))

static const add_n_fn add_n_fns[RF_DTYPE_COUNT] = {
    [RF_FLOAT16] = add_n_f16, [RF_BFLOAT16] = add_n_bf16,
    [RF_FLOAT32] = add_n_f32, [RF_FLOAT64] = add_n_f64,
    [RF_INT8] = add_n_i8,     [RF_UINT8] = add_n_u8,
    [RF_INT32] = add_n_i32,   [RF_INT64] = add_n_i64};

typedef struct add_n_job {
  add_n_fn fn;
  rf_tensor *const *in;
  int k;
  void *out;
} add_n_job;

static void run_add_n(void *arg, int64_t begin, int64_t end) {
  const add_n_job *j = arg;
  j->fn(j->in, j->k, j->out, begin, end);
}

static rf_status *add_n_compute(rf__kernel_ctx *ctx) {
  rf_tensor *const *in = ctx->inputs;
  int k = ctx->num_inputs;
  bool done;
  RF_CHECK(rf__add_n_prepare(ctx, &done));
  if (done) return NULL;
  add_n_fn fn = add_n_fns[in[0]->dtype]; /* every dtype admitted */
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, in[0]->dtype, &in[0]->shape, &out));
  add_n_job job = {fn, in, k, out->data};
  rf__kernel_parallel_for(ctx, out->num_elements, k, run_add_n, &job);
  return NULL;
}

static const rf__kernel_def nary_kernels[] = {RF_NARY_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_nary_kernels(void) {
  return rf__kernel_register_all(nary_kernels,
                                 sizeof nary_kernels / sizeof nary_kernels[0]);
}
