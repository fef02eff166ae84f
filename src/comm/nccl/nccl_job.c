/* comm/nccl/nccl_job.c - NCCL across the processes of an MPI job
 * (nccl_job.h). Communicators are made without blocking
 * (ncclCommInitRankConfig with blocking = 0, all of a process's ranks in
 * one group) and polled through ncclCommGetAsyncError, so the MPI engine's
 * thread keeps watching deadlines. A launch puts every local rank's call in
 * one ncclGroupStart/End on the participants' own streams (stream order
 * makes the inputs ready and the outputs safe to reuse). Completion as in
 * the single-process backend (comm/nccl/backend.c): the GPU runtime's
 * completion thread (device/gpu/completion.c) sees each participant's
 * stream finish and hands a pool task over; the last one reads the
 * communicators' asynchronous errors and reports. A communicator's mutex
 * orders launches, those reads and the abort (the engine aborts a set whose
 * collective missed its deadline while completions may be reading), and
 * its references (the set's, one per launch in flight) keep it until the
 * last completion. Compiled only with MPI as well. */
#ifdef RF_HAVE_MPI
#include "comm/nccl/nccl_job.h"

#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/gpu/gpu_coll.h"
#include "core/cuda_check.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/status.h"
#include "device/gpu/gpu.h"
#include "device/gpu/order.h"

#define MAX_LOCAL 64

_Static_assert(RF_NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "unique id size");

struct rf__nccl_job_comm {
  int n;
  ncclComm_t comms[MAX_LOCAL];
  rf__device *devs[MAX_LOCAL];
  pthread_mutex_t mu; /* launches, async-error reads and the abort */
  bool aborted;       /* under mu: the comms are gone */
  atomic_int refs;    /* the set's + one per launch in flight */
};

static void comm_unref(rf__nccl_job_comm *c) {
  if (atomic_fetch_sub(&c->refs, 1) != 1) return;
  if (!c->aborted)
    for (int i = 0; i < c->n; i++)
      if (c->comms[i]) (void)ncclCommDestroy(c->comms[i]);
  pthread_mutex_destroy(&c->mu);
  rf__free(c);
}

rf_status *rf__nccl_job_unique_id(void *id) {
  ncclUniqueId u;
  RF_CHECK(RF_NCCL_STATUS(ncclGetUniqueId(&u)));
  memcpy(id, &u, sizeof u);
  return NULL;
}

/* NCCL refuses two ranks on one GPU: say which participants share one. */
static rf_status *distinct_gpus(int n, rf__device *const *devs) {
  for (int i = 0; i < n; i++)
    for (int k = 0; k < i; k++)
      if (devs[i]->gpu_ordinal == devs[k]->gpu_ordinal)
        return rf__error(
            RF_UNIMPLEMENTED,
            "%s and %s are both on physical GPU %d: across processes every "
            "GPU participant is one NCCL rank, and NCCL takes one rank per "
            "GPU (give each process its own GPUs, one device per GPU)",
            devs[k]->canonical, devs[i]->canonical, devs[i]->gpu_ordinal);
  return NULL;
}

/* "nccl: making communicators for ranks 2 (gpu:0), 3 (gpu:1) of 4" (info);
 * ready once rf__nccl_job_comm_poll says so. */
static void log_start(int nranks, int n, const int *ranks,
                      rf__device *const *devs) {
  char list[MAX_LOCAL * (RF_DEVICE_NAME_MAX + 16)] = "";
  size_t used = 0;
  for (int i = 0; i < n && used < sizeof list; i++)
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%d (%s)",
                             i ? ", " : "", ranks[i], devs[i]->canonical);
  rf__log_write(RF_LOG_INFO, "nccl: making communicators for ranks %s of %d",
                list, nranks);
}

rf_status *rf__nccl_job_comm_start(int nranks, const void *id, int n,
                                   const int *ranks, rf__device *const *devs,
                                   rf__nccl_job_comm **out) {
  if (n < 1 || n > MAX_LOCAL)
    return rf__invalid("NCCL across processes: %d local ranks (1..%d)", n,
                       MAX_LOCAL);
  RF_CHECK(distinct_gpus(n, devs));
  rf__nccl_job_comm *c = rf__calloc(1, sizeof *c);
  RF_CHECK_ALLOC(c);
  pthread_mutex_init(&c->mu, NULL);
  atomic_init(&c->refs, 1);
  c->n = n;
  memcpy(c->devs, devs, sizeof *devs * (size_t)n);
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0; /* the engine polls; a missing peer cannot hang it */
  setenv("NCCL_NVLS_ENABLE", "0", 0); /* no multicast (unless user-set) */
  int prev = rf__gpu_current();
  rf_status *st = RF_NCCL_STATUS(ncclGroupStart());
  for (int i = 0; i < n && !st; i++) {
    st = devs[i]->enter(devs[i]);
    ncclResult_t r =
        ncclCommInitRankConfig(&c->comms[i], nranks, u, ranks[i], &config);
    if (!st && r != ncclSuccess && r != ncclInProgress) st = RF_NCCL_STATUS(r);
  }
  ncclResult_t end = ncclGroupEnd();
  if (!st && end != ncclSuccess && end != ncclInProgress)
    st = RF_NCCL_STATUS(end);
  rf__gpu_make_current(prev);
  if (st) {
    rf__nccl_job_comm_abort(c);
    comm_unref(c);
    return rf__status_prefix(st, "making NCCL's communicators");
  }
  if (rf__log_on(RF_LOG_INFO)) log_start(nranks, n, ranks, devs);
  *out = c;
  return NULL;
}

rf_status *rf__nccl_job_comm_poll(rf__nccl_job_comm *c, bool *ready) {
  *ready = true;
  for (int i = 0; i < c->n; i++) {
    ncclResult_t r = ncclSuccess;
    RF_CHECK(RF_NCCL_STATUS(ncclCommGetAsyncError(c->comms[i], &r)));
    if (r == ncclInProgress) {
      *ready = false;
    } else if (r != ncclSuccess) {
      return rf__status_prefix(RF_NCCL_STATUS(r),
                               "making NCCL's communicator on %s",
                               c->devs[i]->canonical);
    }
  }
  return NULL;
}

void rf__nccl_job_comm_abort(rf__nccl_job_comm *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  if (!c->aborted) {
    c->aborted = true;
    for (int i = 0; i < c->n; i++)
      if (c->comms[i]) (void)ncclCommAbort(c->comms[i]);
  }
  pthread_mutex_unlock(&c->mu);
}

void rf__nccl_job_comm_free(rf__nccl_job_comm *c) {
  if (c) comm_unref(c); /* destroyed after the last launch's completion */
}

rf_shape rf__nccl_job_out_shape(const rf__coll_group *g, int num_devices,
                                const rf_shape *root_shape) {
  rf_shape s = g->kind == RF_COLL_BROADCAST ? *root_shape : g->p[0].shape;
  if (g->kind == RF_COLL_ALL_GATHER) s.dims[0] *= num_devices;
  if (g->kind == RF_COLL_REDUCE_SCATTER) s.dims[0] /= num_devices;
  return s;
}

/* ---- launches ---- */

typedef struct launch launch;
typedef struct slot {
  rf__gpu_notify notify; /* first: the callback gets it back */
  launch *l;
} slot;

struct launch {
  rf__nccl_job_comm *c;
  void (*done)(void *arg, rf_status *st);
  void *arg;
  atomic_int pending;
  pthread_mutex_t mu;
  rf_status *error;
  slot slots[MAX_LOCAL];
};

static void slot_done(rf__gpu_notify *n, rf_status *st) {
  launch *l = ((slot *)n)->l;
  pthread_mutex_lock(&l->mu);
  if (st && !l->error)
    l->error = st;
  else
    rf_status_free(st);
  pthread_mutex_unlock(&l->mu);
  if (atomic_fetch_sub(&l->pending, 1) != 1) return;
  st = l->error;
  rf__nccl_job_comm *c = l->c;
  pthread_mutex_lock(&c->mu);
  if (!st && c->aborted)
    st = rf__error(RF_ABORTED, "NCCL's communicator was aborted");
  for (int i = 0; !st && i < c->n; i++) {
    ncclResult_t r = ncclSuccess;
    st = RF_NCCL_STATUS(ncclCommGetAsyncError(c->comms[i], &r));
    if (!st && r != ncclSuccess && r != ncclInProgress) st = RF_NCCL_STATUS(r);
  }
  pthread_mutex_unlock(&c->mu);
  comm_unref(c); /* the launch's */
  void (*done)(void *, rf_status *) = l->done;
  void *arg = l->arg;
  pthread_mutex_destroy(&l->mu);
  rf__free(l);
  done(arg, st);
}

/* Rank i's part (inside a group). */
static ncclResult_t issue(const rf__nccl_job_comm *c, const rf__coll_group *g,
                          int i, int num_devices, int root_rank,
                          const rf_shape *root_shape, rf_tensor *out) {
  ncclComm_t comm = c->comms[i];
  cudaStream_t s = (cudaStream_t)g->p[i].device->stream;
  ncclDataType_t t = rf__nccl_type(g->dtype);
  ncclRedOp_t red = rf__nccl_red_op(g->reduction);
  const rf_tensor *in = g->p[i].input;
  const void *src = in ? in->data : NULL;
  void *dst = out ? out->data : NULL;
  size_t count = (size_t)rf_shape_num_elements(
      g->kind == RF_COLL_BROADCAST ? root_shape : &g->p[i].shape);
  switch (g->kind) {
    case RF_COLL_ALL_REDUCE:
      return ncclAllReduce(src, dst, count, t, red, comm, s);
    case RF_COLL_REDUCE:
      return ncclReduce(src, dst, count, t, red, root_rank, comm, s);
    case RF_COLL_BROADCAST: /* in place at the root, which has no output */
      return ncclBroadcast(src, src ? (void *)src : dst, count, t, root_rank,
                           comm, s);
    case RF_COLL_ALL_GATHER: return ncclAllGather(src, dst, count, t, comm, s);
    case RF_COLL_REDUCE_SCATTER:
      return ncclReduceScatter(src, dst, count / (size_t)num_devices, t, red,
                               comm, s);
    default: return ncclInvalidArgument;
  }
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* After ncclGroupEnd returned ncclInProgress: a nonblocking communicator
 * may not have put its kernels on the streams yet (its connections are set
 * up in the background on first use), and whatever is enqueued behind them
 * - the completions - must come after. Polls every rank until none is in
 * progress, for at most timeout_ms. c->mu held. */
static rf_status *wait_enqueued(rf__nccl_job_comm *c, int64_t timeout_ms) {
  int64_t deadline = now_ns() + timeout_ms * 1000000;
  for (;;) {
    bool busy = false;
    for (int i = 0; i < c->n; i++) {
      ncclResult_t r = ncclSuccess;
      RF_NCCL_CHECK(ncclCommGetAsyncError(c->comms[i], &r));
      if (r == ncclInProgress)
        busy = true;
      else if (r != ncclSuccess)
        return rf__status_prefix(RF_NCCL_STATUS(r), "%s",
                                 c->devs[i]->canonical);
    }
    if (!busy) return NULL;
    if (now_ns() > deadline)
      return rf__log_status(
          RF_LOG_WARN, "nccl",
          rf__error(RF_DEADLINE_EXCEEDED,
                    "NCCL did not put the launch on the streams within "
                    "%lld ms",
                    (long long)timeout_ms));
    sched_yield();
  }
}

rf_status *rf__nccl_job_launch(rf__nccl_job_comm *c, const rf__coll_group *g,
                               int num_devices, int root_rank,
                               const rf_shape *root_shape,
                               rf_tensor *const *outs, int64_t timeout_ms,
                               void (*done)(void *arg, rf_status *st),
                               void *arg) {
  if (g->n != c->n)
    return rf__internal("collective '%s': %d participants, %d NCCL ranks",
                        g->key, g->n, c->n);
  launch *l = rf__calloc(1, sizeof *l);
  RF_CHECK_ALLOC(l);
  l->c = c;
  l->done = done;
  l->arg = arg;
  pthread_mutex_init(&l->mu, NULL);
  atomic_init(&l->pending, g->n);
  int prev = rf__gpu_current();
  for (int i = 0; i < g->n; i++) rf__gpu_enqueue_begin(g->p[i].device->order);
  pthread_mutex_lock(&c->mu);
  rf_status *st = c->aborted
                      ? rf__error(RF_ABORTED, "NCCL communicator aborted")
                      : RF_NCCL_STATUS(ncclGroupStart());
  bool started = !st;
  for (int i = 0; i < g->n && !st; i++) {
    st = g->p[i].device->enter(g->p[i].device);
    if (!st)
      st = RF_NCCL_STATUS(
          issue(c, g, i, num_devices, root_rank, root_shape, outs[i]));
  }
  if (started) {
    ncclResult_t r = ncclGroupEnd();
    if (!st && r != ncclSuccess && r != ncclInProgress) st = RF_NCCL_STATUS(r);
    if (!st && r == ncclInProgress) st = wait_enqueued(c, timeout_ms);
  }
  pthread_mutex_unlock(&c->mu);
  for (int i = 0; i < g->n; i++) rf__gpu_enqueue_end(g->p[i].device->order);
  if (st) { /* some ranks may be queued without their peers */
    if (started) rf__nccl_job_comm_abort(c);
    for (int i = 0; started && i < g->n; i++)
      rf_status_free(rf__gpu_sync(g->p[i].device));
    rf__gpu_make_current(prev);
    pthread_mutex_destroy(&l->mu);
    rf__free(l);
    return rf__status_prefix(st, "collective '%s' through NCCL", g->key);
  }
  atomic_fetch_add(&c->refs, 1); /* until the last completion */
  for (int i = 0; i < g->n; i++) l->slots[i].l = l;
  for (int i = 0; i < g->n; i++) {
    const rf__device *d = g->p[i].device;
    rf_status *e = d->enter(d);
    if (!e) e = rf__gpu_notify_when_done(d, &l->slots[i].notify, slot_done);
    if (e) { /* that slot never fires: wait here, then count it */
      rf_status_free(rf__gpu_sync(d));
      slot_done(&l->slots[i].notify, e);
    }
  }
  rf__gpu_make_current(prev);
  return NULL;
}
#endif
