/* ops/array_shapes.c - see array_shapes.h. Nothing here allocates except the
 * error statuses. */
#include "ops/array_shapes.h"

#include <stdio.h>

#include "core/shape.h"
#include "core/status.h"

rf_status *rf__dims_from_tensor(const rf_tensor *t, const char *what,
                                int64_t *dims, int *rank) {
  rf_dtype dt = rf_tensor_dtype(t);
  rf_shape s = rf_tensor_shape(t);
  char buf[128];
  if (dt != RF_INT32 && dt != RF_INT64)
    return rf__invalid("%s must be int32 or int64, got %s", what,
                       rf_dtype_name(dt));
  if (s.rank != 1) {
    rf_shape_format(&s, buf, sizeof buf);
    return rf__invalid("%s must be a vector, got shape %s", what, buf);
  }
  if (s.dims[0] > RF_MAX_RANK)
    return rf__invalid("%s has %lld entries; at most %d dimensions are allowed",
                       what, (long long)s.dims[0], RF_MAX_RANK);
  const void *d = rf_tensor_data(t);
  for (int64_t i = 0; i < s.dims[0]; i++)
    dims[i] =
        dt == RF_INT32 ? ((const int32_t *)d)[i] : ((const int64_t *)d)[i];
  *rank = (int)s.dims[0];
  return NULL;
}

void rf__format_dims(const int64_t *dims, int rank, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "",
                             (long long)dims[i]);
  if (used < len) snprintf(buf + used, len - used, "]");
}

rf_status *rf__reshape_output_shape(int64_t num_in, const int64_t *dims,
                                    int rank, rf_shape *out) {
  char buf[160];
  int unknown_at = -1;
  rf__format_dims(dims, rank, buf, sizeof buf);
  for (int i = 0; i < rank; i++) {
    if (dims[i] == -1) {
      if (unknown_at >= 0)
        return rf__invalid("only one dimension of shape %s may be -1", buf);
      unknown_at = i;
    } else if (dims[i] < 0) {
      return rf__invalid("dimension %d of shape %s is negative", i, buf);
    }
  }
  rf_shape s = rf_shape_make(rank, dims); /* -1 becomes unknown */
  RF_CHECK(rf__shape_check(&s));
  int64_t known = 1; /* product of the dims other than -1: fits, as checked */
  for (int i = 0; i < rank; i++)
    if (i != unknown_at) known *= dims[i];
  if (unknown_at >= 0 && num_in >= 0) {
    if (known == 0 || num_in % known != 0)
      return rf__invalid(
          "cannot reshape a tensor of %lld elements into shape %s",
          (long long)num_in, buf);
    s.dims[unknown_at] = num_in / known;
  } else if (unknown_at < 0 && num_in >= 0 && num_in != known) {
    return rf__invalid(
        "cannot reshape a tensor of %lld elements into shape %s (%lld "
        "elements)",
        (long long)num_in, buf, (long long)known);
  }
  *out = s;
  return NULL;
}

rf_status *rf__fill_output_shape(const int64_t *dims, int rank, rf_shape *out) {
  char buf[160];
  rf__format_dims(dims, rank, buf, sizeof buf);
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0) return rf__invalid("dims %s has a negative entry", buf);
  rf_shape s = rf_shape_make(rank, dims);
  RF_CHECK(rf__shape_check(&s));
  *out = s;
  return NULL;
}
