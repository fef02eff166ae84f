/* ops/reduction_axes.h - the reduction attributes of Sum, Mean and their
 * gradient ops (axes: list(int), all_axes: bool, keep_dims: bool) turned into a
 * bit mask of reduced axes for one rank. Shape functions and kernels share it,
 * so build time and run time reject the same axes with the same message. */
#ifndef RF_OPS_REDUCTION_AXES_H
#define RF_OPS_REDUCTION_AXES_H

#include <stdbool.h>
#include <stdint.h>

#include "graph/attrs.h"

typedef struct rf__reduction_attrs {
  const int64_t *axes; /* borrowed from the attrs; negative counts from end */
  int naxes;
  bool all_axes; /* reduce every axis whatever `axes` says */
  bool keep_dims;
} rf__reduction_attrs;

/* Reads the three attributes; missing all_axes / keep_dims read as false. */
rf_status *rf__reduction_attrs_read(const rf__attrs *a,
                                    rf__reduction_attrs *out);

/* Bit k of *mask is set when axis k (0 <= k < rank) is reduced.
 * INVALID_ARGUMENT for an axis outside [-rank, rank) or one given twice. */
rf_status *rf__reduction_mask(const rf__reduction_attrs *r, int rank,
                              uint32_t *mask);

/* The shape of reducing `in` (known rank) over mask: reduced axes are dropped,
 * or kept as 1 with keep_dims. */
rf_shape rf__reduced_shape(const rf_shape *in, uint32_t mask, bool keep_dims);

#endif
