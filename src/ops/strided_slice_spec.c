/* ops/strided_slice_spec.c - see strided_slice_spec.h. Per dim of size d and
 * stride s: indices count from the end when negative, then clamp to
 * [0, d] (s > 0) or [-1, d - 1] (s < 0); a masked begin is the first element
 * in s's direction, a masked end one past the last; the count is
 * ceil((end - begin) / s) when positive, else 0. */
#include "ops/strided_slice_spec.h"

#include "core/shape.h"
#include "core/status.h"

rf_status *rf__strided_slice_args_get(const rf__attrs *attrs,
                                      rf__strided_slice_args *a) {
  int nb, ne, ns;
  RF_CHECK(rf__attrs_get_int_list(attrs, "begin", &a->begin, &nb));
  RF_CHECK(rf__attrs_get_int_list(attrs, "end", &a->end, &ne));
  RF_CHECK(rf__attrs_get_int_list(attrs, "strides", &a->strides, &ns));
  RF_CHECK(rf__attrs_get_int(attrs, "begin_mask", &a->begin_mask));
  RF_CHECK(rf__attrs_get_int(attrs, "end_mask", &a->end_mask));
  RF_CHECK(rf__attrs_get_int(attrs, "shrink_axis_mask", &a->shrink_axis_mask));
  if (nb != ne || nb != ns)
    return rf__invalid(
        "begin, end and strides must have one entry per sliced dimension "
        "each, got %d, %d and %d",
        nb, ne, ns);
  a->n = nb;
  return NULL;
}

static rf_status *check_args(const rf__strided_slice_args *a) {
  if (a->n > RF_MAX_RANK)
    return rf__invalid("begin, end and strides have %d entries; at most %d",
                       a->n, RF_MAX_RANK);
  const int64_t masks[3] = {a->begin_mask, a->end_mask, a->shrink_axis_mask};
  static const char *const names[3] = {"begin_mask", "end_mask",
                                       "shrink_axis_mask"};
  for (int k = 0; k < 3; k++)
    if (masks[k] < 0 || masks[k] >> a->n)
      return rf__invalid(
          "%s %lld has bits at or past the %d sliced "
          "dimensions",
          names[k], (long long)masks[k], a->n);
  for (int i = 0; i < a->n; i++) {
    if (a->strides[i] == 0) return rf__invalid("dimension %d: stride 0", i);
    if ((a->shrink_axis_mask >> i & 1) && a->strides[i] < 0)
      return rf__invalid(
          "dimension %d: shrink_axis_mask takes one element; "
          "its stride must be positive, got %lld",
          i, (long long)a->strides[i]);
  }
  return NULL;
}

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* Dim i (< n) of known size d: its start, step and count. */
static rf_status *canonical_dim(const rf__strided_slice_args *a, int i,
                                int64_t d, int64_t *start, int64_t *step,
                                int64_t *count) {
  int64_t b = a->begin[i], e = a->end[i], s = a->strides[i];
  if (a->shrink_axis_mask >> i & 1) {
    int64_t idx = b < 0 ? b + d : b;
    if (idx < 0 || idx >= d)
      return rf__invalid(
          "dimension %d: index %lld is outside a dimension "
          "of size %lld",
          i, (long long)b, (long long)d);
    *start = idx, *step = 1, *count = 1;
    return NULL;
  }
  int64_t lo = s > 0 ? 0 : -1, hi = s > 0 ? d : d - 1;
  if (a->begin_mask >> i & 1)
    b = s > 0 ? lo : hi;
  else
    b = clamp(b < 0 ? b + d : b, lo, hi);
  if (a->end_mask >> i & 1)
    e = s > 0 ? hi : lo;
  else
    e = clamp(e < 0 ? e + d : e, lo, hi);
  int64_t n = 0; /* |e - b| <= d + 1: no overflow */
  if (s > 0 && e > b) n = (e - b - 1) / s + 1;
  if (s < 0 && b > e) n = (b - e - 1) / -s + 1;
  *start = n ? b : 0, *step = s, *count = n;
  return NULL;
}

rf_status *rf__strided_slice_spec(const rf__strided_slice_args *a,
                                  const rf_shape *in, int64_t *start,
                                  int64_t *step, int64_t *count,
                                  rf_shape *out) {
  RF_CHECK(check_args(a));
  if (in->rank < 0) {
    *out = rf_shape_unknown();
    return NULL;
  }
  if (a->n > in->rank)
    return rf__invalid(
        "begin, end and strides have %d entries for an input "
        "of rank %d",
        a->n, in->rank);
  rf_shape s = {.rank = 0};
  for (int i = 0; i < in->rank; i++) {
    int64_t d = in->dims[i], b = 0, st = 1, n = d;
    bool shrink = i < a->n && (a->shrink_axis_mask >> i & 1);
    if (d >= 0 && i < a->n) RF_CHECK(canonical_dim(a, i, d, &b, &st, &n));
    if (start) start[i] = b, step[i] = st, count[i] = n;
    if (!shrink) s.dims[s.rank++] = d < 0 ? -1 : n;
  }
  RF_CHECK(rf__shape_check(&s));
  *out = s;
  return NULL;
}
