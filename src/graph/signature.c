/* graph/signature.c - matching a node against its op's registration: type
 * and number attrs inferred from the inputs, defaults, the checks of the
 * registration (strict mode, for the builder) and the output dtypes; plus
 * the call of the op's shape function. Used by the builder and by
 * rf__graph_add_node, so internal nodes get the same dtypes. */
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/shape.h"
#include "core/status.h"
#include "graph/graph_internal.h"

typedef struct sig {
  const rf__op_def *op;
  const char *node;
  rf__attrs *attrs;
  bool strict;
} sig;

#define SIG_ERR(s, ...)                                                    \
  rf__status_prefix(rf__invalid(__VA_ARGS__), "node '%s' (%s)", (s)->node, \
                    (s)->op->name)

/* The type attr named `name`, set to dt if missing; *expected gets its value
 * (RF_DTYPE_INVALID when it is of another attr type). */
static rf_status *type_attr(sig *s, const char *name, rf_dtype dt,
                            rf_dtype *expected) {
  const rf__attr_value *v = rf__attrs_find(s->attrs, name);
  if (!v) {
    rf__attr_value t = rf__attr_type_value(dt);
    RF_CHECK(rf__attrs_set(s->attrs, name, &t));
    *expected = dt;
    return NULL;
  }
  *expected = v->type == RF_ATTR_TYPE ? v->u.type : RF_DTYPE_INVALID;
  return NULL;
}

static rf_status *number_attr(sig *s, const rf__arg_def *a, int count) {
  const rf__attr_value *v = rf__attrs_find(s->attrs, a->number_attr);
  if (!v) {
    rf__attr_value nv = rf__attr_int(count);
    return rf__attrs_set(s->attrs, a->number_attr, &nv);
  }
  if (s->strict && (v->type != RF_ATTR_INT || v->u.i != count))
    return SIG_ERR(s, "attr '%s' does not match the %d elements of input '%s'",
                   a->number_attr, count, a->name);
  return NULL;
}

static rf_status *infer_from_inputs(sig *s, const rf_dtype *in,
                                    const int *sizes) {
  int pos = 0;
  for (int i = 0; i < s->op->num_inputs; i++) {
    const rf__arg_def *a = &s->op->inputs[i];
    if (a->number_attr[0]) RF_CHECK(number_attr(s, a, sizes[i]));
    for (int j = 0; j < sizes[i]; j++, pos++) {
      rf_dtype dt = in[pos], want = a->fixed_type;
      if (dt == RF_DTYPE_INVALID) continue; /* unknown: nothing to check */
      if (a->type_attr[0]) RF_CHECK(type_attr(s, a->type_attr, dt, &want));
      if (s->strict && dt != want) {
        char idx[24] = "";
        if (a->number_attr[0]) snprintf(idx, sizeof idx, "[%d]", j);
        return rf__invalid(
            "input '%s'%s of node '%s' (%s) has dtype %s, "
            "expected %s",
            a->name, idx, s->node, s->op->name, rf_dtype_name(dt),
            rf_dtype_name(want));
      }
    }
  }
  return NULL;
}

/* Converts an int (list) given for a float (list) attr. */
static rf_status *coerce(sig *s, const rf__attr *at, rf__attr_type want) {
  const rf__attr_value *v = &at->value;
  if (want == RF_ATTR_FLOAT && v->type == RF_ATTR_INT) {
    rf__attr_value f = rf__attr_float((double)v->u.i);
    return rf__attrs_set(s->attrs, at->name, &f);
  }
  if (want == RF_ATTR_FLOAT_LIST && v->type == RF_ATTR_INT_LIST) {
    double *d = rf__malloc(sizeof *d * (size_t)(v->n + 1));
    RF_CHECK_ALLOC(d);
    for (int k = 0; k < v->n; k++) d[k] = (double)v->u.ints[k];
    rf__attr_value f = {.type = RF_ATTR_FLOAT_LIST, .n = v->n};
    f.u.floats = d;
    rf_status *st = rf__attrs_set(s->attrs, at->name, &f);
    rf__free(d);
    return st;
  }
  return SIG_ERR(s, "attr '%s' must be of type %s, got %s", at->name,
                 rf__attr_type_name(want), rf__attr_type_name(v->type));
}

static rf_status *check_given(sig *s) {
  for (int k = 0; k < s->attrs->n; k++) {
    const rf__attr *at = &s->attrs->items[k];
    const rf__attr_def *d = rf__op_find_attr(s->op, at->name);
    if (!d) return SIG_ERR(s, "unknown attr '%s'", at->name);
    if (d->type != at->value.type) RF_CHECK(coerce(s, at, d->type));
  }
  return NULL;
}

static rf_status *fill_defaults(sig *s) {
  for (int k = 0; k < s->op->num_attrs; k++) {
    const rf__attr_def *d = &s->op->attrs[k];
    if (rf__attrs_find(s->attrs, d->name)) continue;
    if (d->has_default)
      RF_CHECK(rf__attrs_set(s->attrs, d->name, &d->default_value));
    else if (s->strict)
      return SIG_ERR(s, "missing required attr '%s'", d->name);
  }
  return NULL;
}

static void format_types(const rf__attr_def *d, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int k = 0; k < d->num_allowed_types && used < len; k++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", k ? ", " : "",
                             rf_dtype_name(d->allowed_types[k]));
}

static bool type_allowed(const rf__attr_def *d, rf_dtype t) {
  if (d->num_allowed_types == 0) return true;
  for (int k = 0; k < d->num_allowed_types; k++)
    if (d->allowed_types[k] == t) return true;
  return false;
}

static rf_status *check_value(sig *s, const rf__attr_def *d,
                              const rf__attr_value *v) {
  char buf[256];
  if (d->type == RF_ATTR_TYPE || d->type == RF_ATTR_TYPE_LIST) {
    int n = d->type == RF_ATTR_TYPE ? 1 : v->n;
    for (int k = 0; k < n; k++) {
      rf_dtype t = d->type == RF_ATTR_TYPE ? v->u.type : v->u.types[k];
      if (type_allowed(d, t)) continue;
      format_types(d, buf, sizeof buf);
      return SIG_ERR(s, "attr '%s' is %s, not one of {%s}", d->name,
                     rf_dtype_name(t), buf);
    }
  }
  if (d->type == RF_ATTR_STRING && d->num_allowed_strings) {
    bool ok = false;
    size_t used = 0;
    for (int k = 0; k < d->num_allowed_strings; k++) {
      ok |= strcmp(d->allowed_strings[k], v->u.s) == 0;
      if (used < sizeof buf)
        used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s",
                                 k ? ", " : "", d->allowed_strings[k]);
    }
    if (!ok)
      return SIG_ERR(s, "attr '%s' is '%s', not one of {%s}", d->name, v->u.s,
                     buf);
  }
  if (d->type == RF_ATTR_SHAPE || d->type == RF_ATTR_SHAPE_LIST) {
    int n = d->type == RF_ATTR_SHAPE ? 1 : v->n;
    for (int k = 0; k < n; k++) {
      rf_status *st = rf__shape_check(
          d->type == RF_ATTR_SHAPE ? &v->u.shape : &v->u.shapes[k]);
      if (st)
        return rf__status_prefix(st, "node '%s' (%s): attr '%s'", s->node,
                                 s->op->name, d->name);
    }
  }
  if (d->has_minimum) {
    int64_t got = d->type == RF_ATTR_INT ? v->u.i : v->n;
    if (got < d->minimum)
      return SIG_ERR(s, "attr '%s' %s %lld, must be >= %lld", d->name,
                     d->type == RF_ATTR_INT ? "is" : "has length",
                     (long long)got, (long long)d->minimum);
  }
  return NULL;
}

/* The most outputs one number attr may give an op. */
#define MAX_COUNT ((1 << 20) - 1)

static rf_status *outputs(sig *s, int *num, rf_dtype **out) {
  int n = 0, counts[RF_MAX_OP_ARGS];
  for (int i = 0; i < s->op->num_outputs; i++) {
    const rf__arg_def *a = &s->op->outputs[i];
    counts[i] = 1;
    if (a->number_attr[0]) {
      const rf__attr_value *v = rf__attrs_find(s->attrs, a->number_attr);
      /* A count past the limit is refused, never cut to 0 outputs (a
       * Split of 2^20 pieces built a node without outputs, and its shape
       * function divided by 0). */
      if (v && v->type == RF_ATTR_INT && (v->u.i < 0 || v->u.i > MAX_COUNT))
        return SIG_ERR(s, "attr '%s' is %lld: at most %d outputs",
                       a->number_attr, (long long)v->u.i, MAX_COUNT);
      counts[i] = v && v->type == RF_ATTR_INT ? (int)v->u.i : 0;
    }
    n += counts[i];
  }
  rf_dtype *d = rf__malloc(sizeof *d * (size_t)(n + 1));
  RF_CHECK_ALLOC(d);
  int pos = 0;
  for (int i = 0; i < s->op->num_outputs; i++) {
    const rf__arg_def *a = &s->op->outputs[i];
    rf_dtype t = a->fixed_type;
    if (a->type_attr[0]) {
      const rf__attr_value *v = rf__attrs_find(s->attrs, a->type_attr);
      t = v && v->type == RF_ATTR_TYPE ? v->u.type : RF_DTYPE_INVALID;
    }
    for (int j = 0; j < counts[i]; j++) d[pos++] = t;
  }
  *num = n;
  *out = d;
  return NULL;
}

rf_status *rf__resolve_signature(const rf__op_def *op, const char *node_name,
                                 rf__attrs *attrs, const rf_dtype *in_dtypes,
                                 const int *arg_sizes, bool strict,
                                 int *num_outputs, rf_dtype **out_dtypes) {
  sig s = {op, node_name, attrs, strict};
  /* Given attrs first: a type attr of another attr type is named as such,
   * not read as an input's "expected invalid" dtype. */
  if (strict) RF_CHECK(check_given(&s));
  RF_CHECK(infer_from_inputs(&s, in_dtypes, arg_sizes));
  RF_CHECK(fill_defaults(&s));
  for (int k = 0; strict && k < op->num_attrs; k++) {
    const rf__attr_value *v = rf__attrs_find(attrs, op->attrs[k].name);
    if (v) RF_CHECK(check_value(&s, &op->attrs[k], v));
  }
  return outputs(&s, num_outputs, out_dtypes);
}

rf_status *rf__infer_arg_sizes(const rf__op_def *op, const char *node_name,
                               const rf__attrs *attrs, int num_inputs,
                               int *arg_sizes) {
  int known = 0, unknown = -1;
  for (int i = 0; i < op->num_inputs; i++) {
    const rf__arg_def *a = &op->inputs[i];
    arg_sizes[i] = 1;
    if (a->number_attr[0]) {
      const rf__attr_value *v = rf__attrs_find(attrs, a->number_attr);
      if (v && v->type == RF_ATTR_INT && v->u.i >= 0) {
        arg_sizes[i] = (int)v->u.i;
      } else if (unknown < 0) {
        unknown = i;
        arg_sizes[i] = 0;
      } else {
        return rf__invalid(
            "node '%s' (%s): attr '%s' is needed to split the "
            "inputs",
            node_name, op->name, a->number_attr);
      }
    }
    known += arg_sizes[i];
  }
  if (unknown >= 0 && num_inputs >= known) {
    arg_sizes[unknown] = num_inputs - known;
    known = num_inputs;
  }
  if (known != num_inputs)
    return rf__invalid("node '%s' (%s): expected %d inputs, got %d", node_name,
                       op->name, known, num_inputs);
  return NULL;
}

rf_status *rf__run_shape_fn(rf_node *n, const rf_output *inputs) {
  if (!n->op->shape) return NULL;
  int ni = n->num_inputs;
  rf_dtype *dt = rf__malloc(sizeof *dt * (size_t)(ni + 1));
  rf_shape *sh = rf__malloc(sizeof *sh * (size_t)(ni + 1));
  rf_tensor **vals = rf__calloc((size_t)ni + 1, sizeof *vals);
  rf_status *st = NULL;
  if (!dt || !sh || !vals) {
    st = rf__oom();
    goto done;
  }
  for (int k = 0; k < ni; k++) {
    const rf_node *src = inputs[k].node;
    dt[k] = rf_output_dtype(inputs[k]);
    sh[k] = rf_output_shape(inputs[k]);
    if (src && src->op && strcmp(src->op->name, "Const") == 0) {
      const rf__attr_value *v = rf__attrs_find(&src->attrs, "value");
      if (v && v->type == RF_ATTR_TENSOR) vals[k] = v->u.tensor;
    }
  }
  rf__shape_ctx c = {n, ni, dt, sh, vals, n->num_outputs, n->out_shapes};
  st = n->op->shape(&c); /* c lives only for the call */
  /* Whatever a function combined (broadcasts, merges, products), no output
   * may get a shape that no tensor can have. */
  for (int k = 0; !st && k < n->num_outputs; k++)
    st = rf__status_prefix(rf__shape_check(&n->out_shapes[k]), "output %d", k);
  if (st) /* a failed function may have written part of the shapes */
    for (int k = 0; k < n->num_outputs; k++)
      n->out_shapes[k] = rf_shape_unknown();
done:
  rf__free(dt);
  rf__free(sh);
  rf__free(vals);
  /* cppcheck-suppress returnDanglingLifetime ; st never points into c */
  return st;
}
