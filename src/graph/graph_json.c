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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "graph/graph_order.h"
#include "ops/op_registry.h"
#include "ringflow/graph_io.h"

#define FORMAT_NAME "ringflow-graph"
#define FORMAT_VERSION 1

void rf_string_free(char *s) { free(s); }

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

/* Decodes exactly `want` bytes; -1 on malformed input or another length. */
static int base64_decode(const char *s, unsigned char *out, size_t want) {
  size_t len = strlen(s), o = 0;
  if (len % 4 != 0) return -1;
  for (size_t i = 0; i < len; i += 4) {
    int v[4];
    for (int k = 0; k < 4; k++) {
      v[k] = s[i + k] == '=' && i + 4 == len && k >= 2 ? 0 : b64_value(s[i + k]);
      if (v[k] < 0) return -1;
    }
    uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 |
                 (uint32_t)v[2] << 6 | (uint32_t)v[3];
    int bytes = 3 - (s[i + 2] == '=') - (s[i + 3] == '=');
    for (int k = 0; k < bytes; k++) {
      if (o >= want) return -1;
      out[o++] = (unsigned char)(x >> (16 - 8 * k));
    }
  }
  return o == want ? 0 : -1;
}

/* ---- writing ---- */

static json_t *shape_json(const rf_shape *s) {
  if (s->rank < 0) return json_null();
  json_t *a = json_array();
  for (int i = 0; a && i < s->rank; i++)
    json_array_append_new(a, json_integer(s->dims[i]));
  return a;
}

static json_t *float_json(double v) {
  if (isnan(v)) return json_string("nan");
  if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
  return json_real(v);
}

static json_t *tensor_json(const rf_tensor *t) {
  rf_shape s = rf_tensor_shape(t);
  char *data = base64_encode(rf_tensor_data(t), rf_tensor_nbytes(t));
  if (!data) return NULL;
  json_t *o = json_pack("{s:s, s:o, s:s}", "dtype",
                        rf_dtype_name(rf_tensor_dtype(t)), "shape",
                        shape_json(&s), "data", data);
  rf__free(data);
  return o;
}

static json_t *scalar_json(const rf__attr_value *v, int i) {
  switch (v->type) {
    case RF_ATTR_INT: return json_integer(v->u.i);
    case RF_ATTR_FLOAT: return float_json(v->u.f);
    case RF_ATTR_BOOL: return json_boolean(v->u.b);
    case RF_ATTR_STRING: return json_string(v->u.s);
    case RF_ATTR_TYPE: return json_string(rf_dtype_name(v->u.type));
    case RF_ATTR_SHAPE: return shape_json(&v->u.shape);
    case RF_ATTR_TENSOR: return tensor_json(v->u.tensor);
    case RF_ATTR_INT_LIST: return json_integer(v->u.ints[i]);
    case RF_ATTR_FLOAT_LIST: return float_json(v->u.floats[i]);
    case RF_ATTR_BOOL_LIST: return json_boolean(v->u.bools[i]);
    case RF_ATTR_STRING_LIST: return json_string(v->u.strings[i]);
    case RF_ATTR_TYPE_LIST: return json_string(rf_dtype_name(v->u.types[i]));
    case RF_ATTR_SHAPE_LIST: return shape_json(&v->u.shapes[i]);
    case RF_ATTR_TENSOR_LIST: return tensor_json(v->u.tensors[i]);
    default: return NULL;
  }
}

static bool is_list(rf__attr_type t) { return t >= RF_ATTR_INT_LIST; }

static json_t *attr_json(const rf__attr_value *v) {
  json_t *value;
  if (is_list(v->type)) {
    value = json_array();
    for (int i = 0; value && i < v->n; i++)
      if (json_array_append_new(value, scalar_json(v, i))) {
        json_decref(value);
        return NULL;
      }
  } else {
    value = scalar_json(v, 0);
  }
  if (!value) return NULL;
  return json_pack("{s:s, s:o}", "type", rf__attr_type_name(v->type), "value",
                   value);
}

static json_t *output_json(rf_output o) {
  char buf[600];
  snprintf(buf, sizeof buf, "%s:%d", o.node->name, o.index);
  return json_string(buf);
}

static json_t *node_json(const rf_node *n) {
  json_t *inputs = json_array(), *ctrl = json_array(), *attrs = json_object();
  json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:o, s:o}", "name", n->name, "op",
                        n->op->name, "device", n->requested_device, "inputs",
                        inputs, "control_inputs", ctrl, "attrs", attrs);
  if (!o) return NULL;
  for (int a = 0; a < n->op->num_inputs; a++) {
    bool variadic = n->op->inputs[a].number_attr[0] != '\0';
    json_t *arg = variadic ? json_array() : NULL;
    for (int k = n->arg_start[a]; k < n->arg_start[a + 1]; k++) {
      json_t *src = output_json(rf__input(n, k));
      if (variadic) json_array_append_new(arg, src);
      else arg = src;
    }
    if (!arg || json_array_append_new(inputs, arg)) goto fail;
  }
  for (int i = 0; i < n->num_in_edges; i++)
    if (n->in_edges[i]->dst_in == RF_CONTROL_SLOT &&
        json_array_append_new(ctrl, json_string(n->in_edges[i]->src->name)))
      goto fail;
  for (int i = 0; i < n->attrs.n; i++) {
    /* '_' attrs are compile-time annotations, remade on every compile. */
    if (n->attrs.items[i].name[0] == '_') continue;
    json_t *v = attr_json(&n->attrs.items[i].value);
    if (!v || json_object_set_new(attrs, n->attrs.items[i].name, v)) goto fail;
  }
  return o;
fail:
  json_decref(o);
  return NULL;
}

rf_status *rf_graph_to_json(const rf_graph *g, char **out) {
  if (!g || !out) return rf__invalid("rf_graph_to_json: NULL argument");
  int *order, count;
  RF_CHECK(rf__graph_topological_order(g, &order, &count));
  json_t *nodes = json_array();
  json_t *root = json_pack("{s:s, s:i, s:o}", "format", FORMAT_NAME, "version",
                           FORMAT_VERSION, "nodes", nodes);
  rf_status *st = root ? NULL : rf__oom();
  for (int i = 0; i < count && !st; i++)
    if (json_array_append_new(nodes, node_json(g->nodes[order[i]])))
      st = rf__oom();
  rf__free(order);
  char *text = st ? NULL : json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!st && !text) st = rf__oom();
  if (!st) *out = text;
  return st;
}

rf_status *rf_graph_save(const rf_graph *g, const char *path) {
  if (!g || !path) return rf__invalid("rf_graph_save: NULL argument");
  char *text;
  RF_CHECK(rf_graph_to_json(g, &text));
  FILE *f = fopen(path, "w");
  if (!f) {
    rf_string_free(text);
    return rf__error(RF_PERMISSION_DENIED, "cannot write %s: %s", path,
                     strerror(errno));
  }
  size_t len = strlen(text);
  bool ok = fwrite(text, 1, len, f) == len && fputc('\n', f) != EOF;
  ok = (fclose(f) == 0) && ok;
  rf_string_free(text);
  if (!ok) return rf__error(RF_DATA_LOSS, "writing %s failed", path);
  return NULL;
}

/* ---- reading ---- */

typedef struct loader {
  rf_graph *g;
  const char *node; /* the node being read, for messages */
} loader;

#define LOAD_ERR(l, ...)                                                       \
  rf__status_prefix(rf__invalid(__VA_ARGS__), "graph file, node '%s'",         \
                    (l)->node ? (l)->node : "?")

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
  *out = rf_shape_make((int)n, dims);
  return NULL;
}

static rf_status *read_float(loader *l, json_t *j, double *out) {
  const char *s = json_string_value(j);
  if (json_is_number(j)) *out = json_number_value(j);
  else if (s && strcmp(s, "nan") == 0) *out = NAN;
  else if (s && strcmp(s, "inf") == 0) *out = INFINITY;
  else if (s && strcmp(s, "-inf") == 0) *out = -INFINITY;
  else return LOAD_ERR(l, "expected a number");
  return NULL;
}

static rf_status *read_tensor(loader *l, json_t *j, rf_tensor **out) {
  const char *dtype = NULL, *data = NULL;
  json_t *shape = NULL;
  if (json_unpack(j, "{s:s, s:o, s:s}", "dtype", &dtype, "shape", &shape,
                  "data", &data))
    return LOAD_ERR(l, "a tensor needs dtype, shape and data");
  rf_dtype dt = rf_dtype_from_name(dtype);
  if (dt == RF_DTYPE_INVALID || dt == RF_RESOURCE)
    return LOAD_ERR(l, "unknown tensor dtype '%s'", dtype);
  rf_shape s;
  RF_CHECK(read_shape(l, shape, &s));
  if (!rf_shape_is_fully_defined(&s))
    return LOAD_ERR(l, "a tensor's shape must be fully defined");
  int64_t n = rf_shape_num_elements(&s);
  if (n > ((int64_t)1 << 40) / (int64_t)rf_dtype_size(dt) ||
      strlen(data) / 4 * 3 < (size_t)n * rf_dtype_size(dt))
    return LOAD_ERR(l, "tensor data does not hold %lld %s elements",
                    (long long)n, dtype);
  rf_tensor *t;
  RF_CHECK(rf_tensor_new(dt, &s, NULL, &t));
  size_t nbytes = rf_tensor_nbytes(t);
  if (base64_decode(data, rf_tensor_mutable_data(t), nbytes)) {
    rf_tensor_release(t);
    return LOAD_ERR(l, "tensor data is not base64 of exactly %zu bytes", nbytes);
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
      if (t == RF_ATTR_INT) v->u.i = json_integer_value(j);
      else v->u.ints[i] = json_integer_value(j);
      return NULL;
    case RF_ATTR_FLOAT: return read_float(l, j, &v->u.f);
    case RF_ATTR_FLOAT_LIST: return read_float(l, j, &v->u.floats[i]);
    case RF_ATTR_BOOL:
    case RF_ATTR_BOOL_LIST:
      if (!json_is_boolean(j)) return LOAD_ERR(l, "expected true or false");
      if (t == RF_ATTR_BOOL) v->u.b = json_is_true(j);
      else v->u.bools[i] = json_is_true(j);
      return NULL;
    case RF_ATTR_STRING:
    case RF_ATTR_STRING_LIST:
      if (!json_is_string(j)) return LOAD_ERR(l, "expected a string");
      if (t == RF_ATTR_STRING) v->u.s = (char *)json_string_value(j);
      else v->u.strings[i] = (char *)json_string_value(j);
      return NULL;
    case RF_ATTR_TYPE:
    case RF_ATTR_TYPE_LIST:
      dt = rf_dtype_from_name(json_string_value(j));
      if (dt == RF_DTYPE_INVALID) return LOAD_ERR(l, "expected a dtype name");
      if (t == RF_ATTR_TYPE) v->u.type = dt;
      else v->u.types[i] = dt;
      return NULL;
    case RF_ATTR_SHAPE: return read_shape(l, j, &v->u.shape);
    case RF_ATTR_SHAPE_LIST: return read_shape(l, j, &v->u.shapes[i]);
    case RF_ATTR_TENSOR: return read_tensor(l, j, &v->u.tensor);
    case RF_ATTR_TENSOR_LIST: return read_tensor(l, j, &v->u.tensors[i]);
    default: return LOAD_ERR(l, "unknown attr type");
  }
}

/* Sets one attr on b. Borrowed strings point into the JSON document, which
 * outlives the builder; tensors read here are released after the copy. */
static rf_status *read_attr(loader *l, rf_node_builder *b, const char *name,
                            json_t *j) {
  const char *type = NULL;
  json_t *value = NULL;
  if (json_unpack(j, "{s:s, s:o}", "type", &type, "value", &value))
    return LOAD_ERR(l, "attr '%s' needs a type and a value", name);
  rf__attr_type t = attr_type_from_name(type);
  if (t == RF_ATTR_TYPE_COUNT)
    return LOAD_ERR(l, "attr '%s' has unknown type '%s'", name, type);
  rf__attr_value v;
  memset(&v, 0, sizeof v);
  v.type = t;
  rf_status *st = NULL;
  if (t < RF_ATTR_INT_LIST) {
    st = read_element(l, t, value, &v, 0);
    if (!st) rf__node_builder_attr_value(b, name, &v);
    if (t == RF_ATTR_TENSOR) rf_tensor_release(v.u.tensor);
    return rf__status_prefix(st, "attr '%s'", name);
  }
  size_t n = json_array_size(value);
  if (!json_is_array(value) || n > 1 << 20)
    return LOAD_ERR(l, "attr '%s' must be an array", name);
  void *items = rf__calloc(n ? n : 1, sizeof(rf_shape)); /* largest element */
  RF_CHECK_ALLOC(items);
  v.n = (int)n;
  v.u.ints = items; /* every list member of the union aliases items */
  size_t done = 0;
  for (; done < n && !st; done++)
    st = read_element(l, t, json_array_get(value, done), &v, (int)done);
  if (!st) rf__node_builder_attr_value(b, name, &v);
  if (t == RF_ATTR_TENSOR_LIST)
    for (size_t i = 0; i < done; i++) rf_tensor_release(v.u.tensors[i]);
  rf__free(items);
  return rf__status_prefix(st, "attr '%s'", name);
}

/* "name:3" -> (node, 3); "name" -> (node, 0). */
static rf_status *read_output(loader *l, json_t *j, rf_output *out) {
  const char *s = json_string_value(j);
  if (!s) return LOAD_ERR(l, "an input must be a string \"node:index\"");
  char name[512];
  snprintf(name, sizeof name, "%s", s);
  long index = 0;
  char *colon = strrchr(name, ':');
  if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
    index = strtol(colon + 1, NULL, 10);
    *colon = '\0';
  }
  rf_node *n = rf_graph_find_node(l->g, name);
  if (!n) return LOAD_ERR(l, "input '%s' names no earlier node", s);
  if (index >= rf_node_num_outputs(n))
    return LOAD_ERR(l, "input '%s': node '%s' has %d outputs", s, name,
                    rf_node_num_outputs(n));
  out->node = n;
  out->index = (int)index;
  return NULL;
}

static rf_status *read_inputs(loader *l, rf_node_builder *b, json_t *inputs) {
  size_t i;
  json_t *arg;
  json_array_foreach(inputs, i, arg) {
    if (!json_is_array(arg)) {
      rf_output o;
      RF_CHECK(read_output(l, arg, &o));
      rf_node_builder_input(b, o);
      continue;
    }
    size_t n = json_array_size(arg);
    if (n > 1 << 16) return LOAD_ERR(l, "input list %zu is too long", i);
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

static rf_status *read_node(loader *l, json_t *j) {
  const char *name = NULL, *op = NULL, *device = "";
  json_t *inputs = NULL, *ctrl = NULL, *attrs = NULL;
  if (json_unpack(j, "{s:s, s:s, s?s, s?o, s?o, s?o}", "name", &name, "op",
                  &op, "device", &device, "inputs", &inputs, "control_inputs",
                  &ctrl, "attrs", &attrs))
    return LOAD_ERR(l, "a node needs a string name and op");
  l->node = name;
  if ((inputs && !json_is_array(inputs)) || (ctrl && !json_is_array(ctrl)) ||
      (attrs && !json_is_object(attrs)))
    return LOAD_ERR(l, "inputs and control_inputs must be arrays, attrs an "
                       "object");
  rf_node_builder *b = rf_node_builder_new(l->g, op, name);
  rf_node_builder_device(b, device);
  rf_status *st = inputs ? read_inputs(l, b, inputs) : NULL;
  size_t i;
  json_t *c;
  if (ctrl) json_array_foreach(ctrl, i, c) {
      rf_node *src = st ? NULL : rf_graph_find_node(l->g, json_string_value(c) ? json_string_value(c) : "");
      if (!st && !src) st = LOAD_ERR(l, "control input %zu names no earlier node", i);
      if (!st) rf_node_builder_control_input(b, src);
    }
  const char *key;
  json_t *v;
  if (attrs) json_object_foreach(attrs, key, v) {
      if (!st) st = read_attr(l, b, key, v);
    }
  rf_node *n;
  rf_status *fin = rf_node_builder_finish(b, &n); /* consumes b either way */
  if (st) {
    rf_status_free(fin);
    return st;
  }
  return rf__status_prefix(fin, "graph file");
}

static rf_status *read_graph(json_t *root, rf_graph *g) {
  const char *format = NULL;
  int version = 0;
  json_t *nodes = NULL;
  if (json_unpack(root, "{s:s, s:i, s:o}", "format", &format, "version",
                  &version, "nodes", &nodes) ||
      strcmp(format, FORMAT_NAME) != 0 || !json_is_array(nodes))
    return rf__invalid("not a ringflow graph file (want {\"format\": \"%s\", "
                       "\"version\": %d, \"nodes\": [...]})",
                       FORMAT_NAME, FORMAT_VERSION);
  if (version != FORMAT_VERSION)
    return rf__invalid("graph file version %d; this ringflow reads version %d",
                       version, FORMAT_VERSION);
  loader l = {g, NULL};
  size_t i;
  json_t *n;
  json_array_foreach(nodes, i, n) RF_CHECK(read_node(&l, n));
  return NULL;
}

rf_status *rf_graph_from_json(const char *json, size_t len, rf_graph **out) {
  if (!json || !out) return rf__invalid("rf_graph_from_json: NULL argument");
  RF_CHECK(rf__registry_init());
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
  if (!f) return rf__error(RF_NOT_FOUND, "cannot open %s: %s", path, strerror(errno));
  char *buf = NULL;
  size_t len = 0, cap = 0;
  rf_status *st = NULL;
  for (;;) {
    if (len + 65536 > cap) {
      size_t ncap = cap ? cap * 2 : 65536;
      if (ncap > ((size_t)1 << 31)) {
        st = rf__invalid("%s is larger than 2 GiB", path);
        break;
      }
      char *nb = rf__realloc(buf, ncap);
      if (!nb) {
        st = rf__oom();
        break;
      }
      buf = nb;
      cap = ncap;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  if (!st && ferror(f)) st = rf__error(RF_DATA_LOSS, "reading %s failed", path);
  fclose(f);
  if (!st) st = rf__status_prefix(rf_graph_from_json(buf, len, out), "%s", path);
  rf__free(buf);
  return st;
}
