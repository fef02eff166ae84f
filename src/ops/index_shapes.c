/* ops/index_shapes.c - see index_shapes.h. */
#include "ops/index_shapes.h"

#include "core/shape.h"
#include "core/status.h"
#include "ops/broadcast_shape.h"
#include "ops/shape_op_shapes.h"

rf_status *rf__gather_shape(const rf_shape *params, const rf_shape *indices,
                            int64_t *axis, rf_shape *out) {
  if (params->rank == 0) return rf__invalid("params must have rank >= 1");
  RF_CHECK(rf__normalize_axis(axis, params->rank, "axis"));
  if (params->rank < 0 || indices->rank < 0) {
    *out = rf_shape_unknown();
    return NULL;
  }
  int rank = params->rank - 1 + indices->rank;
  if (rank > RF_MAX_RANK)
    return rf__invalid("the output would have rank %d; at most %d is allowed",
                       rank, RF_MAX_RANK);
  rf_shape s = rf_shape_scalar();
  s.rank = rank;
  int k = 0;
  for (int i = 0; i < *axis; i++) s.dims[k++] = params->dims[i];
  for (int i = 0; i < indices->rank; i++) s.dims[k++] = indices->dims[i];
  for (int i = (int)*axis + 1; i < params->rank; i++)
    s.dims[k++] = params->dims[i];
  RF_CHECK(rf__shape_check(&s));
  *out = s;
  return NULL;
}

rf_status *rf__one_hot_shape(const rf_shape *indices, int64_t depth,
                             int64_t axis, rf_shape *out) {
  if (depth < 0)
    return rf__invalid("depth %lld must be >= 0", (long long)depth);
  RF_CHECK(rf__expand_dims_shape(indices, axis, out));
  if (out->rank < 0) return NULL;
  int64_t a = axis;
  RF_CHECK(rf__normalize_axis(&a, out->rank, "axis"));
  out->dims[a] = depth;
  return rf__shape_check(out);
}

rf_status *rf__select_shape(const rf_shape *c, const rf_shape *t,
                            const rf_shape *e, rf_shape *out) {
  rf_shape te;
  if (!rf__broadcast_shape(t, e, &te)) return rf__broadcast_error(t, e);
  if (!rf__broadcast_shape(c, &te, out)) return rf__broadcast_error(c, &te);
  return NULL;
}
