/* ops/index_shapes.h - output shapes of Gather, OneHot and Select, shared by
 * the shape functions (dims may be unknown) and the kernels (all known), so
 * both refuse alike with the same messages (no node named: callers
 * prefix). */
#ifndef RF_OPS_INDEX_SHAPES_H
#define RF_OPS_INDEX_SHAPES_H

#include <stdint.h>

#include "ringflow/tensor.h"

/* params[:axis] + indices + params[axis+1:]; *axis normalised (params'
 * rank >= 1 when known). */
rf_status *rf__gather_shape(const rf_shape *params, const rf_shape *indices,
                            int64_t *axis, rf_shape *out);

/* indices with a dim of `depth` (>= 0) inserted at axis in [-rank-1, rank]
 * (-1: last). */
rf_status *rf__one_hot_shape(const rf_shape *indices, int64_t depth,
                             int64_t axis, rf_shape *out);

/* numpy broadcast of condition, t and e. */
rf_status *rf__select_shape(const rf_shape *c, const rf_shape *t,
                            const rf_shape *e, rf_shape *out);

#endif
