/* comm/gpu/gpu_coll.c - what the two GPU collective paths share (the checks,
 * output shapes, failing a group, the stream-order switch) and the backend
 * that picks one of them per group. comm/cuda/backend.c and
 * comm/nccl/backend.c use this file and never each other. */
#include <stdatomic.h>

#include "comm/cpu/reduce_kernels.h"
#include "comm/cuda/coll_kernels.h"
#include "comm/gpu/gpu_coll.h"
#include "core/status.h"

/* ---- shared by both GPU paths ---- */

static atomic_bool wait_for_kernels;

void rf__gpu_coll_wait_for_kernels(bool on) {
  atomic_store(&wait_for_kernels, on);
}

bool rf__gpu_coll_stream_ordered(void) {
  return !atomic_load(&wait_for_kernels);
}

void rf__gpu_coll_fail(rf__coll_group *g, const rf_status *st) {
  for (int i = 0; i < g->n; i++) { /* before the dones: see collective.h */
    rf_tensor_release(g->p[i].input);
    g->p[i].input = NULL;
  }
  rf__coll_report(g->p, g->n, st, NULL);
}

static bool reduces(rf__collective_kind k) {
  return k == RF_COLL_ALL_REDUCE || k == RF_COLL_REDUCE ||
         k == RF_COLL_REDUCE_SCATTER;
}

rf_status *rf__gpu_coll_check(const rf__coll_group *g) {
  if (g->n > RF_CUDA_COLL_MAX)
    return rf__invalid("collective '%s': at most %d GPU participants, got %d",
                       g->key, RF_CUDA_COLL_MAX, g->n);
  if (reduces(g->kind) && !rf__cpu_reduce_supported(g->dtype, g->reduction))
    return rf__error(RF_UNIMPLEMENTED,
                     "collective '%s': %s of %s is not supported on GPU "
                     "devices",
                     g->key, rf__reduction_name(g->reduction),
                     rf_dtype_name(g->dtype));
  for (int i = 0; i < g->n; i++) {
    const rf_tensor *in = g->p[i].input;
    if (in && !in->on_gpu && in->nbytes > 0)
      return rf__internal(
          "collective '%s': the input of node '%s' on %s is in host memory, "
          "not device memory",
          g->key, g->p[i].node, g->p[i].device->canonical);
  }
  return NULL;
}

rf_shape rf__gpu_coll_out_shape(const rf__coll_group *g, int r) {
  rf_shape s = g->p[g->root >= 0 ? g->root : 0].shape;
  (void)r;
  if (g->kind == RF_COLL_ALL_GATHER) s.dims[0] *= g->n;
  if (g->kind == RF_COLL_REDUCE_SCATTER) s.dims[0] /= g->n;
  return s;
}

bool rf__gpu_coll_has_output(const rf__coll_group *g, int r) {
  switch (g->kind) {
    case RF_COLL_REDUCE: return r == g->root;
    case RF_COLL_BROADCAST: return r != g->root;
    default: return true;
  }
}

/* ---- the backend: CUDA kernels or NCCL per group ---- */

#ifdef RF_HAVE_NCCL
static atomic_bool nccl_single; /* tests: one participant goes to NCCL */

void rf__gpu_coll_nccl_for_single(bool on) { atomic_store(&nccl_single, on); }

static bool on_distinct_gpus(const rf__coll_group *g) {
  for (int i = 1; i < g->n; i++)
    for (int k = 0; k < i; k++)
      if (g->p[k].device->gpu_ordinal == g->p[i].device->gpu_ordinal)
        return false;
  return g->n > 1 || atomic_load(&nccl_single);
}
#endif

/* NCCL when the participants are all on distinct physical GPUs (and NCCL is
 * built); otherwise CUDA kernels: on one shared GPU, or over peer access. */
static void gpu_run(rf__coll_group *g) {
#ifdef RF_HAVE_NCCL
  if (on_distinct_gpus(g)) {
    rf__nccl_coll_run(g);
    return;
  }
#endif
  rf__cuda_coll_run(g);
}

const rf__coll_backend rf__gpu_coll_backend = {
    .name = "cuda/nccl",
    .device_type = RF_DEVICE_GPU,
    .run = gpu_run,
};
