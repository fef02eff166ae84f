/* runtime/session_sync.c - the end of a step's GPU work, for the session.
 *
 * By default (rf_session_options.gpu_sync_on_finish) a step waits for the
 * streams of its plan's GPU devices, then runs its checks (device/step.h):
 * when it returns, its GPU work has run. With the option off, a step that
 * succeeded returns once its GPU work is enqueued, as PyTorch and
 * nccl-tests launch many calls per wait (TensorFlow's DirectSession has the
 * same knob, sync_on_finish). Stream order already puts the next step's work
 * after it: a device buffer is reused only in its own device's stream order
 * (device/gpu/gpu.h), the collectives make every stream they join wait for
 * the collective (comm/gpu/gpu_coll.h), and fetched values leave a stream
 * only once it has produced them (_Retval, _Send). A step whose checks are
 * left (NCCL collectives) puts them in the session's pending list behind a
 * fence, one event per GPU device of its plan. Every later run polls that
 * list from its oldest step (never waits), runs the checks of steps whose
 * fence has passed and reports the first error among them instead of
 * running its own step;
 * rf_session_sync waits for the pending steps in order, then for every GPU
 * stream of the session, and returns the first unreported error;
 * rf_session_free does the same and drops the error. Failed steps, traced
 * steps, steps with a feed on a GPU device (the copy reads the caller's
 * borrowed tensor) and steps with collectives across tasks always wait. */
#include <limits.h>
#include <pthread.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/status.h"
#include "runtime/session_internal.h"
#include "device/step.h"
#ifdef RF_HAVE_CUDA
#include "device/gpu/gpu.h"
#endif

/* Pending steps beyond this many make a run wait for the oldest: the list
 * stays bounded when nobody calls rf_session_sync (the GPU's launch queue
 * holds the host back long before, in practice). */
#define MAX_PENDING 1024

/* A pipelined step whose checks wait for its GPU work; recycled through its
 * plan's spare list (the fence is made for the plan's GPU devices). */
typedef struct rf__pending_step {
  struct rf__pending_step *next;
  rf__plan *plan;
  int64_t step_id;
  rf__step_check *checks; /* newest first */
  rf_status *fence_error; /* a stream failed before the fence */
#ifdef RF_HAVE_CUDA
  rf__gpu_fence *fence;
#endif
} rf__pending_step;

/* Keeps st as *first unless that is taken (then st is freed). */
static void keep_first(rf_status **first, rf_status *st) {
  if (!*first)
    *first = st;
  else
    rf_status_free(st);
}

/* Waits for the streams of the plan's GPU devices (after a failed or
 * cancelled step as well); the first error (an asynchronous kernel
 * fault). */
static rf_status *sync_gpus(const rf__plan *p) {
  rf_status *first = NULL;
#ifdef RF_HAVE_CUDA
  for (int i = 0; i < p->num_gpus; i++)
    keep_first(&first, rf__gpu_sync(p->gpus[i]));
#else
  (void)p;
#endif
  return first;
}

/* Runs checks (every one once, in any order); the first error. */
static rf_status *run_checks(rf__step_check *c) {
  rf_status *first = NULL;
  while (c) {
    rf__step_check *next = c->next; /* fn may free c */
    keep_first(&first, c->fn(c->arg));
    c = next;
  }
  return first;
}

bool rf__step_may_pipeline(const rf_session *s, const rf__plan *p,
                           bool traced) {
  return !s->opts.gpu_sync_on_finish && p->num_gpus > 0 && !p->gpu_feeds &&
         !p->cross_task && !traced;
}

static void record_free(rf__pending_step *r) {
#ifdef RF_HAVE_CUDA
  rf__gpu_fence_free(r->fence);
#endif
  rf__free(r);
}

void rf__plan_free_spares(rf__plan *p) {
  while (p->spare) {
    rf__pending_step *r = p->spare;
    p->spare = r->next;
    record_free(r);
  }
}

#ifdef RF_HAVE_CUDA
/* Runs r's checks, keeps the first error (the fence's own first) for the
 * next run, and gives r back to its plan. */
static void finish(rf_session *s, rf__pending_step *r) {
  rf_status *st = r->fence_error;
  r->fence_error = NULL;
  keep_first(&st, run_checks(r->checks));
  if (st)
    st = rf__status_prefix(st,
                           "step %lld (it returned before its GPU work ran; "
                           "reported by a later call)",
                           (long long)r->step_id);
  pthread_mutex_lock(&s->pending_mu);
  if (st) {
    keep_first(&s->deferred_error, st);
    atomic_store(&s->has_deferred_error, true);
  }
  r->checks = NULL;
  r->next = r->plan->spare;
  r->plan->spare = r;
  pthread_mutex_unlock(&s->pending_mu);
}

/* Takes the oldest pending step off the list; NULL when there is none, or
 * (passed_only) when its fence has not passed yet. */
static rf__pending_step *pop_oldest(rf_session *s, bool passed_only) {
  pthread_mutex_lock(&s->pending_mu);
  rf__pending_step *r = s->pending;
  if (r && passed_only && !rf__gpu_fence_passed(r->fence, &r->fence_error))
    r = NULL;
  if (r) {
    s->pending = r->next;
    if (!s->pending) s->pending_tail = NULL;
    atomic_fetch_sub(&s->num_pending, 1);
  }
  pthread_mutex_unlock(&s->pending_mu);
  return r;
}

/* Finishes the oldest pending steps whose fences have passed, without
 * waiting, up to the first that has not (steps of one plan pass in order;
 * a later one that passed early waits for the next poll). */
static void poll(rf_session *s) {
  int prev = rf__gpu_current();
  rf__pending_step *r;
  while ((r = pop_oldest(s, true))) finish(s, r);
  rf__gpu_make_current(prev);
}

/* Waits for the oldest `count` pending steps (all: INT_MAX) in order and
 * finishes them. */
static void drain(rf_session *s, int count) {
  int prev = rf__gpu_current();
  rf__pending_step *r;
  for (int k = 0; k < count && (r = pop_oldest(s, false)); k++) {
    r->fence_error = rf__gpu_fence_wait(r->fence);
    finish(s, r);
  }
  rf__gpu_make_current(prev);
}

/* Puts a succeeded pipelined step's checks behind a fence on the plan's
 * GPU streams. When no fence can be had, waits as a synchronous step. */
static rf_status *defer(rf_session *s, rf__plan *p, const rf__step *step,
                        rf__step_check *checks) {
  pthread_mutex_lock(&s->pending_mu);
  rf__pending_step *r = p->spare;
  if (r) p->spare = r->next;
  pthread_mutex_unlock(&s->pending_mu);
  rf_status *st = NULL;
  if (!r) {
    r = rf__calloc(1, sizeof *r);
    st = r ? rf__gpu_fence_new(p->gpus, p->num_gpus, &r->fence) : rf__oom();
  }
  if (!st) st = rf__gpu_fence_record(r->fence);
  if (st) {
    if (r) record_free(r);
    rf_status *first = sync_gpus(p);
    keep_first(&first, run_checks(checks));
    keep_first(&first, st);
    return first;
  }
  r->plan = p;
  r->step_id = step->id;
  r->checks = checks;
  r->next = NULL;
  pthread_mutex_lock(&s->pending_mu);
  if (s->pending_tail)
    s->pending_tail->next = r;
  else
    s->pending = r;
  s->pending_tail = r;
  int n = atomic_fetch_add(&s->num_pending, 1) + 1;
  pthread_mutex_unlock(&s->pending_mu);
  if (n > MAX_PENDING) drain(s, n - MAX_PENDING);
  return NULL;
}
#endif

rf_status *rf__session_end_step(rf_session *s, rf__plan *p, rf__step *step,
                                rf_status *run_st) {
  rf__step_check *checks = atomic_exchange(&step->checks, NULL);
  if (step->pipelined && !run_st) {
    if (!checks) return NULL; /* stream order is all the next step needs */
#ifdef RF_HAVE_CUDA
    return defer(s, p, step, checks);
#endif
  }
  (void)s;
  rf_status *st = run_st;
  keep_first(&st, sync_gpus(p));
  keep_first(&st, run_checks(checks));
  return st;
}

rf_status *rf__session_take_deferred(rf_session *s) {
#ifdef RF_HAVE_CUDA
  if (atomic_load(&s->num_pending) > 0) poll(s);
#endif
  if (!atomic_load(&s->has_deferred_error)) return NULL;
  pthread_mutex_lock(&s->pending_mu);
  rf_status *st = s->deferred_error;
  s->deferred_error = NULL;
  atomic_store(&s->has_deferred_error, false);
  pthread_mutex_unlock(&s->pending_mu);
  return st;
}

rf_status *rf_session_sync(rf_session *s) {
  if (!s) return rf__invalid("rf_session_sync: NULL session");
#ifdef RF_HAVE_CUDA
  if (atomic_load(&s->num_pending) > 0) drain(s, INT_MAX);
#endif
  rf_status *first = rf__session_take_deferred(s);
#ifdef RF_HAVE_CUDA
  if (s->gpu) { /* no CUDA call at all in a session without GPUs */
    int prev = rf__gpu_current();
    for (int i = 0; i < s->num_devices; i++)
      if (s->devices[i].name.type == RF_DEVICE_GPU && s->devices[i].stream)
        keep_first(&first, rf__gpu_sync(&s->devices[i]));
    rf__gpu_make_current(prev);
  }
#endif
  if (first) first = rf__status_prefix(first, "rf_session_sync");
  return first;
}

void rf__session_sync_init(rf_session *s) {
  pthread_mutex_init(&s->pending_mu, NULL);
  atomic_init(&s->num_pending, 0);
  atomic_init(&s->has_deferred_error, false);
}

void rf__session_sync_free(rf_session *s) {
  rf_status_free(rf__log_status(
      RF_LOG_ERROR, "session: freed, dropping an unreported error of a step",
      rf_session_sync(s)));
  pthread_mutex_destroy(&s->pending_mu);
}
