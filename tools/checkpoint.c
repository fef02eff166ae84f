/* tools/checkpoint.c - the checkpoint format, little-endian throughout:
 *
 *   magic "RFCKPT\0\1" (8 bytes) | u32 version = 1 | u32 count | i64 step
 *   count times: u16 name length, name bytes, u8 dtype, u8 rank,
 *                rank x i64 dims, u64 byte count, data
 *   u32 CRC-32 (zlib) of every byte before it
 *
 * Parsing checks every length against what is left before reading it, the CRC
 * before anything else, and dims against the byte count. */
#include "checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static const uint8_t MAGIC[8] = {'R', 'F', 'C', 'K', 'P', 'T', 0, 1};
#define VERSION 1u

typedef struct wbuf {
  uint8_t *p;
  size_t len, cap;
  int oom;
} wbuf;

static void put(wbuf *b, const void *src, size_t n) {
  if (b->oom) return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, src, n);
  b->len += n;
}

static void put_le(wbuf *b, uint64_t v, int bytes) {
  uint8_t tmp[8];
  for (int i = 0; i < bytes; i++) tmp[i] = (uint8_t)(v >> (8 * i));
  put(b, tmp, (size_t)bytes);
}

rf_status *checkpoint_save(const checkpoint *c, const char *path) {
  wbuf b = {0};
  put(&b, MAGIC, sizeof MAGIC);
  put_le(&b, VERSION, 4);
  put_le(&b, (uint64_t)c->n, 4);
  put_le(&b, (uint64_t)c->step, 8);
  for (int i = 0; i < c->n; i++) {
    size_t nl = strlen(c->names[i]);
    rf_shape s = rf_tensor_shape(c->tensors[i]);
    put_le(&b, nl, 2);
    put(&b, c->names[i], nl);
    put_le(&b, (uint64_t)rf_tensor_dtype(c->tensors[i]), 1);
    put_le(&b, (uint64_t)s.rank, 1);
    for (int d = 0; d < s.rank; d++) put_le(&b, (uint64_t)s.dims[d], 8);
    put_le(&b, rf_tensor_nbytes(c->tensors[i]), 8);
    put(&b, rf_tensor_data(c->tensors[i]), rf_tensor_nbytes(c->tensors[i]));
  }
  put_le(&b, crc32(0L, b.p, (uInt)b.len), 4);
  if (b.oom) {
    free(b.p);
    return rf_status_new(RF_RESOURCE_EXHAUSTED, "checkpoint: out of memory");
  }
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  rf_status *st = NULL;
  if (!f) {
    st = rf_status_new(RF_PERMISSION_DENIED, "cannot write %s: %s", tmp,
                       strerror(errno));
  } else {
    int ok = fwrite(b.p, 1, b.len, f) == b.len;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
      st = rf_status_new(RF_DATA_LOSS, "writing %s failed: %s", path,
                         strerror(errno));
      remove(tmp);
    }
  }
  free(b.p);
  return st;
}

typedef struct rbuf {
  const uint8_t *p;
  size_t len, at;
} rbuf;

static int take(rbuf *r, void *dst, size_t n) {
  if (n > r->len - r->at) return -1;
  if (dst) memcpy(dst, r->p + r->at, n);
  r->at += n;
  return 0;
}

static int take_le(rbuf *r, int bytes, uint64_t *v) {
  uint8_t tmp[8];
  if (take(r, tmp, (size_t)bytes)) return -1;
  *v = 0;
  for (int i = 0; i < bytes; i++) *v |= (uint64_t)tmp[i] << (8 * i);
  return 0;
}

void checkpoint_clear(checkpoint *c) {
  for (int i = 0; i < c->n; i++) rf_tensor_release(c->tensors[i]);
  c->n = 0;
}

#define BAD(...) rf_status_new(RF_DATA_LOSS, "checkpoint: " __VA_ARGS__)

static rf_status *parse_tensor(rbuf *r, checkpoint *c, int i) {
  uint64_t nl, dt, rank, nbytes;
  if (take_le(r, 2, &nl) || nl == 0 || nl >= CKPT_NAME_MAX)
    return BAD("tensor %d: bad name length", i);
  if (take(r, c->names[i], nl)) return BAD("tensor %d: truncated name", i);
  c->names[i][nl] = '\0';
  if (strlen(c->names[i]) != nl) return BAD("tensor %d: name holds a NUL", i);
  if (take_le(r, 1, &dt) || take_le(r, 1, &rank))
    return BAD("'%s': truncated header", c->names[i]);
  if (dt >= RF_RESOURCE || rank > RF_MAX_RANK)
    return BAD("'%s': dtype %llu or rank %llu out of range", c->names[i],
               (unsigned long long)dt, (unsigned long long)rank);
  int64_t dims[RF_MAX_RANK];
  uint64_t count = 1;
  for (uint64_t d = 0; d < rank; d++) {
    uint64_t v;
    if (take_le(r, 8, &v)) return BAD("'%s': truncated dims", c->names[i]);
    if (v > (1ull << 40))
      return BAD("'%s': dim %llu too large", c->names[i],
                 (unsigned long long)v);
    dims[d] = (int64_t)v;
    count *= v;
    if (count > (1ull << 40))
      return BAD("'%s': too many elements", c->names[i]);
  }
  if (take_le(r, 8, &nbytes) || nbytes != count * rf_dtype_size((rf_dtype)dt))
    return BAD("'%s': byte count does not match its shape", c->names[i]);
  if (nbytes > r->len - r->at) return BAD("'%s': truncated data", c->names[i]);
  rf_shape s = rf_shape_make((int)rank, dims);
  rf_status *st =
      rf_tensor_new_copy((rf_dtype)dt, &s, r->p + r->at, &c->tensors[i]);
  if (st) return st;
  r->at += nbytes;
  return NULL;
}

rf_status *checkpoint_parse(const uint8_t *buf, size_t len, checkpoint *c) {
  memset(c, 0, sizeof *c);
  if (len < sizeof MAGIC + 4 + 4 + 8 + 4 ||
      memcmp(buf, MAGIC, sizeof MAGIC) != 0)
    return BAD("not a ringflow checkpoint (bad magic or too short)");
  uint32_t stored = (uint32_t)buf[len - 4] | (uint32_t)buf[len - 3] << 8 |
                    (uint32_t)buf[len - 2] << 16 | (uint32_t)buf[len - 1] << 24;
  if (crc32(0L, buf, (uInt)(len - 4)) != stored)
    return BAD("CRC mismatch: the file is corrupt or truncated");
  rbuf r = {buf, len - 4, sizeof MAGIC};
  uint64_t version, count, step;
  take_le(&r, 4, &version);
  take_le(&r, 4, &count);
  take_le(&r, 8, &step);
  if (version != VERSION)
    return BAD("version %llu; this ringflow reads version %u",
               (unsigned long long)version, VERSION);
  if (count > CKPT_MAX_TENSORS)
    return BAD("%llu tensors; at most %d", (unsigned long long)count,
               CKPT_MAX_TENSORS);
  c->step = (int64_t)step;
  for (uint64_t i = 0; i < count; i++) {
    rf_status *st = parse_tensor(&r, c, (int)i);
    if (st) {
      checkpoint_clear(c);
      return st;
    }
    c->n++;
  }
  if (r.at != r.len) {
    checkpoint_clear(c);
    return BAD("%zu trailing bytes", r.len - r.at);
  }
  return NULL;
}

rf_status *checkpoint_load(const char *path, checkpoint *c) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return rf_status_new(RF_NOT_FOUND, "cannot open %s: %s", path,
                         strerror(errno));
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 1 << 20;
      uint8_t *p = cap <= ((size_t)1 << 34) ? realloc(buf, cap) : NULL;
      if (!p) {
        free(buf);
        fclose(f);
        return rf_status_new(RF_RESOURCE_EXHAUSTED, "%s: too large to read",
                             path);
      }
      buf = p;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  fclose(f);
  rf_status *st = checkpoint_parse(buf, len, c);
  free(buf);
  if (st) {
    rf_status *w = rf_status_new(rf_status_code(st), "%s: %s", path,
                                 rf_status_message(st));
    rf_status_free(st);
    return w;
  }
  return NULL;
}
