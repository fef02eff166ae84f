/* tools/idx.h - reading IDX files (the MNIST family's format), plain or
 * gzip-compressed, through zlib. A truncated, corrupt or oversized file is
 * rejected with a message saying what is wrong; nothing is half-loaded. */
#ifndef RF_TOOLS_IDX_H
#define RF_TOOLS_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "ringflow/status.h"

#define IDX_MAX_DIMS 4

typedef struct idx_array {
  int rank;
  int64_t dims[IDX_MAX_DIMS];
  uint8_t *data; /* unsigned bytes, row-major; malloc'ed */
  size_t size;
} idx_array;

/* Reads an IDX file of unsigned bytes (type 0x08) of rank 1..IDX_MAX_DIMS,
 * at most max_bytes of data. */
rf_status *idx_read(const char *path, size_t max_bytes, idx_array *out);
/* Parses an IDX image already in memory (uncompressed), same checks. */
rf_status *idx_parse(const uint8_t *buf, size_t len, size_t max_bytes,
                     idx_array *out);
void idx_free(idx_array *a);

#endif
