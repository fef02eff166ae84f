/* kernels/broadcast_plan.c - see broadcast_plan.h. A merged dim keeps the
 * inner stride of each operand; a broadcast operand has stride 0 there. */
#include "kernels/broadcast_plan.h"

/* Strides of x's dims aligned to the output's rank (0 for missing or
 * broadcast dims). */
static void aligned_strides(const rf_shape *x, int rank, int64_t *st) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    int k = x->rank - rank + i;
    int64_t d = k >= 0 ? x->dims[k] : 1;
    st[i] = d == 1 ? 0 : s;
    s *= d;
  }
}

void rf__broadcast_plan_make(const rf_shape *as, const rf_shape *bs,
                             const rf_shape *os, rf__broadcast_plan *p) {
  int64_t sa[RF_MAX_RANK], sb[RF_MAX_RANK];
  aligned_strides(as, os->rank, sa);
  aligned_strides(bs, os->rank, sb);
  p->rank = 0;
  for (int i = 0; i < os->rank; i++) {
    int64_t d = os->dims[i];
    if (d == 1) continue;
    int r = p->rank;
    if (r > 0 && p->sa[r - 1] == sa[i] * d && p->sb[r - 1] == sb[i] * d) {
      p->dims[r - 1] *= d; /* both operands linear across the pair: merge */
      p->sa[r - 1] = sa[i];
      p->sb[r - 1] = sb[i];
      continue;
    }
    p->dims[r] = d;
    p->sa[r] = sa[i];
    p->sb[r] = sb[i];
    p->rank++;
  }
  if (p->rank == 0) { /* one element */
    p->rank = 1;
    p->dims[0] = 1;
    p->sa[0] = p->sb[0] = 1;
  }
}
