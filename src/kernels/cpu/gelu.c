/* kernels/cpu/gelu.c - CPU kernels of Gelu, _GeluGrad (dy * gelu'(x)) and
 * _GeluSecond (gelu''(x)) for the float dtypes, computed in double
 * (kernels/gelu_math.h) and rounded once. */
#include "core/status.h"
#include "kernels/cpu/half.h"
#include "kernels/gelu_math.h"
#include "kernels/kernel.h"
#include "kernels/kernel_families.h"

typedef struct gelu_args {
  const rf_tensor *dy, *x; /* dy NULL: no factor */
  rf_tensor *out;
  bool approx;
  int which;
} gelu_args;

static void gelu_range(void *arg, int64_t begin, int64_t end) {
  const gelu_args *a = arg;
  rf_dtype dt = a->x->dtype;
  for (int64_t i = begin; i < end; i++) {
    double v = rf__gelu(rf__float_load(dt, a->x->data, i), a->approx, a->which);
    if (a->dy) v *= rf__float_load(dt, a->dy->data, i);
    rf__float_store(dt, a->out->data, i, v);
  }
}

/* which: 0 Gelu(x), 1 _GeluGrad(dy, x), 2 _GeluSecond(x). */
static rf_status *run(rf__kernel_ctx *ctx, int which) {
  gelu_args a = {.which = which};
  RF_CHECK(rf__attrs_get_bool(&ctx->node->attrs, "approximate", &a.approx));
  a.x = ctx->inputs[which == 1 ? 1 : 0];
  a.dy = which == 1 ? ctx->inputs[0] : NULL;
  if (a.dy && !rf_shape_equal(&a.dy->shape, &a.x->shape))
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "dy and x have different shapes");
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, a.x->dtype, &a.x->shape, &a.out));
  rf__kernel_parallel_for(ctx, a.x->num_elements, 40, gelu_range, &a);
  return NULL;
}

static rf_status *gelu_compute(rf__kernel_ctx *ctx) { return run(ctx, 0); }
static rf_status *gelu_grad_compute(rf__kernel_ctx *ctx) { return run(ctx, 1); }
static rf_status *gelu_second_compute(rf__kernel_ctx *ctx) {
  return run(ctx, 2);
}

#define RF_GELU_KERNELS(X)                                     \
  X("Gelu", gelu_compute, 0, 0, RF_COST_PER_ELEMENT)           \
  X("_GeluGrad", gelu_grad_compute, 0, 0, RF_COST_PER_ELEMENT) \
  X("_GeluSecond", gelu_second_compute, 0, 0, RF_COST_PER_ELEMENT)

static const rf__kernel_def defs[] = {RF_GELU_KERNELS(RF__CPU_KERNEL)};

rf_status *rf__register_cpu_gelu_kernels(void) {
  return rf__kernel_register_all(defs, sizeof defs / sizeof defs[0]);
}
