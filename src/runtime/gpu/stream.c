/* runtime/gpu/stream.c - work on a GPU device's stream: copies between host
 * and device memory (and between GPUs), tensors for them, and completion
 * reported on the thread pool. A stream callback runs on a CUDA thread that
 * must not call CUDA, so it only queues a pool task; the task does the rest
 * (rendezvous sends, releasing buffers, `done`). */
#include <cuda_runtime_api.h>
#include <string.h>
#include <time.h>

#include "core/cuda_check.h"
#include "core/status.h"
#include "runtime/gpu/gpu.h"

static const char *where(const rf_tensor *t) {
  return t->on_gpu ? "device" : "host";
}

rf_status *rf__gpu_copy(const rf__device *d, rf_tensor *dst,
                        const rf_tensor *src) {
  if (dst->nbytes != src->nbytes)
    return rf__internal("%s: copy of %zu bytes into a buffer of %zu",
                        d->canonical, src->nbytes, dst->nbytes);
  if (src->nbytes == 0) return NULL;
  cudaStream_t s = (cudaStream_t)d->stream;
  rf_status *st = NULL;
  if (!dst->on_gpu && !src->on_gpu) {
    memcpy(dst->data, src->data, src->nbytes);
  } else if (dst->on_gpu && src->on_gpu) {
    int from = rf__gpu_tensor_ordinal(src), to = rf__gpu_tensor_ordinal(dst);
    if (from < 0 || to < 0 || from == to)
      st = RF_CUDA_STATUS(cudaMemcpyAsync(dst->data, src->data, src->nbytes,
                                          cudaMemcpyDefault, s));
    else
      st = RF_CUDA_STATUS(
          cudaMemcpyPeerAsync(dst->data, to, src->data, from, src->nbytes, s));
  } else {
    /* Default: the pointers say the direction (unified addressing), which
     * also covers reading another GPU's memory from this stream. */
    st = RF_CUDA_STATUS(cudaMemcpyAsync(dst->data, src->data, src->nbytes,
                                        cudaMemcpyDefault, s));
  }
  if (!st) return NULL;
  return rf__status_prefix(st, "%s: copying %zu bytes from %s to %s memory",
                           d->canonical, src->nbytes, where(src), where(dst));
}

rf_status *rf__gpu_new_device(const rf__device *d, const rf_tensor *like,
                              rf_tensor **out) {
  return rf__tensor_new_device(like->dtype, &like->shape, d->allocator, out);
}

rf_status *rf__gpu_new_host(const rf__device *d, const rf_tensor *like,
                            rf_tensor **out) {
  rf_allocator *a = d->host_allocator ? d->host_allocator : NULL;
  return rf_tensor_new(like->dtype, &like->shape, a, out);
}

/* ---- completion ---- */

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

/* On a CUDA thread: no CUDA calls, nothing that waits for the GPU. If the
 * pool cannot queue the task (no memory to grow its queue) it retries for a
 * while; as a last resort the task runs here (its CUDA calls then fail with
 * cudaErrorNotPermitted and the step reports that, rather than hanging). */
static void CUDART_CB on_stream(cudaStream_t stream, cudaError_t status,
                                void *arg) {
  rf__gpu_notify *n = arg;
  n->error = (int)status;
  for (int tries = 0; tries < 10000; tries++) {
    rf_status *st = rf__threadpool_schedule(n->pool, notify_task, n);
    if (!st) return;
    rf_status_free(st);
    struct timespec ms = {0, 1000000L};
    nanosleep(&ms, NULL);
  }
  notify_task(n);
}

rf_status *rf__gpu_notify_when_done(const rf__device *d, rf__gpu_notify *n,
                                    rf__gpu_notify_fn fn) {
  n->fn = fn;
  n->pool = d->pool;
  n->device = d;
  n->error = cudaSuccess;
  rf_status *st = RF_CUDA_STATUS(
      cudaStreamAddCallback((cudaStream_t)d->stream, on_stream, n, 0));
  if (!st) return NULL;
  return rf__status_prefix(st, "%s", d->canonical);
}
