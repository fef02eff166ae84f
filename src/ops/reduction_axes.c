/* ops/reduction_axes.c - see reduction_axes.h. Pure functions over attrs and
 * shapes; nothing here allocates except the error statuses. */
#include "ops/reduction_axes.h"

#include "core/status.h"

rf_status *rf__reduction_attrs_read(const rf__attrs *a,
                                    rf__reduction_attrs *out) {
  rf__reduction_attrs r = {NULL, 0, false, false};
  RF_CHECK(rf__attrs_get_int_list(a, "axes", &r.axes, &r.naxes));
  if (rf__attrs_find(a, "all_axes"))
    RF_CHECK(rf__attrs_get_bool(a, "all_axes", &r.all_axes));
  if (rf__attrs_find(a, "keep_dims"))
    RF_CHECK(rf__attrs_get_bool(a, "keep_dims", &r.keep_dims));
  *out = r;
  return NULL;
}

rf_status *rf__reduction_mask(const rf__reduction_attrs *r, int rank,
                              uint32_t *mask) {
  if (r->all_axes) {
    *mask = rank > 0 ? (uint32_t)((1ull << rank) - 1) : 0;
    return NULL;
  }
  uint32_t m = 0;
  for (int i = 0; i < r->naxes; i++) {
    int64_t ax = r->axes[i];
    if (ax < -rank || ax >= rank)
      return rf__invalid(
          "reduction axis %lld is out of range for an input of rank %d "
          "(valid: [%d, %d))",
          (long long)ax, rank, -rank, rank);
    int k = (int)(ax < 0 ? ax + rank : ax);
    if (m & (1u << k))
      return rf__invalid("reduction axis %d is given twice in axes", k);
    m |= 1u << k;
  }
  *mask = m;
  return NULL;
}

rf_shape rf__reduced_shape(const rf_shape *in, uint32_t mask, bool keep_dims) {
  int64_t dims[RF_MAX_RANK];
  int n = 0;
  for (int k = 0; k < in->rank; k++) {
    if (!(mask & (1u << k)))
      dims[n++] = in->dims[k];
    else if (keep_dims)
      dims[n++] = 1;
  }
  return rf_shape_make(n, dims);
}
