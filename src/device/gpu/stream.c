/* device/gpu/stream.c - work on a GPU device's stream: copies between host
 * and device memory (and between GPUs; small ones with pinned host memory as
 * a kernel, small_copy.cu), and tensors for them. Completion of
 * that work is reported by device/gpu/completion.c. */
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_check.h"
#include "core/status.h"
#include "device/gpu/gpu.h"
#include "device/gpu/order.h"

static const char *where(const rf_tensor *t) {
  return t->on_gpu ? "device" : "host";
}

/* Copies of at most this many bytes between pinned host memory and the
 * device's GPU run as a kernel (small_copy.cu) where the device allows it
 * (rf__device.gpu_small_copies). */
#define SMALL_COPY_BYTES 16384

/* Whether a copy between host tensor h and device tensor g of d's GPU may
 * be a kernel: small, and h in pinned memory (mapped at its own address on
 * every GPU under unified addressing). */
static bool small_pinned(const rf__device *d, const rf_tensor *h,
                         const rf_tensor *g) {
  const rf_tensor *root = h;
  while (root->base) root = root->base;
  return h->nbytes <= SMALL_COPY_BYTES && !h->external &&
         root->allocator == rf__gpu_pinned_allocator() &&
         rf__gpu_tensor_ordinal(g) == d->gpu_ordinal && d->gpu_small_copies;
}

rf_status *rf__gpu_copy(const rf__device *d, rf_tensor *dst,
                        const rf_tensor *src) {
  if (dst->nbytes != src->nbytes)
    return rf__internal("%s: copy of %zu bytes into a buffer of %zu",
                        d->canonical, src->nbytes, dst->nbytes);
  if (src->nbytes == 0) return NULL;
  cudaStream_t s = (cudaStream_t)d->stream;
  rf_status *st = NULL;
  rf__gpu_enqueue_begin(d->order);
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
  } else if (dst->on_gpu ? small_pinned(d, src, dst)
                         : small_pinned(d, dst, src)) {
    (void)cudaGetLastError(); /* not this launch's: see kernels' begin() */
    st = RF_CUDA_STATUS((cudaError_t)rf__gpu_small_copy_launch(
        dst->data, src->data, src->nbytes, s));
  } else {
    /* Default: the pointers say the direction (unified addressing), which
     * also covers reading another GPU's memory from this stream. */
    st = RF_CUDA_STATUS(cudaMemcpyAsync(dst->data, src->data, src->nbytes,
                                        cudaMemcpyDefault, s));
  }
  rf__gpu_enqueue_end(d->order);
  if (!st) return NULL;
  return rf__status_prefix(st, "%s: copying %zu bytes from %s to %s memory",
                           d->canonical, src->nbytes, where(src), where(dst));
}

rf_status *rf__gpu_wait_legacy_stream(const rf__device *d, int gpu) {
  /* The event belongs to (and is recorded on) the producer's GPU; a stream
   * of another GPU may wait for it. */
  if (gpu != d->gpu_ordinal) rf__gpu_make_current(gpu);
  cudaEvent_t ev = NULL;
  rf_status *st =
      RF_CUDA_STATUS(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  if (!st) st = RF_CUDA_STATUS(cudaEventRecord(ev, cudaStreamLegacy));
  if (gpu != d->gpu_ordinal) rf__gpu_make_current(d->gpu_ordinal);
  if (!st) {
    rf__gpu_enqueue_begin(d->order);
    st = RF_CUDA_STATUS(cudaStreamWaitEvent((cudaStream_t)d->stream, ev, 0));
    rf__gpu_enqueue_end(d->order);
  }
  if (ev) cudaEventDestroy(ev); /* freed once the wait no longer needs it */
  if (!st) return NULL;
  return rf__status_prefix(st,
                           "%s: waiting for the legacy default stream of GPU "
                           "%d (fed device memory)",
                           d->canonical, gpu);
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
