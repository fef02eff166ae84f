/* ops/broadcast_shape.c - see broadcast_shape.h. Pure functions on shapes; no
 * allocation except the error status. */
#include "ops/broadcast_shape.h"

#include "core/status.h"

/* The broadcast of one aligned pair of dims; false when incompatible. */
static bool broadcast_dim(int64_t a, int64_t b, int64_t *out) {
  if (a == 1) {
    *out = b;
  } else if (b == 1) {
    *out = a;
  } else if (a < 0) {
    *out = b; /* a must be 1 or b; either way the result is b (maybe ?) */
  } else if (b < 0) {
    *out = a;
  } else if (a == b) {
    *out = a;
  } else {
    return false;
  }
  return true;
}

bool rf__broadcast_shape(const rf_shape *a, const rf_shape *b, rf_shape *out) {
  if (a->rank < 0 || b->rank < 0) {
    *out = rf_shape_unknown();
    return true;
  }
  rf_shape r = rf_shape_scalar();
  r.rank = a->rank > b->rank ? a->rank : b->rank;
  for (int i = 0; i < r.rank; i++) {
    int ia = a->rank - r.rank + i, ib = b->rank - r.rank + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (!broadcast_dim(da, db, &r.dims[i])) return false;
  }
  *out = r;
  return true;
}

rf_status *rf__broadcast_error(const rf_shape *a, const rf_shape *b) {
  char sa[128], sb[128];
  rf_shape_format(a, sa, sizeof sa);
  rf_shape_format(b, sb, sizeof sb);
  return rf__invalid("Incompatible shapes: %s vs. %s", sa, sb);
}
