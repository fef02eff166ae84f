/* graph/graph_json.c - graphs to and from JSON through jansson.
 *
 * Nodes are written in topological order (data and control edges), so a
 * loader can build each node from ones already built. Loading goes through
 * rf_node_builder only: every check that guards code guards files too.
 * Attribute values are self-describing ({"type": "int", "value": 3}); tensors
 * carry their bytes in base64 (little-endian, exact for every dtype). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/shape.h"
#include "graph/graph.h"
#include "graph/graph_order.h"
#include "io/safe_file.h"
#include "ops/op_registry.h"
#include "ops/op_families.h"
#include "ringflow/graph_io.h"

#define FORMAT_NAME "ringflow-graph"
#define FORMAT_VERSION 1

void rf_string_free(char *s) { rf__free(s); }

/* ---- base64 ---- */

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64_encode(const unsigned char *p, size_t n) {
  size_t len = 4 * ((n + 2) / 3);
  char *out = rf__malloc(len + 1), *o = out;
  if (!out) return NULL;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16;
    if (i + 1 < n) v |= (uint32_t)p[i + 1] << 8;
    if (i + 2 < n) v |= p[i + 2];
    *o++ = b64[(v >> 18) & 63];
    *o++ = b64[(v >> 12) & 63];
    *o++ = i + 1 < n ? b64[(v >> 6) & 63] : '=';
    *o++ = i + 2 < n ? b64[v & 63] : '=';
  }
  *o = '\0';
  return out;
}

static int b64_value(char c) {
  const char *p = c ? strchr(b64, c) : NULL;
  return p ? (int)(p - b64) : -1;
}

/* Decodes exactly `want` bytes: 0, or why not (B64_*; *at: the offending
 * character, or the bytes decoded). */
enum { B64_OK, B64_CHAR, B64_LENGTH, B64_COUNT };
static int base64_decode(const char *s, unsigned char *out, size_t want,
                         size_t *at) {
  size_t len = strlen(s), o = 0;
  for (size_t i = 0; i < len; i++) /* '=' only as the last one or two */
    if (b64_value(s[i]) < 0 && !(s[i] == '=' && len % 4 == 0 && i + 2 >= len &&
                                 (i + 1 == len || s[i + 1] == '='))) {
      *at = i;
      return B64_CHAR;
    }
  if (len % 4 != 0) {
    *at = len;
    return B64_LENGTH;
  }
  for (size_t i = 0; i < len; i += 4) {
    int v[4];
    for (int k = 0; k < 4; k++)
      v[k] = s[i + k] == '=' ? 0 : b64_value(s[i + k]);
    uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 |
                 (uint32_t)v[2] << 6 | (uint32_t)v[3];
    int bytes = 3 - (s[i + 2] == '=') - (s[i + 3] == '=');
    for (int k = 0; k < bytes; k++, o++)
      if (o < want) out[o] = (unsigned char)(x >> (16 - 8 * k));
  }
  *at = o;
  return o == want ? B64_OK : B64_COUNT;
}

/* ---- writing ---- */

/* jansson accepts only UTF-8; a string attr may hold any bytes. */
static bool valid_utf8(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    int n = *p < 0x80         ? 0
            : (*p >> 5) == 6  ? 1
            : (*p >> 4) == 14 ? 2
            : (*p >> 3) == 30 ? 3
                              : -1;
    if (n < 0) return false;
    uint32_t cp = n == 0 ? *p : *p & (0x3f >> n);
    for (int k = 1; k <= n; k++) {
      if ((p[k] & 0xc0) != 0x80) return false;
      cp = cp << 6 | (p[k] & 0x3f);
    }
    static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    p += n + 1;
  }
  return true;
}

static json_t *shape_json(const rf_shape *s) {
  if (s->rank < 0) return json_null();
  json_t *a = json_array();
  for (int i = 0; a && i < s->rank; i++)
    if (json_array_append_new(a, json_integer(s->dims[i]))) {
      json_decref(a);
      return NULL;
    }
  return a;
}

/* The NaN that "nan" stands for (C's NAN); "-nan" is it with the sign bit
 * set. Another NaN is written with its bits, "nan:0x7ff8000000000001", so
 * that a kernel converting the attr to its dtype gives the same bits. */
#define NAN_BITS UINT64_C(0x7ff8000000000000)
#define SIGN_BIT (UINT64_C(1) << 63)

static json_t *float_json(double v) {
  if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
  if (!isnan(v)) return json_real(v);
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  if (bits == NAN_BITS) return json_string("nan");
  if (bits == (NAN_BITS | SIGN_BIT)) return json_string("-nan");
  return json_sprintf("nan:0x%016llx", (unsigned long long)bits);
}

static json_t *tensor_json(const rf_tensor *t) {
  rf_shape s = rf_tensor_shape(t);
  char *data = base64_encode(rf_tensor_data(t), rf_tensor_nbytes(t));
  if (!data) return NULL;
  json_t *o =
      json_pack("{s:s, s:o, s:s}", "dtype", rf_dtype_name(rf_tensor_dtype(t)),
                "shape", shape_json(&s), "data", data);
  rf__free(data);
  return o;
}

static json_t *string_json(const char *s) {
  return valid_utf8(s) ? json_string(s) : NULL;
}

static json_t *scalar_json(const rf__attr_value *v, int i) {
  switch (v->type) {
    case RF_ATTR_INT: return json_integer(v->u.i);
    case RF_ATTR_FLOAT: return float_json(v->u.f);
    case RF_ATTR_BOOL: return json_boolean(v->u.b);
    case RF_ATTR_STRING: return string_json(v->u.s);
    case RF_ATTR_TYPE: return json_string(rf_dtype_name(v->u.type));
    case RF_ATTR_SHAPE: return shape_json(&v->u.shape);
    case RF_ATTR_TENSOR: return tensor_json(v->u.tensor);
    case RF_ATTR_INT_LIST: return json_integer(v->u.ints[i]);
    case RF_ATTR_FLOAT_LIST: return float_json(v->u.floats[i]);
    case RF_ATTR_BOOL_LIST: return json_boolean(v->u.bools[i]);
    case RF_ATTR_STRING_LIST: return string_json(v->u.strings[i]);
    case RF_ATTR_TYPE_LIST: return json_string(rf_dtype_name(v->u.types[i]));
    case RF_ATTR_SHAPE_LIST: return shape_json(&v->u.shapes[i]);
    case RF_ATTR_TENSOR_LIST: return tensor_json(v->u.tensors[i]);
    default: return NULL;
  }
}

static bool is_list(rf__attr_type t) { return t >= RF_ATTR_INT_LIST; }

/* Why element i of v could not become JSON. */
static rf_status *attr_error(const rf_node *n, const char *name,
                             const rf__attr_value *v, int i) {
  bool str = v->type == RF_ATTR_STRING || v->type == RF_ATTR_STRING_LIST;
  if (str && !valid_utf8(v->type == RF_ATTR_STRING ? v->u.s : v->u.strings[i]))
    return rf__invalid(
        "cannot save node '%s' (%s): attr '%s' holds a string "
        "that is not valid UTF-8",
        n->name, n->op->name, name);
  return rf__oom();
}

static rf_status *attr_json(const rf_node *n, const char *name,
                            const rf__attr_value *v, json_t **out) {
  json_t *value;
  if (is_list(v->type)) {
    value = json_array();
    for (int i = 0; value && i < v->n; i++) {
      json_t *item = scalar_json(v, i);
      if (!item || json_array_append_new(value, item)) {
        json_decref(value);
        return attr_error(n, name, v, i);
      }
    }
  } else {
    value = scalar_json(v, 0);
  }
  if (!value) return attr_error(n, name, v, 0);
  *out = json_pack("{s:s, s:o}", "type", rf__attr_type_name(v->type), "value",
                   value);
  return *out ? NULL : rf__oom();
}

static json_t *output_json(rf_output o) {
  return json_sprintf("%s:%d", o.node->name, o.index);
}

static rf_status *node_inputs_json(const rf_node *n, json_t *inputs,
                                   json_t *ctrl) {
  for (int a = 0; a < n->op->num_inputs; a++) {
    bool variadic = n->op->inputs[a].number_attr[0] != '\0';
    json_t *arg = variadic ? json_array() : NULL;
    bool ok = true;
    for (int k = n->arg_start[a]; k < n->arg_start[a + 1]; k++) {
      json_t *src = output_json(rf__input(n, k));
      if (!variadic)
        arg = src;
      else if (json_array_append_new(arg, src))
        ok = false; /* src freed */
    }
    if (!ok) json_decref(arg);
    if (!ok || !arg || json_array_append_new(inputs, arg)) return rf__oom();
  }
  for (int i = 0; i < n->num_in_edges; i++)
    if (n->in_edges[i]->dst_in == RF_CONTROL_SLOT &&
        json_array_append_new(ctrl, json_string(n->in_edges[i]->src->name)))
      return rf__oom();
  return NULL;
}

static rf_status *node_json(const rf_node *n, json_t **out) {
  json_t *inputs = json_array(), *ctrl = json_array(), *attrs = json_object();
  json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:o, s:o}", "name", n->name, "op",
                        n->op->name, "device", n->requested_device, "inputs",
                        inputs, "control_inputs", ctrl, "attrs", attrs);
  if (!o) return rf__oom(); /* json_pack released the "o" values */
  rf_status *st = node_inputs_json(n, inputs, ctrl);
  for (int i = 0; i < n->attrs.n && !st; i++) {
    const rf__attr *a = &n->attrs.items[i];
    /* '_' attrs are compile-time annotations, remade on every compile. */
    if (a->name[0] == '_') continue;
    json_t *v = NULL;
    st = attr_json(n, a->name, &a->value, &v);
    if (!st && json_object_set_new(attrs, a->name, v)) st = rf__oom();
  }
  if (st) {
    json_decref(o);
    return st;
  }
  *out = o;
  return NULL;
}

/* jansson's text, copied into the library's allocator for rf_string_free. */
static rf_status *dump(json_t *root, char **out) {
  char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  if (!text) return rf__oom();
  *out = rf__strdup(text);
  json_free_t jfree;
  json_get_alloc_funcs(NULL, &jfree);
  jfree(text);
  return *out ? NULL : rf__oom();
}

rf_status *rf_graph_to_json(const rf_graph *g, char **out) {
  if (!g || !out) return rf__invalid("rf_graph_to_json: NULL argument");
  int *order, count;
  RF_CHECK(rf__graph_topological_order(g, &order, &count));
  json_t *nodes = json_array();
  json_t *root = json_pack("{s:s, s:i, s:o}", "format", FORMAT_NAME, "version",
                           FORMAT_VERSION, "nodes", nodes);
  rf_status *st = root ? NULL : rf__oom();
  for (int i = 0; i < count && !st; i++) {
    json_t *n = NULL;
    st = node_json(g->nodes[order[i]], &n);
    if (!st && json_array_append_new(nodes, n)) st = rf__oom();
  }
  rf__free(order);
  char *text = NULL;
  if (!st) st = dump(root, &text);
  json_decref(root);
  if (!st) *out = text;
  return st;
}

typedef struct text_arg {
  const char *text, *path;
} text_arg;

static rf_status *write_text(int fd, void *arg) {
  const text_arg *t = arg;
  RF_CHECK(rf__file_write_all(fd, t->text, strlen(t->text), t->path));
  return rf__file_write_all(fd, "\n", 1, t->path);
}

/* Replaced atomically through io/safe_file.c, as checkpoints are: a reader
 * (or a crash) sees the old file or the new one, never a part. */
rf_status *rf_graph_save(const rf_graph *g, const char *path) {
  if (!g || !path) return rf__invalid("rf_graph_save: NULL argument");
  char *text;
  RF_CHECK(rf_graph_to_json(g, &text));
  text_arg arg = {text, path};
  rf_status *st = rf__file_replace(path, "graph file", write_text, &arg);
  rf_string_free(text);
  return st;
}

/* ---- reading ---- */

typedef struct loader {
  rf_graph *g;
  size_t index;     /* of the node being read */
  const char *node; /* its name once known, for messages */
  const char *attr; /* the attr being read, for messages */
} loader;

/* "graph file, node 3 'x', attr 'shape': <message>" */
#define LOAD_ERR(l, ...) where((l), rf__invalid(__VA_ARGS__))

static rf_status *where(const loader *l, rf_status *st) {
  return rf__status_prefix(st, "graph file, node %zu%s%s%s%s%s%s", l->index,
                           l->node ? " '" : "", l->node ? l->node : "",
                           l->node ? "'" : "", l->attr ? ", attr '" : "",
                           l->attr ? l->attr : "", l->attr ? "'" : "");
}

static rf_status *read_shape(loader *l, json_t *j, rf_shape *out) {
  if (json_is_null(j)) {
    *out = rf_shape_unknown();
    return NULL;
  }
  size_t n = json_array_size(j);
  if (!json_is_array(j) || n > RF_MAX_RANK)
    return LOAD_ERR(l, "a shape must be null or an array of at most %d ints",
                    RF_MAX_RANK);
  int64_t dims[RF_MAX_RANK];
  for (size_t i = 0; i < n; i++) {
    json_t *d = json_array_get(j, i);
    if (!json_is_integer(d) || json_integer_value(d) < -1)
      return LOAD_ERR(l, "shape dim %zu is not an integer >= -1", i);
    dims[i] = json_integer_value(d);
  }
  rf_shape s = rf_shape_make((int)n, dims);
  RF_CHECK(where(l, rf__shape_check(&s)));
  *out = s;
  return NULL;
}

/* The bits of a NaN written "nan:0x" and 16 hex digits; false for another
 * string or bits that are not a NaN. */
static bool nan_bits(const char *s, uint64_t *bits) {
  if (strncmp(s, "nan:0x", 6) != 0 || strlen(s + 6) != 16 ||
      strspn(s + 6, "0123456789abcdefABCDEF") != 16)
    return false;
  *bits = (uint64_t)strtoull(s + 6, NULL, 16);
  return (*bits & ~SIGN_BIT) > UINT64_C(0x7ff0000000000000);
}

static rf_status *read_float(loader *l, json_t *j, double *out) {
  const char *s = json_string_value(j);
  uint64_t bits;
  if (json_is_number(j)) {
    *out = json_number_value(j);
    return NULL;
  }
  if (s && strcmp(s, "inf") == 0) {
    *out = INFINITY;
    return NULL;
  }
  if (s && strcmp(s, "-inf") == 0) {
    *out = -INFINITY;
    return NULL;
  }
  if (s && strcmp(s, "nan") == 0)
    bits = NAN_BITS;
  else if (s && strcmp(s, "-nan") == 0)
    bits = NAN_BITS | SIGN_BIT;
  else if (!s || !nan_bits(s, &bits))
    return LOAD_ERR(l,
                    "expected a number (or \"nan\", \"-nan\", "
                    "\"nan:0x\" and the 16 hex digits of a NaN, \"inf\", "
                    "\"-inf\")");
  memcpy(out, &bits, sizeof bits);
  return NULL;
}

/* Only 0 and 1 are bools: other bytes would be undefined behaviour when a
 * kernel reads them as C bools. */
static rf_status *check_bools(loader *l, const rf_tensor *t) {
  const unsigned char *p = rf_tensor_data(t);
  for (size_t i = 0; i < rf_tensor_nbytes(t); i++)
    if (p[i] > 1)
      return LOAD_ERR(l, "bool tensor element %zu is %u, not 0 or 1", i, p[i]);
  return NULL;
}

static rf_status *read_tensor(loader *l, json_t *j, rf_tensor **out) {
  json_t *jd = json_object_get(j, "dtype"), *js = json_object_get(j, "shape");
  json_t *jdata = json_object_get(j, "data");
  if (!json_is_object(j) || json_object_size(j) != 3 || !json_is_string(jd) ||
      !js || !json_is_string(jdata))
    return LOAD_ERR(l,
                    "a tensor is {\"dtype\": string, \"shape\": [ints], "
                    "\"data\": base64 string}");
  const char *dtype = json_string_value(jd), *data = json_string_value(jdata);
  rf_dtype dt = rf_dtype_from_name(dtype);
  if (dt == RF_DTYPE_INVALID || dt == RF_RESOURCE)
    return LOAD_ERR(l, "unknown tensor dtype '%s'", dtype);
  rf_shape s;
  RF_CHECK(read_shape(l, js, &s));
  if (!rf_shape_is_fully_defined(&s))
    return LOAD_ERR(l, "a tensor's shape must be fully defined");
  /* Checked before allocating: the text must hold every byte. */
  int64_t n = rf_shape_num_elements(&s); /* >= 0: read_shape checked it */
  size_t have = (json_string_length(jdata) + 3) / 4 * 3; /* at most */
  if ((uint64_t)n > have / rf_dtype_size(dt))
    return LOAD_ERR(l,
                    "tensor data (%zu base64 chars) cannot hold %lld %s "
                    "elements",
                    json_string_length(jdata), (long long)n, dtype);
  rf_tensor *t;
  RF_CHECK(rf_tensor_new(dt, &s, NULL, &t));
  size_t nbytes = rf_tensor_nbytes(t);
  rf_status *st = NULL;
  size_t at;
  switch (base64_decode(data, rf_tensor_mutable_data(t), nbytes, &at)) {
    case B64_CHAR:
      st = LOAD_ERR(l,
                    "tensor data is not base64: character %zu is '%c' "
                    "(standard base64, A-Z a-z 0-9 + /, '=' padding at the "
                    "end)",
                    at, data[at] >= 0x20 && data[at] < 0x7f ? data[at] : '?');
      break;
    case B64_LENGTH:
      st = LOAD_ERR(l,
                    "tensor data is not base64: %zu characters, not a "
                    "multiple of 4 (the '=' padding missing?)",
                    at);
      break;
    case B64_COUNT:
      st = LOAD_ERR(l,
                    "tensor data is base64 of %zu bytes, not of exactly %zu "
                    "(the dtype and shape's)",
                    at, nbytes);
      break;
  }
  if (!st && dt == RF_BOOL) st = check_bools(l, t);
  if (st) {
    rf_tensor_release(t);
    return st;
  }
  *out = t;
  return NULL;
}

static rf__attr_type attr_type_from_name(const char *name) {
  for (int t = 0; t < RF_ATTR_TYPE_COUNT; t++)
    if (strcmp(rf__attr_type_name((rf__attr_type)t), name) == 0)
      return (rf__attr_type)t;
  return RF_ATTR_TYPE_COUNT;
}

/* Reads element i of a value of type t (scalar types: i == 0) into v. */
static rf_status *read_element(loader *l, rf__attr_type t, json_t *j,
                               rf__attr_value *v, int i) {
  rf_dtype dt;
  switch (t) {
    case RF_ATTR_INT:
    case RF_ATTR_INT_LIST:
      if (!json_is_integer(j)) return LOAD_ERR(l, "expected an integer");
      if (t == RF_ATTR_INT)
        v->u.i = json_integer_value(j);
      else
        v->u.ints[i] = json_integer_value(j);
      return NULL;
    case RF_ATTR_FLOAT: return read_float(l, j, &v->u.f);
    case RF_ATTR_FLOAT_LIST: return read_float(l, j, &v->u.floats[i]);
    case RF_ATTR_BOOL:
    case RF_ATTR_BOOL_LIST:
      if (!json_is_boolean(j)) return LOAD_ERR(l, "expected true or false");
      if (t == RF_ATTR_BOOL)
        v->u.b = json_is_true(j);
      else
        v->u.bools[i] = json_is_true(j);
      return NULL;
    case RF_ATTR_STRING:
    case RF_ATTR_STRING_LIST:
      if (!json_is_string(j)) return LOAD_ERR(l, "expected a string");
      if (t == RF_ATTR_STRING)
        v->u.s = (char *)json_string_value(j);
      else
        v->u.strings[i] = (char *)json_string_value(j);
      return NULL;
    case RF_ATTR_TYPE:
    case RF_ATTR_TYPE_LIST:
      dt = rf_dtype_from_name(json_string_value(j));
      if (dt == RF_DTYPE_INVALID) return LOAD_ERR(l, "expected a dtype name");
      if (t == RF_ATTR_TYPE)
        v->u.type = dt;
      else
        v->u.types[i] = dt;
      return NULL;
    case RF_ATTR_SHAPE: return read_shape(l, j, &v->u.shape);
    case RF_ATTR_SHAPE_LIST: return read_shape(l, j, &v->u.shapes[i]);
    case RF_ATTR_TENSOR: return read_tensor(l, j, &v->u.tensor);
    case RF_ATTR_TENSOR_LIST: return read_tensor(l, j, &v->u.tensors[i]);
    default: return LOAD_ERR(l, "unknown attr type");
  }
}

/* Reads a list attr of n elements into v (items allocated here). */
static rf_status *read_list(loader *l, rf__attr_type t, json_t *value,
                            rf__attr_value *v) {
  size_t n = json_array_size(value), done = 0;
  void *items = rf__calloc(n ? n : 1, sizeof(rf_shape)); /* largest element */
  RF_CHECK_ALLOC(items);
  v->n = (int)n;
  v->u.ints = items; /* every list member of the union aliases items */
  rf_status *st = NULL;
  for (; done < n && !st; done++)
    st = read_element(l, t, json_array_get(value, done), v, (int)done);
  if (st && t == RF_ATTR_TENSOR_LIST) /* the failed element holds nothing */
    for (size_t i = 0; i + 1 < done; i++) rf_tensor_release(v->u.tensors[i]);
  if (st) rf__free(items);
  return st;
}

/* Sets one attr on b. Borrowed strings point into the JSON document, which
 * outlives the builder; tensors read here are released after the copy. */
static rf_status *read_attr(loader *l, rf_node_builder *b, const char *name,
                            json_t *j) {
  json_t *jt = json_object_get(j, "type"), *value = json_object_get(j, "value");
  if (!json_is_object(j) || json_object_size(j) != 2 || !json_is_string(jt) ||
      !value)
    return LOAD_ERR(l, "an attr must be {\"type\": string, \"value\": ...}");
  const char *type = json_string_value(jt);
  rf__attr_type t = attr_type_from_name(type);
  if (t == RF_ATTR_TYPE_COUNT)
    return LOAD_ERR(l, "unknown attr type '%s'", type);
  rf__attr_value v;
  memset(&v, 0, sizeof v);
  v.type = t;
  rf_status *st;
  if (!is_list(t)) {
    st = read_element(l, t, value, &v, 0);
    if (!st) rf__node_builder_attr_value(b, name, &v);
    if (!st && t == RF_ATTR_TENSOR) rf_tensor_release(v.u.tensor);
    return st;
  }
  if (!json_is_array(value) || json_array_size(value) > (1u << 20))
    return LOAD_ERR(l, "a %s value must be an array of at most 2^20 items",
                    type);
  RF_CHECK(read_list(l, t, value, &v));
  rf__node_builder_attr_value(b, name, &v);
  if (t == RF_ATTR_TENSOR_LIST)
    for (int i = 0; i < v.n; i++) rf_tensor_release(v.u.tensors[i]);
  rf__free(v.u.ints);
  return NULL;
}

/* Whether s is an output index as the writer writes it: decimal digits
 * without a sign, spaces or leading zeros ("0", "12"; not "", "00", "+1",
 * " 1"). */
static bool canonical_index(const char *s) {
  size_t n = strlen(s);
  return n > 0 && strspn(s, "0123456789") == n && (s[0] != '0' || n == 1);
}

/* "name:3" -> (node, 3); "name" -> (node, 0), the forms the writer writes and
 * nothing else. Names may be of any length; a node name holds no ':'. */
static rf_status *read_output(loader *l, json_t *j, rf_output *out) {
  if (!json_is_string(j))
    return LOAD_ERR(l, "an input must be a string \"node:index\"");
  const char *s = json_string_value(j);
  size_t len = json_string_length(j), name_len = len;
  long index = 0;
  const char *colon = strrchr(s, ':');
  if (colon) {
    if (!canonical_index(colon + 1))
      return LOAD_ERR(l,
                      "input '%s': the output index must be decimal digits "
                      "without sign, spaces or leading zeros (\"node:index\" "
                      "or \"node\" for output 0)",
                      s);
    if (strlen(colon + 1) > 9)
      return LOAD_ERR(l, "input '%s': output index out of range", s);
    index = strtol(colon + 1, NULL, 10);
    name_len = (size_t)(colon - s);
  }
  rf_node *n = NULL;
  int id = strlen(s) == len
               ? rf__name_index_find(&l->g->names, l->g->nodes, s, name_len)
               : -1;
  if (id >= 0) n = l->g->nodes[id];
  if (!n) return LOAD_ERR(l, "input '%s' names no earlier node", s);
  if (index >= n->num_outputs)
    return LOAD_ERR(l, "input '%s': node '%s' has %d outputs", s, n->name,
                    n->num_outputs);
  out->node = n;
  out->index = (int)index;
  return NULL;
}

/* An op's argument is written as its signature says: a list for a variadic
 * one (`N * T`), one string for any other. Entries past the op's arguments
 * are left to the builder, which counts them. */
static rf_status *check_arg_form(loader *l, const rf__op_def *op, size_t i,
                                 json_t *arg) {
  if (i >= (size_t)op->num_inputs) return NULL;
  const rf__arg_def *a = &op->inputs[i];
  bool variadic = a->number_attr[0] != '\0';
  if (variadic && !json_is_array(arg))
    return LOAD_ERR(
        l,
        "input %zu '%s' of %s is variadic (%s * %s): it expects a "
        "list [\"node:index\", ...], got %s",
        i, a->name, op->name, a->number_attr,
        a->type_attr[0] ? a->type_attr : rf_dtype_name(a->fixed_type),
        json_is_string(arg)   ? "a string"
        : json_is_object(arg) ? "an object"
                              : "a JSON scalar");
  if (!variadic && json_is_array(arg))
    return LOAD_ERR(l,
                    "input %zu '%s' of %s takes one tensor, got a list "
                    "(write one \"node:index\" string)",
                    i, a->name, op->name);
  return NULL;
}

static rf_status *read_inputs(loader *l, const rf__op_def *op,
                              rf_node_builder *b, json_t *inputs) {
  size_t i;
  json_t *arg;
  json_array_foreach(inputs, i, arg) {
    RF_CHECK(check_arg_form(l, op, i, arg));
    if (!json_is_array(arg)) {
      rf_output o;
      RF_CHECK(read_output(l, arg, &o));
      rf_node_builder_input(b, o);
      continue;
    }
    size_t n = json_array_size(arg);
    if (n > (1u << 16)) return LOAD_ERR(l, "input list %zu is too long", i);
    rf_output *list = rf__calloc(n ? n : 1, sizeof *list);
    RF_CHECK_ALLOC(list);
    rf_status *st = NULL;
    for (size_t k = 0; k < n && !st; k++)
      st = read_output(l, json_array_get(arg, k), &list[k]);
    if (!st) rf_node_builder_input_list(b, list, (int)n);
    rf__free(list);
    RF_CHECK(st);
  }
  return NULL;
}

static rf_status *read_controls(loader *l, rf_node_builder *b, json_t *ctrl) {
  size_t i;
  json_t *c;
  json_array_foreach(ctrl, i, c) {
    rf_node *src = json_is_string(c)
                       ? rf_graph_find_node(l->g, json_string_value(c))
                       : NULL;
    if (!src)
      return LOAD_ERR(l, "control input %zu must name an earlier node", i);
    rf_node_builder_control_input(b, src);
  }
  return NULL;
}

/* The node object's fields, checked for presence and type. */
typedef struct node_fields {
  const char *name, *op, *device;
  json_t *inputs, *ctrl, *attrs;
} node_fields;

static rf_status *read_fields(loader *l, json_t *j, node_fields *f) {
  if (!json_is_object(j)) return LOAD_ERR(l, "a node must be an object");
  const char *key;
  json_t *v;
  memset(f, 0, sizeof *f);
  f->device = "";
  l->node = json_string_value(json_object_get(j, "name"));
  json_object_foreach(j, key, v) {
    bool ok = true;
    if (strcmp(key, "name") == 0)
      ok = (f->name = json_string_value(v)) != NULL;
    else if (strcmp(key, "op") == 0)
      ok = (f->op = json_string_value(v)) != NULL;
    else if (strcmp(key, "device") == 0)
      ok = (f->device = json_string_value(v)) != NULL;
    else if (strcmp(key, "inputs") == 0)
      ok = json_is_array(f->inputs = v);
    else if (strcmp(key, "control_inputs") == 0)
      ok = json_is_array(f->ctrl = v);
    else if (strcmp(key, "attrs") == 0)
      ok = json_is_object(f->attrs = v);
    else
      return LOAD_ERR(l, "unknown field '%s'", key);
    if (!ok)
      return LOAD_ERR(l, "field '%s' must be %s", key,
                      strcmp(key, "attrs") == 0 ? "an object"
                      : strstr(key, "inputs")   ? "an array"
                                                : "a string");
  }
  if (!f->name || !f->op) return LOAD_ERR(l, "a node needs a name and an op");
  if (!rf__op_find(f->op))
    return where(l, rf__error(RF_NOT_FOUND, "unknown op '%s'", f->op));
  return NULL;
}

static rf_status *read_node(loader *l, json_t *j) {
  node_fields f;
  l->node = l->attr = NULL;
  RF_CHECK(read_fields(l, j, &f));
  rf_node_builder *b = rf_node_builder_new(l->g, f.op, f.name);
  rf_node_builder_device(b, f.device);
  rf__node_builder_allow_reserved(b); /* a saved graph's gradients */
  rf_status *st =
      f.inputs ? read_inputs(l, rf__op_find(f.op), b, f.inputs) : NULL;
  if (!st && f.ctrl) st = read_controls(l, b, f.ctrl);
  const char *key;
  json_t *v;
  if (!st && f.attrs) json_object_foreach(f.attrs, key, v) {
      l->attr = key;
      st = read_attr(l, b, key, v);
      l->attr = NULL;
      if (st) break;
    }
  rf_node *n;
  rf_status *fin = rf_node_builder_finish(b, &n); /* consumes b either way */
  if (st) {
    rf_status_free(fin);
    return st;
  }
  return rf__status_prefix(fin, "graph file, node %zu", l->index);
}

static rf_status *read_graph(json_t *root, rf_graph *g) {
  json_t *format = json_object_get(root, "format");
  json_t *version = json_object_get(root, "version");
  json_t *nodes = json_object_get(root, "nodes");
  bool ours = json_is_object(root) && json_is_string(format) &&
              strcmp(json_string_value(format), FORMAT_NAME) == 0 &&
              json_is_integer(version) && json_is_array(nodes);
  if (!ours)
    return rf__invalid(
        "not a ringflow graph file (want {\"format\": \"%s\", "
        "\"version\": %d, \"nodes\": [...]})",
        FORMAT_NAME, FORMAT_VERSION);
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "format") && strcmp(key, "version") && strcmp(key, "nodes"))
      return rf__invalid(
          "not a ringflow graph file: unknown top-level field "
          "'%s' (the top level has exactly format, version "
          "and nodes)",
          key);
  }
  if (json_integer_value(version) != FORMAT_VERSION)
    return rf__invalid(
        "graph file version %lld; this ringflow reads version "
        "%d",
        (long long)json_integer_value(version), FORMAT_VERSION);
  loader l = {g, 0, NULL, NULL};
  json_t *n;
  json_array_foreach(nodes, l.index, n) RF_CHECK(read_node(&l, n));
  return NULL;
}

rf_status *rf_graph_from_json(const char *json, size_t len, rf_graph **out) {
  if (!json || !out) return rf__invalid("rf_graph_from_json: NULL argument");
  RF_CHECK(rf__ops_init());
  json_error_t err;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return rf__invalid("graph file: JSON error at line %d, column %d: %s",
                       err.line, err.column, err.text);
  rf_graph *g = rf_graph_new();
  rf_status *st = g ? read_graph(root, g) : rf__oom();
  json_decref(root);
  if (st) {
    rf_graph_free(g);
    return st;
  }
  *out = g;
  return NULL;
}

rf_status *rf_graph_load(const char *path, rf_graph **out) {
  if (!path || !out) return rf__invalid("rf_graph_load: NULL argument");
  FILE *f = fopen(path, "rb");
  if (!f)
    return rf__error(rf__errno_code(errno), "cannot open %s: %s", path,
                     strerror(errno));
  char *buf = NULL;
  size_t len = 0, cap = 0;
  rf_status *st = NULL;
  /* A regular file's size is known before anything is read: one past 2 GiB
   * is refused at once (pipes and devices are read up to the limit). */
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) &&
      (uint64_t)sb.st_size > ((uint64_t)1 << 31)) {
    fclose(f);
    return rf__invalid("%s is larger than 2 GiB (%lld bytes)", path,
                       (long long)sb.st_size);
  }
  for (;;) {
    if (len + 65536 > cap) {
      size_t ncap = cap ? cap * 2 : 65536;
      if (ncap > ((size_t)1 << 31)) {
        st = rf__invalid("%s is larger than 2 GiB", path);
        break;
      }
      char *nb = rf__realloc(buf, ncap);
      if (!nb) {
        st = rf__error(RF_RESOURCE_EXHAUSTED,
                       "%s: out of memory reading %zu bytes of it", path, ncap);
        break;
      }
      buf = nb;
      cap = ncap;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  if (!st && ferror(f))
    st =
        rf__error(RF_DATA_LOSS, "reading %s failed: %s", path, strerror(errno));
  fclose(f);
  if (!st)
    st = rf__status_prefix(rf_graph_from_json(buf, len, out), "%s", path);
  rf__free(buf);
  return st;
}
