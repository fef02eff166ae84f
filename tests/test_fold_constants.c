/* tests/test_fold_constants.c - values the static shapes decide are
 * computed at compile time (passes/fold_constants.c, docs/ARCHITECTURE.md
 * "Passes"), through the public API: OnesLike and ZerosLike of every dtype
 * and of scalars, empty and ordinary shapes; the gradient of a full Mean
 * or Sum (the loss's OnesLike and the _MeanGrad it feeds) for every float
 * dtype and batch sizes whose reciprocal rounds, against float64 math and
 * bit for bit against the unfolded kernels (RF_FOLD_CONSTANTS=0); the
 * lowered graph holds "<name>/folded" Consts; what must not fold stays
 * (unknown dims, partial axes, a fed dy, more than 1 MiB); control inputs
 * still run; two gradient computations; the log line; out of memory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_sweep.h"
#include "log_collector.h"
#include "testutil.h"

#include <ringflow/gradients.h>
#include <ringflow/log.h>

static rf_session_options one_cpu(void) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 1;
  o.num_gpu_devices = 0;
  return o;
}

/* The op of the lowered graph's node `name`, or NULL (malloc'ed). */
static char *lowered_op(const rf_graph *g, const char *name) {
  rf_session_options o = one_cpu();
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(g, &o, &low));
  char *op = NULL;
  for (int i = 0; i < rf_graph_num_nodes(low); i++) {
    rf_node *n = rf_graph_node(low, i);
    if (strcmp(rf_node_name(n), name) == 0) op = strdup(rf_node_op(n));
  }
  rf_graph_free(low);
  return op;
}

/* Whether node `name` of g was folded: gone from the lowered graph, with
 * a Const "<name>/folded" in its place. */
static bool folded(const rf_graph *g, const char *name) {
  char *op = lowered_op(g, name);
  char fname[256];
  snprintf(fname, sizeof fname, "%s/folded", name);
  char *fop = lowered_op(g, fname);
  bool yes = op == NULL && fop && strcmp(fop, "Const") == 0;
  bool no = op != NULL && fop == NULL;
  free(op);
  free(fop);
  assert_true(yes || no);
  return yes;
}

/* Runs g on one CPU device, fetching n outputs, with the pass on or off. */
static void run(rf_graph *g, const rf_feed *feeds, int nf,
                const rf_output *fetch, int n, rf_tensor **got, bool fold) {
  if (!fold) setenv("RF_FOLD_CONSTANTS", "0", 1);
  rf_test_run(g, 1, feeds, nf, fetch, n, got);
  unsetenv("RF_FOLD_CONSTANTS");
}

/* Element i of t as a double, read independently of the library. */
static double element(const rf_tensor *t, int64_t i) {
  const void *p = rf_tensor_data(t);
  switch (rf_tensor_dtype(t)) {
    case RF_FLOAT16: {
      uint16_t h = ((const uint16_t *)p)[i];
      int e = (h >> 10) & 0x1f, m = h & 0x3ff;
      double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
      return h & 0x8000 ? -v : v;
    }
    case RF_BFLOAT16: {
      uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
      float f;
      memcpy(&f, &u, 4);
      return f;
    }
    case RF_FLOAT32: return ((const float *)p)[i];
    case RF_FLOAT64: return ((const double *)p)[i];
    case RF_INT8: return ((const int8_t *)p)[i];
    case RF_UINT8: return ((const uint8_t *)p)[i];
    case RF_BOOL: return ((const uint8_t *)p)[i];
    case RF_INT32: return ((const int32_t *)p)[i];
    default: return (double)((const int64_t *)p)[i];
  }
}

/* OnesLike and ZerosLike of every dtype and of scalar, empty and 2-d
 * shapes: Consts in the lowered graph, every element 1 or 0, the same
 * bytes as the kernels'. */
static void test_ones_and_zeros_every_dtype(void **state) {
  (void)state;
  const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                          RF_FLOAT64, RF_INT8,     RF_UINT8,
                          RF_INT32,   RF_INT64,    RF_BOOL};
  const rf_shape shapes[] = {rf_shape_scalar(), rf_shape_of(2, 0, 4),
                             rf_shape_of(2, 3, 5)};
  uint64_t rng = rf_test_rng(11);
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
      rf_graph *g = rf_graph_new();
      rf_output x = rf_placeholder(g, "x", dts[d], shapes[s]);
      rf_output y[2] = {rf_ones_like(g, "ones", x),
                        rf_zeros_like(g, "zeros", x)};
      assert_graph_ok(g);
      assert_true(folded(g, "ones"));
      assert_true(folded(g, "zeros"));
      rf_tensor *xv = rf_test_random_tensor(&rng, dts[d], shapes[s], -9, 9);
      rf_feed feed = {x, xv};
      rf_tensor *got[2], *want[2];
      run(g, &feed, 1, y, 2, got, true);
      run(g, &feed, 1, y, 2, want, false);
      for (int k = 0; k < 2; k++) {
        rf_shape gs = rf_tensor_shape(got[k]);
        assert_true(rf_shape_equal(&gs, &shapes[s]));
        for (int64_t i = 0; i < rf_tensor_num_elements(got[k]); i++)
          assert_true(element(got[k], i) == (k == 0 ? 1.0 : 0.0));
        assert_same_bytes(got[k], want[k]);
        rf_tensor_release(got[k]);
        rf_tensor_release(want[k]);
      }
      rf_tensor_release(xv);
      rf_graph_free(g);
    }
  }
}

/* r rounded once to dt as the kernels round: float16 and bfloat16 through
 * float (a Cast from float32 of (float)r, checked by test_cast). */
static double rounded(rf_dtype dt, double r) {
  if (dt == RF_FLOAT64) return r;
  if (dt == RF_FLOAT32) return (double)(float)r;
  rf_graph *cg = rf_graph_new();
  rf_output p = rf_placeholder(cg, "p", RF_FLOAT32, rf_shape_scalar());
  rf_output q = rf_cast(cg, "q", p, dt);
  rf_tensor *t, *c = NULL;
  assert_ok(rf_tensor_new(RF_FLOAT32, &(rf_shape){0}, NULL, &t));
  *(float *)rf_tensor_mutable_data(t) = (float)r;
  rf_feed f = {p, t};
  rf_test_run(cg, 1, &f, 1, &q, 1, &c);
  double v = element(c, 0);
  rf_tensor_release(c);
  rf_tensor_release(t);
  rf_graph_free(cg);
  return v;
}

/* d mean(x) / dx for x of n x 3 elements (keep_dims either way), once
 * from the loss's own 1 and once from a constant dy of 5, and d sum(x) /
 * dx: 1/(3n) and 5/(3n) rounded once to the dtype (float64 math here), 1
 * for the sum; bit for bit the unfolded kernels' results. */
static void check_loss_gradient(rf_dtype dt, int64_t n, bool keep,
                                uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  rf_shape shape = rf_shape_of(2, n, 3);
  rf_output x = rf_placeholder(g, "x", dt, shape);
  rf_output mean = rf_mean(g, "mean", x, NULL, -1, keep);
  rf_output sum = rf_sum(g, "sum", x, NULL, -1, keep);
  /* dy = 5 of the reduced shape: a scalar, or 1 x 1 with keep_dims */
  rf_tensor *fv;
  rf_shape kept = keep ? rf_shape_of(2, 1, 1) : rf_shape_scalar();
  assert_ok(rf_tensor_new(dt, &kept, NULL, &fv));
  void *fp = rf_tensor_mutable_data(fv);
  if (dt == RF_FLOAT16) *(uint16_t *)fp = rf_float_to_half(5.0f);
  if (dt == RF_BFLOAT16) *(uint16_t *)fp = rf_float_to_bfloat16(5.0f);
  if (dt == RF_FLOAT32) *(float *)fp = 5.0f;
  if (dt == RF_FLOAT64) *(double *)fp = 5.0;
  rf_output five = rf_const(g, "five", fv);
  rf_tensor_release(fv);
  rf_output dx[3];
  assert_ok(rf_gradients(g, &mean, 1, &x, 1, NULL, &dx[0]));
  assert_ok(rf_gradients(g, &sum, 1, &x, 1, NULL, &dx[1]));
  assert_ok(rf_gradients(g, &mean, 1, &x, 1, &five, &dx[2]));
  assert_graph_ok(g);
  for (int k = 0; k < 3; k++) assert_true(folded(g, rf_node_name(dx[k].node)));
  rf_tensor *xv = rf_test_random_tensor(rng, dt, shape, -4, 4);
  rf_feed feed = {x, xv};
  rf_tensor *got[3], *want[3];
  run(g, &feed, 1, dx, 3, got, true);
  run(g, &feed, 1, dx, 3, want, false);
  double w[3] = {rounded(dt, 1.0 / (double)(3 * n)), 1.0,
                 rounded(dt, 5.0 / (double)(3 * n))};
  for (int k = 0; k < 3; k++) {
    for (int64_t i = 0; i < 3 * n; i++) assert_true(element(got[k], i) == w[k]);
    assert_same_bytes(got[k], want[k]);
    rf_tensor_release(got[k]);
    rf_tensor_release(want[k]);
  }
  rf_tensor_release(xv);
  rf_graph_free(g);
}

static void test_loss_gradient_every_float_dtype(void **state) {
  (void)state;
  const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32, RF_FLOAT64};
  const int64_t ns[] = {1, 3, 7, 100, 128};
  uint64_t rng = rf_test_rng(12);
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
      for (int keep = 0; keep < 2; keep++)
        check_loss_gradient(dts[d], ns[i], keep, &rng);
}

/* Not folded, with the right result all the same: a dimension known only
 * at run time, a Mean over some axes, a dy fed by the caller, and a value
 * of more than 1 MiB. */
static void test_what_stays(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(2, -1, 4));
  rf_output big = rf_placeholder(g, "big", RF_FLOAT32, rf_shape_of(1, 262145));
  rf_output fixed =
      rf_placeholder(g, "fixed", RF_FLOAT32, rf_shape_of(2, 5, 4));
  rf_output dy = rf_placeholder(g, "dy", RF_FLOAT32, rf_shape_scalar());
  int64_t axis0 = 0;
  rf_output part = rf_mean(g, "part", fixed, &axis0, 1, false);
  rf_output all = rf_mean(g, "all", fixed, NULL, -1, false);
  rf_output out[4];
  out[0] = rf_ones_like(g, "unknown_dim", x);
  out[1] = rf_zeros_like(g, "too_big", big);
  assert_ok(rf_gradients(g, &part, 1, &fixed, 1, NULL, &out[2]));
  assert_ok(rf_gradients(g, &all, 1, &fixed, 1, &dy, &out[3]));
  assert_graph_ok(g);
  for (int k = 0; k < 4; k++)
    assert_false(folded(g, rf_node_name(out[k].node)));
  /* just at the limit: 1 MiB of float32 folds */
  rf_graph *g2 = rf_graph_new();
  rf_output edge =
      rf_placeholder(g2, "edge", RF_FLOAT32, rf_shape_of(1, 262144));
  rf_output z = rf_zeros_like(g2, "at_limit", edge);
  assert_graph_ok(g2);
  assert_true(folded(g2, rf_node_name(z.node)));
  (void)z;
  rf_graph_free(g2);

  uint64_t rng = rf_test_rng(13);
  rf_tensor *xv =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, 2, 4), -1, 1);
  rf_tensor *bv =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, 262145), -1, 1);
  rf_tensor *fv =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, 5, 4), -1, 1);
  rf_tensor *dv =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_scalar(), 1, 3);
  rf_feed feeds[4] = {{x, xv}, {big, bv}, {fixed, fv}, {dy, dv}};
  rf_tensor *got[4];
  run(g, feeds, 4, out, 4, got, true);
  for (int64_t i = 0; i < 8; i++) assert_true(element(got[0], i) == 1.0);
  for (int64_t i = 0; i < 262145; i++) assert_true(element(got[1], i) == 0.0);
  float fifth = (float)(1.0 / 5.0);
  float scaled = (float)(element(dv, 0) / 20.0);
  for (int64_t i = 0; i < 20; i++) {
    assert_true(element(got[2], i) == fifth);
    assert_true(element(got[3], i) == scaled);
  }
  for (int k = 0; k < 4; k++) rf_tensor_release(got[k]);
  rf_tensor_release(xv);
  rf_tensor_release(bv);
  rf_tensor_release(fv);
  rf_tensor_release(dv);
  rf_graph_free(g);
}

/* A folded node keeps its control inputs: ones_like(x) made to wait on an
 * assignment is a Const that waits on it, and the assignment runs. */
static void test_control_inputs_still_run(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output v = rf_variable(g, "v", RF_FLOAT32, rf_shape_scalar());
  rf_output five = rf_const_scalar(g, "five", RF_FLOAT32, 5.0);
  rf_node *set = rf_assign(g, "set", v, five);
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, 3));
  rf_output ones = rf_ones_like(g, "ones", x);
  assert_ok(rf_graph_add_control_edge(g, set, ones.node));
  rf_output read = rf_read_variable(g, "read", v);
  assert_graph_ok(g);
  assert_true(folded(g, "ones"));
  /* in the lowered graph the Const waits on the assignment */
  rf_session_options o = one_cpu();
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(g, &o, &low));
  rf_node *k = rf_graph_find_node(low, "ones/folded");
  assert_non_null(k);
  assert_int_equal(rf_node_num_control_inputs(k), 1);
  assert_string_equal(rf_node_name(rf_node_control_input(k, 0)), "set");
  rf_graph_free(low);
  rf_session *s = rf_test_cpu_session(g, 1);
  rf_tensor *xv = rf_test_random_tensor(&(uint64_t){14}, RF_FLOAT32,
                                        rf_shape_of(1, 3), -1, 1);
  rf_feed feed = {x, xv};
  rf_tensor *got = NULL, *val = NULL;
  assert_ok(rf_session_run(s, &feed, 1, &ones, 1, NULL, 0, &got));
  assert_true(element(got, 2) == 1.0);
  assert_ok(rf_session_run(s, NULL, 0, &read, 1, NULL, 0, &val));
  assert_true(element(val, 0) == 5.0);
  rf_tensor_release(got);
  rf_tensor_release(val);
  rf_tensor_release(xv);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Two gradient computations through one Mean: each folds, both right; the
 * log names each fold; RF_FOLD_CONSTANTS=0 keeps the kernels. */
static void test_twice_log_and_off(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, rf_shape_of(1, 10));
  rf_output loss = rf_mean(g, "loss", rf_mul(g, NULL, x, x), NULL, -1, false);
  rf_output d[2];
  assert_ok(rf_gradients(g, &loss, 1, &x, 1, NULL, &d[0]));
  assert_ok(rf_gradients(g, &loss, 1, &x, 1, NULL, &d[1]));
  assert_graph_ok(g);
  uint64_t rng = rf_test_rng(15);
  rf_tensor *xv =
      rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(1, 10), -3, 3);
  rf_feed feed = {x, xv};
  logs_start(RF_LOG_INFO);
  rf_tensor *got[2];
  run(g, &feed, 1, d, 2, got, true);
  /* two OnesLike and two _MeanGrad */
  assert_int_equal(logs_count(RF_LOG_INFO, "folded at compile time into Const",
                              "static shapes alone", NULL),
                   4);
  assert_ok(rf_set_log_callback(RF_LOG_INFO, NULL, NULL));
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 10; i++) { /* 2 x / 10, in float64 */
      double want = 2.0 * element(xv, i) / 10.0;
      assert_true(fabs(element(got[k], i) - want) <= 1e-15 * fabs(want));
    }
  }
  setenv("RF_FOLD_CONSTANTS", "0", 1);
  logs_start(RF_LOG_INFO);
  rf_tensor *off[2];
  rf_test_run(g, 1, &feed, 1, d, 2, off);
  assert_int_equal(logs_count(-1, "folded at compile time", NULL, NULL), 0);
  assert_ok(rf_set_log_callback(RF_LOG_INFO, NULL, NULL));
  unsetenv("RF_FOLD_CONSTANTS");
  for (int k = 0; k < 2; k++) {
    assert_same_bytes(got[k], off[k]);
    rf_tensor_release(got[k]);
    rf_tensor_release(off[k]);
  }
  rf_tensor_release(xv);
  rf_graph_free(g);
}

/* Out of memory anywhere in compiling (the pass's tensors and nodes
 * included) and running: RESOURCE_EXHAUSTED, nothing leaked, and the right
 * gradient when the attempt succeeds. */
typedef struct oom_case {
  rf_graph *g;
  rf_output x, dx;
  rf_tensor *xv;
} oom_case;

static rf_status *oom_attempt(void *arg) {
  oom_case *c = arg;
  rf_session_options o = one_cpu();
  rf_session *s = NULL;
  rf_status *st = rf_session_new(c->g, &o, &s);
  rf_tensor *got = NULL;
  rf_feed feed = {c->x, c->xv};
  if (!st) st = rf_session_run(s, &feed, 1, &c->dx, 1, NULL, 0, &got);
  if (!st)
    for (int i = 0; i < 12; i++)
      assert_true(element(got, i) == (double)(float)(1.0 / 12.0));
  rf_tensor_release(got);
  rf_session_free(s);
  return st;
}

static void test_out_of_memory(void **state) {
  (void)state;
  oom_case c;
  c.g = rf_graph_new();
  c.x = rf_placeholder(c.g, "x", RF_FLOAT32, rf_shape_of(2, 4, 3));
  rf_output loss = rf_mean(c.g, "loss", c.x, NULL, -1, false);
  assert_ok(rf_gradients(c.g, &loss, 1, &c.x, 1, NULL, &c.dx));
  assert_graph_ok(c.g);
  uint64_t rng = rf_test_rng(16);
  c.xv = rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, 4, 3), -1, 1);
  assert_ok(oom_attempt(&c)); /* warm-up: registries filled */
  fs_plan p = {.what = "folded loss gradient",
               .attempt = oom_attempt,
               .arg = &c,
               .first_n = 300,
               .max_attempts = 200,
               .check_leaks = true};
  assert_true(fs_sweep(&p, FS_AFTER).failures > 50);
  assert_true(fs_sweep(&p, FS_ONCE).failures > 50);
  rf_tensor_release(c.xv);
  rf_graph_free(c.g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ones_and_zeros_every_dtype),
      cmocka_unit_test(test_loss_gradient_every_float_dtype),
      cmocka_unit_test(test_what_stays),
      cmocka_unit_test(test_control_inputs_still_run),
      cmocka_unit_test(test_twice_log_and_off),
      cmocka_unit_test(test_out_of_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
