/* core/tensor.h - the tensor object, shared by kernels and the runtime. */
#ifndef RF_CORE_TENSOR_H
#define RF_CORE_TENSOR_H

#include <stdatomic.h>

#include "ringflow/tensor.h"

struct rf_tensor {
  atomic_int refs;
  rf_dtype dtype;
  rf_shape shape; /* fully defined */
  int64_t num_elements;
  size_t nbytes;
  void *data; /* RF_TENSOR_ALIGNMENT-aligned, never NULL */
  rf_allocator *allocator;
};

/* True when the caller holds the only reference, so the buffer may be reused in
 * place (variables update this way without breaking immutability). */
static inline int rf__tensor_is_sole_owner(const rf_tensor *t) {
  return atomic_load_explicit(&t->refs, memory_order_acquire) == 1;
}

#endif
