/* tools/idx.c - IDX reader. The header is read first and checked (magic,
 * type, rank, dims whose product is at most max_bytes); then the data is
 * read in chunks, from memory or through zlib (gzread reads plain files
 * too), into a buffer that grows with what has arrived, up to the declared
 * size. A stream that ends early or goes on past the dims is refused, so
 * memory follows the data really there, never the stream's or the dims'
 * claims (a gzip bomb stops one byte past its dims). */
#include "idx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/status.h"

#define IDX_CHECK(expr)      \
  do {                       \
    rf_status *st_ = (expr); \
    if (st_) return st_;     \
  } while (0)

/* What the reader reads from: a gzip (or plain) file, or memory. */
typedef struct source {
  gzFile f;
  const uint8_t *buf;
  size_t len, pos;
} source;

/* Reads up to n bytes into dst; *got < n only at the end. */
static rf_status *source_read(source *s, void *dst, size_t n, size_t *got) {
  if (!s->f) {
    *got = n < s->len - s->pos ? n : s->len - s->pos;
    if (*got) memcpy(dst, s->buf + s->pos, *got);
    s->pos += *got;
    return NULL;
  }
  *got = 0;
  while (*got < n) {
    size_t want = n - *got < (1u << 30) ? n - *got : (1u << 30);
    int r = gzread(s->f, (uint8_t *)dst + *got, (unsigned)want);
    if (r < 0) {
      int errnum;
      return rf_status_new(RF_DATA_LOSS, "corrupt gzip data: %s",
                           gzerror(s->f, &errnum));
    }
    if (r == 0) break;
    *got += (size_t)r;
  }
  return NULL;
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         p[3];
}

/* The header: rank and dims into a, the data's size into *count. */
static rf_status *read_header(source *s, size_t max_bytes, idx_array *a,
                              uint64_t *count) {
  uint8_t h[4 + 4 * IDX_MAX_DIMS];
  size_t got;
  IDX_CHECK(source_read(s, h, 4, &got));
  if (got < 4)
    return rf_status_new(
        RF_DATA_LOSS, "IDX: file is %zu bytes, shorter than its header", got);
  if (h[0] != 0 || h[1] != 0)
    return rf_status_new(RF_DATA_LOSS, "IDX: bad magic %02x %02x (want 00 00)",
                         h[0], h[1]);
  if (h[2] != 0x08)
    return rf_status_new(
        RF_UNIMPLEMENTED,
        "IDX: element type 0x%02x; only unsigned bytes (0x08) are supported",
        h[2]);
  int rank = h[3];
  if (rank < 1 || rank > IDX_MAX_DIMS)
    return rf_status_new(RF_DATA_LOSS, "IDX: rank %d outside 1..%d", rank,
                         IDX_MAX_DIMS);
  size_t header = 4 + 4 * (size_t)rank;
  IDX_CHECK(source_read(s, h + 4, header - 4, &got));
  if (got < header - 4)
    return rf_status_new(RF_DATA_LOSS,
                         "IDX: truncated header (%zu of %zu bytes)", 4 + got,
                         header);
  *a = (idx_array){.rank = rank};
  /* Each factor is below 2^32 and the product so far at most max_bytes:
   * no overflow. */
  *count = 1;
  for (int i = 0; i < rank; i++) {
    a->dims[i] = be32(h + 4 + 4 * i);
    *count *= (uint64_t)a->dims[i];
    if (*count > max_bytes) {
      char dims[IDX_MAX_DIMS * 14] = "";
      for (int k = 0; k <= i; k++)
        snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld",
                 k ? " x " : "", (long long)a->dims[k]);
      return rf_status_new(RF_RESOURCE_EXHAUSTED,
                           "IDX: data would exceed %zu bytes (rank %d, dims "
                           "%s%s)",
                           max_bytes, rank, dims, i < rank - 1 ? " x ..." : "");
    }
  }
  return NULL;
}

/* The data: count bytes exactly, into a buffer that grows as they arrive. */
static rf_status *read_data(source *s, uint64_t count, idx_array *a) {
  size_t cap = count < (1u << 20) ? (size_t)count : (1u << 20), len = 0;
  uint8_t *data = malloc(cap ? cap : 1);
  if (!data) return rf_status_new(RF_RESOURCE_EXHAUSTED, "IDX: out of memory");
  rf_status *st = NULL;
  while (!st && len < count) {
    if (len == cap) {
      size_t grown = cap * 2 < count ? cap * 2 : (size_t)count;
      uint8_t *bigger = realloc(data, grown);
      if (!bigger) {
        st = rf_status_new(RF_RESOURCE_EXHAUSTED, "IDX: out of memory");
        break;
      }
      data = bigger;
      cap = grown;
    }
    size_t want = cap - len, got;
    st = source_read(s, data + len, want, &got);
    len += got;
    if (got < want) break; /* the end, or an error */
  }
  uint8_t extra;
  size_t more = 0;
  if (!st && len == count) st = source_read(s, &extra, 1, &more);
  if (!st && len < count)
    st = rf_status_new(
        RF_DATA_LOSS,
        "IDX: %zu bytes of data, but the dims say %llu (truncated or corrupt)",
        len, (unsigned long long)count);
  if (!st && more)
    st = rf_status_new(RF_DATA_LOSS,
                       "IDX: more than the %llu bytes of data its dims say "
                       "(corrupt)",
                       (unsigned long long)count);
  if (st) {
    free(data);
    return st;
  }
  a->data = data;
  a->size = (size_t)count;
  return NULL;
}

/* "rank 2; an images file has rank 3 (count, rows, columns: magic 00 00 08
 * 03)": one wording wherever a file's rank is not its kind's (want 3 or
 * 1). */
static rf_status *wrong_rank(const char *prefix, int got, int want) {
  return rf_status_new(RF_DATA_LOSS, "%s: rank %d; %s", prefix, got,
                       want == 3 ? "an images file has rank 3 (count, rows, "
                                   "columns: magic 00 00 08 03)"
                                 : "a labels file has rank 1 (count: magic 00 "
                                   "00 08 01)");
}

/* rank: the one wanted (0: any), checked before the size and the data, so
 * a file of another kind is named as such, not as too long or too large. */
static rf_status *read_idx(source *s, size_t max_bytes, int rank,
                           idx_array *out) {
  idx_array a = {0};
  uint64_t count;
  rf_status *st = read_header(s, max_bytes, &a, &count);
  if (rank && (!st || rf_status_code(st) == RF_RESOURCE_EXHAUSTED) &&
      a.rank != rank) {
    rf_status_free(st);
    return wrong_rank("IDX", a.rank, rank);
  }
  IDX_CHECK(st);
  IDX_CHECK(read_data(s, count, &a));
  *out = a;
  return NULL;
}

rf_status *idx_parse(const uint8_t *buf, size_t len, size_t max_bytes,
                     idx_array *out) {
  source s = {.buf = buf, .len = len};
  return read_idx(&s, max_bytes, 0, out);
}

rf_status *idx_read(const char *path, size_t max_bytes, idx_array *out) {
  return idx_read_rank(path, max_bytes, 0, out);
}

rf_status *idx_read_rank(const char *path, size_t max_bytes, int rank,
                         idx_array *out) {
  gzFile f = gzopen(path, "rb");
  if (!f) {
    int e = errno;
    rf_code code = rf__errno_code(e); /* ENAMETOOLONG: INVALID_ARGUMENT */
    return rf_status_new(code == RF_UNKNOWN ? RF_NOT_FOUND : code,
                         "cannot open %s: %s", path, strerror(e));
  }
  source s = {.f = f};
  rf_status *st = read_idx(&s, max_bytes, rank, out);
  gzclose(f);
  if (!st) return NULL;
  rf_status *wrapped =
      rf_status_new(rf_status_code(st), "%s: %s", path, rf_status_message(st));
  rf_status_free(st);
  return wrapped;
}

rf_status *idx_check_labelled(const idx_array *images, const char *images_name,
                              const idx_array *labels, const char *labels_name,
                              int classes) {
  /* each file's kind first: a labels file of rank 3 is no count mismatch */
  if (images->rank != 3) return wrong_rank(images_name, images->rank, 3);
  if (labels->rank != 1) return wrong_rank(labels_name, labels->rank, 1);
  if (images->dims[0] != labels->dims[0])
    return rf_status_new(RF_DATA_LOSS,
                         "%s and %s do not describe the same images (ranks %d "
                         "and %d, counts %lld and %lld)",
                         images_name, labels_name, images->rank, labels->rank,
                         (long long)images->dims[0],
                         (long long)labels->dims[0]);
  for (size_t i = 0; i < labels->size; i++)
    if (labels->data[i] >= classes)
      return rf_status_new(RF_DATA_LOSS, "%s: label %zu is %d, outside 0..%d",
                           labels_name, i, labels->data[i], classes - 1);
  return NULL;
}

void idx_free(idx_array *a) {
  if (!a) return;
  free(a->data);
  a->data = NULL;
}
