/* tests/test_kernel_error.c - a failing kernel stops the whole step: the run
 * returns the first error (naming node, op and device) promptly although
 * other devices wait on receives from the failed part; nodes not started are
 * skipped; kernels that break the output contract are caught; errors without
 * a node name get one; the session runs on afterwards; a step check (work
 * reported done before it ran: GPU collectives) runs once after the step and
 * fails it with its error; and allocation failures anywhere in
 * new/compile/run return RESOURCE_EXHAUSTED and leak nothing. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#include "ringflow/debug.h"
#include "runtime/session_internal.h"
#include "device/step.h"
#include "runtime_test_ops.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Kernels breaking the contract, registered here only. */
static rf_status *no_output(rf__kernel_ctx *ctx) { return NULL; }
static rf_status *wrong_dtype(rf__kernel_ctx *ctx) {
  rf_shape s = rf_shape_scalar();
  return rf__kernel_alloc_output(ctx, 0, RF_INT32, &s, NULL);
}
static rf_status *bare_error(rf__kernel_ctx *ctx) {
  return rf_status_new(RF_OUT_OF_RANGE, "index 9 out of range");
}

/* TestLateCheck forwards x and adds a step check, which counts its calls
 * and fails when x is negative (the error a GPU collective reports after
 * its step's sync). */
static atomic_int checks_run;

typedef struct late_check {
  rf__step_check c;
  bool fail;
  int64_t step;
} late_check;

static rf_status *late_check_fn(void *arg) {
  late_check *lc = arg;
  atomic_fetch_add(&checks_run, 1);
  rf_status *st = lc->fail
                      ? rf_status_new(RF_ABORTED, "late failure of step %lld",
                                      (long long)lc->step)
                      : NULL;
  free(lc);
  return st;
}

static rf_status *late_check_compute(rf__kernel_ctx *ctx) {
  late_check *lc = malloc(sizeof *lc);
  if (!lc) return rf__oom();
  lc->fail = rf_tensor_get(ctx->inputs[0], 0) < 0;
  lc->step = ctx->step->id;
  lc->c = (rf__step_check){.fn = late_check_fn, .arg = lc};
  rf__step_add_check(ctx->step, &lc->c);
  ctx->outputs[0] = rf_tensor_retain(ctx->inputs[0]);
  return NULL;
}

static const rf__op_spec bad_specs[] = {
    {.name = "TestNoOutput", .inputs = "x: float64", .outputs = "y: float64"},
    {.name = "TestWrongDtype", .inputs = "x: float64", .outputs = "y: float64"},
    {.name = "TestBareError", .inputs = "x: float64", .outputs = "y: float64"},
    {.name = "TestLateCheck", .inputs = "x: float64", .outputs = "y: float64"},
};
static const rf__kernel_def bad_kernels[] = {
    {.op = "TestNoOutput", .device_type = RF_DEVICE_CPU, .compute = no_output},
    {.op = "TestWrongDtype",
     .device_type = RF_DEVICE_CPU,
     .compute = wrong_dtype},
    {.op = "TestBareError",
     .device_type = RF_DEVICE_CPU,
     .compute = bare_error},
    {.op = "TestLateCheck",
     .device_type = RF_DEVICE_CPU,
     .compute = late_check_compute},
};

static int setup(void **state) {
  static int done;
  rt_register();
  if (done) return 0;
  done = 1;
  for (int i = 0; i < 4; i++) {
    assert_ok(rf__op_register(&bad_specs[i]));
    assert_ok(rf__kernel_register(&bad_kernels[i]));
  }
  return 0;
}

/* cpu:2 fails at once; cpu:0, cpu:1 and cpu:3 each wait on a receive of
 * what cpu:2 would have produced (and cpu:3 also on its own slow work). */
static void test_failure_stops_every_device(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output c = rt_const_node(g, "c", "cpu:2", 1, rf_shape_of(1, (int64_t)4));
  rf_output bad = rt_fail_node(g, "bad", "cpu:2", c, "boom");
  rf_output fetch[4];
  for (int d = 0; d < 4; d++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", d == 2 ? 0 : d);
    fetch[d] = rt_unary_node(g, "TestAddOne", NULL, dev, bad);
  }
  rf_output c3 = rt_const_node(g, "c3", "cpu:3", 1, rf_shape_scalar());
  rf_output slow = rt_unary_node(g, "TestSleep", "slow", "cpu:3", c3);
  /* A long chain on cpu:3 after the sleep: skipped once the step failed. */
  rf_output after = slow;
  for (int i = 0; i < 50; i++)
    after = rt_unary_node(g, "TestAddOne", NULL, "cpu:3", after);
  fetch[2] = after;
  rf_session *s = rt_session(g, 4, 2);
  for (int rep = 0; rep < 20; rep++) {
    rf_tensor *out[4] = {NULL, NULL, NULL, NULL};
    long calls = atomic_load(&rt_kernel_calls);
    double t0 = now_s();
    rf_status *st = rf_session_run(s, NULL, 0, fetch, 4, NULL, 0, out);
    /* Exactly the failing kernel's error, not an aborted receive's. */
    assert_int_equal(rf_status_code(st), RF_INTERNAL);
    assert_string_equal(rf_status_message(st),
                        "node 'bad' (TestFail) on cpu:2: boom");
    rf_status_free(st);
    /* Generous: a hang would take the ctest timeout, this only catches a
     * step waiting for something it should have cancelled. */
    assert_true(now_s() - t0 < 5.0);
    for (int i = 0; i < 4; i++) assert_null(out[i]);
    /* Receivers failed instead of running their consumers (whether the
     * chain after the sleep ran depends on timing, so it is not checked). */
    (void)calls;
    assert_int_equal(rf__rendezvous_pending(s->rendezvous), 0);
  }
  /* The session keeps working: a fetch not depending on 'bad'. */
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(s, NULL, 0, &after, 1, NULL, 0, &out));
  double want = 51;
  assert_tensor_near(out, rf_shape_scalar(), &want, 0);
  rf_tensor_release(out);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Two failures in one step, on two devices: the run reports one of them,
 * whole - never a receive that was aborted because of it. */
static void test_one_error_reported_whole(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output c = rt_const_node(g, "c", "cpu:0", 1, rf_shape_scalar());
  rf_output f1 = rt_fail_node(g, "f1", "cpu:0", c, "first");
  rf_output f2 = rt_fail_node(g, "f2", "cpu:1", c, "second");
  rf_output after = rt_unary_node(g, "TestAddOne", "after", "cpu:1", f1);
  rf_session *s = rt_session(g, 2, 2);
  rf_output fetch[3] = {after, f2, f1};
  for (int rep = 0; rep < 20; rep++) {
    rf_tensor *out[3] = {NULL, NULL, NULL};
    rf_status *st = rf_session_run(s, NULL, 0, fetch, 3, NULL, 0, out);
    const char *m = rf_status_message(st);
    assert_int_equal(rf_status_code(st), RF_INTERNAL);
    assert_true(strcmp(m, "node 'f1' (TestFail) on cpu:0: first") == 0 ||
                strcmp(m, "node 'f2' (TestFail) on cpu:1: second") == 0);
    rf_status_free(st);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_broken_kernels(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output c = rt_const_node(g, "c", NULL, 1, rf_shape_scalar());
  rf_output a = rt_unary_node(g, "TestNoOutput", "a", "cpu:1", c);
  rf_output b = rt_unary_node(g, "TestWrongDtype", "b", NULL, c);
  rf_output e = rt_unary_node(g, "TestBareError", "e", "cpu:1", c);
  rf_session *s = rt_session(g, 2, 1);
  rf_tensor *out = NULL;
  assert_status(rf_session_run(s, NULL, 0, &a, 1, NULL, 0, &out), RF_INTERNAL,
                "node 'a' (TestNoOutput) on cpu:1: the kernel did not set "
                "output 0 (float64 expected)");
  assert_status(rf_session_run(s, NULL, 0, &b, 1, NULL, 0, &out), RF_INTERNAL,
                "node 'b' (TestWrongDtype) on cpu:0: the kernel produced a "
                "wrong dtype for output 0 (float64 expected)");
  assert_status(rf_session_run(s, NULL, 0, &e, 1, NULL, 0, &out),
                RF_OUT_OF_RANGE,
                "node 'e' (TestBareError) on cpu:1: index 9 out of range");
  assert_null(out);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Step checks on two devices: each runs exactly once per step, after the
 * step's work; a failing one fails the run with its own error (not
 * mistaken for a kernel's), and the next steps run normally. */
static void test_step_checks(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x =
      rt_placeholder_node(g, "x", "cpu:0", rf_shape_of(1, (int64_t)2));
  rf_output a = rt_unary_node(g, "TestLateCheck", "a", "cpu:0", x);
  rf_output b = rt_unary_node(g, "TestLateCheck", "b", "cpu:1", x);
  rf_output fetch[2] = {a, b};
  rf_session *s = rt_session(g, 2, 2);
  for (int rep = 0; rep < 6; rep++) {
    double v = rep % 3 == 1 ? -1 : 2;
    rf_tensor *in = NULL;
    assert_ok(rf_tensor_new(RF_FLOAT64, &(rf_shape){1, {2}}, NULL, &in));
    rf_tensor_set(in, 0, v);
    rf_tensor_set(in, 1, v);
    rf_feed feed = {x, in};
    rf_tensor *out[2] = {NULL, NULL};
    atomic_store(&checks_run, 0);
    rf_status *st = rf_session_run(s, &feed, 1, fetch, 2, NULL, 0, out);
    assert_int_equal(atomic_load(&checks_run), 2);
    if (v < 0) {
      assert_int_equal(rf_status_code(st), RF_ABORTED);
      assert_non_null(strstr(rf_status_message(st), "late failure of step"));
      rf_status_free(st);
      assert_null(out[0]);
      assert_null(out[1]);
    } else {
      assert_ok(st);
      for (int i = 0; i < 2; i++) {
        double want[2] = {v, v};
        assert_tensor_near(out[i], rf_shape_of(1, (int64_t)2), want, 0);
        rf_tensor_release(out[i]);
      }
    }
    rf_tensor_release(in);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

/* Fault injection: the k-th allocation fails, for every k until one run
 * succeeds; each failure is RESOURCE_EXHAUSTED and nothing leaks. */
static void test_allocation_failures(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x =
      rt_placeholder_node(g, "x", "cpu:0", rf_shape_of(1, (int64_t)3));
  rf_output y = rt_unary_node(g, "TestAddOne", "y", "cpu:1", x);
  rf_output z = rt_add_node(g, "z", "cpu:2", y, x);
  rf_node_builder *nb = rf_node_builder_new(g, "TestSink", "sink");
  rf_node_builder_device(nb, "cpu:0");
  rf_node_builder_input(nb, y);
  rf_node *sink = rt_finish(nb);
  assert_ok(rf_graph_add_control_edge(g, z.node, sink));
  double d[3] = {1, 2, 3};
  rf_tensor *xv = rt_tensor(rf_shape_of(1, (int64_t)3), d);
  rf_default_allocator_trim();
  int64_t live = rf_debug_live_allocations();
  int failures = 0;
  for (int k = 1;; k++) {
    rf_session_options o;
    rf_session_options_init(&o);
    o.num_cpu_devices = 3;
    o.num_threads = 2;
    rf_session *s = NULL;
    rf_debug_fail_allocation_after(k);
    rf_status *st = rf_session_new(g, &o, &s);
    rf_tensor *out = NULL;
    rf_feed f = {x, xv};
    if (!st) st = rf_session_run(s, &f, 1, &z, 1, &sink, 1, &out);
    rf_debug_fail_allocation_after(0);
    if (!st) {
      double want[3] = {3, 5, 7};
      assert_tensor_near(out, rf_shape_of(1, (int64_t)3), want, 0);
      rf_tensor_release(out);
      /* A second run must work (no state left broken by failures). */
      assert_ok(rf_session_run(s, &f, 1, &z, 1, &sink, 1, &out));
      rf_tensor_release(out);
      rf_session_free(s);
      break;
    }
    failures++;
    assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
    assert_null(out);
    rf_session_free(s);
    rf_default_allocator_trim();
    assert_int_equal(rf_debug_live_allocations(), live);
    assert_true(k < 5000);
  }
  assert_true(failures > 20);
  rf_default_allocator_trim();
  assert_int_equal(rf_debug_live_allocations(), live);
  /* Failures in a run of an already compiled plan, too. */
  rf_session *s = rt_session(g, 3, 2);
  rf_tensor *out = NULL;
  rf_feed f = {x, xv};
  assert_ok(rf_session_run(s, &f, 1, &z, 1, &sink, 1, &out));
  rf_tensor_release(out);
  for (int k = 1; k < 40; k++) {
    out = NULL;
    rf_debug_fail_allocation_after(k);
    rf_status *st = rf_session_run(s, &f, 1, &z, 1, &sink, 1, &out);
    rf_debug_fail_allocation_after(0);
    if (st)
      assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
    else
      rf_tensor_release(out);
  }
  assert_ok(rf_session_run(s, &f, 1, &z, 1, &sink, 1, &out));
  rf_tensor_release(out);
  rf_session_free(s);
  rf_tensor_release(xv);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_failure_stops_every_device, setup),
      cmocka_unit_test_setup(test_one_error_reported_whole, setup),
      cmocka_unit_test_setup(test_broken_kernels, setup),
      cmocka_unit_test_setup(test_step_checks, setup),
      cmocka_unit_test_setup(test_allocation_failures, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
