/* comm/cuda/backend.c - the CUDA-kernel path of the GPU collectives
 * (comm/gpu/gpu_coll.c picks it or NCCL per group). It serves virtual
 * GPU devices sharing one physical GPU (NCCL refuses two ranks on one GPU):
 * the leader's stream (the root's, else rank 0's) waits for every
 * participant's stream (its input is ready; left out where nothing was
 * enqueued since the last such wait: device/gpu/order.h) and runs one
 * kernel that writes every participant's output, every other participant's
 * stream waits for the kernel, and the dones are called at once (stream
 * order: see gpu_coll.h). Outputs are allocated from each
 * participant's own device allocator before the launch, and inputs released
 * after it: either block is reused only in its own device's stream order,
 * which the final wait puts after the kernel. The waits and the kernel are
 * enqueued holding every participant's capture_mu (device/device.h): while
 * a step is captured as a CUDA graph, another thread may be inside a cuBLAS
 * call on one of these streams, and cuBLAS edits a capturing stream's
 * dependencies by read-modify-write, which drops what we enqueue there
 * meanwhile from the stream's order. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <string.h>

#include "comm/cuda/coll_kernels.h"
#include "comm/gpu/gpu_coll.h"
#include "core/cuda_check.h"
#include "core/mem.h"
#include "core/status.h"
#include "device/gpu/gpu.h"
#include "device/gpu/order.h"

_Static_assert(RF_REDUCE_SUM == 0 && RF_REDUCE_PROD == 1 &&
                   RF_REDUCE_MIN == 2 && RF_REDUCE_MAX == 3 &&
                   RF_REDUCE_AVG == 4,
               "coll_kernels.cu numbers the reductions this way");

/* ---- the CUDA-kernel path ---- */

typedef struct cuda_op {
  rf__gpu_notify notify; /* first: the completion gets it back */
  rf__coll_group g;      /* g.p = parts, g.key = key */
  rf__coll_participant *parts;
  char *key;
  rf_tensor *outs[RF_CUDA_COLL_MAX]; /* per rank; NULL: no output */
} cuda_op;

static void op_free(cuda_op *op) {
  for (int i = 0; i < op->g.n; i++) {
    rf_tensor_release(op->parts[i].input);
    rf_tensor_release(op->outs[i]);
  }
  rf__free(op->parts);
  rf__free(op->key);
  rf__free(op);
}

/* A copy of g that outlives run(), taking over the manager's input
 * references (g's become NULL). */
static cuda_op *op_new(rf__coll_group *g) {
  cuda_op *op = rf__calloc(1, sizeof *op);
  if (!op) return NULL;
  op->parts = rf__malloc(sizeof *op->parts * (size_t)g->n);
  op->key = rf__strdup(g->key);
  if (!op->parts || !op->key) {
    rf__free(op->parts);
    rf__free(op->key);
    rf__free(op);
    return NULL;
  }
  memcpy(op->parts, g->p, sizeof *op->parts * (size_t)g->n);
  for (int i = 0; i < g->n; i++) g->p[i].input = NULL;
  op->g = *g;
  op->g.p = op->parts;
  op->g.key = op->key;
  return op;
}

/* Calls every done (outputs on success, copies of st otherwise), frees op
 * and st. */
static void op_finish(cuda_op *op, rf_status *st) {
  rf__coll_group *g = &op->g;
  for (int i = 0; i < g->n; i++) { /* before the dones: see collective.h */
    rf_tensor_release(g->p[i].input);
    g->p[i].input = NULL;
  }
  rf__coll_report(g->p, g->n, st, op->outs);
  rf_status_free(st);
  op_free(op);
}

static void op_completed(rf__gpu_notify *n, rf_status *st) {
  cuda_op *op = (cuda_op *)n;
  if (st)
    st = rf__status_prefix(st, "collective '%s' (step %lld)", op->g.key,
                           (long long)op->g.step_id);
  op_finish(op, st);
}

static int leader_of(const rf__coll_group *g) {
  return g->root >= 0 ? g->root : 0;
}

/* Every GPU holding a participant or an input must be reachable from the
 * leader's GPU (the same one, or a peer). */
static rf_status *check_reach(const rf__coll_group *g) {
  const rf__device *lead = g->p[leader_of(g)].device;
  for (int i = 0; i < g->n; i++) {
    int o = g->p[i].device->gpu_ordinal, can = 1;
    int t = rf__gpu_tensor_ordinal(g->p[i].input);
    for (int k = 0; k < 2; k++) {
      int ord = k ? t : o;
      if (ord < 0 || ord == lead->gpu_ordinal) continue;
      RF_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, lead->gpu_ordinal, ord));
      if (!can)
        return rf__error(RF_UNIMPLEMENTED,
                         "collective '%s': %s (physical GPU %d) cannot reach "
                         "the memory of %s (physical GPU %d) and NCCL cannot "
                         "run it either (participants must share one GPU or "
                         "all be on distinct GPUs)",
                         g->key, lead->canonical, lead->gpu_ordinal,
                         g->p[i].device->canonical, ord);
    }
  }
  return NULL;
}

/* Allocates each receiving rank's output from its own device and fills the
 * kernel's arguments. */
static rf_status *prepare(cuda_op *op, rf__cuda_coll_args *a) {
  rf__coll_group *g = &op->g;
  int lead = leader_of(g);
  memset(a, 0, sizeof *a);
  a->dtype = g->dtype;
  a->op = (int)g->reduction;
  a->n = g->n;
  a->count = rf_shape_num_elements(&g->p[lead].shape);
  switch (g->kind) {
    case RF_COLL_REDUCE_SCATTER: a->mode = RF_CUDA_COLL_REDUCE_SCATTER; break;
    case RF_COLL_ALL_GATHER:
    case RF_COLL_BROADCAST: a->mode = RF_CUDA_COLL_GATHER; break;
    default: a->mode = RF_CUDA_COLL_REDUCE;
  }
  if (g->kind == RF_COLL_BROADCAST) { /* the gather of the root's input */
    a->n = 1;
    a->in[0] = g->p[lead].input->data;
  } else {
    for (int i = 0; i < g->n; i++) a->in[i] = g->p[i].input->data;
  }
  for (int r = 0; r < g->n; r++) {
    if (!rf__gpu_coll_has_output(g, r)) continue;
    rf_shape s = rf__gpu_coll_out_shape(g, r);
    const rf__device *d = g->p[r].device;
    rf_status *st =
        rf__tensor_new_device(g->dtype, &s, d->allocator, &op->outs[r]);
    if (st)
      return rf__status_prefix(st, "collective '%s': output on %s", g->key,
                               d->canonical);
    /* reduce-scatter addresses its outputs by rank; the others list them */
    if (a->mode == RF_CUDA_COLL_REDUCE_SCATTER)
      a->out[r] = op->outs[r]->data;
    else
      a->out[a->num_outs++] = op->outs[r]->data;
  }
  if (a->mode == RF_CUDA_COLL_REDUCE_SCATTER) a->num_outs = g->n;
  return NULL;
}

/* The participants' devices, for rf__gpu_order_after. */
static int devices_of(const rf__coll_group *g, const rf__device **out) {
  for (int i = 0; i < g->n; i++) out[i] = g->p[i].device;
  return g->n;
}

/* Takes (lock) or lets go of the capture_mu of every participant's device,
 * in device order (g->p is sorted by device index). Uncontended outside
 * captures: the executor takes a capture_mu only while capturing. */
static void hold_streams(const rf__coll_group *g, bool lock) {
  for (int i = 0; i < g->n; i++) {
    rf__device *d = g->p[i].device;
    if (i && d == g->p[i - 1].device) continue;
    if (lock)
      pthread_mutex_lock(&d->capture_mu);
    else
      pthread_mutex_unlock(&d->capture_mu);
  }
}

/* Enqueues waits, kernel, waits, and the completion unless the dones go in
 * stream order. The leader's wait for a participant is left out when that
 * stream has enqueued nothing since it last waited for the leader (a
 * variable read in a loop of pipelined steps: device/gpu/order.h). The
 * kernel counts as an enqueue on the leader's stream. *launched is set once
 * the kernel is queued (the caller must then wait for the stream before
 * freeing anything on error). */
static rf_status *enqueue_held(cuda_op *op, const rf__cuda_coll_args *a,
                               bool ordered, bool *launched) {
  rf__coll_group *g = &op->g;
  const rf__device *lead = g->p[leader_of(g)].device;
  for (int i = 0; i < g->n; i++) /* the leader waits for every input */
    RF_CHECK(rf__gpu_order_after(g->p[i].device, &lead, 1));
  RF_CHECK(lead->enter(lead));
  const rf__gpu_context *ctx = lead->gpu;
  rf__gpu_enqueue_begin(lead->order);
  rf_status *st = rf__cuda_coll_launch(a, lead->stream, ctx->multiprocessors);
  rf__gpu_enqueue_end(lead->order);
  RF_CHECK(st);
  *launched = true;
  const rf__device *parts[RF_CUDA_COLL_MAX];
  /* every stream waits for the kernel */
  RF_CHECK(rf__gpu_order_after(lead, parts, devices_of(g, parts)));
  if (ordered) return NULL;
  RF_CHECK(lead->enter(lead));
  return rf__gpu_notify_when_done(lead, &op->notify, op_completed);
}

/* enqueue_held under the participants' capture_mu (top of the file). */
static rf_status *enqueue(cuda_op *op, const rf__cuda_coll_args *a,
                          bool ordered, bool *launched) {
  hold_streams(&op->g, true);
  rf_status *st = enqueue_held(op, a, ordered, launched);
  hold_streams(&op->g, false);
  return st;
}

void rf__cuda_coll_run(rf__coll_group *g) {
  rf_status *st = rf__gpu_coll_check(g);
  if (!st) st = check_reach(g);
  cuda_op *op = st ? NULL : op_new(g);
  if (!st && !op) st = rf__oom();
  if (st) {
    rf__gpu_coll_fail(g, st);
    rf_status_free(st);
    return;
  }
  rf__cuda_coll_args a;
  st = prepare(op, &a);
  if (!st && (a.count == 0 || a.num_outs == 0)) { /* nothing to move */
    op_finish(op, NULL);
    return;
  }
  bool launched = false, ordered = rf__gpu_coll_stream_ordered();
  if (!st) st = enqueue(op, &a, ordered, &launched);
  if (!st && ordered) { /* every stream now waits for the kernel */
    op_finish(op, NULL);
    return;
  }
  if (!st) return; /* op_completed finishes (op may be gone already) */
  if (launched) {  /* the kernel may still read and write our buffers */
    const rf__device *lead = g->p[leader_of(g)].device;
    rf_status_free(rf__gpu_sync(lead));
  }
  op_finish(op, rf__status_prefix(st, "collective '%s' (step %lld)", g->key,
                                  (long long)g->step_id));
}
