/* tests/test_kernel_registry.c - the kernel table and the kernel context
 * helpers: registration rules, lookup by (op, device type), running one node
 * with a synchronous and an asynchronous kernel, output allocation, input
 * forwarding, error messages and parallel_for without a device. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph_test_ops.h"
#include "kernels/kernel.h"
#include "ringflow/debug.h"
#include "device/device.h"

/* TestAdd on CPU: a + b elementwise in float64 math, for float32 and int32. */
static rf_status *add_compute(rf__kernel_ctx *ctx) {
  const rf_tensor *a = ctx->inputs[0], *b = ctx->inputs[1];
  if (rf_tensor_num_elements(a) != rf_tensor_num_elements(b))
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT, "sizes %lld and %lld",
                            (long long)rf_tensor_num_elements(a),
                            (long long)rf_tensor_num_elements(b));
  rf_shape s = rf_tensor_shape(a);
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, rf_tensor_dtype(a), &s, &out));
  for (int64_t i = 0; i < rf_tensor_num_elements(a); i++)
    rf_tensor_set(out, i, rf_tensor_get(a, i) + rf_tensor_get(b, i));
  return NULL;
}

static int destroyed;
static rf_status *cast_init(const rf_node *node, void **state) {
  rf_dtype *d = rf__malloc(sizeof *d);
  RF_CHECK_ALLOC(d);
  rf_status *st = rf__attrs_get_type(&node->attrs, "DstT", d);
  if (st)
    rf__free(d);
  else
    *state = d;
  return st;
}
static void cast_destroy(void *state) {
  destroyed++;
  rf__free(state);
}

/* TestCast, asynchronous: completes from another thread. */
typedef struct async_job {
  rf__kernel_ctx *ctx;
  rf__done_fn done;
} async_job;

static void *run_job(void *arg) {
  async_job *j = arg;
  rf__kernel_ctx *ctx = j->ctx;
  rf_dtype to = *(rf_dtype *)ctx->state;
  rf_shape s = rf_tensor_shape(ctx->inputs[0]);
  rf_tensor *out;
  rf_status *st = rf__kernel_alloc_output(ctx, 0, to, &s, &out);
  for (int64_t i = 0; !st && i < rf_tensor_num_elements(out); i++)
    rf_tensor_set(out, i, rf_tensor_get(ctx->inputs[0], i));
  rf__done_fn done = j->done;
  free(j);
  done(ctx, st);
  return NULL;
}

static void cast_async(rf__kernel_ctx *ctx, rf__done_fn done) {
  async_job *j = malloc(sizeof *j);
  j->ctx = ctx;
  j->done = done;
  pthread_t th;
  pthread_create(&th, NULL, run_job, j);
  pthread_detach(th);
}

/* TestSink forwards nothing; TestReshape forwards its input. */
static rf_status *reshape_compute(rf__kernel_ctx *ctx) {
  rf__kernel_forward_input(ctx, 0, 0);
  return NULL;
}

static const rf__kernel_def add_kernel = {
    .op = "TestAdd", .device_type = RF_DEVICE_CPU, .compute = add_compute};
static const rf__kernel_def cast_kernel = {.op = "TestCast",
                                           .device_type = RF_DEVICE_CPU,
                                           .init = cast_init,
                                           .destroy = cast_destroy,
                                           .compute_async = cast_async};
static const rf__kernel_def reshape_kernel = {.op = "TestReshape",
                                              .device_type = RF_DEVICE_CPU,
                                              .compute = reshape_compute};
static const rf__kernel_def add_gpu = {
    .op = "TestAdd", .device_type = RF_DEVICE_GPU, .compute = add_compute};

static int setup(void **state) {
  register_test_ops();
  assert_ok(rf__kernel_register(&add_kernel));
  assert_ok(rf__kernel_register(&cast_kernel));
  assert_ok(rf__kernel_register(&reshape_kernel));
  assert_ok(rf__kernel_register(&add_gpu));
  return 0;
}

static void test_register_and_find(void **state) {
  assert_ptr_equal(rf__kernel_find("TestAdd", RF_DEVICE_CPU), &add_kernel);
  assert_ptr_equal(rf__kernel_find("TestAdd", RF_DEVICE_GPU), &add_gpu);
  assert_null(rf__kernel_find("TestCast", RF_DEVICE_GPU));
  assert_null(rf__kernel_find("Nope", RF_DEVICE_CPU));
  assert_null(rf__kernel_find(NULL, RF_DEVICE_CPU));
  assert_status(rf__kernel_register(&add_kernel), RF_ALREADY_EXISTS,
                "'TestAdd' on cpu");
  rf__kernel_def neither = {.op = "TestSink", .device_type = RF_DEVICE_CPU};
  assert_status(rf__kernel_register(&neither), RF_INVALID_ARGUMENT,
                "exactly one of compute and compute_async");
  rf__kernel_def both = {.op = "TestSink",
                         .device_type = RF_DEVICE_CPU,
                         .compute = add_compute,
                         .compute_async = cast_async};
  assert_status(rf__kernel_register(&both), RF_INVALID_ARGUMENT, NULL);
  rf__kernel_def badtype = {.op = "TestSink",
                            .device_type = RF_DEVICE_TYPE_COUNT,
                            .compute = add_compute};
  assert_status(rf__kernel_register(&badtype), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf__kernel_register(NULL), RF_INVALID_ARGUMENT, NULL);
  assert_null(rf__kernel_find("TestSink", RF_DEVICE_CPU));
}

static void test_run_single(void **state) {
  uint64_t rng = rf_test_seed();
  rf_graph *g = rf_graph_new();
  rf_dtype dts[] = {RF_FLOAT32, RF_INT32, RF_FLOAT64};
  for (int d = 0; d < 3; d++) {
    rf_shape s = rf_shape_of(2, 3, 4);
    rf_output x = src_node(g, NULL, dts[d], s);
    rf_output sum = add_node(g, NULL, x, x);
    rf_tensor *a = rf_test_random_tensor(&rng, dts[d], s, -50, 50);
    rf_tensor *b = rf_test_random_tensor(&rng, dts[d], s, -50, 50);
    rf_tensor *in[2] = {a, b}, *out = NULL;
    assert_ok(rf__kernel_run_single(sum.node, in, &out));
    double want[12];
    for (int i = 0; i < 12; i++)
      want[i] = rf_tensor_get(a, i) + rf_tensor_get(b, i);
    assert_tensor_near(out, s, want, rf_test_tolerance(dts[d]));
    assert_int_equal(rf_tensor_dtype(out), dts[d]);
    rf_tensor_release(out);
    rf_tensor_release(a);
    rf_tensor_release(b);
  }
  /* An error from the kernel names node, op and device (cpu:0 by default,
   * else the requested one); outputs stay untouched. */
  rf_output x = src_node(g, "x", RF_FLOAT32, rf_shape_of(1, 2));
  rf_node_builder *nb = rf_node_builder_new(g, "TestAdd", "bad_add");
  rf_node_builder_input(nb, x);
  rf_node_builder_input(nb, x);
  rf_node_builder_device(nb, "cpu:3");
  rf_node *bad = NULL;
  assert_ok(rf_node_builder_finish(nb, &bad));
  rf_tensor *a =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, 2), 0, 1);
  rf_tensor *b =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, 3), 0, 1);
  rf_tensor *in[2] = {a, b}, *out = NULL;
  assert_status(rf__kernel_run_single(bad, in, &out), RF_INVALID_ARGUMENT,
                "node 'bad_add' (TestAdd) on cpu:3: sizes 2 and 3");
  assert_null(out);
  /* Asynchronous kernel with init/destroy. */
  nb = rf_node_builder_new(g, "TestCast", "cast");
  rf_node_builder_input(nb, x);
  rf_node_builder_attr_dtype(nb, "DstT", RF_FLOAT64);
  rf_node *cast = NULL;
  assert_ok(rf_node_builder_finish(nb, &cast));
  int before = destroyed;
  assert_ok(rf__kernel_run_single(cast, &a, &out));
  assert_int_equal(destroyed, before + 1);
  assert_int_equal(rf_tensor_dtype(out), RF_FLOAT64);
  double want[2] = {rf_tensor_get(a, 0), rf_tensor_get(a, 1)};
  assert_tensor_near(out, rf_shape_of(1, 2), want, 1e-7);
  rf_tensor_release(out);
  /* Forwarding: the same tensor, one more reference. */
  nb = rf_node_builder_new(g, "TestReshape", "fwd");
  rf_node_builder_input(nb, x);
  rf_node_builder_input(nb, src_node(g, "shp", RF_INT32, rf_shape_of(1, 2)));
  rf_node *fwd = NULL;
  assert_ok(rf_node_builder_finish(nb, &fwd));
  rf_tensor *two[2] = {a, b};
  assert_ok(rf__kernel_run_single(fwd, two, &out));
  assert_ptr_equal(out, a);
  rf_tensor_release(out);
  /* No kernel. */
  nb = rf_node_builder_new(g, "TestSink", "sink");
  rf_node_builder_input(nb, x);
  rf_node *sink = NULL;
  assert_ok(rf_node_builder_finish(nb, &sink));
  assert_status(rf__kernel_run_single(sink, &a, NULL), RF_UNIMPLEMENTED,
                "no CPU kernel for op TestSink");
  assert_status(rf__kernel_run_single(NULL, NULL, NULL), RF_INVALID_ARGUMENT,
                NULL);
  rf_tensor_release(a);
  rf_tensor_release(b);
  rf_graph_free(g);
}

static void test_context_helpers(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x = src_node(g, "x", RF_FLOAT32, rf_shape_of(1, 2));
  rf_output s = add_node(g, "s", x, x);
  rf_tensor *outs[1] = {NULL};
  rf_tensor *in[2] = {NULL, NULL};
  rf__device dev;
  memset(&dev, 0, sizeof dev);
  strcpy(dev.canonical, "cpu:5");
  dev.allocator = rf_default_allocator();
  rf__kernel_ctx ctx = {.node = s.node,
                        .num_inputs = 2,
                        .inputs = in,
                        .num_outputs = 1,
                        .outputs = outs,
                        .device = &dev};
  rf_status *st = rf__kernel_error(&ctx, RF_INTERNAL, "bad %d", 7);
  assert_status(st, RF_INTERNAL, "node 's' (TestAdd) on cpu:5: bad 7");
  rf_shape sh = rf_shape_of(1, 3);
  rf_tensor *t = NULL;
  assert_ok(rf__kernel_alloc_output(&ctx, 0, RF_INT64, &sh, &t));
  assert_ptr_equal(outs[0], t);
  assert_int_equal(rf_tensor_num_elements(t), 3);
  assert_status(rf__kernel_alloc_output(&ctx, 1, RF_INT64, &sh, &t),
                RF_INTERNAL, NULL);
  rf_shape unk = rf_shape_of(1, -1);
  assert_status(rf__kernel_alloc_output(&ctx, 0, RF_INT64, &unk, NULL),
                RF_INVALID_ARGUMENT, "node 's' (TestAdd) on cpu:5: output 0");
  /* A failed allocation is RESOURCE_EXHAUSTED naming the node. */
  rf_default_allocator_trim();
  rf_debug_fail_allocation_after(1);
  st = rf__kernel_alloc_output(&ctx, 0, RF_INT64, &sh, NULL);
  rf_debug_fail_allocation_after(0);
  assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
  rf_tensor_release(outs[0]);
  /* Without a device the default allocator and "cpu:0". */
  ctx.device = NULL;
  outs[0] = NULL;
  assert_ok(rf__kernel_alloc_output(&ctx, 0, RF_INT64, &sh, NULL));
  rf_tensor_release(outs[0]);
  assert_status(rf__kernel_error(&ctx, RF_INTERNAL, "x"), RF_INTERNAL,
                "node 's' (TestAdd) on cpu:0: x");
  assert_status(rf__kernel_error(NULL, RF_INTERNAL, "plain"), RF_INTERNAL,
                "plain");
  rf_graph_free(g);
}

static void mark(void *arg, int64_t b, int64_t e) {
  char *seen = arg;
  for (int64_t i = b; i < e; i++) seen[i]++;
}

static void test_parallel_for_without_device(void **state) {
  char seen[1000];
  memset(seen, 0, sizeof seen);
  rf__kernel_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  rf__kernel_parallel_for(&ctx, 1000, 10, mark, seen);
  for (int i = 0; i < 1000; i++) assert_int_equal(seen[i], 1);
  rf__kernel_parallel_for(&ctx, 0, 10, mark, seen);
  rf__kernel_parallel_for(NULL, 1000, 10, mark, seen);
  for (int i = 0; i < 1000; i++) assert_int_equal(seen[i], 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_register_and_find),
      cmocka_unit_test(test_run_single),
      cmocka_unit_test(test_context_helpers),
      cmocka_unit_test(test_parallel_for_without_device),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
