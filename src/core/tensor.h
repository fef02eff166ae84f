/* core/tensor.h - the tensor object, shared by kernels and the runtime.
 * A tensor's buffer is host memory unless on_gpu is set: then data is a
 * device pointer (from the GPU caching allocator of the device that made it)
 * that host code must never dereference. Users only ever see host tensors:
 * the public accessors return NULL / 0 for device tensors. */
#ifndef RF_CORE_TENSOR_H
#define RF_CORE_TENSOR_H

#include <stdatomic.h>
#include <stdint.h>

#include "ringflow/tensor.h"

struct rf_tensor {
  atomic_int refs;
  rf_dtype dtype;
  rf_shape shape; /* fully defined */
  int64_t num_elements;
  size_t nbytes;
  /* RF_TENSOR_ALIGNMENT-aligned (external memory: aligned to the dtype's
   * size), never NULL */
  void *data;
  rf_allocator *allocator;
  /* Non-NULL for a view (rf__tensor_new_view): data lies in base's buffer and
   * the view holds one reference to base instead of owning the buffer. */
  struct rf_tensor *base;
  /* 1: data is device memory of `allocator`'s GPU (a view copies its base's
   * flag); 0: host memory. */
  int8_t on_gpu;
  /* The physical GPU of external device memory (rf_tensor_new_external_gpu)
   * and of views of it; -1 otherwise (a cache's tensors know their GPU
   * through the allocator: rf__gpu_tensor_ordinal). */
  int16_t gpu;
  /* 1: data is the caller's memory (rf_tensor_new_external), never written
   * by the library and given back through release (allocator is NULL). */
  int8_t external;
  rf_tensor_release_fn release;
  void *release_arg;
};

/* True when the caller holds the only reference to the buffer, so it may be
 * reused in place (variables update this way without breaking immutability).
 * A view is sole owner only when its base is too: the buffer is shared. The
 * caller's memory (external) is never the library's to write. */
static inline int rf__tensor_is_sole_owner(const rf_tensor *t) {
  for (; t; t = t->base)
    if (t->external ||
        atomic_load_explicit(&t->refs, memory_order_acquire) != 1)
      return 0;
  return 1;
}

/* A new tensor of `shape` (same number of elements as t) sharing t's buffer
 * without a copy (Reshape's output); it retains t (or t's base) until it is
 * released. INVALID_ARGUMENT when the element counts differ; *out untouched
 * on error. */
rf_status *rf__tensor_new_view(rf_tensor *t, const rf_shape *shape,
                               rf_tensor **out);

/* A view of `shape` on t's elements [offset, offset + its count): no copy,
 * t (or its base) retained (a bucket's unpacked results,
 * passes/bucket_collectives.c). The slice must lie inside t and start on an
 * RF_TENSOR_ALIGNMENT boundary, so views keep the alignment every buffer
 * has; otherwise INVALID_ARGUMENT and *out untouched. */
rf_status *rf__tensor_new_slice(rf_tensor *t, int64_t offset,
                                const rf_shape *shape, rf_tensor **out);

/* rf_tensor_new for a device tensor: the buffer comes from `allocator` (a
 * GPU device's caching allocator, device/gpu/gpu.h) and the tensor is
 * marked on_gpu. Same errors as rf_tensor_new; *out untouched on error. */
rf_status *rf__tensor_new_device(rf_dtype dtype, const rf_shape *shape,
                                 rf_allocator *allocator, rf_tensor **out);

#endif
