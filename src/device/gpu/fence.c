/* device/gpu/fence.c - fences: one event per device of a list, recorded on
 * each device's stream, marking everything enqueued there so far. A step
 * that returns before its GPU work has run (rf_session_options.
 * gpu_sync_on_finish off) keeps one with its checks: polled (never waited
 * for) by later runs, waited for by rf_session_sync. */
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#include "core/mem.h"
#include "core/status.h"
#include "device/gpu/gpu.h"

struct rf__gpu_fence {
  int n;
  rf__device *const *devices; /* borrowed */
  cudaEvent_t events[];       /* [n], events[i] made on devices[i]'s GPU */
};

/* A status for a failed event call on d. */
static rf_status *on(const rf__device *d, rf_status *st) {
  if (!st) return NULL;
  return rf__status_prefix(st, "%s (physical GPU %d)", d->canonical,
                           d->gpu_ordinal);
}

rf_status *rf__gpu_fence_new(rf__device *const *devices, int n,
                             rf__gpu_fence **out) {
  rf__gpu_fence *f =
      rf__calloc(1, sizeof *f + sizeof(cudaEvent_t) * (size_t)(n > 0 ? n : 1));
  RF_CHECK_ALLOC(f);
  f->devices = devices;
  rf_status *st = NULL;
  int prev = rf__gpu_current();
  for (int i = 0; i < n && !st; i++) {
    st = devices[i]->enter(devices[i]);
    if (!st)
      st = RF_CUDA_STATUS(
          cudaEventCreateWithFlags(&f->events[i], cudaEventDisableTiming));
    if (!st) f->n = i + 1;
    st = on(devices[i], st);
  }
  rf__gpu_make_current(prev);
  if (st) {
    rf__gpu_fence_free(f);
    return st;
  }
  *out = f;
  return NULL;
}

void rf__gpu_fence_free(rf__gpu_fence *f) {
  if (!f) return;
  for (int i = 0; i < f->n; i++) (void)cudaEventDestroy(f->events[i]);
  (void)cudaGetLastError();
  rf__free(f);
}

rf_status *rf__gpu_fence_record(rf__gpu_fence *f) {
  for (int i = 0; i < f->n; i++) {
    const rf__device *d = f->devices[i];
    rf_status *st = d->enter(d);
    if (!st)
      st = RF_CUDA_STATUS(
          cudaEventRecord(f->events[i], (cudaStream_t)d->stream));
    if (st) return on(d, st);
  }
  return NULL;
}

bool rf__gpu_fence_passed(const rf__gpu_fence *f, rf_status **st) {
  *st = NULL;
  for (int i = 0; i < f->n; i++) {
    const rf__device *d = f->devices[i];
    rf_status *e = d->enter(d);
    cudaError_t r = e ? cudaSuccess : cudaEventQuery(f->events[i]);
    if (r == cudaErrorNotReady) return false;
    if (!e) e = RF_CUDA_STATUS(r);
    if (e) { /* a fault: the stream has stopped */
      *st = on(d, e);
      return true;
    }
  }
  return true;
}

rf_status *rf__gpu_fence_wait(const rf__gpu_fence *f) {
  rf_status *first = NULL;
  for (int i = 0; i < f->n; i++) {
    const rf__device *d = f->devices[i];
    rf_status *st = d->enter(d);
    if (!st) st = RF_CUDA_STATUS(cudaEventSynchronize(f->events[i]));
    st = on(d, st);
    if (!first)
      first = st;
    else
      rf_status_free(st);
  }
  return first;
}
