/* tests/test_session.c - the session API on test-only ops: feeds, fetches and
 * targets, pruning, the compile cache, options, placement rules and errors,
 * missing kernels and feeds, step checks and gpu_sync_on_finish /
 * rf_session_sync on CPU devices, and that a session keeps working after a
 * failed run and frees everything. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "ringflow/debug.h"
#include "runtime/session_internal.h"
#include "device/step.h"
#include "runtime_test_ops.h"

static uint64_t rng;

static int setup(void **state) {
  rt_register();
  if (!rng) rng = rf_test_seed();
  return 0;
}

static int cache_size(rf_session *s) {
  pthread_mutex_lock(&s->cache_mu);
  int n = (int)HASH_COUNT(s->cache);
  pthread_mutex_unlock(&s->cache_mu);
  return n;
}

static rf_tensor *random_vec(int n) {
  return rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(1, (int64_t)n),
                               -10, 10);
}

/* want[i] = x[i] + k */
static void assert_plus(const rf_tensor *got, const rf_tensor *x, double k) {
  int64_t n = rf_tensor_num_elements(x);
  double *want = rf_test_to_doubles(x);
  for (int64_t i = 0; i < n; i++) want[i] += k;
  assert_tensor_near(got, rf_tensor_shape(x), want, 0);
  free(want);
}

static void test_feed_fetch_target(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x = rt_placeholder_node(g, "x", NULL, rf_shape_of(1, (int64_t)5));
  rf_output y = rt_unary_node(g, "TestAddOne", "y", NULL, x);
  rf_output z = rt_unary_node(g, "TestAddOne", "z", NULL, y);
  rf_node_builder *b = rf_node_builder_new(g, "TestSink", "sink");
  rf_node_builder_input(b, z);
  rf_node *sink = rt_finish(b);
  rf_session *s = rt_session(g, 1, 2);
  rf_tensor *xv = random_vec(5);
  rf_feed feed = {x, xv};
  rf_output fetch[2] = {z, y};
  rf_tensor *out[2] = {NULL, NULL};
  assert_ok(rf_session_run(s, &feed, 1, fetch, 2, &sink, 1, out));
  assert_plus(out[0], xv, 2);
  assert_plus(out[1], xv, 1);
  rf_tensor_release(out[0]);
  rf_tensor_release(out[1]);
  /* Feeding an intermediate output cuts what is above it: x is not needed. */
  rf_feed fy = {y, xv};
  assert_ok(rf_session_run(s, &fy, 1, &z, 1, NULL, 0, out));
  assert_plus(out[0], xv, 1);
  rf_tensor_release(out[0]);
  /* Fetching a fed output returns the fed value. */
  assert_ok(rf_session_run(s, &feed, 1, &x, 1, NULL, 0, out));
  assert_ptr_equal(out[0], xv);
  rf_tensor_release(out[0]);
  /* Targets only. */
  assert_ok(rf_session_run(s, &feed, 1, NULL, 0, &sink, 1, NULL));
  /* The same output fetched twice. */
  rf_output twice[2] = {z, z};
  assert_ok(rf_session_run(s, &feed, 1, twice, 2, NULL, 0, out));
  assert_plus(out[0], xv, 2);
  assert_ptr_equal(out[0], out[1]);
  rf_tensor_release(out[0]);
  rf_tensor_release(out[1]);
  rf_tensor_release(xv);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_pruning_runs_only_what_is_needed(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output c = rt_const_node(g, "c", NULL, 1.0, rf_shape_of(1, (int64_t)3));
  rf_output a = rt_unary_node(g, "TestAddOne", "a", NULL, c);
  rf_output a2 = rt_unary_node(g, "TestAddOne", "a2", NULL, a);
  rf_output b = rt_unary_node(g, "TestAddOne", "b", NULL, c);
  rt_fail_node(g, "bad", NULL, b, "must not run");
  rf_session *s = rt_session(g, 1, 1);
  long before = atomic_load(&rt_kernel_calls);
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(s, NULL, 0, &a2, 1, NULL, 0, &out));
  assert_int_equal(atomic_load(&rt_kernel_calls) - before, 2); /* a, a2 */
  double want[3] = {3, 3, 3};
  assert_tensor_near(out, rf_shape_of(1, (int64_t)3), want, 0);
  rf_tensor_release(out);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_compile_cache(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x = rt_placeholder_node(g, "x", NULL, rf_shape_of(1, (int64_t)-1));
  rf_output y = rt_unary_node(g, "TestAddOne", "y", NULL, x);
  rf_output z = rt_unary_node(g, "TestAddOne", "z", NULL, y);
  rf_session *s = rt_session(g, 2, 1);
  assert_int_equal(cache_size(s), 0);
  for (int i = 0; i < 5; i++) {
    rf_tensor *xv = random_vec(1 + i); /* any length: (?) */
    rf_feed f = {x, xv};
    rf_tensor *out = NULL;
    assert_ok(rf_session_run(s, &f, 1, &z, 1, NULL, 0, &out));
    assert_plus(out, xv, 2); /* fresh values every run, cached plan */
    rf_tensor_release(out);
    rf_tensor_release(xv);
    assert_int_equal(cache_size(s), 1);
  }
  rf_tensor *xv = random_vec(4), *out = NULL;
  rf_feed f = {x, xv};
  assert_ok(rf_session_run(s, &f, 1, &y, 1, NULL, 0, &out));
  assert_int_equal(cache_size(s), 2);
  rf_tensor_release(out);
  rf_feed fy = {y, xv};
  assert_ok(rf_session_run(s, &fy, 1, &z, 1, NULL, 0, &out));
  assert_int_equal(cache_size(s), 3);
  assert_plus(out, xv, 1);
  rf_tensor_release(out);
  /* A failed compile is not cached; a failed run leaves the cache alone. */
  rf_tensor_release(xv);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_options(void **state) {
  rf_session_options o;
  memset(&o, 0x5a, sizeof o);
  rf_session_options_init(&o);
  assert_int_equal(o.num_cpu_devices, 1);
  assert_int_equal(o.num_threads, 0);
  assert_string_equal(o.default_device, "cpu:0");
  assert_int_equal(o.collective_timeout_ms, 300000);
  rf_graph *g = rf_graph_new();
  rt_const_node(g, "c", NULL, 1, rf_shape_scalar());
  rf_session *s = NULL;
  o.num_cpu_devices = 0;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "num_cpu_devices must be in 1..64, got 0");
  o.num_cpu_devices = 65;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT, "got 65");
  o.num_cpu_devices = 4;
  o.num_threads = -1;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT, "num_threads");
  o.num_threads = 4097; /* capped: no attempt to start them */
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "num_threads must be in 0..4096 (0: one per core), got 4097");
  o.num_threads = INT_MAX;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT, "num_threads");
  o.num_threads = 1;
  /* a user string quoted in the message is cut */
  char *long_dtype = malloc(5001);
  assert_non_null(long_dtype);
  memset(long_dtype, 'x', 5000);
  long_dtype[5000] = 0;
  o.collective_comm_dtype = long_dtype;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "collective_comm_dtype");
  rf_status *cst = rf_session_new(g, &o, &s);
  assert_true(strlen(rf_status_message(cst)) < 400);
  assert_non_null(strstr(rf_status_message(cst), "... (5000 bytes)\""));
  rf_status_free(cst);
  long_dtype[80] = 0; /* under the cap: quoted whole */
  cst = rf_session_new(g, &o, &s);
  char want[100];
  snprintf(want, sizeof want, "got \"%s\"", long_dtype);
  assert_non_null(strstr(rf_status_message(cst), want));
  rf_status_free(cst);
  free(long_dtype);
  o.collective_comm_dtype = NULL;
  o.default_device = "cpu:4";
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "default_device cpu:4 is not a device of the session "
                "(cpu:0..cpu:3)");
  o.default_device = "gpu:0";
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT, "gpu:0");
  o.default_device = "nonsense!";
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "default_device");
  o.default_device = "/device:CPU:3"; /* any spelling the parser accepts */
  o.collective_timeout_ms = 0;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "collective_timeout_ms");
  /* past the longest (deadlines in int64 nanoseconds would overflow) */
  o.collective_timeout_ms = RF_COLLECTIVE_TIMEOUT_MS_MAX + 1;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "collective_timeout_ms must be in 1..1000000000000");
  o.collective_timeout_ms = INT64_MAX;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "collective_timeout_ms");
  o.collective_timeout_ms = RF_COLLECTIVE_TIMEOUT_MS_MAX;
  assert_ok(rf_session_new(g, &o, &s));
  rf_session_free(s);
  o.collective_timeout_ms = 1000;
  assert_ok(rf_session_new(g, &o, &s));
  assert_int_equal(s->default_device, 3);
  rf_session_free(s);
  assert_status(rf_session_new(NULL, &o, &s), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf_session_new(g, &o, NULL), RF_INVALID_ARGUMENT, NULL);
  assert_ok(rf_session_new(g, NULL, &s)); /* NULL options: defaults */
  assert_int_equal(s->num_devices, 1);
  rf_session_free(s);
  rf_session_free(NULL);
  rf_graph_free(g);
}

/* TestCheck(x: float64, message) -> x, adding a step check that fails with
 * INTERNAL "checked: <message>" (an empty message: passes). */
static atomic_int checks_run;

typedef struct test_check {
  rf__step_check c;
  char message[32];
} test_check;

static rf_status *test_check_fn(void *arg) {
  test_check *t = arg;
  atomic_fetch_add(&checks_run, 1);
  rf_status *st = t->message[0]
                      ? rf_status_new(RF_INTERNAL, "checked: %s", t->message)
                      : NULL;
  free(t);
  return st;
}

static rf_status *test_check_compute(rf__kernel_ctx *ctx) {
  const char *msg;
  RF_CHECK(rf__attrs_get_string(&ctx->node->attrs, "message", &msg));
  test_check *t = calloc(1, sizeof *t);
  if (!t) return rf__oom();
  snprintf(t->message, sizeof t->message, "%s", msg);
  t->c = (rf__step_check){.fn = test_check_fn, .arg = t};
  rf__step_add_check(ctx->step, &t->c);
  rf__kernel_forward_input(ctx, 0, 0);
  return NULL;
}

static rf_output check_node(rf_graph *g, const char *name, rf_output x,
                            const char *message) {
  static int registered;
  if (!registered) {
    registered = 1;
    static const rf__op_spec spec = {.name = "TestCheck",
                                     .inputs = "x: float64",
                                     .outputs = "y: float64",
                                     .attrs = "message: string = ''",
                                     .shape = rt_same_shape};
    static const rf__kernel_def def = {.op = "TestCheck",
                                       .device_type = RF_DEVICE_CPU,
                                       .compute = test_check_compute};
    assert_ok(rf__op_register(&spec));
    assert_ok(rf__kernel_register(&def));
  }
  rf_node_builder *b = rf_node_builder_new(g, "TestCheck", name);
  rf_node_builder_input(b, x);
  rf_node_builder_attr_string(b, "message", message);
  return (rf_output){rt_finish(b), 0};
}

/* gpu_sync_on_finish is on by default and ignored without GPU devices: with
 * it off a CPU session's steps still end with their work done and their
 * checks run (a check's error is the step's own); rf_session_sync has
 * nothing to wait for or report; NULL is refused. */
static void test_gpu_sync_option_on_cpu(void **state) {
  rf_session_options o;
  rf_session_options_init(&o);
  assert_int_equal(o.gpu_sync_on_finish, 1);
  o.num_cpu_devices = 2;
  rf_graph *g = rf_graph_new();
  rf_output c = rt_const_node(g, "c", "cpu:1", 2, rf_shape_of(1, (int64_t)3));
  /* a switch, as allow_tf32 and gpu_graphs: 2 was taken as on */
  const int not_switch[] = {2, -1, INT_MAX};
  for (int i = 0; i < 3; i++) {
    rf_session *none = NULL;
    o.gpu_sync_on_finish = not_switch[i];
    char want[80];
    snprintf(want, sizeof want, "gpu_sync_on_finish must be 0 or 1, got %d",
             not_switch[i]);
    assert_status(rf_session_new(g, &o, &none), RF_INVALID_ARGUMENT, want);
    assert_null(none);
  }
  o.gpu_sync_on_finish = 0;
  rf_output ok =
      check_node(g, "ok", rt_unary_node(g, "TestAddOne", "y", "cpu:0", c), "");
  rf_output bad = check_node(g, "bad", c, "cpu trouble");
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  assert_ok(rf_session_sync(s)); /* before any run */
  atomic_store(&checks_run, 0);
  for (int i = 0; i < 3; i++) {
    rf_tensor *out = NULL;
    assert_ok(rf_session_run(s, NULL, 0, &ok, 1, NULL, 0, &out));
    const double want[3] = {3, 3, 3};
    assert_tensor_near(out, rf_shape_of(1, (int64_t)3), want, 0);
    rf_tensor_release(out);
    assert_int_equal(atomic_load(&checks_run), i + 1); /* already ran */
  }
  assert_ok(rf_session_sync(s));
  rf_tensor *out = NULL;
  assert_status(rf_session_run(s, NULL, 0, &bad, 1, NULL, 0, &out), RF_INTERNAL,
                "checked: cpu trouble");
  assert_null(out);
  assert_int_equal(atomic_load(&checks_run), 4);
  assert_ok(rf_session_sync(s)); /* the run reported it; nothing is left */
  assert_ok(rf_session_run(s, NULL, 0, &ok, 1, NULL, 0, &out));
  rf_tensor_release(out);
  rf_session_free(s);
  assert_status(rf_session_sync(NULL), RF_INVALID_ARGUMENT, "NULL");
  rf_graph_free(g);
}

static void test_graph_with_error_is_refused(void **state) {
  rf_graph *g = rf_graph_new();
  rt_const_node(g, "c", NULL, 1, rf_shape_scalar());
  /* A failing op function records the graph's sticky error. */
  rf_output bad = {NULL, 0};
  rf__graph_inputs_ok(g, "TestAddOne", NULL, &bad, 1);
  rf_status *recorded = rf_graph_status(g);
  assert_non_null(recorded);
  rf_session *s = NULL;
  assert_status(rf_session_new(g, NULL, &s), rf_status_code(recorded),
                "rf_session_new: the graph holds an error: ");
  assert_null(s);
  rf_graph *lowered = NULL; /* named as rf_graph_lower's, not session_new's */
  assert_status(rf_graph_lower(g, NULL, &lowered), rf_status_code(recorded),
                "rf_graph_lower: the graph holds an error: ");
  assert_null(lowered);
  rf_status_free(recorded);
  rf_graph_free(g);
}

static void test_run_argument_errors(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x = rt_placeholder_node(g, "x", NULL,
                                    rf_shape_of(2, (int64_t)2, (int64_t)-1));
  rf_output y = rt_unary_node(g, "TestAddOne", "y", NULL, x);
  rf_session *s = rt_session(g, 1, 1);
  rf_output late = rt_unary_node(g, "TestAddOne", "late", NULL, y);
  rf_tensor *out = NULL;
  assert_status(rf_session_run(s, NULL, 0, &late, 1, NULL, 0, &out),
                RF_NOT_FOUND, "node 'late' is not in the session's graph");
  assert_status(rf_session_run(s, NULL, 0, &late, 1, &late.node, 1, &out),
                RF_NOT_FOUND, "node 'late'");
  rf_output bad_index = {y.node, 3};
  assert_status(rf_session_run(s, NULL, 0, &bad_index, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, "node 'y' (TestAddOne) has 1 outputs");
  rf_output invalid = {NULL, 0};
  assert_status(rf_session_run(s, NULL, 0, &invalid, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, "fetch 0");
  assert_status(rf_session_run(s, NULL, 0, &y, 1, NULL, 0, NULL),
                RF_INVALID_ARGUMENT, NULL);
  assert_status(rf_session_run(NULL, NULL, 0, &y, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, NULL);
  assert_status(rf_session_run(s, NULL, -1, &y, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, NULL);
  /* Feeds: dtype, shape, missing value, fed twice. */
  rf_tensor *f32 = NULL;
  rf_shape s23 = rf_shape_of(2, (int64_t)2, (int64_t)3);
  assert_ok(rf_tensor_new(RF_FLOAT32, &s23, NULL, &f32));
  rf_feed feed = {x, f32};
  assert_status(rf_session_run(s, &feed, 1, &y, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT,
                "node 'x' (TestPlaceholder) output 0: a float32 tensor was "
                "fed, the output is float64");
  double d[14] = {0};
  feed.value = rt_tensor(rf_shape_of(2, (int64_t)3, (int64_t)2), d);
  assert_status(rf_session_run(s, &feed, 1, &y, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT,
                "node 'x' (TestPlaceholder) output 0: shape (3, 2) is not "
                "compatible with the node's shape (2, ?)");
  rf_tensor_release(feed.value);
  feed.value = rt_tensor(rf_shape_of(1, (int64_t)2), d);
  assert_status(rf_session_run(s, &feed, 1, &y, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, "shape (2) is not compatible");
  rf_tensor_release(feed.value);
  feed.value = NULL;
  assert_status(rf_session_run(s, &feed, 1, &y, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, "has no value");
  feed.value = rt_tensor(rf_shape_of(2, (int64_t)2, (int64_t)7), d);
  rf_feed two[2] = {feed, feed};
  assert_status(rf_session_run(s, two, 2, &y, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, "node 'x' output 0 is fed twice");
  /* And the right feed works after all those refusals. */
  assert_ok(rf_session_run(s, &feed, 1, &y, 1, NULL, 0, &out));
  assert_plus(out, feed.value, 1);
  rf_tensor_release(out);
  rf_tensor_release(feed.value);
  rf_tensor_release(f32);
  rf_session_free(s);
  rf_graph_free(g);
}

/* A variable handle cannot be fed: a resource tensor the caller made (or
 * kept from a fetch) holds any address, which ReadVariable followed (a
 * segfault. The session runs on afterwards. */
static void test_resource_feeds_refused(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output v = rf_variable(g, "v", RF_FLOAT32, rf_shape_of(1, (int64_t)2));
  rf_output rv = rf_read_variable(g, "rv", v);
  assert_ok(rf_graph_status(g));
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, NULL, &s));
  rf_shape sc = rf_shape_scalar();
  rf_tensor *handle = NULL;
  assert_ok(rf_tensor_new(RF_RESOURCE, &sc, NULL, &handle));
  memset(rf_tensor_mutable_data(handle), 0x41, 8);
  rf_tensor *out = NULL;
  for (int i = 0; i < 2; i++) { /* resolved, then a recent request */
    rf_feed feed = {v, handle};
    assert_status(rf_session_run(s, &feed, 1, &rv, 1, NULL, 0, &out),
                  RF_INVALID_ARGUMENT,
                  "feed for node 'v' (Variable) output 0: a resource tensor "
                  "was fed, but resource outputs (variable handles) cannot "
                  "be fed");
    assert_null(out);
  }
  /* A handle fetched from the session is refused too. */
  rf_tensor *fetched = NULL;
  assert_ok(rf_session_run(s, NULL, 0, &v, 1, NULL, 0, &fetched));
  rf_feed again = {v, fetched};
  assert_status(rf_session_run(s, &again, 1, &rv, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, "cannot be fed");
  rf_tensor_release(fetched);
  /* Reading it unfed: the documented error for a variable never assigned. */
  assert_status(rf_session_run(s, NULL, 0, &rv, 1, NULL, 0, &out),
                RF_FAILED_PRECONDITION,
                "variable 'v' on cpu:0 is not initialized");
  rf_tensor_release(handle);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_missing_feed(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x = rt_placeholder_node(g, "x", "cpu:1", rf_shape_scalar());
  rf_output y = rt_unary_node(g, "TestAddOne", "y", NULL, x);
  rf_session *s = rt_session(g, 2, 1);
  rf_tensor *out = NULL;
  assert_status(rf_session_run(s, NULL, 0, &y, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT,
                "node 'x' (TestPlaceholder) on cpu:1: a value must be fed");
  assert_null(out);
  rf_session_free(s);
  rf_graph_free(g);
}

/* An _Arg whose index has no feed is an internal error naming the node. */
static void test_arg_without_feed(void **state) {
  rf_graph *g = rf_graph_new();
  rf__attrs attrs = {0};
  rf__attr_value t = rf__attr_type_value(RF_FLOAT64), i = rf__attr_int(3);
  assert_ok(rf__attrs_set(&attrs, "T", &t));
  assert_ok(rf__attrs_set(&attrs, "index", &i));
  rf_node *arg = NULL;
  assert_ok(rf__graph_add_node(g, rf__op_find("_Arg"), "stray_arg", "", NULL, 0,
                               &attrs, &arg));
  rf__attrs_clear(&attrs);
  rf_session *s = rt_session(g, 1, 1);
  rf_output o = {arg, 0};
  rf_tensor *out = NULL;
  assert_status(rf_session_run(s, NULL, 0, &o, 1, NULL, 0, &out), RF_INTERNAL,
                "node 'stray_arg' (_Arg) on cpu:0: no value was fed for _Arg "
                "index 3 (the step has 0 feeds)");
  /* Outside a step the runtime kernels refuse to run. */
  assert_status(rf__kernel_run_single(arg, NULL, &out), RF_FAILED_PRECONDITION,
                "only inside a session step");
  rf_session_free(s);
  rf_graph_free(g);
}

/* A device the session lacks is known before any run: rf_session_new
 * refuses the graph, naming the node, op, device and the session's devices
 * (placement keeps the same check for graphs compiled without a session's
 * check, e.g. rf_graph_lower's copy). */
static void test_placement_errors(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output c = rt_const_node(g, "c", NULL, 1, rf_shape_scalar());
  rf_output x5 = rt_unary_node(g, "TestAddOne", "x5", "cpu:5", c);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 4;
  rf_session *s = NULL;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "node 'x5' (TestAddOne) requests device cpu:5, but the "
                "session has cpu:0..cpu:3 (4 devices)");
  assert_null(s);
  assert_ok(rf_node_set_device(x5.node, "cpu:3"));
  rf_output xg = rt_unary_node(g, "TestAddOne", "xg", "gpu:0", c);
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "node 'xg' (TestAddOne) requests device gpu:0, but the "
                "session has cpu:0..cpu:3 (4 devices)");
  assert_ok(rf_node_set_device(xg.node, ""));
  s = rt_session(g, 4, 1);
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(s, NULL, 0, &x5, 1, NULL, 0, &out));
  rf_tensor_release(out);
  rf_session_free(s);
  o.num_cpu_devices = 1;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "but the session has cpu:0 (1 device)");
  rf_graph_free(g);
}

static double run_scalar(rf_session *s, rf_output o) {
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(s, NULL, 0, &o, 1, NULL, 0, &out));
  double v = rf_tensor_get(out, 0);
  rf_tensor_release(out);
  return v;
}

/* TestWhere reports the device it ran on: x * 100 + device index. */
static void test_placement_rules(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output c = rt_const_node(g, "c", NULL, 0, rf_shape_scalar());
  rf_output on_default = rt_unary_node(g, "TestWhere", "w0", NULL, c);
  rf_output c2 = rt_const_node(g, "c2", "cpu:1", 0, rf_shape_scalar());
  rf_output follows = rt_unary_node(g, "TestWhere", "w1", NULL, c2);
  rf_output explicit3 = rt_unary_node(g, "TestWhere", "w3", "cpu:3", c2);
  rf_output after3 = rt_unary_node(g, "TestWhere", "w3b", NULL, explicit3);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 4;
  o.num_threads = 1;
  o.default_device = "cpu:2";
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  assert_true(run_scalar(s, on_default) == 2); /* default device */
  assert_true(run_scalar(s, follows) == 1);    /* its input's device */
  assert_true(run_scalar(s, explicit3) == 3);  /* requested */
  assert_true(run_scalar(s, after3) == 303);   /* follows w3 */
  /* A fed output's _Arg sits on the fed node's requested device. */
  rf_tensor *v = NULL;
  assert_ok(rf_tensor_new_scalar(RF_FLOAT64, 7, &v));
  rf_feed f = {c2, v};
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(s, &f, 1, &follows, 1, NULL, 0, &out));
  assert_true(rf_tensor_get(out, 0) == 701);
  rf_tensor_release(out);
  rf_tensor_release(v);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_missing_kernel(void **state) {
  rf_graph *g = rf_graph_new();
  rf_node_builder *b = rf_node_builder_new(g, "TestNoInput", "nok");
  rf_node_builder_device(b, "cpu:1");
  rf_node *n = rt_finish(b);
  rf_session *s = rt_session(g, 2, 1);
  assert_status(rf_session_run(s, NULL, 0, NULL, 0, &n, 1, NULL), RF_NOT_FOUND,
                "node 'nok' (TestNoInput): no kernel for op TestNoInput is "
                "registered for device cpu:1");
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_works_after_failed_run(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output c = rt_const_node(g, "c", NULL, 4, rf_shape_of(1, (int64_t)2));
  rf_output bad = rt_fail_node(g, "bad", NULL, c, "boom");
  rf_output good = rt_unary_node(g, "TestAddOne", "good", NULL, c);
  rf_session *s = rt_session(g, 1, 2);
  for (int i = 0; i < 3; i++) {
    rf_tensor *out[2] = {NULL, NULL};
    rf_output both[2] = {good, bad};
    assert_status(rf_session_run(s, NULL, 0, both, 2, NULL, 0, out),
                  RF_INTERNAL, "node 'bad' (TestFail) on cpu:0: boom");
    assert_null(out[0]); /* outputs untouched on error */
    assert_null(out[1]);
    assert_true(run_scalar(s, good) == 5);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_session_frees_everything(void **state) {
  rf_default_allocator_trim();
  int64_t live = rf_debug_live_allocations();
  rf_graph *g = rf_graph_new();
  rf_output c = rt_const_node(g, "c", NULL, 1, rf_shape_of(1, (int64_t)8));
  rf_output y = c;
  for (int i = 0; i < 10; i++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", i % 3);
    y = rt_unary_node(g, "TestAddOne", NULL, dev, y);
  }
  rf_session *s = rt_session(g, 3, 2);
  { /* variables live on devices until the session is freed */
    rf__variable *v = NULL;
    rf_shape sh = rf_shape_scalar();
    assert_ok(rf__device_variable(&s->devices[1], "v", RF_FLOAT32, &sh, &v));
    rf__variable *again = NULL;
    assert_ok(
        rf__device_variable(&s->devices[1], "v", RF_FLOAT32, &sh, &again));
    assert_ptr_equal(v, again);
    assert_status(
        rf__device_variable(&s->devices[1], "v", RF_INT32, &sh, &again),
        RF_FAILED_PRECONDITION,
        "variable 'v' on cpu:1 holds float32, but int32 was "
        "requested");
    assert_ok(rf_tensor_new_scalar(RF_FLOAT32, 2, &v->value));
  }
  for (int i = 0; i < 3; i++) {
    rf_tensor *out = NULL;
    assert_ok(rf_session_run(s, NULL, 0, &y, 1, NULL, 0, &out));
    rf_tensor_release(out);
  }
  rf_session_free(s);
  rf_graph_free(g);
  rf_default_allocator_trim();
  assert_int_equal(rf_debug_live_allocations(), live);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_feed_fetch_target, setup),
      cmocka_unit_test_setup(test_pruning_runs_only_what_is_needed, setup),
      cmocka_unit_test_setup(test_compile_cache, setup),
      cmocka_unit_test_setup(test_options, setup),
      cmocka_unit_test_setup(test_gpu_sync_option_on_cpu, setup),
      cmocka_unit_test_setup(test_graph_with_error_is_refused, setup),
      cmocka_unit_test_setup(test_run_argument_errors, setup),
      cmocka_unit_test_setup(test_resource_feeds_refused, setup),
      cmocka_unit_test_setup(test_missing_feed, setup),
      cmocka_unit_test_setup(test_arg_without_feed, setup),
      cmocka_unit_test_setup(test_placement_errors, setup),
      cmocka_unit_test_setup(test_placement_rules, setup),
      cmocka_unit_test_setup(test_missing_kernel, setup),
      cmocka_unit_test_setup(test_works_after_failed_run, setup),
      cmocka_unit_test_setup(test_session_frees_everything, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
