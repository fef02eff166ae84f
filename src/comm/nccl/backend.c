/* comm/nccl/backend.c - collectives of GPU participants on distinct physical
 * GPUs through NCCL (CUDA builds with NCCL only).
 *
 * Communicators: one set per ordered list of physical GPUs (rank r on the
 * GPU of the group's rank r), made once with ncclCommInitAll and cached for
 * the process. A set's launches are serialised by its mutex, so every rank
 * sees its set's operations in one order. All ranks of a collective are
 * launched in one ncclGroupStart/End, each on its participant's stream (stream
 * order makes the inputs ready and the outputs, allocated from each
 * participant's own device, safe to reuse), and the dones are called right
 * after the launch (stream order: see gpu_coll.h). The record lives on until
 * the step's check (after the step's GPU sync) completes it: it reads
 * ncclCommGetAsyncError, and a watchdog timeout or an asynchronous NCCL
 * error fails the step. A watchdog aborts (ncclCommAbort) the set of a
 * collective still running after the session's collective timeout, records
 * DEADLINE_EXCEEDED for the step and drops the set from the cache (the next
 * use rebuilds it). In a pipelined step (device/step.h) the check may come
 * long after the collective ran: an event per rank, recorded after the
 * launch, lets the watchdog see that it ran rather than abort it. With
 * rf__gpu_coll_wait_for_kernels on, or outside a
 * step, a completion per participant stream (device/gpu/completion.c, then
 * a pool task) completes the op instead, and the last calls the dones.
 * NVLink SHARP (multicast) stays off: NCCL_NVLS_ENABLE=0 unless the user set
 * it. */
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/gpu/gpu_coll.h"
#include "core/cuda_check.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/status.h"
#include "device/gpu/gpu.h"
#include "device/gpu/order.h"
#include "device/step.h"

#define MAX_RANKS 64

/* ---- communicator sets ---- */

typedef struct comm_set {
  int n;
  int ordinals[MAX_RANKS];
  ncclComm_t comms[MAX_RANKS];
  pthread_mutex_t mu; /* launches, async-error reads and the abort */
  bool aborted;       /* comms are gone; the set has left the cache */
  int refs;           /* the cache's + one per collective in flight */
  struct comm_set *next;
} comm_set;

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static comm_set *cache; /* guarded by cache_mu, as every set's refs */

static void set_unref(comm_set *s) {
  pthread_mutex_lock(&cache_mu);
  bool last = --s->refs == 0;
  pthread_mutex_unlock(&cache_mu);
  if (!last) return;
  if (!s->aborted)
    for (int i = 0; i < s->n; i++) (void)ncclCommDestroy(s->comms[i]);
  pthread_mutex_destroy(&s->mu);
  rf__free(s);
}

/* Aborts s's communicators once and drops s from the cache. */
static void set_abort(comm_set *s) {
  pthread_mutex_lock(&cache_mu);
  bool cached = false;
  for (comm_set **p = &cache; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      cached = true;
      break;
    }
  pthread_mutex_unlock(&cache_mu);
  pthread_mutex_lock(&s->mu);
  if (!s->aborted) {
    s->aborted = true;
    for (int i = 0; i < s->n; i++) (void)ncclCommAbort(s->comms[i]);
  }
  pthread_mutex_unlock(&s->mu);
  if (cached) set_unref(s); /* the cache's reference */
}

/* "nccl: made communicators for 4 ranks on GPUs 0, 1, 2, 3" (info). */
static void log_made(const comm_set *s) {
  char gpus[MAX_RANKS * 12] = "";
  size_t used = 0;
  for (int i = 0; i < s->n && used < sizeof gpus; i++)
    used += (size_t)snprintf(gpus + used, sizeof gpus - used, "%s%d",
                             i ? ", " : "", s->ordinals[i]);
  rf__log_write(RF_LOG_INFO, "nccl: made communicators for %d ranks on GPUs %s",
                s->n, gpus);
}

/* The cached set for ordinals[0..n) (a new reference), made on first use. */
static rf_status *set_get(const int *ordinals, int n, comm_set **out) {
  pthread_mutex_lock(&cache_mu);
  for (comm_set *s = cache; s; s = s->next)
    if (s->n == n && memcmp(s->ordinals, ordinals, sizeof(int) * n) == 0) {
      s->refs++;
      pthread_mutex_unlock(&cache_mu);
      *out = s;
      return NULL;
    }
  /* Made under the lock: two first uses of one set must not both init. */
  comm_set *s = rf__calloc(1, sizeof *s);
  rf_status *st = s ? NULL : rf__oom();
  if (s) {
    s->n = n;
    memcpy(s->ordinals, ordinals, sizeof(int) * n);
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* no multicast (unless user-set) */
    int prev = rf__gpu_current();
    st = RF_NCCL_STATUS(ncclCommInitAll(s->comms, n, s->ordinals));
    rf__gpu_make_current(prev);
  }
  if (!st) {
    pthread_mutex_init(&s->mu, NULL);
    s->refs = 2; /* the cache's and the caller's */
    s->next = cache;
    cache = s;
    *out = s;
  } else {
    rf__free(s);
  }
  pthread_mutex_unlock(&cache_mu);
  if (!st && rf__log_on(RF_LOG_INFO)) log_made(*out); /* outside the lock */
  return st;
}

/* ---- collectives in flight ---- */

typedef struct nccl_op nccl_op;

typedef struct slot {
  rf__gpu_notify notify; /* first: the completion gets it back */
  nccl_op *op;
} slot;

struct nccl_op {
  rf__coll_group g; /* g.p = parts, g.key = key */
  rf__coll_participant *parts;
  char *key;
  comm_set *set;
  rf_tensor *outs[MAX_RANKS];
  slot slots[MAX_RANKS];
  atomic_int pending;  /* stream completions still to come */
  atomic_int finished; /* the dones were called */
  /* holders of a launched op: its stream completions (one), the step check
   * and the launching thread (in stream order) */
  atomic_int refs;
  rf__step_check check;
  pthread_mutex_t mu; /* error */
  rf_status *error;   /* the first stream failure, async error or timeout */
  /* In a pipelined step (device/step.h): an event per rank recorded after
   * the launch, for the watchdog to tell a collective that ran from a
   * stuck one when its check comes late. */
  cudaEvent_t marks[MAX_RANKS];
  int mark_gpus[MAX_RANKS]; /* each mark's physical GPU */
  int num_marks;
  /* the watchdog's list (guarded by wd_mu) */
  int64_t deadline_ns; /* 0: none */
  bool listed;
  nccl_op *next;
};

static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_wake;
static pthread_once_t wd_once = PTHREAD_ONCE_INIT;
static bool wd_started;
static nccl_op *wd_list;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- marks: events of pipelined collectives, pooled per GPU ---- */

#define MAX_GPUS 64

static pthread_mutex_t mark_mu = PTHREAD_MUTEX_INITIALIZER;
static cudaEvent_t *spare_marks[MAX_GPUS]; /* guarded by mark_mu */
static int num_spare[MAX_GPUS], cap_spare[MAX_GPUS];

/* An event of GPU `ordinal` (the current device), reused or made. */
static cudaEvent_t mark_get(int ordinal) {
  cudaEvent_t e = NULL;
  pthread_mutex_lock(&mark_mu);
  if (ordinal < MAX_GPUS && num_spare[ordinal] > 0)
    e = spare_marks[ordinal][--num_spare[ordinal]];
  pthread_mutex_unlock(&mark_mu);
  if (!e &&
      cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
    (void)cudaGetLastError();
    e = NULL;
  }
  return e;
}

static void mark_put(int ordinal, cudaEvent_t e) {
  pthread_mutex_lock(&mark_mu);
  bool kept = ordinal < MAX_GPUS &&
              !rf__grow(&spare_marks[ordinal], &cap_spare[ordinal],
                        num_spare[ordinal] + 1, sizeof(cudaEvent_t));
  if (kept) spare_marks[ordinal][num_spare[ordinal]++] = e;
  pthread_mutex_unlock(&mark_mu);
  if (!kept) (void)cudaEventDestroy(e);
}

/* Records a mark behind the collective on every rank's stream; none when
 * one cannot be had (the watchdog then judges by the deadline alone). */
static void mark(nccl_op *op) {
  for (int r = 0; r < op->g.n; r++) {
    const rf__device *d = op->g.p[r].device;
    rf_status *st = d->enter(d);
    cudaEvent_t e = st ? NULL : mark_get(d->gpu_ordinal);
    if (e && cudaEventRecord(e, (cudaStream_t)d->stream) != cudaSuccess) {
      (void)cudaGetLastError();
      mark_put(d->gpu_ordinal, e);
      e = NULL;
    }
    rf_status_free(st);
    if (!e) break;
    op->mark_gpus[op->num_marks] = d->gpu_ordinal;
    op->marks[op->num_marks++] = e;
  }
  if (op->num_marks == op->g.n) return;
  for (int r = 0; r < op->num_marks; r++)
    mark_put(op->mark_gpus[r], op->marks[r]);
  op->num_marks = 0;
}

/* Whether every rank's stream has passed op's marks (false without). */
static bool marks_passed(const nccl_op *op) {
  for (int r = 0; r < op->num_marks; r++) {
    if (cudaSetDevice(op->mark_gpus[r]) != cudaSuccess ||
        cudaEventQuery(op->marks[r]) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
  }
  return op->num_marks > 0;
}

static void op_free(nccl_op *op) {
  for (int r = 0; r < op->num_marks; r++)
    mark_put(op->mark_gpus[r], op->marks[r]);
  for (int i = 0; i < op->g.n; i++) {
    rf_tensor_release(op->parts[i].input);
    rf_tensor_release(op->outs[i]);
  }
  if (op->set) set_unref(op->set);
  rf_status_free(op->error);
  pthread_mutex_destroy(&op->mu);
  rf__free(op->parts);
  rf__free(op->key);
  rf__free(op);
}

static void op_unref(nccl_op *op) {
  if (atomic_fetch_sub(&op->refs, 1) == 1) op_free(op);
}

/* Keeps a copy of st as op's error unless it has one. */
static void keep_error(nccl_op *op, const rf_status *st) {
  pthread_mutex_lock(&op->mu);
  if (!op->error) op->error = rf__status_copy(st);
  pthread_mutex_unlock(&op->mu);
}

/* A copy of g that outlives run(), taking over the manager's input
 * references (g's become NULL). */
static nccl_op *op_new(rf__coll_group *g) {
  nccl_op *op = rf__calloc(1, sizeof *op);
  if (!op) return NULL;
  op->parts = rf__malloc(sizeof *op->parts * (size_t)g->n);
  op->key = rf__strdup(g->key);
  if (!op->parts || !op->key) {
    rf__free(op->parts);
    rf__free(op->key);
    rf__free(op);
    return NULL;
  }
  pthread_mutex_init(&op->mu, NULL);
  memcpy(op->parts, g->p, sizeof *op->parts * (size_t)g->n);
  for (int i = 0; i < g->n; i++) g->p[i].input = NULL;
  op->g = *g;
  op->g.p = op->parts;
  op->g.key = op->key;
  return op;
}

/* Releases the inputs before the dones (see collective.h); only once no
 * stream reads them any more. */
static void drop_inputs(nccl_op *op) {
  for (int i = 0; i < op->g.n; i++) {
    rf_tensor_release(op->parts[i].input);
    op->parts[i].input = NULL;
  }
}

/* Calls every done once (outputs when st is NULL); consumes st. */
static void op_report(nccl_op *op, rf_status *st) {
  if (atomic_exchange(&op->finished, 1)) {
    rf_status_free(st);
    return;
  }
  rf__coll_report(op->parts, op->g.n, st, op->outs);
  rf_status_free(st);
}

/* The first asynchronous NCCL error of the set's communicators, if any. */
static rf_status *async_error(comm_set *s) {
  rf_status *st = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->aborted)
    st = rf__error(RF_ABORTED, "the NCCL communicator was aborted");
  for (int i = 0; !st && i < s->n; i++) {
    ncclResult_t r = ncclSuccess;
    st = RF_NCCL_STATUS(ncclCommGetAsyncError(s->comms[i], &r));
    if (!st && r != ncclSuccess && r != ncclInProgress) st = RF_NCCL_STATUS(r);
  }
  pthread_mutex_unlock(&s->mu);
  return st;
}

static void slot_done(rf__gpu_notify *n, rf_status *st) {
  nccl_op *op = ((slot *)n)->op;
  if (st) {
    pthread_mutex_lock(&op->mu);
    if (!op->error)
      op->error = st;
    else
      rf_status_free(st);
    pthread_mutex_unlock(&op->mu);
  }
  /* Under wd_mu: the watchdog only takes a count of a listed op, so the
   * last count and the unlisting cannot interleave with it. */
  pthread_mutex_lock(&wd_mu);
  bool last = atomic_fetch_sub(&op->pending, 1) == 1;
  if (last && op->listed) {
    for (nccl_op **p = &wd_list; *p; p = &(*p)->next)
      if (*p == op) {
        *p = op->next;
        break;
      }
    op->listed = false;
  }
  pthread_mutex_unlock(&wd_mu);
  if (!last) return;
  pthread_mutex_lock(&op->mu);
  st = op->error ? rf__status_copy(op->error) : NULL;
  pthread_mutex_unlock(&op->mu);
  if (!st) {
    st = async_error(op->set);
    if (st) {
      set_abort(op->set); /* unusable after an async error */
      keep_error(op, st); /* for the step check, if it is still to come */
    }
  }
  if (st)
    st = rf__status_prefix(st, "collective '%s' (step %lld) through NCCL",
                           op->g.key, (long long)op->g.step_id);
  drop_inputs(op);   /* every stream is past the collective */
  op_report(op, st); /* nothing when the dones went in stream order */
  op_unref(op);
}

/* The step check (after the step's GPU sync, so the collective has run or
 * been aborted): completes the op as a stream completion would (NCCL's
 * asynchronous error is read there), then returns its error. */
static rf_status *step_check(void *arg) {
  nccl_op *op = arg;
  slot_done(&op->slots[0].notify, NULL);
  pthread_mutex_lock(&op->mu);
  rf_status *st = op->error ? rf__status_copy(op->error) : NULL;
  pthread_mutex_unlock(&op->mu);
  if (st)
    st = rf__status_prefix(st, "collective '%s' (step %lld) through NCCL",
                           op->g.key, (long long)op->g.step_id);
  op_unref(op);
  return st;
}

/* ---- the watchdog ---- */

static void *watchdog_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&wd_mu);
  for (;;) {
    int64_t now = now_ns(), next = 0;
    nccl_op *expired = NULL;
    for (nccl_op **p = &wd_list; *p;) {
      nccl_op *op = *p;
      if (op->deadline_ns <= now && marks_passed(op)) {
        /* it ran; its check (a later call, pipelined) completes it */
        *p = op->next;
        op->listed = false;
      } else if (op->deadline_ns <= now) {
        *p = op->next;
        op->listed = false;
        op->next = expired;
        expired = op;
        atomic_fetch_add(&op->pending, 1); /* kept until we are done */
      } else {
        if (!next || op->deadline_ns < next) next = op->deadline_ns;
        p = &op->next;
      }
    }
    if (expired) {
      pthread_mutex_unlock(&wd_mu);
      while (expired) {
        nccl_op *op = expired;
        expired = op->next;
        rf_status *why = rf__log_status(
            RF_LOG_WARN, "nccl",
            rf__error(RF_DEADLINE_EXCEEDED,
                      "collective '%s' (step %lld): NCCL did not finish "
                      "within %lld ms; its communicator was aborted (rebuilt "
                      "on next use)",
                      op->g.key, (long long)op->g.step_id,
                      (long long)op->g.timeout_ms));
        keep_error(op, why); /* before the abort lets the step's sync go */
        set_abort(op->set);
        op_report(op, why); /* nothing when the dones went in stream order */
        slot_done(&op->slots[0].notify, NULL); /* our extra count */
      }
      pthread_mutex_lock(&wd_mu);
      continue;
    }
    if (!next) {
      pthread_cond_wait(&wd_wake, &wd_mu);
    } else {
      struct timespec ts = {next / 1000000000, next % 1000000000};
      pthread_cond_timedwait(&wd_wake, &wd_mu, &ts);
    }
  }
  return NULL;
}

static void wd_start(void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&wd_wake, &ca);
  pthread_condattr_destroy(&ca);
  pthread_t t;
  if (pthread_create(&t, NULL, watchdog_main, NULL) == 0) {
    pthread_detach(t);
    wd_started = true;
  }
}

/* Puts op under the watchdog (nothing when the session has no timeout or
 * the thread could not start: then a stuck collective waits). */
static void watch(nccl_op *op) {
  if (op->g.timeout_ms <= 0) return;
  pthread_once(&wd_once, wd_start);
  if (!wd_started) return;
  pthread_mutex_lock(&wd_mu);
  op->deadline_ns = now_ns() + op->g.timeout_ms * 1000000;
  op->listed = true;
  op->next = wd_list;
  wd_list = op;
  pthread_cond_signal(&wd_wake);
  pthread_mutex_unlock(&wd_mu);
}

/* ---- launching ---- */

ncclDataType_t rf__nccl_type(rf_dtype d) {
  switch (d) {
    case RF_FLOAT16: return ncclFloat16;
    case RF_BFLOAT16: return ncclBfloat16;
    case RF_FLOAT32: return ncclFloat32;
    case RF_FLOAT64: return ncclFloat64;
    case RF_INT8: return ncclInt8;
    case RF_INT32: return ncclInt32;
    case RF_INT64: return ncclInt64;
    default: return ncclUint8; /* uint8, bool: bytes */
  }
}

ncclRedOp_t rf__nccl_red_op(rf_reduction r) {
  switch (r) {
    case RF_REDUCE_PROD: return ncclProd;
    case RF_REDUCE_MIN: return ncclMin;
    case RF_REDUCE_MAX: return ncclMax;
    case RF_REDUCE_AVG: return ncclAvg;
    default: return ncclSum;
  }
}

/* Enqueues rank r's part of the collective (inside a group). */
static ncclResult_t issue(nccl_op *op, int r, size_t count) {
  rf__coll_group *g = &op->g;
  ncclComm_t c = op->set->comms[r];
  cudaStream_t s = (cudaStream_t)g->p[r].device->stream;
  ncclDataType_t t = rf__nccl_type(g->dtype);
  ncclRedOp_t red = rf__nccl_red_op(g->reduction);
  const void *in = g->p[r].input ? g->p[r].input->data : NULL;
  void *out = op->outs[r] ? op->outs[r]->data : NULL;
  switch (g->kind) {
    case RF_COLL_ALL_REDUCE: return ncclAllReduce(in, out, count, t, red, c, s);
    case RF_COLL_REDUCE:
      return ncclReduce(in, out, count, t, red, g->root, c, s);
    case RF_COLL_BROADCAST: /* in place at the root, which has no output */
      return ncclBroadcast(in, r == g->root ? (void *)in : out, count, t,
                           g->root, c, s);
    case RF_COLL_ALL_GATHER: return ncclAllGather(in, out, count, t, c, s);
    case RF_COLL_REDUCE_SCATTER:
      return ncclReduceScatter(in, out, count / (size_t)g->n, t, red, c, s);
    default: return ncclInvalidArgument;
  }
}

static rf_status *alloc_outputs(nccl_op *op) {
  rf__coll_group *g = &op->g;
  for (int r = 0; r < g->n; r++) {
    if (!rf__gpu_coll_has_output(g, r)) continue;
    rf_shape s = rf__gpu_coll_out_shape(g, r);
    const rf__device *d = g->p[r].device;
    rf_status *st =
        rf__tensor_new_device(g->dtype, &s, d->allocator, &op->outs[r]);
    if (st)
      return rf__status_prefix(st, "collective '%s': output on %s", g->key,
                               d->canonical);
  }
  return NULL;
}

/* Launches every rank in one group, then the completions; in stream order
 * (`step` non-NULL) adds the step check and calls the dones. On error after
 * the launch the streams are waited for before returning. */
static rf_status *launch(nccl_op *op, size_t count, rf__step *step) {
  rf__coll_group *g = &op->g;
  for (int r = 0; r < g->n; r++) rf__gpu_enqueue_begin(g->p[r].device->order);
  pthread_mutex_lock(&op->set->mu);
  rf_status *st = op->set->aborted
                      ? rf__error(RF_ABORTED, "NCCL communicator aborted")
                      : RF_NCCL_STATUS(ncclGroupStart());
  bool started = !st;
  for (int r = 0; !st && r < g->n; r++)
    st = RF_NCCL_STATUS(issue(op, r, count));
  if (started) {
    rf_status *end = RF_NCCL_STATUS(ncclGroupEnd());
    if (!st)
      st = end;
    else
      rf_status_free(end);
  }
  pthread_mutex_unlock(&op->set->mu);
  for (int r = 0; r < g->n; r++) rf__gpu_enqueue_end(g->p[r].device->order);
  if (st) { /* some ranks may be queued without their peers: abort them */
    set_abort(op->set);
    for (int r = 0; r < g->n; r++) rf_status_free(rf__gpu_sync(g->p[r].device));
    return st;
  }
  /* In stream order the step check is the one completion (the step's sync
   * has waited for every stream): no event per stream, no completion
   * thread. */
  atomic_store(&op->pending, step ? 1 : g->n);
  atomic_store(&op->refs, step ? 3 : 1);
  for (int r = 0; r < g->n; r++) op->slots[r].op = op;
  if (step && step->pipelined) mark(op);
  watch(op);
  for (int r = 0; !step && r < g->n; r++) {
    const rf__device *d = g->p[r].device;
    st = d->enter(d);
    if (!st) st = rf__gpu_notify_when_done(d, &op->slots[r].notify, slot_done);
    if (st) { /* the slot never fires: wait here, then count it done */
      rf_status_free(rf__gpu_sync(d));
      slot_done(&op->slots[r].notify, st);
    }
  }
  if (step) {
    op->check = (rf__step_check){.fn = step_check, .arg = op};
    rf__step_add_check(step, &op->check);
    drop_inputs(op); /* each rank's stream orders its input's reuse */
    op_report(op, NULL);
    op_unref(op);
  }
  return NULL;
}

void rf__nccl_coll_run(rf__coll_group *g) {
  rf_status *st = rf__gpu_coll_check(g);
  nccl_op *op = st ? NULL : op_new(g);
  if (!st && !op) st = rf__oom();
  if (st) {
    rf__gpu_coll_fail(g, st);
    rf_status_free(st);
    return;
  }
  int ordinals[MAX_RANKS];
  for (int r = 0; r < g->n; r++) ordinals[r] = g->p[r].device->gpu_ordinal;
  size_t count =
      (size_t)rf_shape_num_elements(&g->p[g->root >= 0 ? g->root : 0].shape);
  st = alloc_outputs(op);
  if (!st && count == 0) { /* nothing to move */
    drop_inputs(op);
    op_report(op, NULL);
    op_free(op);
    return;
  }
  if (!st) st = set_get(ordinals, g->n, &op->set);
  rf__step *step = rf__gpu_coll_stream_ordered() ? g->p[0].step : NULL;
  if (!st) st = launch(op, count, step);
  if (!st) return; /* the last stream completion reports */
  drop_inputs(op); /* launch waited for the streams on error */
  op_report(op, rf__status_prefix(st,
                                  "collective '%s' (step %lld) through "
                                  "NCCL",
                                  g->key, (long long)g->step_id));
  op_free(op);
}
