/* ops/broadcast_shape.h - numpy's broadcasting rule on shapes, shared by the
 * shape functions (where dims may be unknown) and the CPU kernels (where they
 * never are). Shapes align at their last dimension; a dimension of 1
 * stretches to the other operand's size. */
#ifndef RF_OPS_BROADCAST_SHAPE_H
#define RF_OPS_BROADCAST_SHAPE_H

#include <stdbool.h>

#include "ringflow/dtype.h"
#include "ringflow/status.h"

/* Stores the broadcast shape of a and b in *out and returns true, or returns
 * false (out untouched) when some pair of known dims differs and neither is
 * 1. An unknown rank gives an unknown rank; an unknown dim gives the other
 * operand's dim when that one cannot be 1's partner (known and != 1), else
 * unknown. */
bool rf__broadcast_shape(const rf_shape *a, const rf_shape *b, rf_shape *out);

/* INVALID_ARGUMENT "Incompatible shapes: (2, 3) vs. (4, 3)" for a and b. */
rf_status *rf__broadcast_error(const rf_shape *a, const rf_shape *b);

#endif
