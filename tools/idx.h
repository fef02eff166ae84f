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
 * plain or gzip, whose dims give at most max_bytes of data (otherwise
 * RESOURCE_EXHAUSTED, before any data is read). The data must be exactly as
 * long as the dims say (otherwise DATA_LOSS): it is read in chunks into a
 * buffer that grows with what arrives, and reading stops one byte past the
 * dims, so memory is at most about twice the data that really arrived and
 * never more than max_bytes, whatever the stream or the dims claim. On error
 * *out is untouched. */
rf_status *idx_read(const char *path, size_t max_bytes, idx_array *out);
/* idx_read of a file whose rank must be `rank`: 3 (an images file) or 1 (a
 * labels file); another rank is DATA_LOSS naming both, checked before the
 * size cap and the data. */
rf_status *idx_read_rank(const char *path, size_t max_bytes, int rank,
                         idx_array *out);
/* Parses an IDX image already in memory (uncompressed), same checks. */
rf_status *idx_parse(const uint8_t *buf, size_t len, size_t max_bytes,
                     idx_array *out);
/* A labelled data set: images of rank 3 (count, rows, cols) and labels of
 * rank 1, the same count, every label in 0..classes-1. The names are for
 * messages. Returns DATA_LOSS naming the first problem. */
rf_status *idx_check_labelled(const idx_array *images, const char *images_name,
                              const idx_array *labels, const char *labels_name,
                              int classes);
void idx_free(idx_array *a);

#endif
