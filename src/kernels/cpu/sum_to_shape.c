/* kernels/cpu/sum_to_shape.c - _SumToShapeOf(x, like) on the CPU: x summed
 * over the dimensions along which `like` was broadcast, giving like's shape
 * (the gradient of a broadcasting binary op w.r.t. one input).
 *
 * x's dims are grouped into runs that are all kept or all summed (size-1
 * dims dropped), so x is walked once in order with the innermost run either
 * added element-wise into the output or summed into one element. Floats
 * accumulate in float (float16/bfloat16 in a float scratch buffer, rounded
 * once at the end), integers in their unsigned type (wrapping). */
#include <string.h>

#include "core/mem.h"
#include "kernels/cpu/math_kernels.h"
#include "kernels/math_prepare.h"

typedef struct sum_plan {
  int ng; /* >= 2: group 0 is outermost */
  int64_t size[RF_MAX_RANK + 1];
  bool kept[RF_MAX_RANK + 1];
  int64_t xstride[RF_MAX_RANK + 1]; /* in x's elements */
  int64_t ostride[RF_MAX_RANK + 1]; /* in output elements; 0 when summed */
} sum_plan;

/* like's shape broadcasts to x's (rf__sum_to_shape_prepare checked it). */
static void plan_make(const rf_shape *x, const rf_shape *like, sum_plan *p) {
  p->ng = 0;
  for (int i = 0; i < x->rank; i++) {
    int k = like->rank - x->rank + i;
    int64_t xd = x->dims[i], ld = k >= 0 ? like->dims[k] : 1;
    if (xd == 1) continue;
    bool kept = ld == xd;
    if (p->ng > 0 && p->kept[p->ng - 1] == kept) {
      p->size[p->ng - 1] *= xd;
      continue;
    }
    p->size[p->ng] = xd;
    p->kept[p->ng] = kept;
    p->ng++;
  }
  while (p->ng < 2) { /* pad at the outside so the walk has an outer group */
    memmove(p->size + 1, p->size, sizeof(int64_t) * (size_t)p->ng);
    memmove(p->kept + 1, p->kept, sizeof(bool) * (size_t)p->ng);
    p->size[0] = 1;
    p->kept[0] = true;
    p->ng++;
  }
  int64_t xs = 1, os = 1;
  for (int g = p->ng - 1; g >= 0; g--) {
    p->xstride[g] = xs;
    p->ostride[g] = p->kept[g] ? os : 0;
    xs *= p->size[g];
    if (p->kept[g]) os *= p->size[g];
  }
}

typedef struct sum_job {
  const sum_plan *p;
  const void *x;
  void *acc; /* the output, or float scratch for 16-bit floats */
  void (*fn)(const struct sum_job *j, int64_t b0, int64_t e0);
} sum_job;

/* Adds the x elements with group-0 index in [b0, e0) into acc. Summed inner
 * runs use 8 independent partial sums so the loop vectorises in a fixed,
 * deterministic order. */
#define SUM_FN(sfx, T, CT, LOAD)                                     \
  static void sum_##sfx(const sum_job *jb, int64_t b0, int64_t e0) { \
    const sum_plan *p = jb->p;                                       \
    const T *x = jb->x;                                              \
    CT *acc = jb->acc;                                               \
    int last = p->ng - 1;                                            \
    int64_t inner = p->size[last], idx[RF_MAX_RANK + 1] = {0};       \
    for (int64_t g0 = b0; g0 < e0; g0++) {                           \
      int64_t xo = g0 * p->xstride[0], oo = g0 * p->ostride[0];      \
      for (;;) {                                                     \
        const T *restrict xr = x + xo;                               \
        CT *restrict ar = acc + oo;                                  \
        if (p->kept[last]) {                                         \
          for (int64_t j = 0; j < inner; j++) ar[j] += LOAD(xr[j]);  \
        } else {                                                     \
          CT s[8] = {0}, t = 0;                                      \
          int64_t j = 0;                                             \
          for (; j + 8 <= inner; j += 8)                             \
            for (int q = 0; q < 8; q++) s[q] += LOAD(xr[j + q]);     \
          for (int q = 0; q < 8; q++) t += s[q];                     \
          for (; j < inner; j++) t += LOAD(xr[j]);                   \
          ar[0] += t;                                                \
        }                                                            \
        int g = last - 1; /* odometer over groups 1 .. last-1 */     \
        for (; g >= 1; g--) {                                        \
          xo += p->xstride[g];                                       \
          oo += p->ostride[g];                                       \
          if (++idx[g] < p->size[g]) break;                          \
          xo -= p->xstride[g] * p->size[g];                          \
          oo -= p->ostride[g] * p->size[g];                          \
          idx[g] = 0;                                                \
        }                                                            \
        if (g < 1) break;                                            \
      }                                                              \
    }                                                                \
  }

#define ID(v) (v)
SUM_FN(f16, uint16_t, float, rf__h2f)
SUM_FN(bf16, uint16_t, float, rf__bf2f)
SUM_FN(f32, float, float, ID)
SUM_FN(f64, double, double, ID)
SUM_FN(i8, int8_t, uint8_t, (uint8_t))
SUM_FN(u8, uint8_t, uint8_t, ID)
SUM_FN(i32, int32_t, uint32_t, (uint32_t))
SUM_FN(i64, int64_t, uint64_t, (uint64_t))

typedef void (*sum_fn)(const sum_job *j, int64_t b0, int64_t e0);
static const sum_fn sum_fns[RF_DTYPE_COUNT] = {
    [RF_FLOAT16] = sum_f16, [RF_BFLOAT16] = sum_bf16, [RF_FLOAT32] = sum_f32,
    [RF_FLOAT64] = sum_f64, [RF_INT8] = sum_i8,       [RF_UINT8] = sum_u8,
    [RF_INT32] = sum_i32,   [RF_INT64] = sum_i64};

static void run_sum(void *arg, int64_t begin, int64_t end) {
  const sum_job *j = arg;
  j->fn(j, begin, end);
}

static rf_status *sum_to_shape_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *x = ctx->inputs[0], *like = ctx->inputs[1];
  bool done;
  RF_CHECK(rf__sum_to_shape_prepare(ctx, NULL, &done));
  if (done) return NULL;
  sum_plan p;
  plan_make(&x->shape, &like->shape, &p);
  sum_fn fn = sum_fns[x->dtype]; /* every dtype admitted has one */
  bool half = rf_dtype_size(x->dtype) == 2;
  int64_t n = like->num_elements;
  float *scratch =
      half ? rf__calloc((size_t)(n > 0 ? n : 1), sizeof(float)) : NULL;
  if (half && !scratch) return rf__oom();
  rf_tensor *y;
  rf_status *st = rf__kernel_alloc_output(ctx, 0, x->dtype, &like->shape, &y);
  if (st) {
    rf__free(scratch);
    return st;
  }
  if (!half) memset(y->data, 0, y->nbytes); /* all-zero bits: 0 for all */
  sum_job job = {&p, x->data, half ? (void *)scratch : y->data, fn};
  if (x->num_elements > 0) {
    if (p.kept[0]) /* group-0 slices write disjoint outputs */
      rf__kernel_parallel_for(ctx, p.size[0], x->num_elements / p.size[0],
                              run_sum, &job);
    else
      fn(&job, 0, p.size[0]);
  }
  if (half) {
    uint16_t *o = y->data;
    for (int64_t i = 0; i < n; i++)
      o[i] =
          x->dtype == RF_FLOAT16 ? rf__f2h(scratch[i]) : rf__f2bf(scratch[i]);
  }
  rf__free(scratch);
  return NULL;
}

static const rf__kernel_def sum_to_shape_kernel = {
    .op = "_SumToShapeOf",
    .device_type = RF_DEVICE_CPU,
    .cost = RF_COST_PER_ELEMENT,
    .compute = sum_to_shape_compute};

rf_status *rf__register_cpu_sum_to_shape_kernels(void) {
  return rf__kernel_register(&sum_to_shape_kernel);
}
