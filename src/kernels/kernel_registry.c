/* kernels/kernel_registry.c - the kernel table keyed by (op, device type),
 * filled at start-up and read-only afterwards (lookups take no lock), and the
 * helpers kernels call through their context. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/status.h"
#include "kernels/kernel.h"
#include "ops/op_registry.h"
#include "device/device.h"
#include "device/threadpool.h"

#define KEY_MAX 96

typedef struct kernel_entry {
  char key[KEY_MAX]; /* "<op>@<device type>" */
  const rf__kernel_def *def;
  UT_hash_handle hh;
} kernel_entry;

static kernel_entry *kernel_table;
static pthread_mutex_t register_mu = PTHREAD_MUTEX_INITIALIZER;

static bool make_key(const char *op, rf__device_type type, char *key) {
  int n = snprintf(key, KEY_MAX, "%s@%s", op, rf__device_type_name(type));
  return n > 0 && n < KEY_MAX;
}

rf_status *rf__kernel_register(const rf__kernel_def *def) {
  if (!def || !def->op)
    return rf__invalid("rf__kernel_register: NULL kernel or op name");
  if ((def->compute == NULL) == (def->compute_async == NULL))
    return rf__invalid(
        "kernel for op '%s' on %s must have exactly one of "
        "compute and compute_async",
        def->op, rf__device_type_name(def->device_type));
  if ((int)def->device_type < 0 || def->device_type >= RF_DEVICE_TYPE_COUNT)
    return rf__invalid("kernel for op '%s': bad device type %d", def->op,
                       (int)def->device_type);
  kernel_entry *e = rf__calloc(1, sizeof *e);
  RF_CHECK_ALLOC(e);
  if (!make_key(def->op, def->device_type, e->key)) {
    rf__free(e);
    return rf__invalid("kernel op name '%s' is too long", def->op);
  }
  e->def = def;
  rf_status *st = NULL;
  pthread_mutex_lock(&register_mu);
  kernel_entry *old = NULL;
  HASH_FIND_STR(kernel_table, e->key, old);
  if (old) {
    st = rf__error(RF_ALREADY_EXISTS,
                   "a kernel for op '%s' on %s is already "
                   "registered",
                   def->op, rf__device_type_name(def->device_type));
  } else {
    int rf__hash_oom = 0;
    HASH_ADD_STR(kernel_table, key, e);
    if (rf__hash_oom) st = rf__oom();
  }
  pthread_mutex_unlock(&register_mu);
  if (st) rf__free(e);
  return st;
}

rf_status *rf__kernel_register_all(const rf__kernel_def *defs, size_t n) {
  for (size_t i = 0; i < n; i++) RF_CHECK(rf__kernel_register(&defs[i]));
  return NULL;
}

const rf__kernel_def *rf__kernel_find(const char *op, rf__device_type type) {
  char key[KEY_MAX];
  if (!op || !make_key(op, type, key)) return NULL;
  kernel_entry *e = NULL;
  HASH_FIND_STR(kernel_table, key, e);
  return e ? e->def : NULL;
}

/* ---- context helpers ---- */

static const char *ctx_device(const rf__kernel_ctx *ctx) {
  if (ctx->device) return ctx->device->canonical;
  if (ctx->node && ctx->node->requested_device &&
      ctx->node->requested_device[0])
    return ctx->node->requested_device;
  return "cpu:0";
}

rf_status *rf__kernel_error_at(const rf__kernel_ctx *ctx, rf_status *st) {
  if (!ctx) return st;
  const rf_node *n = ctx->node;
  return rf__status_prefix(st, "node '%s' (%s) on %s", n ? n->name : "?",
                           n && n->op ? n->op->name : "?", ctx_device(ctx));
}

rf_status *rf__kernel_error(const rf__kernel_ctx *ctx, rf_code code,
                            const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rf_status *st = rf__status_vnew(code, fmt, ap);
  va_end(ap);
  return rf__kernel_error_at(ctx, st);
}

/* Stores t as output i, or turns st (t's allocation failed) into an error
 * naming the node and the output. */
static rf_status *set_output(rf__kernel_ctx *ctx, int i, rf_status *st,
                             rf_tensor *t, rf_tensor **out) {
  if (st)
    return rf__kernel_error_at(ctx, rf__status_prefix(st, "output %d", i));
  rf_tensor_release(ctx->outputs[i]);
  ctx->outputs[i] = t;
  if (out) *out = t;
  return NULL;
}

rf_status *rf__kernel_alloc_output(rf__kernel_ctx *ctx, int i, rf_dtype dtype,
                                   const rf_shape *shape, rf_tensor **out) {
  if (!ctx || i < 0 || i >= ctx->num_outputs)
    return rf__internal("rf__kernel_alloc_output: output %d out of range", i);
  rf_allocator *a = ctx->device && ctx->device->allocator
                        ? ctx->device->allocator
                        : rf_default_allocator();
  bool device_memory = ctx->device && ctx->device->name.type == RF_DEVICE_GPU;
  if (device_memory && ctx->def && i < 32 &&
      (ctx->def->host_memory_outputs >> i & 1u)) {
    device_memory = false;
    a = rf_default_allocator();
  }
  rf_tensor *t = NULL;
  /* A reserved place is memory of the device's own kind. */
  bool own_kind =
      device_memory || !ctx->device || ctx->device->name.type != RF_DEVICE_GPU;
  if (ctx->output_home && own_kind &&
      (t = ctx->output_home(ctx, i, dtype, shape)) != NULL)
    return set_output(ctx, i, NULL, t, out);
  rf_status *st = device_memory ? rf__tensor_new_device(dtype, shape, a, &t)
                                : rf_tensor_new(dtype, shape, a, &t);
  return set_output(ctx, i, st, t, out);
}

rf_status *rf__kernel_alloc_host_output(rf__kernel_ctx *ctx, int i,
                                        rf_dtype dtype, const rf_shape *shape,
                                        rf_tensor **out) {
  if (!ctx || i < 0 || i >= ctx->num_outputs)
    return rf__internal("rf__kernel_alloc_host_output: output %d out of range",
                        i);
  rf_tensor *t = NULL;
  rf_status *st = rf_tensor_new(dtype, shape, NULL, &t);
  return set_output(ctx, i, st, t, out);
}

void rf__kernel_drop_outputs(rf__kernel_ctx *ctx) {
  for (int i = 0; i < ctx->num_outputs; i++) {
    rf_tensor_release(ctx->outputs[i]);
    ctx->outputs[i] = NULL;
  }
}

void rf__kernel_forward_input(rf__kernel_ctx *ctx, int j, int i) {
  if (!ctx || j < 0 || j >= ctx->num_inputs || i < 0 || i >= ctx->num_outputs)
    return;
  rf_tensor *t = rf_tensor_retain(ctx->inputs[j]);
  rf_tensor_release(ctx->outputs[i]);
  ctx->outputs[i] = t;
}

void rf__kernel_parallel_for(rf__kernel_ctx *ctx, int64_t n,
                             int64_t cost_per_item,
                             void (*fn)(void *arg, int64_t begin, int64_t end),
                             void *arg) {
  rf__threadpool *p = ctx && ctx->device ? ctx->device->pool : NULL;
  rf__threadpool_parallel_for(p, n, cost_per_item, fn, arg);
}

/* ---- one node on its own ---- */

typedef struct waiter {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  rf_status *st;
} waiter;

static void async_done(rf__kernel_ctx *ctx, rf_status *st) {
  waiter *w = ctx->executor_private;
  pthread_mutex_lock(&w->mu);
  w->st = st;
  w->done = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

static rf_status *run_compute(const rf__kernel_def *k, rf__kernel_ctx *ctx) {
  if (k->compute) return k->compute(ctx);
  waiter w = {.done = false, .st = NULL};
  pthread_mutex_init(&w.mu, NULL);
  pthread_cond_init(&w.cv, NULL);
  /* The waiter lives on this stack until done has been called. */
  /* cppcheck-suppress autoVariables */
  ctx->executor_private = &w;
  k->compute_async(ctx, async_done);
  pthread_mutex_lock(&w.mu);
  while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
  pthread_mutex_unlock(&w.mu);
  pthread_cond_destroy(&w.cv);
  pthread_mutex_destroy(&w.mu);
  return w.st;
}

rf_status *rf__kernel_run_single(const rf_node *node, rf_tensor *const *inputs,
                                 rf_tensor **outputs) {
  if (!node || (node->num_inputs > 0 && !inputs) ||
      (node->num_outputs > 0 && !outputs))
    return rf__invalid("rf__kernel_run_single: NULL argument");
  const rf__kernel_def *k = rf__kernel_find(node->op->name, RF_DEVICE_CPU);
  if (!k)
    return rf__error(RF_UNIMPLEMENTED, "no CPU kernel for op %s (node '%s')",
                     node->op->name, node->name);
  rf_tensor **outs = rf__calloc((size_t)node->num_outputs + 1, sizeof *outs);
  RF_CHECK_ALLOC(outs);
  void *state = NULL;
  rf_status *st = k->init ? k->init(node, &state) : NULL;
  if (!st) {
    rf__kernel_ctx ctx = {.node = node,
                          .def = k,
                          .state = state,
                          .num_inputs = node->num_inputs,
                          .inputs = inputs,
                          .num_outputs = node->num_outputs,
                          .outputs = outs};
    st = run_compute(k, &ctx);
    if (k->destroy) k->destroy(state);
  }
  for (int i = 0; !st && i < node->num_outputs; i++)
    if (!outs[i])
      st = rf__internal("node '%s' (%s) on cpu:0: kernel left output %d unset",
                        node->name, node->op->name, i);
  for (int i = 0; i < node->num_outputs; i++) {
    if (st)
      rf_tensor_release(outs[i]);
    else
      outputs[i] = outs[i];
  }
  rf__free(outs);
  return st;
}
