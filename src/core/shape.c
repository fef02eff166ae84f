/* core/shape.c - rf_shape helpers. A shape is a value; nothing here allocates.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ringflow/dtype.h"

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
  if (!s || s->rank < 0) return false;
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] < 0) return false;
  return true;
}

int64_t rf_shape_num_elements(const rf_shape *s) {
  if (!rf_shape_is_fully_defined(s)) return -1;
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++)
    if (__builtin_mul_overflow(n, s->dims[i], &n)) return -1; /* > INT64_MAX */
  return n;
}

bool rf_shape_equal(const rf_shape *a, const rf_shape *b) {
  if (!a || !b || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

void rf_shape_format(const rf_shape *s, char *buf, size_t len) {
  if (!buf || len == 0) return;
  if (!s || s->rank < 0) {
    snprintf(buf, len, "<unknown>");
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
