/* ops/op_registry.c - the op table and the parser of the text specs described
 * in op_registry.h. The table is a uthash filled at start-up (registration
 * takes a lock) and read-only afterwards, so rf__op_find takes none. A def's
 * default values own their memory and live as long as the process. */
#include "ops/op_registry.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/status.h"

static rf__op_def *op_table;
/* Set when a value's copy could not be allocated, so the parse error becomes
 * RESOURCE_EXHAUSTED rather than a complaint about the spec. */
static _Thread_local bool parse_oom;
static pthread_mutex_t register_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- text helpers ---- */

typedef struct span {
  const char *p;
  size_t n;
} span;

static span trim(span s) {
  while (s.n && isspace((unsigned char)s.p[0])) s.p++, s.n--;
  while (s.n && isspace((unsigned char)s.p[s.n - 1])) s.n--;
  return s;
}

static bool span_eq(span s, const char *w) {
  return strlen(w) == s.n && strncmp(s.p, w, s.n) == 0;
}

/* Copies s into buf (NUL-terminated); false when it does not fit. */
static bool span_copy(span s, char *buf, size_t len) {
  if (s.n + 1 > len) return false;
  memcpy(buf, s.p, s.n);
  buf[s.n] = '\0';
  return true;
}

static bool is_ident(span s) {
  if (s.n == 0 || !(isalpha((unsigned char)s.p[0]) || s.p[0] == '_'))
    return false;
  for (size_t i = 1; i < s.n; i++)
    if (!(isalnum((unsigned char)s.p[i]) || s.p[i] == '_')) return false;
  return s.n < RF_ARG_NAME_MAX;
}

/* Next top-level segment of *rest split at sep (brackets and quotes nest);
 * false when *rest is exhausted. */
static bool next_segment(span *rest, char sep, span *seg) {
  if (rest->p == NULL) return false;
  int depth = 0;
  char quote = 0;
  size_t i = 0;
  for (; i < rest->n; i++) {
    char c = rest->p[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '(' || c == '{') {
      depth++;
    } else if (c == ']' || c == ')' || c == '}') {
      depth--;
    } else if (c == sep && depth == 0) {
      break;
    }
  }
  seg->p = rest->p;
  seg->n = i;
  if (i < rest->n) {
    rest->p += i + 1;
    rest->n -= i + 1;
  } else {
    rest->p = NULL;
    rest->n = 0;
  }
  return true;
}

/* Strips surrounding brackets open/close; false if they are not there. */
static bool unwrap(span *s, char open, char close) {
  *s = trim(*s);
  if (s->n < 2 || s->p[0] != open || s->p[s->n - 1] != close) return false;
  s->p++;
  s->n -= 2;
  *s = trim(*s);
  return true;
}

/* ---- error reporting ---- */

typedef struct parser {
  const char *op;
  rf_status *err;
} parser;

static bool fail(parser *ps, const char *what, span bad) {
  if (!ps->err && parse_oom) ps->err = rf__oom();
  bad = trim(bad);
  if (!ps->err)
    ps->err =
        rf__invalid("op '%s': %s in '%.*s'", ps->op, what, (int)bad.n, bad.p);
  return false;
}

/* ---- values ---- */

static bool parse_int(span s, int64_t *out) {
  char buf[64];
  s = trim(s);
  if (!span_copy(s, buf, sizeof buf) || s.n == 0) return false;
  char *end;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  if (*end || errno) return false;
  *out = v;
  return true;
}

static bool parse_float(span s, double *out) {
  char buf[64];
  s = trim(s);
  if (!span_copy(s, buf, sizeof buf) || s.n == 0) return false;
  char *end;
  double v = strtod(buf, &end);
  if (*end) return false;
  *out = v;
  return true;
}

static bool parse_bool(span s, bool *out) {
  s = trim(s);
  if (span_eq(s, "true")) return *out = true, true;
  if (span_eq(s, "false")) return *out = false, true;
  return false;
}

static bool parse_dtype(span s, rf_dtype *out) {
  char buf[32];
  s = trim(s);
  if (!span_copy(s, buf, sizeof buf)) return false;
  *out = rf_dtype_from_name(buf);
  return *out != RF_DTYPE_INVALID;
}

/* A bare word or a quoted string; *out is a new copy. */
static bool parse_string(span s, char **out) {
  s = trim(s);
  if (s.n >= 2 && (s.p[0] == '"' || s.p[0] == '\'') && s.p[s.n - 1] == s.p[0])
    s.p++, s.n -= 2;
  else if (memchr(s.p, '"', s.n) || memchr(s.p, '\'', s.n))
    return false;
  char *c = rf__malloc(s.n + 1);
  if (!c) return parse_oom = true, false;
  span_copy(s, c, s.n + 1);
  *out = c;
  return true;
}

/* "?" (unknown rank) or "[2, ?, 3]" / "(2, ?, 3)". */
static bool parse_shape(span s, rf_shape *out) {
  s = trim(s);
  if (span_eq(s, "?")) return *out = rf_shape_unknown(), true;
  if (!unwrap(&s, '[', ']') && !unwrap(&s, '(', ')')) return false;
  int64_t dims[RF_MAX_RANK];
  int rank = 0;
  span seg, rest = s;
  while (s.n && next_segment(&rest, ',', &seg)) {
    if (rank == RF_MAX_RANK) return false;
    seg = trim(seg);
    if (span_eq(seg, "?"))
      dims[rank] = RF_UNKNOWN_DIM;
    else if (!parse_int(seg, &dims[rank]) || dims[rank] < 0)
      return false;
    rank++;
  }
  *out = rf_shape_make(rank, dims);
  return true;
}

static bool parse_scalar(rf__attr_type t, span s, rf__attr_value *v) {
  switch (t) {
    case RF_ATTR_INT: return parse_int(s, &v->u.i);
    case RF_ATTR_FLOAT: return parse_float(s, &v->u.f);
    case RF_ATTR_BOOL: return parse_bool(s, &v->u.b);
    case RF_ATTR_STRING: return parse_string(s, &v->u.s);
    case RF_ATTR_TYPE: return parse_dtype(s, &v->u.type);
    case RF_ATTR_SHAPE: return parse_shape(s, &v->u.shape);
    default: return false; /* tensors have no text form */
  }
}

static rf__attr_type list_elem_type(rf__attr_type t) {
  switch (t) {
    case RF_ATTR_INT_LIST: return RF_ATTR_INT;
    case RF_ATTR_FLOAT_LIST: return RF_ATTR_FLOAT;
    case RF_ATTR_BOOL_LIST: return RF_ATTR_BOOL;
    case RF_ATTR_STRING_LIST: return RF_ATTR_STRING;
    case RF_ATTR_TYPE_LIST: return RF_ATTR_TYPE;
    case RF_ATTR_SHAPE_LIST: return RF_ATTR_SHAPE;
    case RF_ATTR_TENSOR_LIST: return RF_ATTR_TENSOR;
    default: return RF_ATTR_TYPE_COUNT;
  }
}

/* "[a, b, ...]" of elements of the list's element type. */
static bool parse_list(rf__attr_type t, span s, rf__attr_value *v) {
  rf__attr_type et = list_elem_type(t);
  if (!unwrap(&s, '[', ']')) return false;
  rf__attr_value tmp = {.type = t};
  rf__attr_value elems[64];
  int n = 0;
  span seg, rest = s;
  bool ok = true;
  while (ok && s.n && next_segment(&rest, ',', &seg)) {
    if (n == 64) {
      ok = false;
      break;
    }
    memset(&elems[n], 0, sizeof elems[n]);
    elems[n].type = et;
    ok = parse_scalar(et, seg, &elems[n]);
    if (ok) n++;
  }
  /* Build a borrowed list from the parsed scalars and deep-copy it. */
  union {
    int64_t i[64];
    double f[64];
    bool b[64];
    char *s[64];
    rf_dtype t[64];
    rf_shape sh[64];
  } arr;
  for (int i = 0; ok && i < n; i++) {
    switch (et) {
      case RF_ATTR_INT: arr.i[i] = elems[i].u.i; break;
      case RF_ATTR_FLOAT: arr.f[i] = elems[i].u.f; break;
      case RF_ATTR_BOOL: arr.b[i] = elems[i].u.b; break;
      case RF_ATTR_STRING: arr.s[i] = elems[i].u.s; break;
      case RF_ATTR_TYPE: arr.t[i] = elems[i].u.type; break;
      case RF_ATTR_SHAPE: arr.sh[i] = elems[i].u.shape; break;
      default: ok = false; break;
    }
  }
  if (ok) {
    tmp.n = n;
    tmp.u.ints = arr.i;
    rf_status *st = rf__attr_value_copy(&tmp, v);
    ok = st == NULL;
    if (st) parse_oom = true; /* the copy fails only for memory */
    rf_status_free(st);
  }
  for (int i = 0; i < n; i++) rf__attr_value_clear(&elems[i]);
  return ok;
}

/* ---- attr specs ---- */

static bool add_group(rf__attr_def *d, span item) {
  static const rf_dtype floats[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                    RF_FLOAT64};
  static const rf_dtype ints[] = {RF_INT8, RF_UINT8, RF_INT32, RF_INT64};
  bool f = span_eq(item, "@float"), i = span_eq(item, "@int");
  bool num = span_eq(item, "@numeric"), all = span_eq(item, "@all");
  rf_dtype one = RF_DTYPE_INVALID;
  if (!(f || i || num || all)) {
    if (!parse_dtype(item, &one)) return false;
  }
  rf_dtype add[RF_DTYPE_COUNT];
  int n = 0;
  if (f || num || all)
    for (int k = 0; k < 4; k++) add[n++] = floats[k];
  if (i || num || all)
    for (int k = 0; k < 4; k++) add[n++] = ints[k];
  if (all) add[n++] = RF_BOOL;
  if (!(f || i || num || all)) add[n++] = one;
  for (int k = 0; k < n; k++) {
    bool dup = false;
    for (int j = 0; j < d->num_allowed_types; j++)
      dup |= d->allowed_types[j] == add[k];
    if (!dup) d->allowed_types[d->num_allowed_types++] = add[k];
  }
  return true;
}

static bool parse_allowed(parser *ps, rf__attr_def *d, span set) {
  span whole = set;
  if (!unwrap(&set, '{', '}')) return fail(ps, "expected '{...}'", whole);
  bool types = d->type == RF_ATTR_TYPE || d->type == RF_ATTR_TYPE_LIST;
  bool strings = d->type == RF_ATTR_STRING || d->type == RF_ATTR_STRING_LIST;
  if (!types && !strings)
    return fail(ps, "'in {...}' only fits type and string attrs", whole);
  span seg, rest = set;
  while (set.n && next_segment(&rest, ',', &seg)) {
    seg = trim(seg);
    if (types) {
      if (!add_group(d, seg)) return fail(ps, "unknown dtype or group", seg);
      continue;
    }
    if (d->num_allowed_strings == RF_MAX_ALLOWED)
      return fail(ps, "too many allowed values", whole);
    char *s = NULL;
    if (!parse_string(seg, &s)) return fail(ps, "bad allowed value", seg);
    bool fits = strlen(s) < RF_ARG_NAME_MAX;
    if (fits) strcpy(d->allowed_strings[d->num_allowed_strings++], s);
    rf__free(s);
    if (!fits) return fail(ps, "allowed value too long", seg);
  }
  if (types ? d->num_allowed_types == 0 : d->num_allowed_strings == 0)
    return fail(ps, "empty allowed set", whole);
  return true;
}

/* The attr type named at the start of s (longest match); advances s. */
static bool parse_attr_type(span *s, rf__attr_type *t) {
  size_t best = 0;
  for (int k = 0; k < RF_ATTR_TYPE_COUNT; k++) {
    const char *nm = rf__attr_type_name((rf__attr_type)k);
    size_t n = strlen(nm);
    if (n > s->n || strncmp(s->p, nm, n) != 0 || n <= best) continue;
    if (n < s->n && (isalnum((unsigned char)s->p[n]) || s->p[n] == '_'))
      continue;
    best = n;
    *t = (rf__attr_type)k;
  }
  if (!best) return false;
  s->p += best;
  s->n -= best;
  return true;
}

static bool starts(span s, const char *w) {
  size_t n = strlen(w);
  return s.n >= n && strncmp(s.p, w, n) == 0;
}

static bool check_default(parser *ps, rf__attr_def *d, span whole) {
  const rf__attr_value *v = &d->default_value;
  if (d->type == RF_ATTR_TYPE && d->num_allowed_types) {
    bool ok = false;
    for (int k = 0; k < d->num_allowed_types; k++)
      ok |= d->allowed_types[k] == v->u.type;
    if (!ok) return fail(ps, "default not in the allowed set", whole);
  }
  if (d->type == RF_ATTR_STRING && d->num_allowed_strings) {
    bool ok = false;
    for (int k = 0; k < d->num_allowed_strings; k++)
      ok |= strcmp(d->allowed_strings[k], v->u.s) == 0;
    if (!ok) return fail(ps, "default not in the allowed set", whole);
  }
  if (d->has_minimum && d->type == RF_ATTR_INT && v->u.i < d->minimum)
    return fail(ps, "default below the minimum", whole);
  return true;
}

static bool parse_attr(parser *ps, rf__op_def *op, span whole) {
  span s = trim(whole);
  const char *colon = memchr(s.p, ':', s.n);
  if (!colon) return fail(ps, "expected 'NAME: TYPE'", whole);
  span name = trim((span){s.p, (size_t)(colon - s.p)});
  if (!is_ident(name)) return fail(ps, "bad attr name", whole);
  if (op->num_attrs == RF_MAX_OP_ATTRS)
    return fail(ps, "too many attrs", whole);
  rf__attr_def *d = &op->attrs[op->num_attrs];
  memset(d, 0, sizeof *d);
  span_copy(name, d->name, sizeof d->name);
  for (int k = 0; k < op->num_attrs; k++)
    if (strcmp(op->attrs[k].name, d->name) == 0)
      return fail(ps, "duplicate attr", whole);
  s = trim((span){colon + 1, s.n - (size_t)(colon + 1 - s.p)});
  if (!parse_attr_type(&s, &d->type))
    return fail(ps, "unknown attr type", whole);
  d->default_value.type = d->type;
  s = trim(s);
  if (starts(s, "in") && s.n > 2 &&
      (isspace((unsigned char)s.p[2]) || s.p[2] == '{')) {
    s.p += 2, s.n -= 2;
    s = trim(s);
    const char *close = memchr(s.p, '}', s.n);
    if (!close) return fail(ps, "unclosed '{'", whole);
    span set = {s.p, (size_t)(close - s.p + 1)};
    if (!parse_allowed(ps, d, set)) return false;
    s = trim((span){close + 1, s.n - set.n});
  }
  if (starts(s, ">=")) {
    s.p += 2, s.n -= 2;
    const char *eq = memchr(s.p, '=', s.n);
    span num = {s.p, eq ? (size_t)(eq - s.p) : s.n};
    if (!parse_int(num, &d->minimum)) return fail(ps, "bad minimum", whole);
    if (d->type != RF_ATTR_INT && list_elem_type(d->type) == RF_ATTR_TYPE_COUNT)
      return fail(ps, "'>=' only fits int and list attrs", whole);
    d->has_minimum = true;
    s = trim((span){s.p + num.n, s.n - num.n});
  }
  if (starts(s, "=")) {
    span def = trim((span){s.p + 1, s.n - 1});
    bool ok = list_elem_type(d->type) != RF_ATTR_TYPE_COUNT
                  ? parse_list(d->type, def, &d->default_value)
                  : parse_scalar(d->type, def, &d->default_value);
    if (!ok) return fail(ps, "bad default value", whole);
    d->has_default = true;
    op->num_attrs++; /* counted now so a failure below frees the default */
    return check_default(ps, d, whole);
  }
  if (s.n) return fail(ps, "unexpected text", whole);
  op->num_attrs++;
  return true;
}

/* ---- arg specs ---- */

static bool parse_arg(parser *ps, rf__op_def *op, rf__arg_def *a, span whole) {
  span s = trim(whole);
  const char *colon = memchr(s.p, ':', s.n);
  if (!colon) return fail(ps, "expected 'name: type'", whole);
  span name = trim((span){s.p, (size_t)(colon - s.p)});
  if (!is_ident(name)) return fail(ps, "bad arg name", whole);
  memset(a, 0, sizeof *a);
  span_copy(name, a->name, sizeof a->name);
  a->fixed_type = RF_DTYPE_INVALID;
  span ty = trim((span){colon + 1, s.n - (size_t)(colon + 1 - s.p)});
  const char *star = memchr(ty.p, '*', ty.n);
  if (star) {
    span num = trim((span){ty.p, (size_t)(star - ty.p)});
    if (!is_ident(num)) return fail(ps, "bad number attr", whole);
    span_copy(num, a->number_attr, sizeof a->number_attr);
    const rf__attr_def *nd = rf__op_find_attr(op, a->number_attr);
    if (!nd || nd->type != RF_ATTR_INT)
      return fail(ps, "number attr is not a declared int attr", whole);
    ty = trim((span){star + 1, ty.n - (size_t)(star + 1 - ty.p)});
  }
  if (parse_dtype(ty, &a->fixed_type)) return true;
  if (!is_ident(ty)) return fail(ps, "bad arg type", whole);
  span_copy(ty, a->type_attr, sizeof a->type_attr);
  const rf__attr_def *td = rf__op_find_attr(op, a->type_attr);
  if (!td || td->type != RF_ATTR_TYPE)
    return fail(ps, "arg type is neither a dtype nor a declared type attr",
                whole);
  return true;
}

static bool parse_args(parser *ps, rf__op_def *op, const char *text,
                       rf__arg_def *args, int *num) {
  *num = 0;
  if (!text) return true;
  span all = trim((span){text, strlen(text)});
  span seg, rest = all;
  while (all.n && next_segment(&rest, ',', &seg)) {
    if (*num == RF_MAX_OP_ARGS) return fail(ps, "too many args", all);
    if (!parse_arg(ps, op, &args[*num], seg)) return false;
    for (int k = 0; k < *num; k++)
      if (strcmp(args[k].name, args[*num].name) == 0)
        return fail(ps, "duplicate arg name", seg);
    (*num)++;
  }
  return true;
}

/* ---- the table ---- */

static void free_def(rf__op_def *op) {
  for (int k = 0; k < op->num_attrs; k++)
    rf__attr_value_clear(&op->attrs[k].default_value);
  rf__free(op);
}

static rf_status *parse_spec(const rf__op_spec *spec, rf__op_def **out) {
  rf__op_def *op = rf__calloc(1, sizeof *op);
  RF_CHECK_ALLOC(op);
  snprintf(op->name, sizeof op->name, "%s", spec->name);
  parser ps = {spec->name, NULL};
  parse_oom = false;
  span all = trim((span){spec->attrs ? spec->attrs : "",
                         spec->attrs ? strlen(spec->attrs) : 0});
  span seg, rest = all;
  bool ok = true;
  while (ok && all.n && next_segment(&rest, ';', &seg))
    if (trim(seg).n) ok = parse_attr(&ps, op, seg);
  ok = ok && parse_args(&ps, op, spec->inputs, op->inputs, &op->num_inputs);
  ok = ok && parse_args(&ps, op, spec->outputs, op->outputs, &op->num_outputs);
  if (!ok) {
    free_def(op);
    return ps.err ? ps.err : rf__oom();
  }
  op->shape = spec->shape;
  op->grad = spec->grad;
  op->flags = spec->flags;
  *out = op;
  return NULL;
}

rf_status *rf__op_register(const rf__op_spec *spec) {
  if (!spec || !spec->name) return rf__invalid("rf__op_register: NULL spec");
  size_t n = strlen(spec->name);
  if (n == 0 || n >= sizeof op_table->name)
    return rf__invalid("op name '%s' is empty or too long", spec->name);
  rf__op_def *op = NULL;
  RF_CHECK(parse_spec(spec, &op));
  pthread_mutex_lock(&register_mu);
  rf_status *st = NULL;
  if (rf__op_find(op->name)) {
    st =
        rf__error(RF_ALREADY_EXISTS, "op '%s' is already registered", op->name);
  } else {
    int rf__hash_oom = 0;
    HASH_ADD_STR(op_table, name, op);
    if (rf__hash_oom) st = rf__oom();
  }
  pthread_mutex_unlock(&register_mu);
  if (st) free_def(op);
  return st;
}

const rf__op_def *rf__op_find(const char *name) {
  if (!name) return NULL;
  rf__op_def *op = NULL;
  HASH_FIND_STR(op_table, name, op);
  return op;
}

const rf__attr_def *rf__op_find_attr(const rf__op_def *op, const char *name) {
  if (!op || !name) return NULL;
  for (int k = 0; k < op->num_attrs; k++)
    if (strcmp(op->attrs[k].name, name) == 0) return &op->attrs[k];
  return NULL;
}
