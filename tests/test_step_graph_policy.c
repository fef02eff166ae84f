/* tests/test_step_graph_policy.c - when a step is captured as a CUDA graph
 * (rf_session_options.gpu_graphs), decided without a GPU: the second run
 * with the first run's feed shapes is captured, later ones replay whatever
 * the values, another shape runs without the graph and says why (and is
 * captured in its place when repeated), a dropped graph is captured again,
 * a feed in device memory is never captured; and the reasons a plan is
 * never captured: no GPU device, a CPU device in the step (but not one that
 * only runs the step's control plumbing: a NoOp target and the tokens of
 * crossing control edges) - and not Dropout (its kernel reads the step's
 * number in device memory); the option's values (0 or 1, else
 * INVALID_ARGUMENT). The GPU side: test_gpu_graphs.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor.h"
#include "runtime/session_internal.h"
#include "runtime/step_graph.h"
#include "testutil.h"

static rf_tensor *zeros(int64_t rows, int64_t cols) {
  int64_t dims[2] = {rows, cols};
  rf_shape sh = rf_shape_make(2, dims);
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new(RF_FLOAT32, &sh, NULL, &t));
  memset(rf_tensor_mutable_data(t), 0, rf_tensor_nbytes(t));
  return t;
}

static void test_decide_by_shapes(void **state) {
  (void)state;
  rf__graph_shapes g;
  assert_ok(rf__graph_shapes_init(&g, 2));
  rf_tensor *a = zeros(3, 4), *b = zeros(1, 1), *c = zeros(5, 4);
  rf_tensor *f34[2] = {a, b}, *f54[2] = {c, b};
  char why[512];
  assert_int_equal(rf__graph_decide(&g, f34, why, sizeof why), RF__GRAPH_EAGER);
  assert_string_equal(why, "");
  assert_int_equal(rf__graph_decide(&g, f34, why, sizeof why),
                   RF__GRAPH_CAPTURE);
  rf__graph_captured(&g);
  for (int i = 0; i < 3; i++) /* the values may change: the shapes do not */
    assert_int_equal(rf__graph_decide(&g, f34, why, sizeof why),
                     RF__GRAPH_REPLAY);
  assert_int_equal(rf__graph_decide(&g, f54, why, sizeof why), RF__GRAPH_EAGER);
  assert_non_null(strstr(why,
                         "feed 0 has shape (5, 4), the graph was "
                         "captured with (3, 4)"));
  /* the new shape again: captured in the old one's place */
  assert_int_equal(rf__graph_decide(&g, f54, why, sizeof why),
                   RF__GRAPH_CAPTURE);
  rf__graph_captured(&g);
  assert_int_equal(rf__graph_decide(&g, f54, why, sizeof why),
                   RF__GRAPH_REPLAY);
  assert_int_equal(rf__graph_decide(&g, f34, why, sizeof why), RF__GRAPH_EAGER);
  assert_non_null(strstr(why, "(3, 4)"));
  /* dropped (a variable changed buffer): the same shapes capture again */
  rf__graph_forget(&g);
  assert_int_equal(rf__graph_decide(&g, f34, why, sizeof why),
                   RF__GRAPH_CAPTURE);
  /* a feed in device memory is never captured */
  a->on_gpu = 1;
  assert_int_equal(rf__graph_decide(&g, f34, why, sizeof why), RF__GRAPH_EAGER);
  assert_non_null(strstr(why, "feed 0 is in device memory"));
  assert_int_equal(rf__graph_decide(&g, f34, why, sizeof why), RF__GRAPH_EAGER);
  a->on_gpu = 0;
  rf__graph_shapes_fini(&g);
  rf_tensor_release(a);
  rf_tensor_release(b);
  rf_tensor_release(c);
}

/* The plan of one run of s (its only cached plan). */
static rf__plan *only_plan(rf_session *s) {
  assert_int_equal(HASH_COUNT(s->cache), 1);
  return s->cache;
}

/* The rules on a plan of CPU devices, with cpu:1 standing in for a GPU
 * device (its type changed for the check alone). */
static const char *reason_with_fake_gpu(rf_session *s, char *buf, size_t len) {
  rf__plan *p = only_plan(s);
  rf__device *fake = &s->devices[1];
  rf__device *gpus[1] = {fake};
  rf__device **saved = p->gpus;
  int saved_n = p->num_gpus;
  fake->name.type = RF_DEVICE_GPU;
  p->gpus = gpus;
  p->num_gpus = 1;
  const char *why = rf__graph_unsupported(s, p, buf, len);
  p->gpus = saved;
  p->num_gpus = saved_n;
  fake->name.type = RF_DEVICE_CPU;
  return why;
}

static rf_session *two_cpu_session(rf_graph *g) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 2;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

static void test_never_captured_reasons(void **state) {
  (void)state;
  int64_t dims[1] = {8};
  rf_shape sh = rf_shape_make(1, dims);
  rf_tensor *fed = NULL, *out = NULL;
  assert_ok(rf_tensor_new(RF_FLOAT32, &sh, NULL, &fed));
  memset(rf_tensor_mutable_data(fed), 0, rf_tensor_nbytes(fed));
  char buf[512];
  /* a CPU device in the step */
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, sh);
  rf_output y = rf_neg(g, "y", x);
  rf_graph_pop_device(g);
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output z = rf_neg(g, "z", y);
  rf_graph_pop_device(g);
  rf_session *s = two_cpu_session(g);
  rf_feed f = {x, fed};
  assert_ok(rf_session_run(s, &f, 1, &z, 1, NULL, 0, &out));
  rf_tensor_release(out);
  assert_string_equal(rf__graph_unsupported(s, only_plan(s), buf, sizeof buf),
                      "no GPU device in the step");
  const char *why = reason_with_fake_gpu(s, buf, sizeof buf);
  assert_non_null(why);
  assert_non_null(strstr(why, "a CPU device in the step (cpu:0 runs"));
  rf_session_free(s);
  rf_graph_free(g);
  /* A NoOp target on cpu:0 after the GPU's work: control plumbing only
   * (_Token, _Send and _Recv of the crossing control edge, the NoOp) */
  g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  x = rf_placeholder(g, "x", RF_FLOAT32, sh);
  y = rf_neg(g, "y", x);
  rf_graph_pop_device(g);
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_node *train = rf_noop(g, "train");
  rf_graph_pop_device(g);
  assert_ok(rf_graph_add_control_edge(g, y.node, train));
  s = two_cpu_session(g);
  f = (rf_feed){x, fed};
  assert_ok(rf_session_run(s, &f, 1, &y, 1, &train, 1, &out));
  rf_tensor_release(out);
  assert_null(reason_with_fake_gpu(s, buf, sizeof buf));
  rf_session_free(s);
  rf_graph_free(g);
  /* Dropout on the (stand-in) GPU device: captured (its kernel reads the
   * step's number from device memory the graph writes at each launch) */
  g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  x = rf_placeholder(g, "x", RF_FLOAT32, sh);
  rf_output d = rf_dropout(g, "drop", x, 0.5, 7);
  rf_graph_pop_device(g);
  s = two_cpu_session(g);
  f = (rf_feed){x, fed};
  assert_ok(rf_session_run(s, &f, 1, &d, 1, NULL, 0, &out));
  rf_tensor_release(out);
  assert_null(reason_with_fake_gpu(s, buf, sizeof buf));
  rf_session_free(s);
  rf_graph_free(g);
  rf_tensor_release(fed);
}

/* RF_GPU_GRAPH_DEBUG's words, and the error naming one it does not know. */
static void test_debug_words(void **state) {
  (void)state;
  int f = -1;
  assert_ok(rf__graph_debug_parse(NULL, &f));
  assert_int_equal(f, 0);
  assert_ok(rf__graph_debug_parse("", &f));
  assert_int_equal(f, 0);
  assert_ok(rf__graph_debug_parse("sync", &f));
  assert_int_equal(f, RF__GRAPH_DEBUG_SYNC);
  assert_ok(rf__graph_debug_parse("serial,workspace,", &f));
  assert_int_equal(f, RF__GRAPH_DEBUG_SERIAL | RF__GRAPH_DEBUG_WORKSPACE);
  assert_ok(rf__graph_debug_parse("workspace,,sync,serial", &f));
  assert_int_equal(f, RF__GRAPH_DEBUG_SYNC | RF__GRAPH_DEBUG_SERIAL |
                          RF__GRAPH_DEBUG_WORKSPACE);
  assert_status(rf__graph_debug_parse("sync,synchronous", &f),
                RF_INVALID_ARGUMENT,
                "RF_GPU_GRAPH_DEBUG: 'synchronous' is not one of sync, "
                "serial, workspace");
  assert_status(rf__graph_debug_parse("syn", &f), RF_INVALID_ARGUMENT,
                "'syn' is not one of");
}

/* gpu_graphs is 0 or 1 (default RF_DEFAULT_GPU_GRAPHS); a session refuses
 * anything else. */
static void test_option_values(void **state) {
  (void)state;
  rf_session_options o;
  rf_session_options_init(&o);
  assert_int_equal(o.gpu_graphs, RF_DEFAULT_GPU_GRAPHS);
  rf_graph *g = rf_graph_new();
  rf_output c = rf_const_scalar(g, "c", RF_FLOAT32, 1);
  const int bad[] = {2, -1, 255};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    rf_session_options_init(&o);
    o.gpu_graphs = bad[i];
    rf_session *s = (rf_session *)&o; /* untouched on error */
    char want[64];
    snprintf(want, sizeof want, "gpu_graphs must be 0 or 1, got %d", bad[i]);
    assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT, want);
    assert_ptr_equal(s, (rf_session *)&o);
  }
  rf_session_options_init(&o);
  o.gpu_graphs = 1; /* no GPU device in the session: ignored */
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(s, NULL, 0, &c, 1, NULL, 0, &out));
  assert_true(rf_tensor_get(out, 0) == 1.0);
  rf_tensor_release(out);
  rf_session_free(s);
  rf_graph_free(g);
}

/* RF_GPU_GRAPHS in the environment sets gpu_graphs' default (0 or 1); an
 * explicit option wins; another value makes rf_session_new fail naming it. */
static void test_env_default(void **state) {
  (void)state;
  rf_session_options o;
  rf_graph *g = rf_graph_new();
  (void)rf_const_scalar(g, "c", RF_FLOAT32, 1);
  const char *vals[] = {"0", "1"};
  for (int i = 0; i < 2; i++) {
    assert_int_equal(setenv("RF_GPU_GRAPHS", vals[i], 1), 0);
    rf_session_options_init(&o);
    assert_int_equal(o.gpu_graphs, i);
    o.gpu_graphs = 1 - i; /* the option set in code wins */
    rf_session *s = NULL;
    assert_ok(rf_session_new(g, &o, &s));
    rf_session_free(s);
  }
  assert_int_equal(setenv("RF_GPU_GRAPHS", "off", 1), 0);
  rf_session_options_init(&o);
  rf_session *s = NULL;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "RF_GPU_GRAPHS is 'off' (0 or 1)");
  assert_null(s);
  assert_int_equal(setenv("RF_GPU_GRAPHS", "", 1), 0);
  rf_session_options_init(&o);
  assert_int_equal(o.gpu_graphs, RF_DEFAULT_GPU_GRAPHS);
  assert_int_equal(unsetenv("RF_GPU_GRAPHS"), 0);
  rf_session_options_init(&o);
  assert_int_equal(o.gpu_graphs, RF_DEFAULT_GPU_GRAPHS);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decide_by_shapes),
      cmocka_unit_test(test_never_captured_reasons),
      cmocka_unit_test(test_option_values),
      cmocka_unit_test(test_debug_words),
      cmocka_unit_test(test_env_default),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
