/* tests/test_single_collectives.c - collectives of one participant run as
 * Identity (passes/single_collectives.c, docs/COLLECTIVES.md "One
 * participant"), through the public API: every kind, reduction and dtype
 * gives its input back bit for bit on fresh random data, and the lowered
 * graph holds Identity under the collective's name; what must stay a
 * collective stays one (a narrower wire dtype rounds, a group short of
 * num_devices is still an error, RF_SINGLE_COLLECTIVES=keep); gradients
 * through it, twice; the log line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault_sweep.h"
#include "log_collector.h"
#include "testutil.h"

#include <ringflow/collectives.h>
#include <ringflow/gradients.h>
#include <ringflow/log.h>

/* The op the lowered graph runs for node `name`. */
static char *lowered_op(const rf_graph *g, const rf_session_options *o,
                        const char *name) {
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(g, o, &low));
  char *op = NULL;
  for (int i = 0; i < rf_graph_num_nodes(low); i++) {
    rf_node *n = rf_graph_node(low, i);
    if (strcmp(rf_node_name(n), name) == 0) op = strdup(rf_node_op(n));
  }
  rf_graph_free(low);
  return op;
}

static rf_session_options one_cpu(void) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 1;
  o.num_gpu_devices = 0;
  return o;
}

/* Every kind over one device, for one dtype and reduction: the fetched
 * results are the fed tensor, and each node lowers to Identity. */
static void check_kinds(rf_dtype dt, rf_reduction r, uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  int64_t dims[2] = {6, 5};
  rf_shape shape = rf_shape_make(2, dims);
  rf_output x = rf_placeholder(g, "x", dt, shape);
  rf_output y[4];
  rf_all_reduce_n(g, "ar", &x, 1, r, &y[0]);
  rf_all_gather_n(g, "ag", &x, 1, &y[1]);
  rf_reduce_scatter_n(g, "rs", &x, 1, r, &y[2]);
  y[3] = rf_reduce(g, "red", &x, 1, r);
  rf_graph_pop_device(g);
  assert_graph_ok(g);

  rf_tensor *xv = rf_test_random_tensor(rng, dt, shape, -50, 50);
  rf_feed feed = {x, xv};
  rf_tensor *got[4] = {0};
  rf_test_run(g, 1, &feed, 1, y, 4, got);
  for (int i = 0; i < 4; i++) {
    assert_same_bytes(got[i], xv);
    rf_tensor_release(got[i]);
  }
  rf_session_options o = one_cpu();
  for (int i = 0; i < 4; i++) {
    char *op = lowered_op(g, &o, rf_node_name(y[i].node));
    assert_non_null(op);
    assert_string_equal(op, "Identity");
    free(op);
  }
  rf_tensor_release(xv);
  rf_graph_free(g);
}

static void test_every_kind_reduction_and_dtype(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(1);
  const rf_dtype dts[] = {RF_FLOAT32,  RF_FLOAT64, RF_FLOAT16,
                          RF_BFLOAT16, RF_INT32,   RF_INT64};
  const rf_reduction rs[] = {RF_REDUCE_SUM, RF_REDUCE_PROD, RF_REDUCE_MIN,
                             RF_REDUCE_MAX};
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
    for (size_t r = 0; r < sizeof rs / sizeof *rs; r++)
      check_kinds(dts[d], rs[r], &rng);
  check_kinds(RF_FLOAT32, RF_REDUCE_AVG, &rng);
  check_kinds(RF_FLOAT64, RF_REDUCE_AVG, &rng);
}

/* A graph of x (placeholder of dt and shape on cpu:0) and y, its sum
 * all-reduced over that one device under `name`. */
static rf_graph *one_all_reduce(const char *name, rf_dtype dt, rf_shape shape,
                                rf_output *x, rf_output *y) {
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  *x = rf_placeholder(g, "x", dt, shape);
  rf_all_reduce_n(g, name, x, 1, RF_REDUCE_SUM, y);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  return g;
}

/* bfloat16's rounding of a float32 (to nearest, ties to even). */
static float to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &u, 4);
  return f;
}

/* A float32 all-reduce with a bfloat16 wire stays a collective: its one
 * participant's values pass through bfloat16, as with two. */
static void test_narrow_wire_dtype_still_rounds(void **state) {
  (void)state;
  rf_shape shape = rf_shape_of(1, 64);
  rf_output x, y;
  rf_graph *g = one_all_reduce("ar", RF_FLOAT32, shape, &x, &y);
  uint64_t rng = rf_test_rng(2);
  rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT32, shape, -3, 3);
  rf_session_options o = one_cpu();
  o.collective_comm_dtype = "bfloat16";
  char *op = lowered_op(g, &o, rf_node_name(y.node));
  assert_true(op == NULL || strcmp(op, "Identity") != 0);
  free(op);
  rf_session *s;
  assert_ok(rf_session_new(g, &o, &s));
  rf_feed feed = {x, xv};
  rf_tensor *got = NULL;
  assert_ok(rf_session_run(s, &feed, 1, &y, 1, NULL, 0, &got));
  const float *in = rf_tensor_data(xv), *out = rf_tensor_data(got);
  int rounded = 0;
  for (int i = 0; i < 64; i++) {
    assert_true(out[i] == to_bf16(in[i]));
    rounded += out[i] != in[i];
  }
  assert_true(rounded > 0);
  rf_tensor_release(got);
  rf_session_free(s);
  rf_tensor_release(xv);
  rf_graph_free(g);
}

/* The wire dtype narrows float32 only: in a bfloat16 session an int32
 * all-reduce over one device is Identity and exact. A float32 one whose own
 * comm_dtype attr is bfloat16 stays a collective in a float32 session. */
static void test_what_the_wire_leaves(void **state) {
  (void)state;
  rf_shape shape = rf_shape_of(1, 32);
  rf_output x, y;
  rf_graph *g = one_all_reduce("ints", RF_INT32, shape, &x, &y);
  rf_session_options o = one_cpu();
  o.collective_comm_dtype = "bfloat16";
  char *op = lowered_op(g, &o, rf_node_name(y.node));
  assert_non_null(op);
  assert_string_equal(op, "Identity");
  free(op);
  uint64_t rng = rf_test_rng(6);
  rf_tensor *xv = rf_test_random_tensor(&rng, RF_INT32, shape, -1e6, 1e6);
  rf_session *s;
  assert_ok(rf_session_new(g, &o, &s));
  rf_feed feed = {x, xv};
  rf_tensor *got = NULL;
  assert_ok(rf_session_run(s, &feed, 1, &y, 1, NULL, 0, &got));
  assert_same_bytes(got, xv);
  rf_tensor_release(got);
  rf_session_free(s);
  rf_tensor_release(xv);
  rf_graph_free(g);

  g = one_all_reduce("own_wire", RF_FLOAT32, shape, &x, &y);
  assert_ok(rf_all_reduce_set_comm_dtype(y.node, RF_BFLOAT16));
  o = one_cpu();
  op = lowered_op(g, &o, rf_node_name(y.node));
  assert_true(op == NULL || strcmp(op, "Identity") != 0);
  free(op);
  rf_graph_free(g);
}

/* num_devices 2 with one participant in the graph is still the group
 * check's error, not an Identity. */
static void test_short_group_still_an_error(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, 4));
  rf_output y = rf_all_reduce(g, "lonely", x, RF_REDUCE_SUM, 2, "grp");
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  rf_tensor *xv = rf_test_random_tensor(&(uint64_t){3}, RF_FLOAT32,
                                        rf_shape_of(1, 4), -1, 1);
  rf_feed feed = {x, xv};
  rf_tensor *got = NULL;
  rf_status *st = rf_test_try_run(g, &feed, 1, &y, 1, &got);
  assert_status(st, RF_INVALID_ARGUMENT,
                "collective 'grp' (AllReduce) expects 2 participants but the "
                "graph has 1");
  assert_null(got);
  rf_tensor_release(xv);
  rf_graph_free(g);
}

/* The gradient of sum(all_reduce(x) * w) with respect to x and w, built
 * twice through the same collective, against w and all_reduce(x) = x. */
static void test_gradients_twice(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_shape shape = rf_shape_of(2, 3, 4);
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, shape);
  rf_output w = rf_placeholder(g, "w", RF_FLOAT64, shape);
  rf_output y;
  rf_all_reduce_n(g, "ar", &x, 1, RF_REDUCE_SUM, &y);
  rf_output loss = rf_sum(g, "loss", rf_mul(g, NULL, y, w), NULL, -1, false);
  rf_output xs[2] = {x, w}, d1[2], d2[2];
  assert_ok(rf_gradients(g, &loss, 1, xs, 2, NULL, d1));
  assert_ok(rf_gradients(g, &loss, 1, xs, 2, NULL, d2));
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  uint64_t rng = rf_test_rng(4);
  rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT64, shape, -2, 2);
  rf_tensor *wv = rf_test_random_tensor(&rng, RF_FLOAT64, shape, -2, 2);
  rf_feed feeds[2] = {{x, xv}, {w, wv}};
  rf_output fetch[4] = {d1[0], d1[1], d2[0], d2[1]};
  rf_tensor *got[4];
  rf_test_run(g, 1, feeds, 2, fetch, 4, got);
  for (int k = 0; k < 2; k++) {
    assert_same_bytes(got[2 * k], wv);     /* d loss / d x = w */
    assert_same_bytes(got[2 * k + 1], xv); /* d loss / d w = x */
  }
  for (int i = 0; i < 4; i++) rf_tensor_release(got[i]);
  rf_tensor_release(xv);
  rf_tensor_release(wv);
  rf_graph_free(g);
}

/* The log says which collective became Identity; RF_SINGLE_COLLECTIVES=keep
 * keeps the collective, with the same result. */
static void test_log_and_keep(void **state) {
  (void)state;
  rf_shape shape = rf_shape_of(1, 10);
  rf_output x, y;
  rf_graph *g = one_all_reduce("the_sum", RF_INT32, shape, &x, &y);
  uint64_t rng = rf_test_rng(5);
  rf_tensor *xv = rf_test_random_tensor(&rng, RF_INT32, shape, -100, 100);
  rf_feed feed = {x, xv};
  rf_session_options o = one_cpu();

  logs_start(RF_LOG_INFO);
  rf_tensor *got = NULL;
  rf_test_run(g, 1, &feed, 1, &y, 1, &got);
  assert_int_equal(logs_count(RF_LOG_INFO, "collective '",
                              "' (AllReduce) on "
                              "its one device runs as Identity",
                              NULL),
                   1);
  assert_int_equal(logs_count(-1, rf_node_name(y.node), "Identity", NULL), 1);
  assert_ok(rf_set_log_callback(RF_LOG_INFO, NULL, NULL));
  assert_same_bytes(got, xv);
  rf_tensor_release(got);

  setenv("RF_SINGLE_COLLECTIVES", "keep", 1);
  char *op = lowered_op(g, &o, rf_node_name(y.node));
  assert_non_null(op);
  assert_string_equal(op, "AllReduce");
  free(op);
  rf_test_run(g, 1, &feed, 1, &y, 1, &got);
  unsetenv("RF_SINGLE_COLLECTIVES");
  assert_same_bytes(got, xv);
  rf_tensor_release(got);
  rf_tensor_release(xv);
  rf_graph_free(g);
}

/* Two participants are untouched: the pass rewrites only groups of one. */
static void test_two_participants_stay(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x[2], y[2];
  for (int d = 0; d < 2; d++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    assert_ok(rf_graph_push_device(g, dev));
    char name[8];
    snprintf(name, sizeof name, "x%d", d);
    x[d] = rf_placeholder(g, name, RF_FLOAT32, rf_shape_of(1, 8));
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "pair", x, 2, RF_REDUCE_SUM, y);
  assert_graph_ok(g);
  rf_session_options o = one_cpu();
  o.num_cpu_devices = 2;
  for (int d = 0; d < 2; d++) {
    char *op = lowered_op(g, &o, rf_node_name(y[d].node));
    assert_non_null(op);
    assert_string_equal(op, "AllReduce");
    free(op);
  }
  rf_graph_free(g);
}

/* Out of memory anywhere in compiling (the pass included) and running a
 * step of one-device collectives: RESOURCE_EXHAUSTED, nothing leaked, and
 * the input back when the attempt succeeds. */
typedef struct oom_case {
  rf_graph *g;
  rf_output x, y[3];
  rf_tensor *xv;
} oom_case;

static rf_status *oom_attempt(void *arg) {
  oom_case *c = arg;
  rf_session_options o = one_cpu();
  rf_session *s = NULL;
  rf_status *st = rf_session_new(c->g, &o, &s);
  rf_tensor *got[3] = {0};
  rf_feed feed = {c->x, c->xv};
  if (!st) st = rf_session_run(s, &feed, 1, c->y, 3, NULL, 0, got);
  for (int i = 0; i < 3; i++) {
    if (!st) assert_same_bytes(got[i], c->xv);
    rf_tensor_release(got[i]);
  }
  rf_session_free(s);
  return st;
}

static void test_out_of_memory(void **state) {
  (void)state;
  oom_case c;
  c.g = rf_graph_new();
  assert_ok(rf_graph_push_device(c.g, "cpu:0"));
  rf_shape shape = rf_shape_of(1, 40);
  c.x = rf_placeholder(c.g, "x", RF_FLOAT32, shape);
  rf_all_reduce_n(c.g, "ar", &c.x, 1, RF_REDUCE_SUM, &c.y[0]);
  rf_all_gather_n(c.g, "ag", &c.x, 1, &c.y[1]);
  c.y[2] = rf_reduce(c.g, "red", &c.x, 1, RF_REDUCE_MAX);
  rf_graph_pop_device(c.g);
  assert_graph_ok(c.g);
  uint64_t rng = rf_test_rng(7);
  c.xv = rf_test_random_tensor(&rng, RF_FLOAT32, shape, -1, 1);
  assert_ok(oom_attempt(&c)); /* warm-up: registries filled */
  fs_plan p = {.what = "one-device collectives",
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
      cmocka_unit_test(test_every_kind_reduction_and_dtype),
      cmocka_unit_test(test_narrow_wire_dtype_still_rounds),
      cmocka_unit_test(test_what_the_wire_leaves),
      cmocka_unit_test(test_short_group_still_an_error),
      cmocka_unit_test(test_gradients_twice),
      cmocka_unit_test(test_log_and_keep),
      cmocka_unit_test(test_two_participants_stay),
      cmocka_unit_test(test_out_of_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
