/* kernels/cpu/bucket_kernels.c - the kernels of a bucket of fused
 * all-reduces (passes/bucket_collectives.c). _BucketPack lays its inputs
 * out in one flat tensor at the offsets the pass chose. Its output is
 * normally the tensor the inputs' producers already wrote into
 * (runtime/executor_homes.c): an input found at its place is not copied;
 * the others are (one copy in). On the CPU the gaps that keep each slice
 * 64-byte aligned are zeroed, so the reduction never reads uninitialised
 * memory (memset is cheap there; on a GPU it is a launch, see below).
 * The first step logs how many inputs were in place. _BucketUnpack copies
 * nothing: each output is a view of the reduced tensor
 * (rf__tensor_new_slice), on CPU and GPU devices alike (host work only). */
#include <stdatomic.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/status.h"
#include "device/device.h"
#include "kernels/kernel.h"
#include "kernels/kernel_families.h"
#ifdef RF_HAVE_CUDA
#include "core/cuda_check.h"
#endif

/* The offsets attr, checked against the inputs (or outputs) it places: each
 * slice inside `total` and after the one before. */
static rf_status *read_offsets(rf__kernel_ctx *ctx, int n,
                               const int64_t *counts, int64_t total,
                               const int64_t **offsets) {
  int k;
  RF_CHECK(rf__attrs_get_int_list(&ctx->node->attrs, "offsets", offsets, &k));
  if (k != n)
    return rf__kernel_error(ctx, RF_INTERNAL, "%d offsets for %d slices", k, n);
  int64_t end = 0;
  for (int i = 0; i < n; i++) {
    int64_t o = (*offsets)[i];
    if (o < end || counts[i] > total - o)
      return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                              "slice %d (%lld elements at %lld) does not fit "
                              "the bucket of %lld elements",
                              i, (long long)counts[i], (long long)o,
                              (long long)total);
    end = o + counts[i];
  }
  return NULL;
}

/* Per pack node: whether its first step has been logged. */
typedef struct pack_state {
  atomic_bool logged;
} pack_state;

static rf_status *pack_init(const rf_node *node, void **state) {
  (void)node;
  pack_state *s = rf__malloc(sizeof *s);
  RF_CHECK_ALLOC(s);
  atomic_init(&s->logged, false);
  *state = s;
  return NULL;
}

static void pack_destroy(void *state) { rf__free(state); }

/* Once per node: how many inputs the producers wrote in place. */
static void log_first_step(rf__kernel_ctx *ctx, int copied, size_t bytes) {
  pack_state *s = ctx->state;
  if (!s || !rf__log_on(RF_LOG_INFO) ||
      atomic_exchange_explicit(&s->logged, true, memory_order_relaxed))
    return;
  rf__log_write(RF_LOG_INFO,
                "bucket '%.200s' on %s: %d of %d inputs written in place by "
                "their producers, %d copied in (%zu bytes)",
                ctx->node->name, ctx->device ? ctx->device->canonical : "?",
                ctx->num_inputs - copied, ctx->num_inputs, copied, bytes);
}

/* Allocates the packed output and checks the layout; *offsets the attr's. */
static rf_status *pack_prepare(rf__kernel_ctx *ctx, rf_tensor **out,
                               const int64_t **offsets) {
  int64_t total, counts[64];
  int n = ctx->num_inputs;
  RF_CHECK(rf__attrs_get_int(&ctx->node->attrs, "total", &total));
  if (n > 64)
    return rf__kernel_error(ctx, RF_INTERNAL, "%d inputs; at most 64", n);
  for (int i = 0; i < n; i++) counts[i] = ctx->inputs[i]->num_elements;
  RF_CHECK(read_offsets(ctx, n, counts, total, offsets));
  rf_shape s = rf_shape_of(1, total);
  return rf__kernel_alloc_output(ctx, 0, ctx->inputs[0]->dtype, &s, out);
}

static rf_status *pack_compute(rf__kernel_ctx *ctx) {
  rf_tensor *out;
  const int64_t *offsets;
  RF_CHECK(pack_prepare(ctx, &out, &offsets));
  size_t esize = rf_dtype_size(out->dtype), end = 0, bytes = 0;
  char *p = out->data;
  int copied = 0;
  for (int i = 0; i < ctx->num_inputs; i++) {
    const rf_tensor *x = ctx->inputs[i];
    size_t at = (size_t)offsets[i] * esize;
    memset(p + end, 0, at - end);
    if (x->data != p + at && x->nbytes > 0) {
      memcpy(p + at, x->data, x->nbytes);
      copied++;
      bytes += x->nbytes;
    }
    end = at + x->nbytes;
  }
  memset(p + end, 0, out->nbytes - end);
  log_first_step(ctx, copied, bytes);
  return NULL;
}

static rf_status *unpack_compute(rf__kernel_ctx *ctx) {
  rf_tensor *x = ctx->inputs[0];
  const rf__attr_value *v = rf__attrs_find(&ctx->node->attrs, "shapes");
  int n = ctx->num_outputs;
  int64_t counts[64];
  if (!v || v->type != RF_ATTR_SHAPE_LIST || v->n != n || n > 64)
    return rf__kernel_error(ctx, RF_INTERNAL, "bad shapes attr");
  for (int i = 0; i < n; i++)
    counts[i] = rf_shape_num_elements(&v->u.shapes[i]);
  const int64_t *offsets;
  RF_CHECK(read_offsets(ctx, n, counts, x->num_elements, &offsets));
  for (int i = 0; i < n; i++) {
    rf_status *st =
        rf__tensor_new_slice(x, offsets[i], &v->u.shapes[i], &ctx->outputs[i]);
    if (st) {
      rf__kernel_drop_outputs(ctx);
      return rf__kernel_error_at(ctx, st);
    }
  }
  return NULL;
}

static const rf__kernel_def cpu_kernels[] = {
    /* Cheap: run inline like the all-reduce it feeds (below 1 MiB the
     * collective stays on one thread too); handing it to a pool worker cost
     * more than the copy (bench_bucket_allreduce, docs/PERFORMANCE.md). */
    {.op = "_BucketPack",
     .device_type = RF_DEVICE_CPU,
     .init = pack_init,
     .destroy = pack_destroy,
     .compute = pack_compute,
     .cost = RF_COST_CHEAP},
    {.op = "_BucketUnpack",
     .device_type = RF_DEVICE_CPU,
     .compute = unpack_compute,
     .cost = RF_COST_CHEAP},
};

rf_status *rf__register_cpu_bucket_kernels(void) {
  return rf__kernel_register_all(cpu_kernels,
                                 sizeof cpu_kernels / sizeof *cpu_kernels);
}

#ifdef RF_HAVE_CUDA
/* The same layout on the device's stream, in stream order after the
 * inputs' producers: a device-to-device copy of each input not already in
 * place. Unlike on the CPU the gaps are not zeroed: each would take its own
 * cudaMemsetAsync (about one per input, a launch as dear as an unfused
 * all-reduce's: ~240 a device and step for 256 gradients), and nothing
 * reads them - the reduction (and a wire Cast) is element by element, so a
 * gap's bytes reach only the same gap of the result, which no view of
 * _BucketUnpack covers. */
static rf_status *gpu_pack_compute(rf__kernel_ctx *ctx) {
  rf_tensor *out;
  const int64_t *offsets;
  RF_CHECK(pack_prepare(ctx, &out, &offsets));
  cudaStream_t stream = rf__gpu_kernel_stream(ctx);
  size_t esize = rf_dtype_size(out->dtype), bytes = 0;
  char *p = out->data;
  int copied = 0;
  rf_status *st = NULL;
  for (int i = 0; i < ctx->num_inputs && !st; i++) {
    size_t at = (size_t)offsets[i] * esize;
    const rf_tensor *x = ctx->inputs[i];
    if (x->data != p + at && x->nbytes > 0) {
      st = RF_CUDA_STATUS(cudaMemcpyAsync(p + at, x->data, x->nbytes,
                                          cudaMemcpyDeviceToDevice, stream));
      copied++;
      bytes += x->nbytes;
    }
  }
  if (!st) log_first_step(ctx, copied, bytes);
  return rf__kernel_error_at(ctx, st);
}

static const rf__kernel_def gpu_kernels[] = {
    {.op = "_BucketPack",
     .device_type = RF_DEVICE_GPU,
     .init = pack_init,
     .destroy = pack_destroy,
     .compute = gpu_pack_compute},
    {.op = "_BucketUnpack",
     .device_type = RF_DEVICE_GPU,
     .compute = unpack_compute,
     .cost = RF_COST_CHEAP},
};

rf_status *rf__register_gpu_bucket_kernels(void) {
  return rf__kernel_register_all(gpu_kernels,
                                 sizeof gpu_kernels / sizeof *gpu_kernels);
}
#endif
