/* graph/attrs.c - typed node attributes. An rf__attrs is an array kept sorted
 * by name (nodes have a handful, so binary search beats a hash). Every value
 * owns its memory: strings and lists are deep-copied, tensors retained. */
#include "graph/attrs.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/status.h"

static const char *const attr_type_names[] = {
#define RF_X(e, s) s,
    RF_ATTR_TYPE_LIST(RF_X)
#undef RF_X
};
_Static_assert(sizeof(attr_type_names) / sizeof(attr_type_names[0]) ==
                   RF_ATTR_TYPE_COUNT,
               "one name per attr type");

const char *rf__attr_type_name(rf__attr_type t) {
  if ((int)t < 0 || t >= RF_ATTR_TYPE_COUNT) return "unknown";
  return attr_type_names[t];
}

/* ---- values ---- */

static size_t list_elem_size(rf__attr_type t) {
  switch (t) {
    case RF_ATTR_INT_LIST: return sizeof(int64_t);
    case RF_ATTR_FLOAT_LIST: return sizeof(double);
    case RF_ATTR_BOOL_LIST: return sizeof(bool);
    case RF_ATTR_STRING_LIST: return sizeof(char *);
    case RF_ATTR_TYPE_LIST: return sizeof(rf_dtype);
    case RF_ATTR_SHAPE_LIST: return sizeof(rf_shape);
    case RF_ATTR_TENSOR_LIST: return sizeof(rf_tensor *);
    default: return 0;
  }
}

static bool is_list(rf__attr_type t) { return list_elem_size(t) != 0; }

void rf__attr_value_clear(rf__attr_value *v) {
  if (!v) return;
  switch (v->type) {
    case RF_ATTR_STRING: rf__free(v->u.s); break;
    case RF_ATTR_TENSOR: rf_tensor_release(v->u.tensor); break;
    case RF_ATTR_STRING_LIST:
      for (int i = 0; i < v->n; i++) rf__free(v->u.strings[i]);
      rf__free(v->u.strings);
      break;
    case RF_ATTR_TENSOR_LIST:
      for (int i = 0; i < v->n; i++) rf_tensor_release(v->u.tensors[i]);
      rf__free(v->u.tensors);
      break;
    default:
      if (is_list(v->type)) rf__free(v->u.ints); /* any list pointer */
      break;
  }
  memset(&v->u, 0, sizeof v->u);
  v->n = 0;
}

static rf_status *copy_list(const rf__attr_value *v, rf__attr_value *out) {
  size_t es = list_elem_size(v->type);
  void *p = rf__malloc(es * (size_t)(v->n > 0 ? v->n : 1));
  RF_CHECK_ALLOC(p);
  if (v->n > 0) memcpy(p, v->u.ints, es * (size_t)v->n);
  out->u.ints = p; /* union: the same pointer for every list kind */
  if (v->type == RF_ATTR_STRING_LIST) {
    for (int i = 0; i < v->n; i++) {
      out->u.strings[i] = rf__strdup(v->u.strings[i] ? v->u.strings[i] : "");
      if (!out->u.strings[i]) {
        for (int j = 0; j < i; j++) rf__free(out->u.strings[j]);
        rf__free(p);
        return rf__oom();
      }
    }
  } else if (v->type == RF_ATTR_TENSOR_LIST) {
    for (int i = 0; i < v->n; i++) rf_tensor_retain(v->u.tensors[i]);
  }
  return NULL;
}

rf_status *rf__attr_value_copy(const rf__attr_value *v, rf__attr_value *out) {
  if (!v || !out) return rf__invalid("rf__attr_value_copy: NULL argument");
  if (v->n < 0) return rf__invalid("attr list of negative length %d", v->n);
  rf__attr_value r = *v;
  if (v->type == RF_ATTR_STRING) {
    r.u.s = rf__strdup(v->u.s ? v->u.s : "");
    RF_CHECK_ALLOC(r.u.s);
  } else if (v->type == RF_ATTR_TENSOR) {
    rf_tensor_retain(v->u.tensor);
  } else if (is_list(v->type)) {
    RF_CHECK(copy_list(v, &r));
  }
  *out = r;
  return NULL;
}

static bool tensor_equal(const rf_tensor *a, const rf_tensor *b) {
  if (a == b) return true;
  if (!a || !b) return false;
  if (rf_tensor_dtype(a) != rf_tensor_dtype(b)) return false;
  rf_shape sa = rf_tensor_shape(a), sb = rf_tensor_shape(b);
  if (!rf_shape_equal(&sa, &sb)) return false;
  return memcmp(rf_tensor_data(a), rf_tensor_data(b), rf_tensor_nbytes(a)) == 0;
}

static bool elem_equal(const rf__attr_value *a, const rf__attr_value *b,
                       int i) {
  switch (a->type) {
    case RF_ATTR_INT_LIST: return a->u.ints[i] == b->u.ints[i];
    case RF_ATTR_FLOAT_LIST: return a->u.floats[i] == b->u.floats[i];
    case RF_ATTR_BOOL_LIST: return a->u.bools[i] == b->u.bools[i];
    case RF_ATTR_STRING_LIST:
      return strcmp(a->u.strings[i], b->u.strings[i]) == 0;
    case RF_ATTR_TYPE_LIST: return a->u.types[i] == b->u.types[i];
    case RF_ATTR_SHAPE_LIST:
      return rf_shape_equal(&a->u.shapes[i], &b->u.shapes[i]);
    case RF_ATTR_TENSOR_LIST:
      return tensor_equal(a->u.tensors[i], b->u.tensors[i]);
    default: return false;
  }
}

bool rf__attr_value_equal(const rf__attr_value *a, const rf__attr_value *b) {
  if (!a || !b || a->type != b->type) return false;
  switch (a->type) {
    case RF_ATTR_INT: return a->u.i == b->u.i;
    case RF_ATTR_FLOAT: return a->u.f == b->u.f;
    case RF_ATTR_BOOL: return a->u.b == b->u.b;
    case RF_ATTR_STRING: return strcmp(a->u.s, b->u.s) == 0;
    case RF_ATTR_TYPE: return a->u.type == b->u.type;
    case RF_ATTR_SHAPE: return rf_shape_equal(&a->u.shape, &b->u.shape);
    case RF_ATTR_TENSOR: return tensor_equal(a->u.tensor, b->u.tensor);
    default: break;
  }
  if (a->n != b->n) return false;
  for (int i = 0; i < a->n; i++)
    if (!elem_equal(a, b, i)) return false;
  return true;
}

/* ---- formatting ---- */

typedef struct sbuf {
  char *p;
  size_t len, used;
} sbuf;

static void put(sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
  if (b->used >= b->len) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->p + b->used, b->len - b->used, fmt, ap);
  va_end(ap);
  if (n > 0) b->used += (size_t)n;
}

static void put_shape(sbuf *b, const rf_shape *s) {
  char tmp[160];
  rf_shape_format(s, tmp, sizeof tmp);
  put(b, "%s", tmp);
}

static void put_tensor(sbuf *b, const rf_tensor *t) {
  if (!t) {
    put(b, "<null tensor>");
    return;
  }
  rf_shape s = rf_tensor_shape(t);
  put(b, "%s", rf_dtype_name(rf_tensor_dtype(t)));
  put_shape(b, &s);
  int64_t n = rf_tensor_num_elements(t);
  if (n > 8 || rf_tensor_dtype(t) == RF_RESOURCE) return;
  put(b, " [");
  for (int64_t i = 0; i < n; i++) put(b, "%s%g", i ? ", " : "", rf_tensor_get(t, i));
  put(b, "]");
}

static void put_elem(sbuf *b, const rf__attr_value *v, int i) {
  switch (v->type) {
    case RF_ATTR_INT_LIST: put(b, "%lld", (long long)v->u.ints[i]); break;
    case RF_ATTR_FLOAT_LIST: put(b, "%g", v->u.floats[i]); break;
    case RF_ATTR_BOOL_LIST: put(b, "%s", v->u.bools[i] ? "true" : "false"); break;
    case RF_ATTR_STRING_LIST: put(b, "%s", v->u.strings[i]); break;
    case RF_ATTR_TYPE_LIST: put(b, "%s", rf_dtype_name(v->u.types[i])); break;
    case RF_ATTR_SHAPE_LIST: put_shape(b, &v->u.shapes[i]); break;
    case RF_ATTR_TENSOR_LIST: put_tensor(b, v->u.tensors[i]); break;
    default: break;
  }
}

void rf__attr_value_format(const rf__attr_value *v, char *buf, size_t len) {
  if (!buf || len == 0) return;
  buf[0] = '\0';
  if (!v) return;
  sbuf b = {buf, len, 0};
  switch (v->type) {
    case RF_ATTR_INT: put(&b, "%lld", (long long)v->u.i); return;
    case RF_ATTR_FLOAT: put(&b, "%g", v->u.f); return;
    case RF_ATTR_BOOL: put(&b, "%s", v->u.b ? "true" : "false"); return;
    case RF_ATTR_STRING: put(&b, "%s", v->u.s ? v->u.s : ""); return;
    case RF_ATTR_TYPE: put(&b, "%s", rf_dtype_name(v->u.type)); return;
    case RF_ATTR_SHAPE: put_shape(&b, &v->u.shape); return;
    case RF_ATTR_TENSOR: put_tensor(&b, v->u.tensor); return;
    default: break;
  }
  put(&b, "[");
  for (int i = 0; i < v->n; i++) {
    if (i) put(&b, ", ");
    put_elem(&b, v, i);
  }
  put(&b, "]");
}

/* ---- attribute sets ---- */

/* Index of name, or -(insertion point) - 1. */
static int find_index(const rf__attrs *a, const char *name) {
  int lo = 0, hi = a->n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    int c = strcmp(a->items[mid].name, name);
    if (c == 0) return mid;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -lo - 1;
}

rf_status *rf__attrs_set(rf__attrs *a, const char *name,
                         const rf__attr_value *v) {
  if (!a || !name || !v) return rf__invalid("rf__attrs_set: NULL argument");
  rf__attr_value copy;
  RF_CHECK(rf__attr_value_copy(v, &copy));
  int i = find_index(a, name);
  if (i >= 0) {
    rf__attr_value_clear(&a->items[i].value);
    a->items[i].value = copy;
    return NULL;
  }
  i = -i - 1;
  char *nm = rf__strdup(name);
  if (!nm || rf__grow(&a->items, &a->cap, a->n + 1, sizeof *a->items) != 0) {
    rf__free(nm);
    rf__attr_value_clear(&copy);
    return rf__oom();
  }
  memmove(&a->items[i + 1], &a->items[i], sizeof *a->items * (size_t)(a->n - i));
  a->items[i].name = nm;
  a->items[i].value = copy;
  a->n++;
  return NULL;
}

const rf__attr_value *rf__attrs_find(const rf__attrs *a, const char *name) {
  if (!a || !name || a->n == 0) return NULL;
  int i = find_index(a, name);
  return i >= 0 ? &a->items[i].value : NULL;
}

void rf__attrs_clear(rf__attrs *a) {
  if (!a) return;
  for (int i = 0; i < a->n; i++) {
    rf__free(a->items[i].name);
    rf__attr_value_clear(&a->items[i].value);
  }
  rf__free(a->items);
  a->items = NULL;
  a->n = a->cap = 0;
}

rf_status *rf__attrs_copy(const rf__attrs *a, rf__attrs *out) {
  if (!a || !out) return rf__invalid("rf__attrs_copy: NULL argument");
  rf__attrs r = {NULL, 0, 0};
  if (a->n > 0) {
    r.items = rf__calloc((size_t)a->n, sizeof *r.items);
    RF_CHECK_ALLOC(r.items);
    r.cap = a->n;
  }
  for (int i = 0; i < a->n; i++) {
    rf__attr *d = &r.items[i];
    d->name = rf__strdup(a->items[i].name);
    rf_status *st = d->name ? rf__attr_value_copy(&a->items[i].value, &d->value)
                            : rf__oom();
    if (st) {
      rf__free(d->name);
      rf__attrs_clear(&r);
      return st;
    }
    r.n++;
  }
  *out = r;
  return NULL;
}

/* ---- typed reads ---- */

static rf_status *lookup(const rf__attrs *a, const char *name,
                         rf__attr_type type, const rf__attr_value **v) {
  if (!name) return rf__invalid("attr name is NULL");
  *v = rf__attrs_find(a, name);
  if (!*v) return rf__error(RF_NOT_FOUND, "attr '%s' not found", name);
  if ((*v)->type != type)
    return rf__invalid("attr '%s' is of type %s, not %s", name,
                       rf__attr_type_name((*v)->type), rf__attr_type_name(type));
  return NULL;
}

#define RF_GETTER(fn, ctype, atype, field)                                     \
  rf_status *fn(const rf__attrs *a, const char *name, ctype *out) {            \
    const rf__attr_value *v;                                                   \
    RF_CHECK(lookup(a, name, atype, &v));                                      \
    if (out) *out = v->u.field;                                                \
    return NULL;                                                               \
  }

RF_GETTER(rf__attrs_get_int, int64_t, RF_ATTR_INT, i)
RF_GETTER(rf__attrs_get_float, double, RF_ATTR_FLOAT, f)
RF_GETTER(rf__attrs_get_bool, bool, RF_ATTR_BOOL, b)
RF_GETTER(rf__attrs_get_type, rf_dtype, RF_ATTR_TYPE, type)
RF_GETTER(rf__attrs_get_shape, rf_shape, RF_ATTR_SHAPE, shape)
RF_GETTER(rf__attrs_get_tensor, rf_tensor *, RF_ATTR_TENSOR, tensor)
#undef RF_GETTER

rf_status *rf__attrs_get_string(const rf__attrs *a, const char *name,
                                const char **out) {
  const rf__attr_value *v;
  RF_CHECK(lookup(a, name, RF_ATTR_STRING, &v));
  if (out) *out = v->u.s;
  return NULL;
}

rf_status *rf__attrs_get_int_list(const rf__attrs *a, const char *name,
                                  const int64_t **out, int *n) {
  const rf__attr_value *v;
  RF_CHECK(lookup(a, name, RF_ATTR_INT_LIST, &v));
  if (out) *out = v->u.ints;
  if (n) *n = v->n;
  return NULL;
}

/* ---- constructors ---- */

static rf__attr_value make(rf__attr_type t) {
  rf__attr_value v;
  memset(&v, 0, sizeof v);
  v.type = t;
  return v;
}

rf__attr_value rf__attr_int(int64_t x) {
  rf__attr_value v = make(RF_ATTR_INT);
  v.u.i = x;
  return v;
}

rf__attr_value rf__attr_float(double x) {
  rf__attr_value v = make(RF_ATTR_FLOAT);
  v.u.f = x;
  return v;
}

rf__attr_value rf__attr_bool(bool x) {
  rf__attr_value v = make(RF_ATTR_BOOL);
  v.u.b = x;
  return v;
}

rf__attr_value rf__attr_type_value(rf_dtype x) {
  rf__attr_value v = make(RF_ATTR_TYPE);
  v.u.type = x;
  return v;
}

rf__attr_value rf__attr_shape(rf_shape x) {
  rf__attr_value v = make(RF_ATTR_SHAPE);
  v.u.shape = x;
  return v;
}

rf__attr_value rf__attr_string_ref(const char *x) {
  rf__attr_value v = make(RF_ATTR_STRING);
  v.u.s = (char *)x; /* borrowed: rf__attrs_set copies */
  return v;
}

rf__attr_value rf__attr_tensor_ref(rf_tensor *x) {
  rf__attr_value v = make(RF_ATTR_TENSOR);
  v.u.tensor = x;
  return v;
}

rf__attr_value rf__attr_int_list_ref(const int64_t *x, int n) {
  rf__attr_value v = make(RF_ATTR_INT_LIST);
  v.u.ints = (int64_t *)x;
  v.n = n;
  return v;
}
