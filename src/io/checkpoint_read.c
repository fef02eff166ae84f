/* io/checkpoint_read.c - the safetensors reader. Every size comes from the
 * file's real size (fstat) before anything is allocated: the header length
 * is capped and must fit the file, every tensor's data_offsets must equal
 * its shape x dtype size (overflow-checked) and the tensors must tile the
 * data section exactly. Only then are tensors allocated and read, straight
 * from the file, so memory stays proportional to the file's bytes. */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/mem.h"
#include "core/status.h"
#include "io/checkpoint.h"
#include "io/safe_file.h"

#define BAD(...) rf_status_new(RF_DATA_LOSS, __VA_ARGS__)

static const unsigned char OLD_MAGIC[8] = {'R', 'F', 'C', 'K', 'P', 'T', 0, 1};

typedef struct entry {
  const char *name; /* borrowed from the JSON */
  rf_dtype dtype;
  rf_shape shape;
  uint64_t begin, end;
} entry;

static int by_offset(const void *a, const void *b) {
  const entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* One tensor's header entry: {"dtype", "shape", "data_offsets"}. */
static rf_status *parse_entry(const char *path, const char *name, json_t *v,
                              uint64_t data_len, entry *out) {
  json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
         *off = json_object_get(v, "data_offsets");
  if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(sh) ||
      !json_is_array(off) || json_array_size(off) != 2)
    return BAD(
        "checkpoint '%s': tensor '%s' needs dtype, shape and "
        "data_offsets",
        path, name);
  out->name = name;
  out->dtype = rf__ckpt_dtype_from_name(json_string_value(dt));
  if (out->dtype == RF_DTYPE_INVALID)
    return rf_status_new(RF_UNIMPLEMENTED,
                         "checkpoint '%s': tensor '%s' has dtype '%s', which "
                         "ringflow does not hold",
                         path, name, json_string_value(dt));
  size_t rank = json_array_size(sh);
  if (rank > RF_MAX_RANK)
    return rf_status_new(
        RF_UNIMPLEMENTED,
        "checkpoint '%s': tensor '%s' has rank %zu; at most %d", path, name,
        rank, RF_MAX_RANK);
  int64_t dims[RF_MAX_RANK];
  int zero = 0;
  for (size_t d = 0; d < rank; d++) {
    json_t *x = json_array_get(sh, d);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
      return BAD("checkpoint '%s': tensor '%s' has a bad dim %zu", path, name,
                 d);
    dims[d] = (int64_t)json_integer_value(x);
    zero |= dims[d] == 0;
  }
  /* Overflow-checked: the bytes of a tensor with data must fit the data
   * section; an empty one's other dims must still multiply within int64. */
  uint64_t bytes = rf_dtype_size(out->dtype), count = 1;
  for (size_t d = 0; d < rank; d++) {
    uint64_t x = (uint64_t)dims[d];
    if (x == 0) continue;
    if (count > (uint64_t)INT64_MAX / x) /* the shape rule (dtype.h) */
      return BAD(
          "checkpoint '%s': tensor '%s' has a shape whose nonzero "
          "dims multiply past INT64_MAX",
          path, name);
    if (!zero && bytes > data_len / x)
      return BAD("checkpoint '%s': tensor '%s' is larger than the file", path,
                 name);
    count *= x;
    bytes *= x;
  }
  if (zero) bytes = 0;
  json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
  if (!json_is_integer(b) || !json_is_integer(e))
    return BAD(
        "checkpoint '%s': tensor '%s' has data_offsets that are not two "
        "integers",
        path, name);
  if (json_integer_value(b) < 0 ||
      json_integer_value(e) < json_integer_value(b) ||
      (uint64_t)json_integer_value(e) > data_len)
    return BAD(
        "checkpoint '%s': tensor '%s' has data_offsets outside the "
        "%" PRIu64 " data bytes",
        path, name, data_len);
  out->begin = (uint64_t)json_integer_value(b);
  out->end = (uint64_t)json_integer_value(e);
  if (out->end - out->begin != bytes)
    return BAD("checkpoint '%s': tensor '%s' has %" PRIu64
               " data bytes; its shape and dtype need %" PRIu64,
               path, name, out->end - out->begin, bytes);
  out->shape = rf_shape_make((int)rank, dims);
  return NULL;
}

/* A decimal 0..RF_CHECKPOINT_STEP_MAX as the writer writes it, nothing
 * else: no leading zeros ("012" would hide a flipped digit). */
static int parse_step(const char *s, int64_t *step) {
  int64_t v = 0;
  if (!*s || strlen(s) > 16 || (s[0] == '0' && s[1])) return -1;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    v = v * 10 + (*s - '0');
  }
  if (v > RF_CHECKPOINT_STEP_MAX) return -1;
  *step = v;
  return 0;
}

/* __metadata__: a map of strings whose keys are 1..RF_CHECKPOINT_NAME_MAX
 * bytes; ringflow's keys go to step and *crc, other "ringflow." keys are
 * skipped. */
static rf_status *parse_meta(const char *path, json_t *meta, rf_checkpoint *c,
                             const char **crc) {
  if (!json_is_object(meta))
    return BAD("checkpoint '%s': __metadata__ is not an object", path);
  const char *key;
  json_t *v;
  json_object_foreach(meta, key, v) {
    /* rf_checkpoint_set_metadata's rules (JSON makes keys and values
     * UTF-8), so every key read can be written again. */
    size_t len = strlen(key);
    if (len == 0 || len > RF_CHECKPOINT_NAME_MAX)
      return BAD("checkpoint '%s': metadata key '%s' is %zu bytes; 1..%d", path,
                 key, len, RF_CHECKPOINT_NAME_MAX);
    if (!json_is_string(v))
      return BAD("checkpoint '%s': metadata '%s' is not a string", path, key);
    const char *s = json_string_value(v);
    if (!strcmp(key, RF__CKPT_STEP_KEY)) {
      if (parse_step(s, &c->step))
        return BAD(
            "checkpoint '%s': step '%s' is not an integer in "
            "0..%" PRId64,
            path, s, RF_CHECKPOINT_STEP_MAX);
    } else if (!strcmp(key, RF__CKPT_CRC_KEY)) {
      bool hex = strlen(s) == 8;
      for (int k = 0; hex && k < 8; k++)
        hex = (s[k] >= '0' && s[k] <= '9') || (s[k] >= 'a' && s[k] <= 'f');
      if (!hex) /* a format error, not a corrupt file */
        return BAD(
            "checkpoint '%s': %s '%s' is not 8 lowercase hex digits (the "
            "CRC-32 of the data, as ringflow writes it)",
            path, RF__CKPT_CRC_KEY, s);
      *crc = s;
    } else if (strncmp(key, RF__CKPT_RESERVED, strlen(RF__CKPT_RESERVED))) {
      RF_CHECK(rf__ckpt_put_meta(c, key, s));
    }
  }
  return NULL;
}

/* Checks that the entries (sorted) tile [0, data_len) exactly. */
static rf_status *check_tiling(const char *path, const entry *e, size_t n,
                               uint64_t data_len) {
  uint64_t at = 0;
  for (size_t i = 0; i < n; i++) {
    if (e[i].begin != at)
      return BAD("checkpoint '%s': tensor '%s' starts at byte %" PRIu64
                 "; expected %" PRIu64 " (tensors overlap or leave a gap)",
                 path, e[i].name, e[i].begin, at);
    at = e[i].end;
  }
  if (at != data_len)
    return BAD("checkpoint '%s': the tensors hold %" PRIu64
               " bytes but the file has %" PRIu64 " after its header",
               path, at, data_len);
  return NULL;
}

/* Reads the entries' data in file order into c, checking the CRC. */
static rf_status *read_data(int fd, const char *path, const entry *e, size_t n,
                            const char *crc_text, rf_checkpoint *c) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t i = 0; i < n; i++) {
    rf_tensor *t;
    RF_CHECK(rf_tensor_new(e[i].dtype, &e[i].shape, NULL, &t));
    size_t want = rf_tensor_nbytes(t), got;
    rf_status *st =
        rf__file_read_full(fd, rf_tensor_mutable_data(t), want, &got, path);
    if (!st && got != want)
      st =
          BAD("checkpoint '%s' is truncated: tensor '%s' ends past the end "
              "of the file",
              path, e[i].name);
    const unsigned char *p = rf_tensor_data(t);
    /* A bool is one byte of 0 or 1 (as in graph files): another byte would
     * be undefined behaviour in a kernel that reads it. */
    for (size_t k = 0; !st && e[i].dtype == RF_BOOL && k < want; k++)
      if (p[k] > 1)
        st =
            BAD("checkpoint '%s': bool tensor '%s' element %zu is %u, not 0 "
                "or 1",
                path, e[i].name, k, p[k]);
    for (size_t left = want; !st && left > 0;) {
      uInt chunk = left > (1u << 30) ? 1u << 30 : (uInt)left;
      crc = crc32(crc, p, chunk);
      p += chunk;
      left -= chunk;
    }
    if (!st) st = rf__ckpt_append(c, e[i].name, t);
    rf_tensor_release(t);
    RF_CHECK(st);
  }
  if (crc_text) {
    char want[16];
    snprintf(want, sizeof want, "%08lx", (unsigned long)(crc & 0xffffffffu));
    if (strcmp(want, crc_text))
      return BAD(
          "checkpoint '%s': CRC mismatch (data %s, header %s): the file "
          "is corrupt or truncated",
          path, want, crc_text);
  }
  return NULL;
}

/* Parses the header JSON into entries (*e, sorted by offset) and c's
 * metadata. */
static rf_status *parse_header(const char *path, json_t *root,
                               uint64_t data_len, rf_checkpoint *c, entry **e,
                               size_t *n, const char **crc) {
  if (!json_is_object(root))
    return BAD("checkpoint '%s': its header is not a JSON object", path);
  size_t cap = json_object_size(root);
  *e = rf__calloc(cap ? cap : 1, sizeof **e);
  if (!*e) return rf__oom();
  *n = 0;
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (!strcmp(key, "__metadata__")) {
      RF_CHECK(parse_meta(path, v, c, crc));
      continue;
    }
    if (!*key || strlen(key) > RF_CHECKPOINT_NAME_MAX)
      return BAD("checkpoint '%s': tensor name '%s' is not 1..%d bytes", path,
                 key, RF_CHECKPOINT_NAME_MAX);
    RF_CHECK(parse_entry(path, key, v, data_len, &(*e)[(*n)++]));
  }
  qsort(*e, *n, sizeof **e, by_offset);
  return check_tiling(path, *e, *n, data_len);
}

rf_status *rf__checkpoint_read_fd(int fd, size_t size, const char *path,
                                  rf_checkpoint **out) {
  unsigned char len8[8];
  size_t got;
  if (size < 8)
    return BAD(
        "checkpoint '%s' is %zu bytes: too short for a safetensors "
        "header",
        path, size);
  RF_CHECK(rf__file_read_full(fd, len8, 8, &got, path));
  if (got != 8) return BAD("checkpoint '%s' is truncated", path);
  if (!memcmp(len8, OLD_MAGIC, 8))
    return BAD(
        "checkpoint '%s' is in ringflow's old format; checkpoints are "
        "now safetensors files: write it again with this version",
        path);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++) hlen |= (uint64_t)len8[i] << (8 * i);
  if (hlen > RF_CHECKPOINT_HEADER_MAX || hlen > size - 8)
    return BAD(
        "checkpoint '%s': header length %" PRIu64
        " is past %s (%zu "
        "bytes)",
        path, hlen, hlen > RF_CHECKPOINT_HEADER_MAX ? "the limit" : "the file",
        hlen > RF_CHECKPOINT_HEADER_MAX ? (size_t)RF_CHECKPOINT_HEADER_MAX
                                        : size - 8);
  char *text = rf__malloc(hlen ? hlen : 1);
  if (!text) return rf__oom();
  rf_status *st = rf__file_read_full(fd, text, hlen, &got, path);
  if (!st && got != hlen) st = BAD("checkpoint '%s' is truncated", path);
  json_error_t jerr;
  json_t *root =
      st ? NULL : json_loadb(text, hlen, JSON_REJECT_DUPLICATES, &jerr);
  rf__free(text);
  if (!st && !root)
    st = BAD("checkpoint '%s': its header is not valid JSON (byte %d: %s)",
             path, jerr.position, jerr.text);
  rf_checkpoint *c = NULL;
  entry *e = NULL;
  size_t n = 0;
  const char *crc = NULL;
  if (!st) st = rf_checkpoint_new(&c);
  if (!st) st = parse_header(path, root, size - 8 - hlen, c, &e, &n, &crc);
  if (!st) st = read_data(fd, path, e, n, crc, c);
  rf__free(e);
  json_decref(root);
  if (st) {
    rf_checkpoint_free(c);
    return st;
  }
  *out = c;
  return NULL;
}
