/* device/gpu/stream.c - work on a GPU device's stream: copies between host
 * and device memory (and between GPUs), and tensors for them. Completion of
 * that work is reported by device/gpu/completion.c. */
#include <cuda_runtime_api.h>
#include <string.h>

#include "core/cuda_check.h"
#include "core/status.h"
#include "device/gpu/gpu.h"
#include "device/gpu/order.h"

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

rf_status *rf__gpu_new_device(const rf__device *d, const rf_tensor *like,
                              rf_tensor **out) {
  return rf__tensor_new_device(like->dtype, &like->shape, d->allocator, out);
}

rf_status *rf__gpu_new_host(const rf__device *d, const rf_tensor *like,
                            rf_tensor **out) {
  rf_allocator *a = d->host_allocator ? d->host_allocator : NULL;
  return rf_tensor_new(like->dtype, &like->shape, a, out);
}
