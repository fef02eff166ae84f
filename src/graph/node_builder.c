/* graph/node_builder.c - rf_node_builder: collects a node's parts, then
 * checks them against the op's registration and adds the node all-or-nothing.
 * Setters never fail visibly: the first problem (no memory, bad argument) is
 * kept and reported by finish. When even the builder cannot be allocated, a
 * static sentinel stands in; finish reports it as RESOURCE_EXHAUSTED. Also the
 * sticky-error helpers the op functions use. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/status.h"
#include "core/tensor.h"
#include "graph/graph_internal.h"
#include "ops/op_families.h"

typedef struct given_arg {
  int start, count;
  bool list;
} given_arg;

struct rf_node_builder {
  rf_graph *g;
  char *op, *name, *device; /* name, device: NULL when not given */
  rf_output *inputs;
  int num_inputs, cap_inputs;
  given_arg *args;
  int num_args, cap_args;
  rf_node **controls;
  int num_controls, cap_controls;
  rf__attrs attrs;
  rf_status *error; /* first problem seen by a setter */
  bool reserved_ok; /* may use RF_RESERVED_NAME_CHAR in a shared_name */
};

static rf_node_builder oom_builder;

static void builder_free(rf_node_builder *b) {
  if (!b || b == &oom_builder) return;
  rf__free(b->op);
  rf__free(b->name);
  rf__free(b->device);
  rf__free(b->inputs);
  rf__free(b->args);
  rf__free(b->controls);
  rf__attrs_clear(&b->attrs);
  rf_status_free(b->error);
  rf__free(b);
}

static bool usable(rf_node_builder *b) {
  return b && b != &oom_builder && !b->error;
}

static void set_error(rf_node_builder *b, rf_status *st) {
  if (!st) return;
  if (!usable(b)) {
    rf_status_free(st);
    return;
  }
  b->error = st;
}

rf_node_builder *rf_node_builder_new(rf_graph *g, const char *op,
                                     const char *name) {
  rf_node_builder *b = rf__calloc(1, sizeof *b);
  if (!b) return &oom_builder;
  b->g = g;
  b->op = rf__strdup(op ? op : "");
  if (name) b->name = rf__strdup(name);
  if (!b->op || (name && !b->name)) set_error(b, rf__oom());
  if (!g) set_error(b, rf__invalid("rf_node_builder_new: NULL graph"));
  if (!op) set_error(b, rf__invalid("rf_node_builder_new: NULL op"));
  return b;
}

static void add_inputs(rf_node_builder *b, const rf_output *in, int n,
                       bool list) {
  if (!usable(b)) return;
  if (n < 0 || (n > 0 && !in)) {
    set_error(b, rf__invalid("bad input list (%d inputs%s)", n,
                             in ? "" : ", NULL array"));
    return;
  }
  if (n > INT_MAX - b->num_inputs) { /* the count would overflow int */
    set_error(b,
              rf__invalid("%d inputs after %d is too many", n, b->num_inputs));
    return;
  }
  if (rf__grow(&b->inputs, &b->cap_inputs, b->num_inputs + n,
               sizeof *b->inputs) ||
      rf__grow(&b->args, &b->cap_args, b->num_args + 1, sizeof *b->args)) {
    set_error(b, rf__oom());
    return;
  }
  b->args[b->num_args++] = (given_arg){b->num_inputs, n, list};
  if (n > 0) memcpy(&b->inputs[b->num_inputs], in, sizeof *in * (size_t)n);
  b->num_inputs += n;
}

void rf_node_builder_input(rf_node_builder *b, rf_output input) {
  add_inputs(b, &input, 1, false);
}

void rf_node_builder_input_list(rf_node_builder *b, const rf_output *inputs,
                                int n) {
  add_inputs(b, inputs, n, true);
}

void rf_node_builder_control_input(rf_node_builder *b, rf_node *src) {
  if (!usable(b)) return;
  if (rf__grow(&b->controls, &b->cap_controls, b->num_controls + 1,
               sizeof *b->controls)) {
    set_error(b, rf__oom());
    return;
  }
  b->controls[b->num_controls++] = src;
}

void rf_node_builder_device(rf_node_builder *b, const char *device) {
  if (!usable(b)) return;
  char *d = rf__strdup(device ? device : "");
  if (!d) {
    set_error(b, rf__oom());
    return;
  }
  rf__free(b->device);
  b->device = d;
}

static void set_attr(rf_node_builder *b, const char *name,
                     const rf__attr_value *v) {
  if (!usable(b)) return;
  if (!name) {
    set_error(b, rf__invalid("NULL attr name"));
    return;
  }
  set_error(b, rf__attrs_set(&b->attrs, name, v));
}

void rf__node_builder_attr_value(rf_node_builder *b, const char *name,
                                 const rf__attr_value *v) {
  set_attr(b, name, v);
}

void rf__node_builder_allow_reserved(rf_node_builder *b) {
  if (usable(b)) b->reserved_ok = true;
}

void rf_node_builder_attr_int(rf_node_builder *b, const char *name, int64_t v) {
  rf__attr_value a = rf__attr_int(v);
  set_attr(b, name, &a);
}

void rf_node_builder_attr_float(rf_node_builder *b, const char *name,
                                double v) {
  rf__attr_value a = rf__attr_float(v);
  set_attr(b, name, &a);
}

void rf_node_builder_attr_bool(rf_node_builder *b, const char *name, bool v) {
  rf__attr_value a = rf__attr_bool(v);
  set_attr(b, name, &a);
}

void rf_node_builder_attr_string(rf_node_builder *b, const char *name,
                                 const char *v) {
  if (!v) {
    if (usable(b))
      set_error(b, rf__invalid("attr '%s' is a NULL string", name ? name : ""));
    return;
  }
  rf__attr_value a = rf__attr_string_ref(v);
  set_attr(b, name, &a);
}

void rf_node_builder_attr_dtype(rf_node_builder *b, const char *name,
                                rf_dtype v) {
  rf__attr_value a = rf__attr_type_value(v);
  set_attr(b, name, &a);
}

void rf_node_builder_attr_shape(rf_node_builder *b, const char *name,
                                rf_shape v) {
  rf__attr_value a = rf__attr_shape(v);
  set_attr(b, name, &a);
}

void rf_node_builder_attr_tensor(rf_node_builder *b, const char *name,
                                 rf_tensor *v) {
  if (!v) {
    if (usable(b))
      set_error(b, rf__invalid("attr '%s' is a NULL tensor", name ? name : ""));
    return;
  }
  if (v->on_gpu) { /* device memory: no host code may read it */
    if (usable(b))
      set_error(b, rf__invalid("attr '%s' is a tensor in device memory "
                               "(rf_tensor_new_external_gpu); an attr "
                               "needs a host tensor",
                               name ? name : ""));
    return;
  }
  rf__attr_value a = rf__attr_tensor_ref(v);
  set_attr(b, name, &a);
}

void rf_node_builder_attr_int_list(rf_node_builder *b, const char *name,
                                   const int64_t *v, int n) {
  if ((n < 0 || (n > 0 && !v)) && usable(b)) {
    set_error(b, rf__invalid("bad list for attr '%s'", name ? name : ""));
    return;
  }
  rf__attr_value a = rf__attr_int_list_ref(v, n);
  set_attr(b, name, &a);
}

void rf_node_builder_attr_float_list(rf_node_builder *b, const char *name,
                                     const double *v, int n) {
  if ((n < 0 || (n > 0 && !v)) && usable(b)) {
    set_error(b, rf__invalid("bad list for attr '%s'", name ? name : ""));
    return;
  }
  rf__attr_value a = {.type = RF_ATTR_FLOAT_LIST, .n = n};
  a.u.floats = (double *)v;
  set_attr(b, name, &a);
}

/* ---- finish ---- */

static bool valid_name(const char *s) {
  if (!s[0]) return false;
  for (const char *p = s; *p; p++) {
    char c = *p;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              (p != s && (c == '/' || c == '-'));
    if (!ok) return false;
  }
  return true;
}

/* A collective's shared_name may not hold the character reserved for the
 * collectives rf_gradients makes, unless the builder is one of those (or a
 * loader rebuilding a saved graph). */
static rf_status *check_shared_name(const rf_node_builder *b,
                                    const rf__op_def *op, const char *name) {
  if (b->reserved_ok || !(op->flags & RF_OP_GROUPED)) return NULL;
  const rf__attr_value *v = rf__attrs_find(&b->attrs, "shared_name");
  if (!v || v->type != RF_ATTR_STRING || !strchr(v->u.s, RF_RESERVED_NAME_CHAR))
    return NULL;
  return rf__invalid(
      "node '%s' (%s): shared_name '%s' holds '%c', which is reserved for the "
      "collectives rf_gradients makes",
      name, op->name, v->u.s, RF_RESERVED_NAME_CHAR);
}

/* Checks the given arguments against op's inputs; fills per-arg sizes. */
static rf_status *match_args(const rf_node_builder *b, const rf__op_def *op,
                             const char *name, int *sizes) {
  if (b->num_args != op->num_inputs) {
    char list[256] = "";
    size_t used = 0;
    for (int i = 0; i < op->num_inputs && used < sizeof list; i++)
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                               i ? ", " : "", op->inputs[i].name);
    return rf__invalid("node '%s' (%s): expected %d inputs (%s), got %d", name,
                       op->name, op->num_inputs, list, b->num_args);
  }
  for (int i = 0; i < op->num_inputs; i++) {
    const rf__arg_def *a = &op->inputs[i];
    if (b->args[i].list && !a->number_attr[0])
      return rf__invalid(
          "node '%s' (%s): input '%s' takes one tensor, got a "
          "list",
          name, op->name, a->name);
    sizes[i] = b->args[i].count;
  }
  for (int k = 0; k < b->num_inputs; k++) {
    rf_output in = b->inputs[k];
    if (!in.node)
      return rf__invalid("node '%s' (%s): input %d is invalid (NULL node)",
                         name, op->name, k);
    if (!rf__graph_owns(b->g, in.node))
      return rf__invalid(
          "node '%s' (%s): input %d comes from node '%s' of "
          "another graph",
          name, op->name, k, in.node->name);
    if (in.index < 0 || in.index >= in.node->num_outputs)
      return rf__invalid(
          "node '%s' (%s): input %d: node '%s' has no output "
          "%d",
          name, op->name, k, in.node->name, in.index);
  }
  for (int k = 0; k < b->num_controls; k++)
    if (!rf__graph_owns(b->g, b->controls[k]))
      return rf__invalid(
          "node '%s' (%s): control input %d is NULL or from "
          "another graph",
          name, op->name, k);
  return NULL;
}

static rf_status *resolve_device(const rf_node_builder *b, const char *name,
                                 const char *op, char *canon) {
  const char *dev = b->device ? b->device : rf__graph_scope_device(b->g);
  canon[0] = '\0';
  if (!dev[0]) return NULL;
  rf__device_name d;
  rf_status *st = rf__device_name_parse(dev, &d);
  if (st) return rf__status_prefix(st, "node '%s' (%s)", name, op);
  rf__device_name_format(&d, canon, RF_DEVICE_NAME_MAX);
  return NULL;
}

/* The node's name: given (checked) or generated; *buf is freed by caller. */
static rf_status *pick_name(rf_node_builder *b, const rf__op_def *op,
                            char **out) {
  if (b->name) {
    if (!valid_name(b->name))
      return rf__invalid(
          "node '%s' (%s): the name is not valid (letters, digits, "
          "'_', '.', and '/', '-' after the first)",
          b->name, op->name);
    if (rf_graph_find_node(b->g, b->name))
      return rf__error(RF_ALREADY_EXISTS,
                       "node '%s' (%s): the name is already used", b->name,
                       op->name);
    *out = rf__strdup(b->name);
  } else {
    size_t len = strlen(op->name) + 24;
    *out = rf__malloc(len);
    if (*out) rf__graph_unique_name(b->g, op->name, *out, len);
  }
  return *out ? NULL : rf__oom();
}

static rf_status *build(rf_node_builder *b, rf_node **out) {
  RF_CHECK(rf__ops_init());
  const rf__op_def *op = rf__op_find(b->op);
  if (!op)
    return b->name
               ? rf__error(RF_NOT_FOUND,
                           "Op type not registered '%s' (node '%s')", b->op,
                           b->name)
               : rf__error(RF_NOT_FOUND, "Op type not registered '%s'", b->op);
  int sizes[RF_MAX_OP_ARGS], num_outputs = 0;
  char *name = NULL, canon[RF_DEVICE_NAME_MAX];
  rf_dtype *in_dt = NULL, *out_dt = NULL;
  rf_node *n = NULL;
  rf_status *st = NULL;
  RF_CHECK_GOTO(pick_name(b, op, &name), st, done);
  RF_CHECK_GOTO(match_args(b, op, name, sizes), st, done);
  RF_CHECK_GOTO(check_shared_name(b, op, name), st, done);
  RF_CHECK_GOTO(resolve_device(b, name, op->name, canon), st, done);
  in_dt = rf__malloc(sizeof *in_dt * (size_t)(b->num_inputs + 1));
  if (!in_dt) RF_CHECK_GOTO(rf__oom(), st, done);
  for (int k = 0; k < b->num_inputs; k++)
    in_dt[k] = rf_output_dtype(b->inputs[k]);
  RF_CHECK_GOTO(rf__resolve_signature(op, name, &b->attrs, in_dt, sizes, true,
                                      &num_outputs, &out_dt),
                st, done);
  RF_CHECK_GOTO(rf__node_alloc(op, name, canon, sizes, b->num_inputs, &b->attrs,
                               num_outputs, &out_dt, &n),
                st, done);
  st = rf__run_shape_fn(n, b->inputs);
  if (st) {
    st = rf__status_prefix(st, "node '%s' (%s)", name, op->name);
    goto done;
  }
  RF_CHECK_GOTO(
      rf__graph_insert(b->g, n, b->inputs, b->controls, b->num_controls), st,
      done);
  *out = n;
  n = NULL;
done:
  rf__node_free(n);
  rf__free(out_dt);
  rf__free(in_dt);
  rf__free(name);
  return st;
}

rf_status *rf_node_builder_finish(rf_node_builder *b, rf_node **out) {
  if (!b) return rf__invalid("rf_node_builder_finish: NULL builder");
  if (b == &oom_builder) return rf__oom();
  rf_status *st = b->error;
  b->error = NULL;
  /* A setter's error names the node and op, as build's do (a NULL graph or
   * op has neither to name). */
  if (st && b->g && b->op && b->op[0]) {
    const char *dev = rf__graph_scope_device(b->g); /* "": no scope */
    if (b->name)
      st = rf__status_prefix(st, "node '%s' (%s)", b->name, b->op);
    else
      st = rf__status_prefix(st, "a new %s node%s%s", b->op,
                             dev[0] ? " on " : "", dev);
  }
  rf_node *n = NULL;
  if (!st) st = build(b, &n);
  builder_free(b);
  if (!st && out) *out = n;
  return st;
}

/* ---- sticky errors for the op functions ---- */

rf_output rf__finish_output(rf_graph *g, rf_node_builder *b) {
  rf_node *n = rf__finish_node(g, b);
  rf_output o = {n, 0};
  return o;
}

rf_node *rf__finish_node(rf_graph *g, rf_node_builder *b) {
  if (rf__graph_failed(g)) {
    builder_free(b);
    return NULL;
  }
  rf_node *n = NULL;
  rf_status *st = rf_node_builder_finish(b, &n);
  if (st) {
    rf__graph_record(g, st);
    return NULL;
  }
  return n;
}

void rf__graph_refuse(rf_graph *g, const char *op, const char *name,
                      const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rf_status *st = rf__status_vnew(RF_INVALID_ARGUMENT, fmt, ap);
  va_end(ap);
  rf__graph_refuse_status(g, op, name, st);
}

void rf__graph_refuse_status(rf_graph *g, const char *op, const char *name,
                             rf_status *st) {
  if (!st) return;
  const char *dev = rf__graph_scope_device(g); /* "": no scope */
  if (!*dev) dev = NULL;
  if (name && *name)
    st = rf__status_prefix(st, "node '%s' (%s)%s%s", name, op,
                           dev ? " on " : "", dev ? dev : "");
  else
    st = rf__status_prefix(st, "a new %s node%s%s", op, dev ? " on " : "",
                           dev ? dev : "");
  rf__graph_record(g, st);
}

bool rf__graph_inputs_ok(rf_graph *g, const char *op, const char *name,
                         const rf_output *in, int n) {
  if (rf__graph_failed(g)) return false;
  if (n < 0 || (n > 0 && !in)) {
    rf__graph_refuse(g, op, name, "bad input list (%d inputs%s)", n,
                     in ? "" : ", NULL array");
    return false;
  }
  for (int k = 0; k < n; k++) {
    const char *why = NULL;
    if (!in[k].node)
      why = "is invalid (NULL node)";
    else if (!rf__graph_owns(g, in[k].node))
      why = "comes from another graph";
    else if (in[k].index < 0 || in[k].index >= in[k].node->num_outputs)
      why = "names an output its node does not have";
    if (why) {
      rf__graph_refuse(g, op, name, "input %d %s", k, why);
      return false;
    }
  }
  return true;
}
