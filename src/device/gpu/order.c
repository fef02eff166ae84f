/* device/gpu/order.c - cross-stream waits that remember what they covered
 * (see order.h). */
#include <cuda_runtime_api.h>
#include <pthread.h>

#include "core/cuda_check.h"
#include "core/status.h"
#include "device/gpu/gpu.h"
#include "device/gpu/order.h"

/* Guards every rf__gpu_order's seen_by and seen_at. Taken only to enqueue
 * the waits of a collective on virtual GPUs: a few CUDA calls. */
static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;

/* Whether w's stream has waited for every enqueue on d's so far. */
static bool has_seen(const rf__device *w, const rf__gpu_order *o) {
  return o->seen_by == w->order &&
         atomic_load(&o->begun) == o->seen_at; /* none begun since */
}

static rf_status *order_after(const rf__device *d,
                              const rf__device *const *waiters, int n) {
  rf__gpu_order *o = d->order;
  /* ended before begun: equal, no enqueue was under way when begun was read,
   * so the event recorded below covers all of them */
  uint64_t ended = atomic_load(&o->ended), begun = atomic_load(&o->begun);
  bool recorded = false;
  cudaEvent_t ev = (cudaEvent_t)d->order_event;
  for (int i = 0; i < n; i++) {
    const rf__device *w = waiters[i];
    if (w->stream == d->stream) continue;
    if (has_seen(w, o)) {
      atomic_fetch_add(&w->order->waits_skipped, 1);
      continue;
    }
    if (!recorded) {
      RF_CHECK(d->enter(d));
      RF_CUDA_CHECK(cudaEventRecord(ev, (cudaStream_t)d->stream));
      recorded = true;
    }
    RF_CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)w->stream, ev, 0));
    atomic_fetch_add(&w->order->waits, 1);
    /* w now depends on d's work: whoever saw all of w has not seen that,
     * unless it is d itself */
    if (w->order->seen_by != o) w->order->seen_by = NULL;
    if (begun == ended) {
      o->seen_by = w->order;
      o->seen_at = begun;
    }
  }
  return NULL;
}

rf_status *rf__gpu_order_after(const rf__device *d,
                               const rf__device *const *waiters, int n) {
  pthread_mutex_lock(&order_mu);
  rf_status *st = order_after(d, waiters, n);
  pthread_mutex_unlock(&order_mu);
  return st;
}
