/* kernels/cpu/dropout.c - Dropout on the CPU: each element's keep decision
 * from kernels/philox.h (keyed as kernels/dropout_prepare.h says), output
 * x * mask and the mask (0 or 1 / (1 - rate)), float dtypes. */
#include "core/status.h"
#include "kernels/cpu/half.h"
#include "kernels/dropout_prepare.h"
#include "kernels/kernel.h"
#include "kernels/kernel_families.h"
#include "kernels/philox.h"

typedef struct drop_args {
  const rf__dropout_key *k;
  const rf_tensor *x;
  rf_tensor *y, *mask;
} drop_args;

static void drop_range(void *arg, int64_t begin, int64_t end) {
  const drop_args *a = arg;
  const rf__dropout_key *k = a->k;
  rf_dtype dt = a->x->dtype;
  for (int64_t i = begin; i < end; i++) {
    double m = rf__dropout_keep(k->seed, k->step, k->device, i, k->rate)
                   ? k->scale
                   : 0.0;
    rf__float_store(dt, a->mask->data, i, m);
    rf__float_store(dt, a->y->data, i, m * rf__float_load(dt, a->x->data, i));
  }
}

static rf_status *dropout_compute(rf__kernel_ctx *ctx) {
  rf__dropout_key k;
  RF_CHECK(rf__dropout_prepare(ctx, &k));
  drop_args a = {&k, ctx->inputs[0], NULL, NULL};
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, a.x->dtype, &a.x->shape, &a.y));
  RF_CHECK(rf__kernel_alloc_output(ctx, 1, a.x->dtype, &a.x->shape, &a.mask));
  rf__kernel_parallel_for(ctx, a.x->num_elements, 60, drop_range, &a);
  return NULL;
}

static const rf__kernel_def defs[] = {{.op = "Dropout",
                                       .device_type = RF_DEVICE_CPU,
                                       .compute = dropout_compute,
                                       .cost = RF_COST_PER_ELEMENT}};

rf_status *rf__register_cpu_dropout_kernels(void) {
  return rf__kernel_register_all(defs, 1);
}
