/* core/shape.c - rf_shape helpers and the overflow-checked dim arithmetic of
 * core/shape.h. A shape is a value; nothing here allocates but an error
 * status. Shapes may be filled in by users' hands: nothing reads past
 * RF_MAX_RANK dims, whatever the rank says. */
#include "core/shape.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/status.h"

bool rf__dim_mul(int64_t a, int64_t b, int64_t *out) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return false;
  *out = r;
  return true;
}

static bool rank_ok(const rf_shape *s) {
  return s->rank >= RF_UNKNOWN_RANK && s->rank <= RF_MAX_RANK;
}

/* Multiplies the known nonzero dims of s (rank_ok) into *product; false on
 * overflow. *zero: a dim is 0. */
static bool nonzero_product(const rf_shape *s, int64_t *product, bool *zero) {
  *product = 1;
  *zero = false;
  for (int i = 0; i < s->rank; i++) {
    int64_t d = s->dims[i];
    *zero |= d == 0;
    if (d > 0 && !rf__dim_mul(*product, d, product)) return false;
  }
  return true;
}

rf_status *rf__shape_check(const rf_shape *s) {
  if (!s) return rf__invalid("NULL shape");
  if (!rank_ok(s))
    return rf__invalid("a shape has rank %d; ranks are 0..%d (or unknown)",
                       s->rank, RF_MAX_RANK);
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] < RF_UNKNOWN_DIM)
      return rf__invalid(
          "a shape has dim %d = %lld; dims are >= 0 (or -1, unknown)", i,
          (long long)s->dims[i]);
  int64_t product;
  bool zero;
  if (nonzero_product(s, &product, &zero)) return NULL;
  char buf[200];
  rf_shape_format(s, buf, sizeof buf);
  for (int i = 0; i < s->rank && !zero; i++) zero = s->dims[i] == 0;
  if (zero)
    return rf__invalid(
        "shape %s: its nonzero dims multiply past INT64_MAX (strides would "
        "overflow int64)",
        buf);
  return rf__invalid("shape %s: element count overflows int64", buf);
}

bool rf__shape_compatible(const rf_shape *a, const rf_shape *b) {
  if (a->rank < 0 || b->rank < 0) return true;
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] >= 0 && b->dims[i] >= 0 && a->dims[i] != b->dims[i])
      return false;
  return true;
}

rf_status *rf__shape_agree(const char *an, const rf_shape *a, const char *bn,
                           const rf_shape *b) {
  if (rf__shape_compatible(a, b)) return NULL;
  char x[96], y[96];
  rf_shape_format(a, x, sizeof x);
  rf_shape_format(b, y, sizeof y);
  return rf__invalid("%s %s and %s %s differ", an, x, bn, y);
}

rf_shape rf_shape_make(int rank, const int64_t *dims) {
  rf_shape s;
  memset(&s, 0, sizeof s);
  if (rank < 0 || rank > RF_MAX_RANK || (rank > 0 && !dims)) {
    s.rank = RF_UNKNOWN_RANK;
    return s;
  }
  s.rank = rank;
  for (int i = 0; i < rank; i++)
    s.dims[i] = dims[i] < 0 ? RF_UNKNOWN_DIM : dims[i];
  return s;
}

rf_shape rf_shape_unknown(void) { return rf_shape_make(-1, NULL); }
rf_shape rf_shape_scalar(void) { return rf_shape_make(0, NULL); }

rf_shape rf_shape_from_array(const int64_t *a) {
  if (!a || a[0] < 0 || a[0] > RF_MAX_RANK) return rf_shape_unknown();
  return rf_shape_make((int)a[0], a + 1);
}

/* The function behind the macro, for C callers that cannot use it (through
 * a pointer); C++ has an inline template in the header instead. The
 * parentheses keep the macro from expanding here. */
rf_shape(rf_shape_of)(int rank, ...) {
  int64_t dims[RF_MAX_RANK];
  if (rank < 0 || rank > RF_MAX_RANK) return rf_shape_unknown();
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) dims[i] = va_arg(ap, int64_t);
  va_end(ap);
  return rf_shape_make(rank, dims);
}

bool rf_shape_is_fully_defined(const rf_shape *s) {
  if (!s || s->rank < 0 || s->rank > RF_MAX_RANK) return false;
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] < 0) return false;
  return true;
}

/* -1 also for a shape rf__shape_check refuses, even when a zero dim makes
 * the count 0: its strides do not fit. */
int64_t rf_shape_num_elements(const rf_shape *s) {
  int64_t product;
  bool zero;
  if (!rf_shape_is_fully_defined(s) || !nonzero_product(s, &product, &zero))
    return -1;
  return zero ? 0 : product;
}

bool rf_shape_equal(const rf_shape *a, const rf_shape *b) {
  if (!a || !b || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank && i < RF_MAX_RANK; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

void rf_shape_format(const rf_shape *s, char *buf, size_t len) {
  if (!buf || len == 0) return;
  if (!s || s->rank == RF_UNKNOWN_RANK) {
    snprintf(buf, len, "<unknown>");
    return;
  }
  if (!rank_ok(s)) {
    snprintf(buf, len, "<rank %d>", s->rank);
    return;
  }
  size_t used = 0;
  used += (size_t)snprintf(buf, len, "(");
  for (int i = 0; i < s->rank && used < len; i++) {
    if (s->dims[i] < 0)
      used += (size_t)snprintf(buf + used, len - used, "%s?", i ? ", " : "");
    else
      used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "",
                               (long long)s->dims[i]);
  }
  if (used < len) snprintf(buf + used, len - used, ")");
}
