/* io/checkpoint.c - the checkpoint object (named tensors, a step, string
 * metadata), its checked lookup, and its writer: a safetensors header made
 * with jansson, then each tensor's bytes straight from the tensor, written
 * through io/safe_file.c's atomic replacement. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "core/mem.h"
#include "core/status.h"
#include "io/checkpoint.h"
#include "io/safe_file.h"

static const struct {
  rf_dtype dtype;
  const char *name;
} DTYPES[] = {{RF_FLOAT16, "F16"}, {RF_BFLOAT16, "BF16"}, {RF_FLOAT32, "F32"},
              {RF_FLOAT64, "F64"}, {RF_INT8, "I8"},       {RF_UINT8, "U8"},
              {RF_INT32, "I32"},   {RF_INT64, "I64"},     {RF_BOOL, "BOOL"}};
#define NDTYPES (int)(sizeof DTYPES / sizeof DTYPES[0])

const char *rf__ckpt_dtype_name(rf_dtype dtype) {
  for (int i = 0; i < NDTYPES; i++)
    if (DTYPES[i].dtype == dtype) return DTYPES[i].name;
  return NULL;
}

rf_dtype rf__ckpt_dtype_from_name(const char *name) {
  for (int i = 0; i < NDTYPES; i++)
    if (!strcmp(DTYPES[i].name, name)) return DTYPES[i].dtype;
  return RF_DTYPE_INVALID;
}

rf_status *rf_checkpoint_new(rf_checkpoint **out) {
  if (!out) return rf__invalid("rf_checkpoint_new: out is NULL");
  rf_checkpoint *c = rf__calloc(1, sizeof *c);
  if (!c) return rf__oom();
  c->step = -1;
  *out = c;
  return NULL;
}

void rf_checkpoint_free(rf_checkpoint *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) {
    rf__free(c->e[i].name);
    rf_tensor_release(c->e[i].t);
  }
  for (int i = 0; i < 2 * c->nmeta; i++) rf__free(c->meta[i]);
  rf__free(c->e);
  rf__free(c->meta);
  rf__free(c);
}

rf_status *rf__ckpt_append(rf_checkpoint *c, const char *name, rf_tensor *t) {
  char *copy = rf__strdup(name);
  if (!copy || rf__grow(&c->e, &c->cap, c->n + 1, sizeof *c->e)) {
    rf__free(copy);
    return rf__oom();
  }
  c->e[c->n++] = (rf__ckpt_entry){copy, rf_tensor_retain(t)};
  return NULL;
}

/* Whether s is UTF-8, which JSON strings must be (jansson checks). */
static bool utf8(const char *s) {
  json_t *j = json_string(s);
  json_decref(j);
  return j != NULL;
}

static int find(const rf_checkpoint *c, const char *name) {
  for (int i = 0; i < c->n; i++)
    if (!strcmp(c->e[i].name, name)) return i;
  return -1;
}

rf_status *rf_checkpoint_add(rf_checkpoint *c, const char *name, rf_tensor *t) {
  if (!c || !name || !t)
    return rf__invalid("rf_checkpoint_add: NULL checkpoint, name or tensor");
  size_t len = strlen(name);
  if (len == 0 || len > RF_CHECKPOINT_NAME_MAX)
    return rf__invalid("checkpoint tensor name '%s' is %zu bytes; 1..%d", name,
                       len, RF_CHECKPOINT_NAME_MAX);
  if (!strcmp(name, "__metadata__"))
    return rf__invalid("checkpoint tensor name '__metadata__' is reserved");
  if (!utf8(name))
    return rf__invalid("checkpoint tensor name '%s' is not UTF-8", name);
  if (!rf__ckpt_dtype_name(rf_tensor_dtype(t)))
    return rf__invalid("checkpoint tensor '%s': dtype %s cannot be saved", name,
                       rf_dtype_name(rf_tensor_dtype(t)));
  if (rf_tensor_nbytes(t) > 0 && !rf_tensor_data(t))
    return rf__invalid("checkpoint tensor '%s' is not in host memory", name);
  if (find(c, name) >= 0)
    return rf_status_new(RF_INVALID_ARGUMENT,
                         "checkpoint already holds a tensor named '%s'", name);
  return rf__ckpt_append(c, name, t);
}

rf_status *rf_checkpoint_set_step(rf_checkpoint *c, int64_t step) {
  if (!c) return rf__invalid("rf_checkpoint_set_step: NULL checkpoint");
  if (step < 0 || step > RF_CHECKPOINT_STEP_MAX)
    return rf__invalid("checkpoint step %" PRId64 " is not in 0..%" PRId64,
                       step, RF_CHECKPOINT_STEP_MAX);
  c->step = step;
  return NULL;
}

int64_t rf_checkpoint_step(const rf_checkpoint *c) { return c ? c->step : -1; }

rf_status *rf__ckpt_put_meta(rf_checkpoint *c, const char *key,
                             const char *value) {
  char *v = rf__strdup(value);
  if (!v) return rf__oom();
  for (int i = 0; i < c->nmeta; i++)
    if (!strcmp(c->meta[2 * i], key)) {
      rf__free(c->meta[2 * i + 1]);
      c->meta[2 * i + 1] = v;
      return NULL;
    }
  char *k = rf__strdup(key);
  int cap2 = c->meta_cap;
  if (!k || rf__grow(&c->meta, &cap2, 2 * c->nmeta + 2, sizeof *c->meta)) {
    rf__free(k);
    rf__free(v);
    return rf__oom();
  }
  c->meta_cap = cap2;
  c->meta[2 * c->nmeta] = k;
  c->meta[2 * c->nmeta + 1] = v;
  c->nmeta++;
  return NULL;
}

rf_status *rf_checkpoint_set_metadata(rf_checkpoint *c, const char *key,
                                      const char *value) {
  if (!c || !key || !value)
    return rf__invalid("rf_checkpoint_set_metadata: NULL argument");
  size_t len = strlen(key);
  if (len == 0 || len > RF_CHECKPOINT_NAME_MAX)
    return rf__invalid("checkpoint metadata key '%s' is %zu bytes; 1..%d", key,
                       len, RF_CHECKPOINT_NAME_MAX);
  if (!strncmp(key, RF__CKPT_RESERVED, strlen(RF__CKPT_RESERVED)))
    return rf__invalid("checkpoint metadata key '%s' is reserved (ringflow.*)",
                       key);
  if (!utf8(key) || !utf8(value))
    return rf__invalid("checkpoint metadata '%s' is not UTF-8", key);
  return rf__ckpt_put_meta(c, key, value);
}

const char *rf_checkpoint_metadata(const rf_checkpoint *c, const char *key) {
  if (!c || !key) return NULL;
  for (int i = 0; i < c->nmeta; i++)
    if (!strcmp(c->meta[2 * i], key)) return c->meta[2 * i + 1];
  return NULL;
}

const char *rf_checkpoint_metadata_key(const rf_checkpoint *c, int i) {
  return c && i >= 0 && i < c->nmeta ? c->meta[2 * i] : NULL;
}

int rf_checkpoint_count(const rf_checkpoint *c) { return c ? c->n : 0; }

const char *rf_checkpoint_name(const rf_checkpoint *c, int i) {
  return c && i >= 0 && i < c->n ? c->e[i].name : NULL;
}

rf_tensor *rf_checkpoint_tensor(const rf_checkpoint *c, int i) {
  return c && i >= 0 && i < c->n ? c->e[i].t : NULL;
}

/* "[2,?]" (an unknown dim - any negative one - as '?', as rf_shape_format
 * writes it); a caller's shape may hold any rank: nothing past RF_MAX_RANK
 * dims is read. */
static void format_shape(const rf_shape *s, char *buf, size_t cap) {
  if (s->rank == RF_UNKNOWN_RANK) {
    snprintf(buf, cap, "of unknown rank");
    return;
  }
  if (s->rank < 0 || s->rank > RF_MAX_RANK) {
    snprintf(buf, cap, "of rank %d (ranks are 0..%d)", s->rank, RF_MAX_RANK);
    return;
  }
  size_t at = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < s->rank && at < cap; d++) {
    if (s->dims[d] < 0)
      at += (size_t)snprintf(buf + at, cap - at, "%s?", d ? "," : "");
    else
      at += (size_t)snprintf(buf + at, cap - at, "%s%" PRId64, d ? "," : "",
                             s->dims[d]);
  }
  if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* The first element of t that fails `checks`, or -1. */
static int64_t first_bad(const rf_tensor *t, unsigned checks, double *value) {
  if (!rf_dtype_is_float(rf_tensor_dtype(t))) return -1;
  int64_t n = rf_tensor_num_elements(t);
  for (int64_t i = 0; i < n; i++) {
    double v = rf_tensor_get(t, i);
    if (((checks & RF_CHECKPOINT_FINITE) && !isfinite(v)) ||
        ((checks & RF_CHECKPOINT_NONNEGATIVE) && v < 0)) {
      *value = v;
      return i;
    }
  }
  return -1;
}

rf_status *rf_checkpoint_get(const rf_checkpoint *c, const char *name,
                             rf_dtype dtype, const rf_shape *shape,
                             unsigned checks, rf_tensor **out) {
  if (!c || !name || !out)
    return rf__invalid("rf_checkpoint_get: NULL checkpoint, name or out");
  if (dtype != RF_DTYPE_INVALID && rf_dtype_size(dtype) == 0)
    return rf__invalid("rf_checkpoint_get: dtype %d is not a dtype",
                       (int)dtype);
  if (checks & ~(unsigned)(RF_CHECKPOINT_FINITE | RF_CHECKPOINT_NONNEGATIVE))
    return rf__invalid("rf_checkpoint_get: checks 0x%x hold unknown bits",
                       checks);
  int i = find(c, name);
  if (i < 0)
    return rf_status_new(RF_NOT_FOUND, "checkpoint has no tensor '%s'", name);
  rf_tensor *t = c->e[i].t;
  rf_shape got = rf_tensor_shape(t);
  if ((dtype != RF_DTYPE_INVALID && rf_tensor_dtype(t) != dtype) ||
      (shape && !rf_shape_equal(shape, &got))) {
    char a[200], b[200];
    format_shape(&got, a, sizeof a);
    if (shape)
      format_shape(shape, b, sizeof b);
    else
      snprintf(b, sizeof b, "of any shape");
    return rf__invalid(
        "checkpoint tensor '%s' is %s %s; expected %s %s", name,
        rf_dtype_name(rf_tensor_dtype(t)), a,
        dtype == RF_DTYPE_INVALID ? "any dtype" : rf_dtype_name(dtype), b);
  }
  double v = 0;
  int64_t bad = checks ? first_bad(t, checks, &v) : -1;
  if (bad >= 0)
    return rf__invalid(
        "checkpoint tensor '%s' element %" PRId64 " is %g; expected %s", name,
        bad, v,
        (checks & RF_CHECKPOINT_FINITE) && !isfinite(v) ? "a finite number"
                                                        : ">= 0");
  *out = t;
  return NULL;
}

/* ---- writing ---- */

typedef struct writer {
  const rf_checkpoint *c;
  const char *header;
  size_t header_len; /* padded to a multiple of 8 */
  const char *path;
} writer;

static uint32_t data_crc(const rf_checkpoint *c) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (int i = 0; i < c->n; i++) {
    const unsigned char *p = rf_tensor_data(c->e[i].t);
    size_t n = rf_tensor_nbytes(c->e[i].t);
    while (n > 0) {
      uInt chunk = n > (1u << 30) ? 1u << 30 : (uInt)n;
      crc = crc32(crc, p, chunk);
      p += chunk;
      n -= chunk;
    }
  }
  return (uint32_t)crc;
}

static int put_str(json_t *obj, const char *key, const char *value) {
  return json_object_set_new(obj, key, json_string(value));
}

/* The header JSON: __metadata__ first, then each tensor in order. */
static char *make_header(const rf_checkpoint *c) {
  json_t *root = json_object(), *meta = json_object();
  int bad = !root || !meta || json_object_set(root, "__metadata__", meta);
  char buf[32];
  for (int i = 0; i < c->nmeta && !bad; i++)
    bad = put_str(meta, c->meta[2 * i], c->meta[2 * i + 1]);
  if (c->step >= 0) {
    snprintf(buf, sizeof buf, "%" PRId64, c->step);
    bad = bad || put_str(meta, RF__CKPT_STEP_KEY, buf);
  }
  snprintf(buf, sizeof buf, "%08" PRIx32, data_crc(c));
  bad = bad || put_str(meta, RF__CKPT_CRC_KEY, buf);
  json_int_t at = 0;
  for (int i = 0; i < c->n && !bad; i++) {
    rf_tensor *t = c->e[i].t;
    rf_shape s = rf_tensor_shape(t);
    json_t *dims = json_array();
    for (int d = 0; d < s.rank && dims; d++)
      if (json_array_append_new(dims, json_integer(s.dims[d]))) {
        json_decref(dims);
        dims = NULL;
      }
    json_int_t end = at + (json_int_t)rf_tensor_nbytes(t);
    json_t *info = dims ? json_pack("{s:s, s:o, s:[I,I]}", "dtype",
                                    rf__ckpt_dtype_name(rf_tensor_dtype(t)),
                                    "shape", dims, "data_offsets", at, end)
                        : NULL;
    bad = !info || json_object_set_new(root, c->e[i].name, info);
    at = end;
  }
  char *text = bad ? NULL : json_dumps(root, JSON_COMPACT);
  json_decref(meta);
  json_decref(root);
  return text;
}

static rf_status *write_file(int fd, void *arg) {
  const writer *w = arg;
  unsigned char len[8];
  for (int i = 0; i < 8; i++)
    len[i] = (unsigned char)(w->header_len >> (8 * i));
  RF_CHECK(rf__file_write_all(fd, len, 8, w->path));
  RF_CHECK(rf__file_write_all(fd, w->header, w->header_len, w->path));
  for (int i = 0; i < w->c->n; i++)
    RF_CHECK(rf__file_write_all(fd, rf_tensor_data(w->c->e[i].t),
                                rf_tensor_nbytes(w->c->e[i].t), w->path));
  return NULL;
}

/* A bool is one byte of 0 or 1: rf_checkpoint_load refuses any other, so a
 * save must not write one (the caller may have written it through
 * rf_tensor_mutable_data). */
static rf_status *check_bools(const rf_checkpoint *c, const char *path) {
  for (int i = 0; i < c->n; i++) {
    const rf_tensor *t = c->e[i].t;
    if (rf_tensor_dtype(t) != RF_BOOL) continue;
    const unsigned char *p = rf_tensor_data(t);
    size_t n = rf_tensor_nbytes(t);
    for (size_t k = 0; k < n; k++)
      if (p[k] > 1)
        return rf__invalid(
            "checkpoint '%s': bool tensor '%s' element %zu is %u, not 0 or 1 "
            "(rf_checkpoint_load would refuse the file)",
            path, c->e[i].name, k, p[k]);
  }
  return NULL;
}

rf_status *rf_checkpoint_save(const rf_checkpoint *c, const char *path) {
  if (!c || !path)
    return rf__invalid("rf_checkpoint_save: NULL checkpoint or path");
  RF_CHECK(check_bools(c, path));
  char *text = make_header(c);
  if (!text) return rf__oom();
  size_t len = strlen(text), padded = (len + 7) / 8 * 8;
  if (padded > RF_CHECKPOINT_HEADER_MAX) {
    free(text);
    return rf__invalid(
        "checkpoint '%s': its header would be %zu bytes; "
        "readers take at most %d",
        path, padded, RF_CHECKPOINT_HEADER_MAX);
  }
  char *header = rf__malloc(padded);
  if (!header) {
    free(text);
    return rf__oom();
  }
  memcpy(header, text, len);
  memset(header + len, ' ', padded - len);
  free(text);
  writer w = {c, header, padded, path};
  rf_status *st = rf__file_replace(path, "checkpoint", write_file, &w);
  rf__free(header);
  return st;
}

rf_status *rf_checkpoint_check_path(const char *path) {
  return rf__file_check_replace(path, "checkpoint");
}

rf_status *rf_checkpoint_load(const char *path, rf_checkpoint **out) {
  if (!path || !out) return rf__invalid("rf_checkpoint_load: NULL path or out");
  int fd;
  size_t size;
  RF_CHECK(rf__file_open_read(path, "checkpoint", &fd, &size));
  rf_status *st = rf__checkpoint_read_fd(fd, size, path, out);
  close(fd);
  return st;
}
