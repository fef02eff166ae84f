/* tests/test_session_option_audit.c - session options that change how
 * collectives run, as session.h and docs/COLLECTIVES.md describe them:
 * collective_comm_dtype narrows every float32 all-reduce, those whose shape
 * is known only at run time included (they never fuse, but still travel in
 * the wire dtype), with the same bits as the casts built by hand; the
 * narrowing comm_dtype check applies to such all-reduces too; and
 * rf_session_trace_next_run's argument errors say what is wrong, and which
 * run a trace belongs to. */
#define _GNU_SOURCE /* mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#include <ringflow/collectives.h>

#define NDEV 3
#define LEN 257

static uint64_t rng;

static int setup(void **state) {
  (void)state;
  rng = rf_test_rng(0xa0d17);
  return 0;
}

/* A graph of one all-reduce (sum) over n CPU devices of x_d * x_d, x_d
 * fed with shape (?); when `wire` is a dtype, the input is cast to it by
 * hand and the result back to float32. */
typedef struct one_ar {
  rf_graph *g;
  rf_output x[NDEV], y[NDEV];
} one_ar;

static one_ar build(int n, rf_dtype wire) {
  one_ar c = {.g = rf_graph_new()};
  rf_output in[NDEV], out[NDEV];
  for (int d = 0; d < n; d++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    assert_ok(rf_graph_push_device(c.g, dev));
    c.x[d] = rf_placeholder(c.g, NULL, RF_FLOAT32, rf_shape_of(1, (int64_t)-1));
    in[d] = rf_mul(c.g, NULL, c.x[d], c.x[d]);
    if (wire != RF_DTYPE_INVALID) in[d] = rf_cast(c.g, NULL, in[d], wire);
    rf_graph_pop_device(c.g);
  }
  rf_all_reduce_n(c.g, "g", in, n, RF_REDUCE_SUM, out);
  for (int d = 0; d < n; d++)
    c.y[d] = wire == RF_DTYPE_INVALID ? out[d]
                                      : rf_cast(c.g, NULL, out[d], RF_FLOAT32);
  assert_graph_ok(c.g);
  return c;
}

static void run(const one_ar *c, int n, const char *comm, int64_t bucket,
                rf_tensor *const *vals, rf_tensor **out) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = n;
  o.num_threads = 2;
  o.collective_timeout_ms = 30000;
  o.collective_comm_dtype = comm;
  o.collective_bucket_bytes = bucket;
  rf_session *s;
  assert_ok(rf_session_new(c->g, &o, &s));
  rf_feed f[NDEV];
  for (int d = 0; d < n; d++) f[d] = (rf_feed){c->x[d], vals[d]};
  assert_ok(rf_session_run(s, f, n, c->y, n, NULL, 0, out));
  rf_session_free(s);
}

static bool same_bytes(const rf_tensor *a, const rf_tensor *b) {
  return rf_tensor_nbytes(a) == rf_tensor_nbytes(b) &&
         memcmp(rf_tensor_data(a), rf_tensor_data(b), rf_tensor_nbytes(a)) == 0;
}

/* A float32 all-reduce whose shape the graph does not know travels in the
 * session's wire dtype like any other (session.h, collective_comm_dtype):
 * bit for bit the casts built by hand, on one device and on several, with
 * buckets or without; it used to stay float32 (exact) because only
 * all-reduces that could fuse were narrowed. */
static void test_comm_dtype_narrows_unknown_shapes(void **state) {
  (void)state;
  static const rf_dtype wires[] = {RF_BFLOAT16, RF_FLOAT16};
  for (int n = 1; n <= NDEV; n += NDEV - 1)
    for (int wi = 0; wi < 2; wi++) {
      rf_tensor *vals[NDEV];
      for (int d = 0; d < n; d++)
        vals[d] =
            rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, LEN), -3, 3);
      one_ar plain = build(n, RF_DTYPE_INVALID), hand = build(n, wires[wi]);
      rf_tensor *exact[NDEV], *want[NDEV], *got[NDEV];
      run(&plain, n, NULL, 0, vals, exact);
      run(&hand, n, NULL, 0, vals, want);
      for (int d = 0; d < n; d++) assert_false(same_bytes(want[d], exact[d]));
      for (int bucket = 0; bucket < 2; bucket++) {
        run(&plain, n, rf_dtype_name(wires[wi]),
            bucket ? RF_BUCKET_BYTES_AUTO : 0, vals, got);
        for (int d = 0; d < n; d++) {
          if (!same_bytes(got[d], want[d]))
            fail_msg("%d devices, wire %s, bucket %d: device %d not narrowed",
                     n, rf_dtype_name(wires[wi]), bucket, d);
          rf_tensor_release(got[d]);
        }
      }
      /* "float32" and NULL: exact */
      run(&plain, n, "float32", 0, vals, got);
      for (int d = 0; d < n; d++) {
        assert_true(same_bytes(got[d], exact[d]));
        rf_tensor_release(got[d]);
      }
      for (int d = 0; d < n; d++) {
        rf_tensor_release(exact[d]);
        rf_tensor_release(want[d]);
        rf_tensor_release(vals[d]);
      }
      rf_graph_free(plain.g);
      rf_graph_free(hand.g);
    }
}

/* rf_graph_lower shows the casts of such an all-reduce. */
static void test_lower_shows_casts_of_unknown_shapes(void **state) {
  (void)state;
  one_ar c = build(2, RF_DTYPE_INVALID);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 2;
  o.collective_comm_dtype = "float16";
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(c.g, &o, &low));
  int casts = 0, to_half = 0;
  for (int i = 0; i < rf_graph_num_nodes(low); i++) {
    rf_node *n = rf_graph_node(low, i);
    if (strcmp(rf_node_op(n), "Cast") != 0) continue;
    casts++;
    rf_dtype dst;
    assert_ok(rf_node_attr_dtype(n, "DstT", &dst));
    to_half += dst == RF_FLOAT16;
  }
  assert_int_equal(casts, 4); /* to the wire and back, on each device */
  assert_int_equal(to_half, 2);
  rf_graph_free(low);
  rf_graph_free(c.g);
}

/* A narrowing comm_dtype attr (through the node builder, as a graph file
 * may have it) on an all-reduce that is not float32 is INVALID_ARGUMENT
 * naming the node whether or not its shape is known. */
static void test_narrowing_attr_on_integer_unknown_shape(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_node *w[2];
  for (int d = 0; d < 2; d++) {
    char dev[16], name[16];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    snprintf(name, sizeof name, "w%d", d);
    assert_ok(rf_graph_push_device(g, dev));
    rf_output x =
        rf_placeholder(g, NULL, RF_INT32, rf_shape_of(1, (int64_t)-1));
    rf_node_builder *b = rf_node_builder_new(g, "AllReduce", name);
    rf_node_builder_input(b, x);
    rf_node_builder_attr_string(b, "reduction", "sum");
    rf_node_builder_attr_int(b, "num_devices", 2);
    rf_node_builder_attr_string(b, "shared_name", "w");
    rf_node_builder_attr_string(b, "comm_dtype", "bfloat16");
    assert_ok(rf_node_builder_finish(b, &w[d]));
    rf_graph_pop_device(g);
  }
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 2;
  rf_graph *low = NULL;
  assert_status(rf_graph_lower(g, &o, &low), RF_INVALID_ARGUMENT,
                "node 'w0' (AllReduce) on cpu:0: comm_dtype bfloat16 applies "
                "to float32 all-reduces only, this one is int32");
  rf_graph_free(g);
}

/* An empty trace path is refused as such, not as a NULL argument. */
static void test_trace_empty_path(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, (int64_t)2));
  rf_session *s = rf_test_cpu_session(g, 1);
  assert_status(rf_session_trace_next_run(s, ""), RF_INVALID_ARGUMENT,
                "rf_session_trace_next_run: empty path");
  assert_status(rf_session_trace_next_run(s, NULL), RF_INVALID_ARGUMENT,
                "rf_session_trace_next_run: NULL argument");
  rf_session_free(s);
  rf_graph_free(g);
}

/* Tracing stays armed through a run refused before its step, and a step
 * that fails writes no trace and disarms it (session.h). */
static void test_trace_armed_until_a_step_runs(void **state) {
  (void)state;
  char dir[] = "/tmp/rf_trace_audit_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char a[64], b[64];
  snprintf(a, sizeof a, "%s/a.json", dir);
  snprintf(b, sizeof b, "%s/b.json", dir);
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, (int64_t)2));
  rf_output y = rf_identity(g, "y", x);
  rf_output v = rf_variable(g, "v", RF_FLOAT32, rf_shape_of(1, (int64_t)2));
  rf_output r = rf_read_variable(g, "r", v);
  assert_graph_ok(g);
  rf_session *s = rf_test_cpu_session(g, 1);
  rf_tensor *good = rf_test_random_tensor(&rng, RF_FLOAT32,
                                          rf_shape_of(1, (int64_t)2), -1, 1);
  rf_tensor *bad = rf_test_random_tensor(&rng, RF_FLOAT32,
                                         rf_shape_of(1, (int64_t)3), -1, 1);
  rf_tensor *out = NULL;
  assert_ok(rf_session_trace_next_run(s, a));
  rf_feed f = {x, bad};
  assert_status(rf_session_run(s, &f, 1, &y, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, "feed for node 'x'");
  assert_int_not_equal(access(a, F_OK), 0);
  f.value = good;
  assert_ok(rf_session_run(s, &f, 1, &y, 1, NULL, 0, &out));
  rf_tensor_release(out);
  assert_int_equal(access(a, F_OK), 0);
  assert_ok(rf_session_trace_next_run(s, b));
  assert_status(rf_session_run(s, NULL, 0, &r, 1, NULL, 0, &out),
                RF_FAILED_PRECONDITION, "'v'");
  assert_int_not_equal(access(b, F_OK), 0);
  assert_ok(rf_session_run(s, &f, 1, &y, 1, NULL, 0, &out));
  rf_tensor_release(out);
  assert_int_not_equal(access(b, F_OK), 0);
  rf_tensor_release(good);
  rf_tensor_release(bad);
  rf_session_free(s);
  rf_graph_free(g);
  unlink(a);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_comm_dtype_narrows_unknown_shapes),
      cmocka_unit_test(test_lower_shows_casts_of_unknown_shapes),
      cmocka_unit_test(test_narrowing_attr_on_integer_unknown_shape),
      cmocka_unit_test(test_trace_empty_path),
      cmocka_unit_test(test_trace_armed_until_a_step_runs),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
