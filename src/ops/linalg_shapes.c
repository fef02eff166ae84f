/* ops/linalg_shapes.c - see linalg_shapes.h. */
#include "ops/linalg_shapes.h"

#include "core/shape.h"
#include "core/status.h"
#include "ops/broadcast_shape.h"

#define UNK RF_UNKNOWN_DIM

/* The shape without its last two dims. */
static rf_shape batch_of(const rf_shape *s) {
  rf_shape b = *s;
  if (b.rank >= 2) b.rank -= 2;
  return b;
}

rf_status *rf__batch_matmul_shape(const rf_shape *x, const rf_shape *y,
                                  bool adj_x, bool adj_y, rf_shape *out) {
  char a[96], b[96];
  rf_shape_format(x, a, sizeof a);
  rf_shape_format(y, b, sizeof b);
  if ((x->rank >= 0 && x->rank < 2) || (y->rank >= 0 && y->rank < 2))
    return rf__invalid("x %s and y %s must have rank >= 2", a, b);
  if (x->rank < 2 || y->rank < 2) { /* here: a rank is unknown */
    *out = rf_shape_unknown();
    return NULL;
  }
  int64_t m = x->dims[x->rank - (adj_x ? 1 : 2)];
  int64_t kx = x->dims[x->rank - (adj_x ? 2 : 1)];
  int64_t ky = y->dims[y->rank - (adj_y ? 1 : 2)];
  int64_t n = y->dims[y->rank - (adj_y ? 2 : 1)];
  if (kx >= 0 && ky >= 0 && kx != ky)
    return rf__invalid(
        "inner dimensions differ: x %s%s, y %s%s (%lld vs. "
        "%lld)",
        a, adj_x ? " adjointed" : "", b, adj_y ? " adjointed" : "",
        (long long)kx, (long long)ky);
  rf_shape bx = batch_of(x), by = batch_of(y), s;
  if (!rf__broadcast_shape(&bx, &by, &s))
    return rf__invalid("batch dimensions of x %s and y %s do not broadcast", a,
                       b);
  if (s.rank + 2 > RF_MAX_RANK)
    return rf__invalid(
        "the product would have rank %d; at most %d is "
        "allowed",
        s.rank + 2, RF_MAX_RANK);
  s.dims[s.rank++] = m < 0 ? UNK : m;
  s.dims[s.rank++] = n < 0 ? UNK : n;
  RF_CHECK(rf__shape_check(&s));
  *out = s;
  return NULL;
}
