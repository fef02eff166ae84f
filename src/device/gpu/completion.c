/* device/gpu/completion.c - completion of stream work, reported on the
 * thread pool, for what must wait for the GPU (_Send, _Retval; collectives
 * complete in stream order and use it only when rf__gpu_coll_wait_for_kernels
 * is on). Each notified operation records an event behind its work; one
 * process-wide completion thread polls the pending events (cudaEventQuery)
 * and hands each finished one to its pool as a task, which runs the
 * operation's function. Measured on an H200 (2026-12-02, `ringflow bench
 * --devices gpu:0 --backend nccl`'s former raw_cb column against raw): a
 * stream callback (cudaStreamAddCallback) took 20-50 us to fire after short
 * work and ~100 us after a 265 us copy, as the driver backs off while it
 * waits; polling sees completion within one pass. While anything is pending the
 * thread spins (yielding the core) for the first SPIN_NS of the oldest wait,
 * then passes every NAP_NS; with nothing pending it sleeps on a condition
 * variable. Invariants: an entry leaves the list exactly once, and its function
 * runs exactly once, after its event completed or the stream failed. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "core/cuda_check.h"
#include "core/status.h"
#include "device/gpu/gpu.h"

#define SPIN_NS 2000000 /* spin while the oldest wait is younger than this */
#define NAP_NS 20000    /* then one pass every this long */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static rf__gpu_notify *incoming; /* guarded by mu; newest first */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool started;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void notify_task(void *arg) {
  rf__gpu_notify *n = arg;
  rf_status *st = NULL;
  if (n->error != cudaSuccess) {
    cudaError_t e = (cudaError_t)n->error;
    st = rf__error(RF_INTERNAL,
                   "%s (physical GPU %d): the stream failed: %s (%s)",
                   n->device->canonical, n->device->gpu_ordinal,
                   cudaGetErrorName(e), cudaGetErrorString(e));
  }
  n->fn(n, st);
}

/* Queues n's task on its pool. If the pool cannot take it (no memory to
 * grow its queue) this retries for a while; as a last resort the task runs
 * here, on the completion thread. */
static void hand_over(rf__gpu_notify *n) {
  for (int tries = 0; tries < 10000; tries++) {
    rf_status *st = rf__threadpool_schedule(n->pool, notify_task, n);
    if (!st) return;
    rf_status_free(st);
    struct timespec ms = {0, 1000000L};
    nanosleep(&ms, NULL);
  }
  notify_task(n);
}

/* One pass over the pending list: hands over every finished entry; returns
 * the queue time of the oldest one still pending (0: none). */
static int64_t poll_once(rf__gpu_notify **pending, int *current) {
  int64_t oldest = 0;
  for (rf__gpu_notify **p = pending; *p;) {
    rf__gpu_notify *n = *p;
    if (*current != n->device->gpu_ordinal) {
      *current = n->device->gpu_ordinal;
      rf__gpu_make_current(*current);
    }
    cudaError_t e = cudaEventQuery((cudaEvent_t)n->event);
    if (e == cudaErrorNotReady) {
      if (!oldest || n->queued_ns < oldest) oldest = n->queued_ns;
      p = &n->next;
      continue;
    }
    *p = n->next;
    (void)cudaEventDestroy((cudaEvent_t)n->event);
    (void)cudaGetLastError(); /* not this thread's next call's error */
    n->event = NULL;
    n->error = (int)e; /* cudaSuccess, or the stream's failure */
    hand_over(n);
  }
  return oldest;
}

static void *completion_main(void *arg) {
  (void)arg;
#ifdef __linux__
  prctl(PR_SET_TIMERSLACK, 1000UL); /* naps of NAP_NS, not 50 us more */
#endif
  rf__gpu_notify *pending = NULL, **tail = &pending;
  int current = -1; /* this thread's current GPU */
  for (;;) {
    pthread_mutex_lock(&mu);
    while (!incoming && !pending) pthread_cond_wait(&wake, &mu);
    rf__gpu_notify *fresh = incoming;
    incoming = NULL;
    pthread_mutex_unlock(&mu);
    /* oldest first: reverse the newest-first batch onto the tail */
    rf__gpu_notify *rev = NULL;
    while (fresh) {
      rf__gpu_notify *next = fresh->next;
      fresh->next = rev;
      rev = fresh;
      fresh = next;
    }
    *tail = rev;
    int64_t oldest = poll_once(&pending, &current);
    tail = &pending;
    while (*tail) tail = &(*tail)->next;
    if (!pending) continue;
    if (now_ns() - oldest < SPIN_NS) {
      sched_yield();
    } else {
      struct timespec nap = {0, NAP_NS};
      nanosleep(&nap, NULL);
    }
  }
  return NULL;
}

static void start(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, completion_main, NULL) == 0) {
    pthread_detach(t);
    started = true;
  }
}

/* The fallback when the completion thread could not start: a CUDA stream
 * callback (runs on a CUDA thread, which must not call CUDA: it only hands
 * the task over). */
static void CUDART_CB on_stream(cudaStream_t stream, cudaError_t status,
                                void *arg) {
  rf__gpu_notify *n = arg;
  (void)stream;
  n->error = (int)status;
  hand_over(n);
}

rf_status *rf__gpu_notify_when_done(const rf__device *d, rf__gpu_notify *n,
                                    rf__gpu_notify_fn fn) {
  n->fn = fn;
  n->pool = d->pool;
  n->device = d;
  n->error = cudaSuccess;
  n->event = NULL;
  n->next = NULL;
  pthread_once(&once, start);
  rf_status *st = d->enter(d);
  if (!st && !started)
    st = RF_CUDA_STATUS(
        cudaStreamAddCallback((cudaStream_t)d->stream, on_stream, n, 0));
  if (st || !started)
    return st ? rf__status_prefix(st, "%s", d->canonical) : NULL;
  cudaEvent_t ev = NULL;
  st = RF_CUDA_STATUS(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  if (!st) {
    st = RF_CUDA_STATUS(cudaEventRecord(ev, (cudaStream_t)d->stream));
    if (st) (void)cudaEventDestroy(ev);
  }
  if (st) return rf__status_prefix(st, "%s", d->canonical);
  n->event = ev;
  n->queued_ns = now_ns();
  pthread_mutex_lock(&mu);
  n->next = incoming;
  incoming = n;
  pthread_cond_signal(&wake);
  pthread_mutex_unlock(&mu);
  return NULL;
}
