/* tests/test_assign_mul.c - AssignMul (rf_assign_mul) through a session on
 * cpu:0: var *= value for every float dtype over several steps, exactly as
 * a float64 reference rounded to the dtype (one rounding a step); the
 * output is the new value; the update stays in the variable's buffer while
 * nothing else holds the value (what lets a CUDA graph of the step replay
 * it), and writes a copy while a snapshot does (the snapshot keeps its
 * value); Adam's beta powers kept as float64 products and read as float32
 * equal float32(pow(beta, t)) bit for bit; and the errors at build and run
 * time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static const rf_dtype float_dtypes[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                        RF_FLOAT64};

static uint64_t rng;

static int setup(void **state) {
  (void)state;
  rng = rf_test_seed();
  return 0;
}

static rf_session *new_session(rf_graph *g) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 1;
  rf_session *s = NULL;
  assert_graph_ok(g);
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

/* v as a tensor of dtype dt stores it. */
static double stored(rf_dtype dt, double v) {
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new_scalar(dt, v, &t));
  double r = rf_tensor_get(t, 0);
  rf_tensor_release(t);
  return r;
}

typedef struct mul_graph {
  rf_graph *g;
  rf_output var, init, by, product, read;
  rf_node *assign;
} mul_graph;

static mul_graph build(rf_dtype dt, rf_shape shape) {
  mul_graph m;
  m.g = rf_graph_new();
  m.var = rf_variable(m.g, "v", dt, shape);
  m.init = rf_placeholder(m.g, "init", dt, shape);
  m.assign = rf_assign(m.g, "assign", m.var, m.init);
  m.by = rf_placeholder(m.g, "by", dt, shape);
  m.product = rf_assign_mul(m.g, "mul", m.var, m.by);
  m.read = rf_read_variable(m.g, "read", m.var);
  assert_graph_ok(m.g);
  return m;
}

static rf_tensor *read_var(rf_session *s, const mul_graph *m) {
  rf_tensor *t = NULL;
  assert_ok(rf_session_run(s, NULL, 0, &m->read, 1, NULL, 0, &t));
  return t;
}

/* Five steps of random factors: the output and the variable equal the
 * reference, each step's product rounded once to the dtype (for 16-bit
 * floats the product of two stored values is exact in float, so rounding
 * it from double is the kernel's rounding). */
static void test_values_every_float_dtype(void **state) {
  (void)state;
  rf_shape shape = rf_shape_of(1, 37);
  for (int d = 0; d < 4; d++) {
    rf_dtype dt = float_dtypes[d];
    mul_graph m = build(dt, shape);
    rf_session *s = new_session(m.g);
    rf_tensor *init = rf_test_random_tensor(&rng, dt, shape, -2, 2);
    double *want = rf_test_to_doubles(init);
    rf_feed f = {m.init, init};
    assert_ok(rf_session_run(s, &f, 1, NULL, 0, &m.assign, 1, NULL));
    rf_tensor_release(init);
    for (int step = 0; step < 5; step++) {
      rf_tensor *by = rf_test_random_tensor(&rng, dt, shape, -1.5, 1.5);
      for (int i = 0; i < 37; i++)
        want[i] = stored(dt, want[i] * rf_tensor_get(by, i));
      rf_feed fb = {m.by, by};
      rf_tensor *out = NULL;
      assert_ok(rf_session_run(s, &fb, 1, &m.product, 1, NULL, 0, &out));
      assert_int_equal(rf_tensor_dtype(out), dt);
      assert_tensor_near(out, shape, want, 0);
      rf_tensor_release(out);
      rf_tensor_release(by);
    }
    rf_tensor *now = read_var(s, &m);
    assert_tensor_near(now, shape, want, 0);
    rf_tensor_release(now);
    free(want);
    rf_session_free(s);
    rf_graph_free(m.g);
  }
}

/* With nothing else holding the value the multiply writes in place: the
 * buffer stays across steps (a CUDA graph of the step reads and writes the
 * variable there; runtime/gpu/step_graph.c refuses a step that moves it).
 * While a snapshot of an earlier read is held, the multiply writes a copy:
 * the snapshot keeps its value. */
static void test_in_place_unless_held(void **state) {
  (void)state;
  rf_shape shape = rf_shape_of(1, 1000);
  mul_graph m = build(RF_FLOAT64, shape);
  rf_session *s = new_session(m.g);
  rf_tensor *init = rf_test_random_tensor(&rng, RF_FLOAT64, shape, -1, 1);
  rf_feed f = {m.init, init};
  assert_ok(rf_session_run(s, &f, 1, NULL, 0, &m.assign, 1, NULL));
  rf_tensor *by = rf_test_random_tensor(&rng, RF_FLOAT64, shape, 0.5, 1.5);
  rf_feed fb = {m.by, by};
  rf_node *mul = m.product.node;
  /* the first may copy: the variable may share the fed tensor */
  assert_ok(rf_session_run(s, &fb, 1, NULL, 0, &mul, 1, NULL));
  rf_tensor *before = read_var(s, &m);
  const void *where = rf_tensor_data(before);
  rf_tensor_release(before);
  for (int step = 0; step < 3; step++)
    assert_ok(rf_session_run(s, &fb, 1, NULL, 0, &mul, 1, NULL));
  rf_tensor *after = read_var(s, &m);
  assert_ptr_equal(rf_tensor_data(after), where);
  double *old = rf_test_to_doubles(after);
  /* `after` is a snapshot still held: the next multiply must not write it */
  assert_ok(rf_session_run(s, &fb, 1, NULL, 0, &mul, 1, NULL));
  assert_tensor_near(after, shape, old, 0);
  rf_tensor *moved = read_var(s, &m);
  assert_ptr_not_equal(rf_tensor_data(moved), where);
  for (int i = 0; i < 1000; i++) old[i] *= rf_tensor_get(by, i);
  assert_tensor_near(moved, shape, old, 0);
  rf_tensor_release(moved);
  rf_tensor_release(after);
  free(old);
  rf_tensor_release(by);
  rf_tensor_release(init);
  rf_session_free(s);
  rf_graph_free(m.g);
}

/* tools/mlp.c keeps Adam's beta powers in float64 variables that each step
 * multiplies by beta, read as float32: for 3000 steps from step 0 and from
 * step 1000 (a --load), they equal float32(pow(beta, t)), the value the
 * driver fed before, bit for bit. A float32 variable would not: its
 * products drift from the second step. */
static void powers_from(double beta, int64_t from, int steps) {
  rf_graph *g = rf_graph_new();
  rf_output var = rf_variable(g, "power", RF_FLOAT64, rf_shape_scalar());
  rf_output init = rf_placeholder(g, "init", RF_FLOAT64, rf_shape_scalar());
  rf_node *assign = rf_assign(g, "assign", var, init);
  rf_output by = rf_const_scalar(g, "beta", RF_FLOAT64, beta);
  rf_output power =
      rf_cast(g, "as_f32", rf_assign_mul(g, "mul", var, by), RF_FLOAT32);
  rf_session *s = new_session(g);
  rf_tensor *t0 = NULL;
  assert_ok(rf_tensor_new_scalar(RF_FLOAT64, pow(beta, (double)from), &t0));
  rf_feed f = {init, t0};
  assert_ok(rf_session_run(s, &f, 1, NULL, 0, &assign, 1, NULL));
  rf_tensor_release(t0);
  for (int64_t t = from + 1; t <= from + steps; t++) {
    rf_tensor *out = NULL;
    assert_ok(rf_session_run(s, NULL, 0, &power, 1, NULL, 0, &out));
    float got = ((const float *)rf_tensor_data(out))[0];
    float want = (float)pow(beta, (double)t);
    if (memcmp(&got, &want, sizeof got))
      fail_msg("beta %g, step %lld: %.9g, want %.9g", beta, (long long)t,
               (double)got, (double)want);
    rf_tensor_release(out);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_beta_powers_equal_pow(void **state) {
  (void)state;
  powers_from(0.9, 0, 3000);
  powers_from(0.999, 0, 3000);
  powers_from(0.999, 1000, 3000);
}

static void test_build_errors(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output v = rf_variable(g, "v", RF_FLOAT32, rf_shape_of(1, 3));
  rf_output wrong = rf_placeholder(g, "d", RF_FLOAT64, rf_shape_of(1, 3));
  assert_null(rf_assign_mul(g, "m", v, wrong).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'm' (AssignMul): value is float64 but variable 'v' is "
                "float32");
  rf_graph_free(g);

  g = rf_graph_new();
  v = rf_variable(g, "v", RF_FLOAT32, rf_shape_of(1, 3));
  wrong = rf_placeholder(g, "s", RF_FLOAT32, rf_shape_of(1, 4));
  assert_null(rf_assign_mul(g, "m", v, wrong).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'm' (AssignMul): value has shape (4) but variable 'v' "
                "has shape "
                "(3)");
  rf_graph_free(g);

  g = rf_graph_new(); /* only float variables */
  v = rf_variable(g, "n", RF_INT32, rf_shape_of(1, 3));
  wrong = rf_placeholder(g, "i", RF_INT32, rf_shape_of(1, 3));
  assert_null(rf_assign_mul(g, "m", v, wrong).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "int32");
  rf_graph_free(g);

  g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, 3));
  assert_null(rf_assign_mul(g, "m", x, x).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "not a resource");
  rf_graph_free(g);
}

/* Before the variable's first assign the run fails naming it; the variable
 * stays uninitialised. */
static void test_uninitialized(void **state) {
  (void)state;
  mul_graph m = build(RF_FLOAT32, rf_shape_of(1, 3));
  rf_session *s = new_session(m.g);
  rf_tensor *by =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, 3), -1, 1);
  rf_feed fb = {m.by, by};
  rf_tensor *out = NULL;
  assert_status(rf_session_run(s, &fb, 1, &m.product, 1, NULL, 0, &out),
                RF_FAILED_PRECONDITION,
                "variable 'v' on cpu:0 is not "
                "initialized");
  assert_status(rf_session_run(s, NULL, 0, &m.read, 1, NULL, 0, &out),
                RF_FAILED_PRECONDITION, "not initialized");
  rf_tensor_release(by);
  rf_session_free(s);
  rf_graph_free(m.g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_values_every_float_dtype),
      cmocka_unit_test(test_in_place_unless_held),
      cmocka_unit_test(test_beta_powers_equal_pow),
      cmocka_unit_test(test_build_errors),
      cmocka_unit_test(test_uninitialized),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
