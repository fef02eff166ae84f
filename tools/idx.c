/* tools/idx.c - IDX reader. The whole file is inflated into memory first
 * (gzread handles plain files too), then parsed and checked: magic, type,
 * rank, dims, and that the data is exactly as long as the dims say. */
#include "idx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         p[3];
}

rf_status *idx_parse(const uint8_t *buf, size_t len, size_t max_bytes,
                     idx_array *out) {
  if (len < 4)
    return rf_status_new(
        RF_DATA_LOSS, "IDX: file is %zu bytes, shorter than its header", len);
  if (buf[0] != 0 || buf[1] != 0)
    return rf_status_new(RF_DATA_LOSS, "IDX: bad magic %02x %02x (want 00 00)",
                         buf[0], buf[1]);
  if (buf[2] != 0x08)
    return rf_status_new(
        RF_UNIMPLEMENTED,
        "IDX: element type 0x%02x; only unsigned bytes (0x08) are supported",
        buf[2]);
  int rank = buf[3];
  if (rank < 1 || rank > IDX_MAX_DIMS)
    return rf_status_new(RF_DATA_LOSS, "IDX: rank %d outside 1..%d", rank,
                         IDX_MAX_DIMS);
  size_t header = 4 + 4 * (size_t)rank;
  if (len < header)
    return rf_status_new(
        RF_DATA_LOSS, "IDX: truncated header (%zu of %zu bytes)", len, header);
  idx_array a = {.rank = rank};
  uint64_t count = 1;
  for (int i = 0; i < rank; i++) {
    a.dims[i] = be32(buf + 4 + 4 * i);
    count *= (uint64_t)a.dims[i];
    if (count > max_bytes)
      return rf_status_new(RF_RESOURCE_EXHAUSTED,
                           "IDX: data would exceed %zu bytes", max_bytes);
  }
  if (len - header != count)
    return rf_status_new(
        RF_DATA_LOSS,
        "IDX: %zu bytes of data, but the dims say %llu (truncated or corrupt)",
        len - header, (unsigned long long)count);
  a.data = malloc(count ? count : 1);
  if (!a.data)
    return rf_status_new(RF_RESOURCE_EXHAUSTED, "IDX: out of memory");
  memcpy(a.data, buf + header, count);
  a.size = count;
  *out = a;
  return NULL;
}

rf_status *idx_read(const char *path, size_t max_bytes, idx_array *out) {
  gzFile f = gzopen(path, "rb");
  if (!f)
    return rf_status_new(RF_NOT_FOUND, "cannot open %s: %s", path,
                         strerror(errno));
  size_t cap = 1 << 20, len = 0;
  uint8_t *buf = malloc(cap);
  rf_status *st =
      buf ? NULL : rf_status_new(RF_RESOURCE_EXHAUSTED, "out of memory");
  while (!st) {
    if (len == cap) {
      if (cap > max_bytes + 64) {
        st = rf_status_new(RF_RESOURCE_EXHAUSTED, "%s: more than %zu bytes",
                           path, max_bytes);
        break;
      }
      uint8_t *nb = realloc(buf, cap * 2);
      if (!nb) {
        st = rf_status_new(RF_RESOURCE_EXHAUSTED, "out of memory");
        break;
      }
      buf = nb;
      cap *= 2;
    }
    int got = gzread(f, buf + len, (unsigned)(cap - len));
    if (got < 0) {
      int errnum;
      const char *msg = gzerror(f, &errnum);
      st = rf_status_new(RF_DATA_LOSS, "%s: corrupt gzip data: %s", path, msg);
      break;
    }
    if (got == 0) break;
    len += (size_t)got;
  }
  gzclose(f);
  if (!st) {
    st = idx_parse(buf, len, max_bytes, out);
    if (st) {
      rf_status *wrapped = rf_status_new(rf_status_code(st), "%s: %s", path,
                                         rf_status_message(st));
      rf_status_free(st);
      st = wrapped;
    }
  }
  free(buf);
  return st;
}

void idx_free(idx_array *a) {
  if (!a) return;
  free(a->data);
  a->data = NULL;
}
