/* tests/runtime_test_ops.h - test-only ops with CPU kernels, registered by the
 * runtime tests themselves so they need none of the real op families:
 *   TestConst(T, value, shape)  -> a tensor filled with value
 *   TestAddOne(x: float64)      -> x + 1
 *   TestAdd(a, b: float64)      -> a + b
 *   TestIdentity(x: T)          -> x (no copy: forwards the reference)
 *   TestWhere(x: float64)       -> x * 100 + the index of the running device
 *   TestFail(x: T, message)     -> fails with INTERNAL "<message>"
 *   TestSleep(x: float64, ms)   -> x, after sleeping ms milliseconds
 *   TestNap(x: T, ms)           -> x after ms milliseconds, asynchronously
 *                                  (CPU and GPU devices)
 *   TestPlaceholder(T, shape)   -> fails unless fed, as Placeholder does
 *   TestSink(x: T)              -> nothing (a target)
 *   TestNoInput()               -> nothing (a target without inputs)
 * Header-only: each test includes it once. */
#ifndef RF_TESTS_RUNTIME_TEST_OPS_H
#define RF_TESTS_RUNTIME_TEST_OPS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/graph.h"
#include "kernels/kernel.h"
#include "ops/op_registry.h"
#include "runtime/families.h"
#include "device/device.h"
#include "testutil.h"

static inline rf_status *rt_shape_attr(rf__shape_ctx *c) {
  return rf__attrs_get_shape(&c->node->attrs, "shape", &c->output_shapes[0]);
}

static inline rf_status *rt_same_shape(rf__shape_ctx *c) {
  c->output_shapes[0] = c->input_shapes[0];
  return NULL;
}

static const rf__op_spec rt_op_specs[] = {
    {.name = "TestConst",
     .outputs = "output: T",
     .attrs = "T: type = float64; value: float = 0; shape: shape = []",
     .shape = rt_shape_attr},
    {.name = "TestAddOne",
     .inputs = "x: float64",
     .outputs = "y: float64",
     .shape = rt_same_shape},
    {.name = "TestAdd",
     .inputs = "a: float64, b: float64",
     .outputs = "y: float64",
     .shape = rt_same_shape},
    {.name = "TestIdentity",
     .inputs = "x: T",
     .outputs = "y: T",
     .attrs = "T: type",
     .shape = rt_same_shape},
    {.name = "TestWhere",
     .inputs = "x: float64",
     .outputs = "y: float64",
     .shape = rt_same_shape},
    {.name = "TestFail",
     .inputs = "x: T",
     .outputs = "y: T",
     .attrs = "T: type; message: string = failed"},
    {.name = "TestSleep",
     .inputs = "x: float64",
     .outputs = "y: float64",
     .attrs = "ms: int = 10",
     .shape = rt_same_shape},
    {.name = "TestNap",
     .inputs = "x: T",
     .outputs = "y: T",
     .attrs = "T: type; ms: int = 100",
     .shape = rt_same_shape},
    {.name = "TestPlaceholder",
     .outputs = "output: T",
     .attrs = "T: type; shape: shape = ?",
     .shape = rt_shape_attr,
     .flags = RF_OP_STATEFUL},
    {.name = "TestSink",
     .inputs = "x: T",
     .attrs = "T: type",
     .flags = RF_OP_STATEFUL},
    {.name = "TestNoInput", .flags = RF_OP_STATEFUL},
};

/* Kernel calls, for tests that count them. */
static atomic_long rt_kernel_calls;

static inline rf_status *rt_const(rf__kernel_ctx *ctx) {
  rf_dtype dt;
  double v;
  rf_shape s;
  RF_CHECK(rf__attrs_get_type(&ctx->node->attrs, "T", &dt));
  RF_CHECK(rf__attrs_get_float(&ctx->node->attrs, "value", &v));
  RF_CHECK(rf__attrs_get_shape(&ctx->node->attrs, "shape", &s));
  rf_tensor *t;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, dt, &s, &t));
  for (int64_t i = 0; i < t->num_elements; i++) rf_tensor_set(t, i, v);
  return NULL;
}

/* y = f(x) elementwise over float64; shared by the unary kernels. */
static inline rf_status *rt_unary(rf__kernel_ctx *ctx, double mul, double add) {
  const rf_tensor *x = ctx->inputs[0];
  rf_tensor *y;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, RF_FLOAT64, &x->shape, &y));
  const double *a = x->data;
  double *b = y->data;
  for (int64_t i = 0; i < x->num_elements; i++) b[i] = a[i] * mul + add;
  return NULL;
}

static inline rf_status *rt_add_one(rf__kernel_ctx *ctx) {
  atomic_fetch_add_explicit(&rt_kernel_calls, 1, memory_order_relaxed);
  return rt_unary(ctx, 1, 1);
}

static inline rf_status *rt_where(rf__kernel_ctx *ctx) {
  return rt_unary(ctx, 100, ctx->device->index);
}

static inline rf_status *rt_add(rf__kernel_ctx *ctx) {
  const rf_tensor *x = ctx->inputs[0], *z = ctx->inputs[1];
  if (x->num_elements != z->num_elements)
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT, "sizes differ");
  rf_tensor *y;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, RF_FLOAT64, &x->shape, &y));
  const double *a = x->data, *b = z->data;
  double *c = y->data;
  for (int64_t i = 0; i < x->num_elements; i++) c[i] = a[i] + b[i];
  return NULL;
}

static inline rf_status *rt_identity(rf__kernel_ctx *ctx) {
  rf__kernel_forward_input(ctx, 0, 0);
  return NULL;
}

static inline rf_status *rt_fail(rf__kernel_ctx *ctx) {
  const char *msg;
  RF_CHECK(rf__attrs_get_string(&ctx->node->attrs, "message", &msg));
  return rf__kernel_error(ctx, RF_INTERNAL, "%s", msg);
}

static inline rf_status *rt_sleep(rf__kernel_ctx *ctx) {
  int64_t ms;
  RF_CHECK(rf__attrs_get_int(&ctx->node->attrs, "ms", &ms));
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  rf__kernel_forward_input(ctx, 0, 0);
  return NULL;
}

/* TestNap: a thread of its own completes it after ms milliseconds, so no
 * executor thread waits and the other devices run on whatever the scheduler
 * does (a synchronous sleep could run inline before the other devices even
 * start, hiding a timeout). Forwarding the input needs no CUDA call, so the
 * kernel serves GPU devices as it is. */
typedef struct rt_nap_job {
  rf__kernel_ctx *ctx;
  rf__done_fn done;
  int64_t ms;
} rt_nap_job;

static inline void *rt_nap_main(void *arg) {
  rt_nap_job *n = arg;
  struct timespec ts = {(time_t)(n->ms / 1000),
                        (long)(n->ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  rf__kernel_forward_input(n->ctx, 0, 0);
  n->done(n->ctx, NULL);
  free(n);
  return NULL;
}

static inline void rt_nap(rf__kernel_ctx *ctx, rf__done_fn done) {
  rt_nap_job *n = malloc(sizeof *n);
  rf_status *st =
      n ? rf__attrs_get_int(&ctx->node->attrs, "ms", &n->ms) : rf__oom();
  pthread_t t;
  if (!st) {
    n->ctx = ctx;
    n->done = done;
    if (pthread_create(&t, NULL, rt_nap_main, n) == 0) {
      pthread_detach(t);
      return;
    }
  }
  free(n);
  done(ctx, st ? st : rf__kernel_error(ctx, RF_INTERNAL, "no thread"));
}

static inline rf_status *rt_placeholder(rf__kernel_ctx *ctx) {
  return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                          "a value must be fed for this placeholder");
}

static inline rf_status *rt_nothing(rf__kernel_ctx *ctx) { return NULL; }

static const rf__kernel_def rt_kernels[] = {
    {.op = "TestConst", .device_type = RF_DEVICE_CPU, .compute = rt_const},
    {.op = "TestAddOne", .device_type = RF_DEVICE_CPU, .compute = rt_add_one},
    {.op = "TestAdd", .device_type = RF_DEVICE_CPU, .compute = rt_add},
    {.op = "TestIdentity",
     .device_type = RF_DEVICE_CPU,
     .compute = rt_identity},
    {.op = "TestWhere", .device_type = RF_DEVICE_CPU, .compute = rt_where},
    {.op = "TestFail", .device_type = RF_DEVICE_CPU, .compute = rt_fail},
    {.op = "TestSleep", .device_type = RF_DEVICE_CPU, .compute = rt_sleep},
    {.op = "TestNap", .device_type = RF_DEVICE_CPU, .compute_async = rt_nap},
    {.op = "TestNap", .device_type = RF_DEVICE_GPU, .compute_async = rt_nap},
    {.op = "TestPlaceholder",
     .device_type = RF_DEVICE_CPU,
     .compute = rt_placeholder},
    {.op = "TestSink", .device_type = RF_DEVICE_CPU, .compute = rt_nothing},
    /* TestNoInput deliberately has no kernel (tests the missing-kernel
     * error). */
};

/* Registers the test ops and kernels once per process. */
static inline void rt_register(void) {
  static int done;
  if (done) return;
  done = 1;
  assert_ok(rf__registry_init());
  for (size_t i = 0; i < sizeof rt_op_specs / sizeof rt_op_specs[0]; i++)
    assert_ok(rf__op_register(&rt_op_specs[i]));
  for (size_t i = 0; i < sizeof rt_kernels / sizeof rt_kernels[0]; i++)
    assert_ok(rf__kernel_register(&rt_kernels[i]));
}

/* ---- builders (assert success) ---- */

static inline rf_node *rt_finish(rf_node_builder *b) {
  rf_node *n = NULL;
  assert_ok(rf_node_builder_finish(b, &n));
  return n;
}

/* TestNap(x) on device for ms milliseconds. */
static inline rf_output rt_nap_node(rf_graph *g, const char *name,
                                    const char *device, rf_output x,
                                    int64_t ms) {
  rf_node_builder *b = rf_node_builder_new(g, "TestNap", name);
  rf_node_builder_device(b, device);
  rf_node_builder_input(b, x);
  rf_node_builder_attr_int(b, "ms", ms);
  return (rf_output){rt_finish(b), 0};
}

static inline rf_output rt_const_node(rf_graph *g, const char *name,
                                      const char *device, double value,
                                      rf_shape shape) {
  rf_node_builder *b = rf_node_builder_new(g, "TestConst", name);
  if (device) rf_node_builder_device(b, device);
  rf_node_builder_attr_float(b, "value", value);
  rf_node_builder_attr_shape(b, "shape", shape);
  return (rf_output){rt_finish(b), 0};
}

/* A one-input op (TestAddOne, TestIdentity, TestWhere, TestSleep, ...). */
static inline rf_output rt_unary_node(rf_graph *g, const char *op,
                                      const char *name, const char *device,
                                      rf_output x) {
  rf_node_builder *b = rf_node_builder_new(g, op, name);
  if (device) rf_node_builder_device(b, device);
  rf_node_builder_input(b, x);
  return (rf_output){rt_finish(b), 0};
}

static inline rf_output rt_add_node(rf_graph *g, const char *name,
                                    const char *device, rf_output a,
                                    rf_output c) {
  rf_node_builder *b = rf_node_builder_new(g, "TestAdd", name);
  if (device) rf_node_builder_device(b, device);
  rf_node_builder_input(b, a);
  rf_node_builder_input(b, c);
  return (rf_output){rt_finish(b), 0};
}

static inline rf_output rt_fail_node(rf_graph *g, const char *name,
                                     const char *device, rf_output x,
                                     const char *message) {
  rf_node_builder *b = rf_node_builder_new(g, "TestFail", name);
  if (device) rf_node_builder_device(b, device);
  rf_node_builder_input(b, x);
  rf_node_builder_attr_string(b, "message", message);
  return (rf_output){rt_finish(b), 0};
}

static inline rf_output rt_placeholder_node(rf_graph *g, const char *name,
                                            const char *device,
                                            rf_shape shape) {
  rf_node_builder *b = rf_node_builder_new(g, "TestPlaceholder", name);
  if (device) rf_node_builder_device(b, device);
  rf_node_builder_attr_dtype(b, "T", RF_FLOAT64);
  rf_node_builder_attr_shape(b, "shape", shape);
  return (rf_output){rt_finish(b), 0};
}

/* A session over g with n CPU devices and `threads` workers. */
static inline rf_session *rt_session(const rf_graph *g, int n, int threads) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = n;
  o.num_threads = threads;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

/* A float64 tensor of `shape` holding data. */
static inline rf_tensor *rt_tensor(rf_shape shape, const double *data) {
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new_copy(RF_FLOAT64, &shape, data, &t));
  return t;
}

#endif
