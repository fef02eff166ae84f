/* tests/test_env_knobs.c - the environment variables that switch passes and
 * CPU kernels (docs/ARCHITECTURE.md, "Environment variables"): a value
 * outside the accepted ones fails rf_session_new and rf_graph_lower with
 * INVALID_ARGUMENT naming the variable and quoting the value (capped); the
 * accepted values, and an empty one, make a session that runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringflow/ops.h"
#include "ringflow/session.h"
#include "testutil.h"

#define assert_contains(msg, sub) \
  if (!strstr((msg), (sub))) fail_msg("'%s' is not in: %s", (sub), (msg))

typedef struct {
  const char *var;
  const char *good[3];
  const char *bad[6];
  const char *expected;
} knob_case;

static const knob_case cases[] = {
    {"RF_BLAS_THREADS",
     {"1", "2", "1024"},
     {"0", "-1", "1025", "two", "2x", " 2"},
     "a thread count from 1 to 1024"},
    {"RF_CPU_CONV",
     {"im2col", "onednn", NULL},
     {"IM2COL", "dnnl", "im2col ", "1", NULL, NULL},
     "im2col or onednn"},
    {"RF_CUBLASLT_EPILOGUES",
     {"0", "1", NULL},
     {"off", "00", "2", "true", NULL, NULL},
     "0 or 1"},
    {"RF_CUBLASLT_SPLITK", {"0", "1", NULL}, {"no", "-0", NULL}, "0 or 1"},
    {"RF_CUDNN_LAYOUT",
     {"auto", "nhwc", "nchw"},
     {"NCHW", "nhwc ", "channels_last", "1", NULL, NULL},
     "auto, nhwc or nchw"},
    {"RF_FLUSH_DENORMALS", {"0", "1", NULL}, {"false", "0 ", NULL}, "0 or 1"},
    {"RF_FOLD_CONSTANTS", {"0", "1", NULL}, {"off", "yes", NULL}, "0 or 1"},
    {"RF_FUSE_XENT_GRAD", {"0", "1", NULL}, {"disable", "10", NULL}, "0 or 1"},
    {"RF_SINGLE_COLLECTIVES",
     {"keep", "identity", NULL},
     {"Keep", "0", "off", NULL},
     "keep or identity"},
};

static rf_output x_out, y_out;

/* y = x * 2: enough to make a session and run it. */
static rf_graph *small_graph(void) {
  rf_graph *g = rf_graph_new();
  x_out = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, (int64_t)3));
  rf_output two = rf_const_scalar(g, "two", RF_FLOAT32, 2.0);
  y_out = rf_mul(g, "y", x_out, two);
  assert_ok(rf_graph_status(g));
  return g;
}

static rf_status *make_session(const rf_graph *g) {
  rf_session *s = NULL;
  rf_status *st = rf_session_new(g, NULL, &s);
  if (st) return st;
  const float x[3] = {1, 2, 3};
  rf_shape shape = rf_shape_of(1, (int64_t)3);
  rf_tensor *xv = NULL;
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &shape, x, &xv));
  rf_feed f = {x_out, xv};
  rf_tensor *yv = NULL;
  st = rf_session_run(s, &f, 1, &y_out, 1, NULL, 0, &yv);
  if (!st) {
    const float *q = rf_tensor_data(yv);
    assert_true(q[0] == 2 && q[1] == 4 && q[2] == 6);
    rf_tensor_release(yv);
  }
  rf_tensor_release(xv);
  rf_session_free(s);
  return st;
}

static void check_refused(rf_status *st, const char *var, const char *value,
                          const char *expected) {
  assert_non_null(st);
  assert_int_equal(rf_status_code(st), RF_INVALID_ARGUMENT);
  char want[256];
  snprintf(want, sizeof want, "environment variable %s='%s': expected %s", var,
           value, expected);
  assert_contains(rf_status_message(st), want);
  rf_status_free(st);
}

static void test_bad_values_are_refused(void **state) {
  (void)state;
  rf_graph *g = small_graph();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    for (int b = 0; b < 6 && cases[i].bad[b]; b++) {
      setenv(cases[i].var, cases[i].bad[b], 1);
      check_refused(make_session(g), cases[i].var, cases[i].bad[b],
                    cases[i].expected);
      rf_graph *lowered = NULL;
      check_refused(rf_graph_lower(g, NULL, &lowered), cases[i].var,
                    cases[i].bad[b], cases[i].expected);
      assert_null(lowered);
    }
    unsetenv(cases[i].var);
  }
  rf_graph_free(g);
}

static void test_accepted_and_empty_values_run(void **state) {
  (void)state;
  rf_graph *g = small_graph();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    for (int k = 0; k < 3 && cases[i].good[k]; k++) {
      setenv(cases[i].var, cases[i].good[k], 1);
      assert_ok(make_session(g));
    }
    setenv(cases[i].var, "", 1);
    assert_ok(make_session(g));
    unsetenv(cases[i].var);
  }
  rf_graph_free(g);
}

/* A huge value is quoted capped (RF_STATUS_QUOTE_MAX), as every user
 * string is. */
static void test_long_value_is_capped(void **state) {
  (void)state;
  size_t n = 100000;
  char *v = malloc(n + 1);
  memset(v, 'z', n);
  v[n] = 0;
  setenv("RF_FOLD_CONSTANTS", v, 1);
  rf_graph *g = small_graph();
  rf_status *st = make_session(g);
  assert_non_null(st);
  assert_int_equal(rf_status_code(st), RF_INVALID_ARGUMENT);
  assert_true(strlen(rf_status_message(st)) < 1000);
  assert_contains(rf_status_message(st), "RF_FOLD_CONSTANTS");
  rf_status_free(st);
  unsetenv("RF_FOLD_CONSTANTS");
  rf_graph_free(g);
  free(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_values_are_refused),
      cmocka_unit_test(test_accepted_and_empty_values_run),
      cmocka_unit_test(test_long_value_is_capped),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
