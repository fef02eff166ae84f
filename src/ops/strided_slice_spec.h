/* ops/strided_slice_spec.h - StridedSlice's begin/end/strides and masks made
 * canonical for an input shape, TensorFlow's rules without ellipsis_mask and
 * new_axis_mask: per dim the first index, the step and the count of the
 * elements taken. Shared by the shape functions (build time, dims may be
 * unknown) and the kernels' plans (run time), so both refuse alike with the
 * same messages. Messages name no node: callers prefix. */
#ifndef RF_OPS_STRIDED_SLICE_SPEC_H
#define RF_OPS_STRIDED_SLICE_SPEC_H

#include <stdint.h>

#include "graph/attrs.h"
#include "ringflow/tensor.h"

typedef struct rf__strided_slice_args {
  const int64_t *begin, *end, *strides; /* n entries each, borrowed */
  int n;
  int64_t begin_mask, end_mask, shrink_axis_mask;
} rf__strided_slice_args;

/* The op's attrs (begin, end, strides, the three masks) of a node; the
 * lists are borrowed from attrs. */
rf_status *rf__strided_slice_args_get(const rf__attrs *attrs,
                                      rf__strided_slice_args *a);

/* For input shape `in`: start[i], step[i] and count[i] for each of its rank
 * dims (dims at and past n whole; a shrunk dim counts 1 and is left out of
 * *out). An unknown rank gives an unknown *out (only the arguments are
 * checked); an unknown dim an unknown output dim (its start, step and count
 * unset). INVALID_ARGUMENT: lists of different lengths or longer than the
 * rank, a zero stride, a mask bit at or past n, a shrunk dim whose stride is
 * not positive or whose index is outside the dim. start/step/count may be
 * NULL. */
rf_status *rf__strided_slice_spec(const rf__strided_slice_args *a,
                                  const rf_shape *in, int64_t *start,
                                  int64_t *step, int64_t *count, rf_shape *out);

#endif
