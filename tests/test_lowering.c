/* tests/test_lowering.c - the structure of lowered graphs (docs/COLLECTIVES.md,
 * "Lowering"): what rf_graph_lower makes of Reduce and Broadcast (node kinds,
 * devices, data and control edges, attrs, Const versus Shape), the
 * single-device Broadcast removal, and every compile-time error of collectives:
 * missing device, no input on the Reduce's device, incomplete groups, two
 * participants on one device, unlowered stubs, gradients that do not exist.
 * Lowered graphs also run, against float64 references. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "kernels/kernel.h"
#include "passes/lower_collectives.h"
#include "ringflow/collectives.h"
#include "testutil.h"

/* ---- helpers ---- */

/* Session options with ndev CPU devices. */
static rf_session_options cpus(int ndev) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = ndev;
  return o;
}

static rf_graph *lower(const rf_graph *g, int ndev) {
  rf_session_options o = cpus(ndev);
  rf_graph *out = NULL;
  assert_ok(rf_graph_lower(g, &o, &out));
  return out;
}

static rf_status *lower_status(const rf_graph *g, int ndev) {
  rf_session_options o = cpus(ndev);
  rf_graph *out = NULL;
  rf_status *st = rf_graph_lower(g, &o, &out);
  assert_null(out);
  return st;
}

/* Asserts g (built without error) fails to lower on ndev devices with
 * INVALID_ARGUMENT containing sub; frees g. */
static void expect_lower_error(rf_graph *g, int ndev, const char *sub) {
  assert_graph_ok(g);
  assert_status(lower_status(g, ndev), RF_INVALID_ARGUMENT, sub);
  rf_graph_free(g);
}

/* The status of running fetch once in a session of ndev devices (which
 * must be made): a collective error shows up on the first run. */
static rf_status *run_status(rf_graph *g, int ndev, rf_output fetch) {
  rf_session_options o = cpus(ndev);
  rf_session *sess;
  assert_ok(rf_session_new(g, &o, &sess));
  rf_tensor *out = NULL;
  rf_status *st = rf_session_run(sess, NULL, 0, &fetch, 1, NULL, 0, &out);
  assert_null(out);
  rf_session_free(sess);
  return st;
}

/* Nodes of op `op` in g, in insertion order; returns their count. */
static int find_ops(const rf_graph *g, const char *op, rf_node **out, int max) {
  int n = 0;
  for (int i = 0; i < rf_graph_num_nodes(g); i++) {
    rf_node *x = rf_graph_node(g, i);
    if (strcmp(rf_node_op(x), op) != 0) continue;
    if (n < max) out[n] = x;
    n++;
  }
  return n;
}

/* The node of op `op` on `device`; fails unless exactly one exists. */
static rf_node *one_on(const rf_graph *g, const char *op, const char *device) {
  rf_node *found = NULL;
  int n = 0;
  for (int i = 0; i < rf_graph_num_nodes(g); i++) {
    rf_node *x = rf_graph_node(g, i);
    if (strcmp(rf_node_op(x), op) == 0 &&
        strcmp(rf_node_device(x), device) == 0)
      found = x, n++;
  }
  if (n != 1) fprintf(stderr, "%d %s nodes on %s, want 1\n", n, op, device);
  assert_int_equal(n, 1);
  return found;
}

static rf_node *node(const rf_graph *g, const char *name) {
  rf_node *n = rf_graph_find_node(g, name);
  if (!n) fprintf(stderr, "no node '%s'\n", name);
  assert_non_null(n);
  return n;
}

static bool has_control(const rf_node *dst, const rf_node *src) {
  for (int i = 0; i < rf_node_num_control_inputs(dst); i++)
    if (rf_node_control_input(dst, i) == src) return true;
  return false;
}

static void assert_control(const rf_node *dst, const rf_node *src) {
  if (!has_control(dst, src))
    fprintf(stderr, "no control edge %s -> %s\n", rf_node_name(src),
            rf_node_name(dst));
  assert_true(has_control(dst, src));
}

/* Asserts input k of n is output `index` of the node named `src`. */
static void assert_input(const rf_node *n, int k, const rf_node *src,
                         int index) {
  rf_output in = rf_node_input(n, k);
  if (in.node != src || in.index != index)
    fprintf(stderr, "input %d of %s is %s:%d, want %s:%d\n", k, rf_node_name(n),
            in.node ? rf_node_name(in.node) : "-", in.index, rf_node_name(src),
            index);
  assert_ptr_equal(in.node, src);
  assert_int_equal(in.index, index);
}

static void assert_participant_attrs(const rf_node *n, const char *shared,
                                     int64_t num_devices, rf_dtype t) {
  const char *s;
  int64_t nd;
  rf_dtype dt;
  assert_ok(rf_node_attr_string(n, "shared_name", &s));
  assert_string_equal(s, shared);
  assert_ok(rf_node_attr_int(n, "num_devices", &nd));
  assert_int_equal(nd, num_devices);
  assert_ok(rf_node_attr_dtype(n, "T", &dt));
  assert_int_equal(dt, t);
}

static rf_output ph(rf_graph *g, const char *name, const char *dev,
                    rf_shape s) {
  assert_ok(rf_graph_push_device(g, dev));
  rf_output x = rf_placeholder(g, name, RF_FLOAT64, s);
  rf_graph_pop_device(g);
  return x;
}

static rf_output ident(rf_graph *g, const char *name, const char *dev,
                       rf_output x) {
  assert_ok(rf_graph_push_device(g, dev));
  rf_output y = rf_identity(g, name, x);
  rf_graph_pop_device(g);
  return y;
}

static rf_node *noop(rf_graph *g, const char *name, const char *dev) {
  assert_ok(rf_graph_push_device(g, dev));
  rf_node *n = rf_noop(g, name);
  rf_graph_pop_device(g);
  return n;
}

static rf_tensor *random64(uint64_t *rng, rf_shape s) {
  return rf_test_random_tensor(rng, RF_FLOAT64, s, -3, 3);
}

/* Runs g on ndev devices with x fed random values of shape s: output 0 of
 * each node in names[0, n) must be a copy of them. */
static void expect_copies(rf_graph *g, int ndev, rf_output x, rf_shape s,
                          const char *const *names, int n, uint64_t salt) {
  uint64_t rng = rf_test_seed() + salt;
  rf_tensor *in = random64(&rng, s), *out[8];
  rf_feed feed = {x, in};
  rf_output f[8];
  assert_true(n <= 8);
  for (int i = 0; i < n; i++)
    f[i] = (rf_output){rf_graph_find_node(g, names[i]), 0};
  rf_test_run(g, ndev, &feed, 1, f, n, out);
  double *want = rf_test_to_doubles(in);
  for (int i = 0; i < n; i++) {
    assert_tensor_near(out[i], s, want, 0);
    rf_tensor_release(out[i]);
  }
  free(want);
  rf_tensor_release(in);
}

/* ---- Reduce ---- */

/* Reduce on cpu:2 over inputs on cpu:1, cpu:2, cpu:0; a control input; data
 * consumers on cpu:2 and cpu:3 and a control consumer on cpu:0. */
static void test_reduce_structure(void **state) {
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(2, (int64_t)2, (int64_t)3);
  rf_output xs[3] = {ph(g, "x0", "cpu:1", s), ph(g, "x1", "cpu:2", s),
                     ph(g, "x2", "cpu:0", s)};
  rf_node *gate = noop(g, "gate", "cpu:3");
  assert_ok(rf_graph_push_device(g, "cpu:2"));
  rf_output r = rf_reduce(g, "red", xs, 3, RF_REDUCE_SUM);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  assert_string_equal(rf_node_device(r.node), "cpu:2");
  assert_ok(rf_graph_add_control_edge(g, gate, r.node));
  ident(g, "c_same", "cpu:2", r);
  ident(g, "c_other", "cpu:3", r);
  rf_node *after = noop(g, "after", "cpu:0");
  assert_ok(rf_graph_add_control_edge(g, r.node, after));
  assert_graph_ok(g);

  rf_graph *lg = lower(g, 4);
  rf_node *tmp[8];
  assert_int_equal(find_ops(lg, "Reduce", tmp, 8), 0);
  assert_null(rf_graph_find_node(lg, "red"));
  assert_int_equal(find_ops(lg, "_ReduceRecv", tmp, 8), 1);
  assert_int_equal(find_ops(lg, "_ReduceSend", tmp, 8), 2);
  assert_int_equal(find_ops(lg, "AddN", tmp, 8), 0);
  rf_node *recv = one_on(lg, "_ReduceRecv", "cpu:2");
  rf_node *send1 = one_on(lg, "_ReduceSend", "cpu:1");
  rf_node *send0 = one_on(lg, "_ReduceSend", "cpu:0");
  /* Recv fed by the input on its own device; each Send by its device's. */
  assert_input(recv, 0, node(lg, "x1"), 0);
  assert_input(send1, 0, node(lg, "x0"), 0);
  assert_input(send0, 0, node(lg, "x2"), 0);
  assert_int_equal(rf_node_num_outputs(send0), 0);
  /* Names derive from the original's (the lowering once wrote '' and '_1'). */
  assert_string_equal(rf_node_name(recv), "red/_ReduceRecv");
  assert_string_equal(rf_node_name(send1), "red/_ReduceSend");
  assert_string_equal(rf_node_name(send0), "red/_ReduceSend_1");
  rf_node *parts[3] = {recv, send1, send0};
  for (int i = 0; i < 3; i++) { /* compile's note of the group's devices */
    const char *devs;
    assert_ok(rf_node_attr_string(parts[i], "_devices", &devs));
    assert_string_equal(devs, "cpu:0,cpu:1,cpu:2"); /* device order */
  }
  for (int i = 0; i < 3; i++) {
    assert_participant_attrs(parts[i], "red", 3, RF_FLOAT64);
    const char *red;
    assert_ok(rf_node_attr_string(parts[i], "reduction", &red));
    assert_string_equal(red, "sum");
    assert_control(parts[i], node(lg, "gate")); /* control inputs copied */
  }
  /* Consumers read the Recv and wait for every Send. */
  const char *consumers[2] = {"c_same", "c_other"};
  for (int i = 0; i < 2; i++) {
    rf_node *c = node(lg, consumers[i]);
    assert_input(c, 0, recv, 0);
    assert_control(c, send0);
    assert_control(c, send1);
  }
  rf_node *a = node(lg, "after");
  assert_control(a, recv);
  assert_control(a, send0);
  assert_control(a, send1);
  rf_graph_free(lg);

  /* It runs: the consumer on cpu:3 gets the sum. */
  uint64_t rng = rf_test_seed();
  rf_tensor *in[3], *out[2];
  rf_feed feeds[3];
  for (int i = 0; i < 3; i++) {
    in[i] = random64(&rng, s);
    feeds[i] = (rf_feed){xs[i], in[i]};
  }
  rf_output f[2] = {{rf_graph_find_node(g, "c_other"), 0}, r};
  rf_test_run(g, 4, feeds, 3, f, 2, out);
  double want[6];
  for (int e = 0; e < 6; e++)
    want[e] = rf_tensor_get(in[0], e) + rf_tensor_get(in[1], e) +
              rf_tensor_get(in[2], e);
  for (int i = 0; i < 2; i++) {
    assert_tensor_near(out[i], s, want, 1e-12);
    rf_tensor_release(out[i]);
  }
  for (int i = 0; i < 3; i++) rf_tensor_release(in[i]);
  rf_graph_free(g);
}

/* Several inputs on one device are summed there first (on the receiver and
 * on a sender), so each device takes part once; the first same-device input
 * feeds the Recv. */
static void test_reduce_sums_inputs_per_device(void **state) {
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(1, (int64_t)5);
  rf_output xs[5] = {ph(g, "a0", "cpu:0", s), ph(g, "b0", "cpu:1", s),
                     ph(g, "a1", "cpu:0", s), ph(g, "b1", "cpu:1", s),
                     ph(g, "c0", "cpu:2", s)};
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output r = rf_reduce(g, "sum5", xs, 5, RF_REDUCE_SUM);
  rf_graph_pop_device(g);
  ident(g, "y", "cpu:1", r);
  assert_graph_ok(g);

  rf_graph *lg = lower(g, 3);
  rf_node *tmp[8];
  assert_int_equal(find_ops(lg, "AddN", tmp, 8), 2);
  rf_node *add0 = one_on(lg, "AddN", "cpu:0");
  rf_node *add1 = one_on(lg, "AddN", "cpu:1");
  assert_int_equal(rf_node_num_inputs(add0), 2);
  assert_input(add0, 0, node(lg, "a0"), 0);
  assert_input(add0, 1, node(lg, "a1"), 0);
  assert_input(add1, 0, node(lg, "b0"), 0);
  assert_input(add1, 1, node(lg, "b1"), 0);
  rf_node *recv = one_on(lg, "_ReduceRecv", "cpu:0");
  assert_input(recv, 0, add0, 0);
  assert_input(one_on(lg, "_ReduceSend", "cpu:1"), 0, add1, 0);
  assert_input(one_on(lg, "_ReduceSend", "cpu:2"), 0, node(lg, "c0"), 0);
  assert_int_equal(find_ops(lg, "_ReduceSend", tmp, 8), 2);
  /* num_devices counts devices, not inputs. */
  assert_participant_attrs(recv, "sum5", 3, RF_FLOAT64);
  rf_graph_free(lg);

  uint64_t rng = rf_test_seed() + 1;
  rf_tensor *in[5], *out;
  rf_feed feeds[5];
  double want[5] = {0};
  for (int i = 0; i < 5; i++) {
    in[i] = random64(&rng, s);
    feeds[i] = (rf_feed){xs[i], in[i]};
    for (int e = 0; e < 5; e++) want[e] += rf_tensor_get(in[i], e);
  }
  rf_output y = {rf_graph_find_node(g, "y"), 0};
  rf_test_run(g, 3, feeds, 5, &y, 1, &out);
  assert_tensor_near(out, s, want, 1e-12);
  rf_tensor_release(out);
  for (int i = 0; i < 5; i++) rf_tensor_release(in[i]);
  rf_graph_free(g);
}

/* A Reduce whose inputs all sit on its device lowers to a Recv alone. */
static void test_reduce_single_device(void **state) {
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(1, (int64_t)3);
  rf_output xs[2] = {ph(g, "p", "cpu:1", s), ph(g, "q", "cpu:1", s)};
  rf_output r = rf_reduce(g, "r1", xs, 2, RF_REDUCE_SUM);
  assert_graph_ok(g);
  assert_string_equal(rf_node_device(r.node), "cpu:1"); /* first input's */
  rf_graph *lg = lower(g, 2);
  rf_node *tmp[4];
  assert_int_equal(find_ops(lg, "_ReduceSend", tmp, 4), 0);
  rf_node *recv = one_on(lg, "_ReduceRecv", "cpu:1");
  assert_participant_attrs(recv, "r1", 1, RF_FLOAT64);
  assert_input(recv, 0, one_on(lg, "AddN", "cpu:1"), 0);
  rf_graph_free(lg);
  rf_graph_free(g);
}

/* Other reductions cannot be combined locally by AddN (the lowering once
 * summed them: a Reduce(max) of a, b on one device and c on another gave
 * max(a + b, c)). */
static void test_reduce_non_sum_inputs_sharing_a_device(void **state) {
  static const rf_reduction reds[] = {RF_REDUCE_MAX, RF_REDUCE_MIN,
                                      RF_REDUCE_PROD, RF_REDUCE_AVG};
  rf_shape s = rf_shape_of(1, (int64_t)3);
  for (int i = 0; i < 4; i++) {
    rf_graph *g = rf_graph_new();
    rf_output xs[3] = {ph(g, "a", "cpu:0", s), ph(g, "b", "cpu:0", s),
                       ph(g, "c", "cpu:1", s)};
    rf_reduce(g, "r", xs, 3, reds[i]);
    assert_graph_ok(g);
    assert_status(lower_status(g, 2), RF_UNIMPLEMENTED, "node 'r' (Reduce, ");
    assert_status(lower_status(g, 2), RF_UNIMPLEMENTED,
                  "has 2 inputs on cpu:0: only a sum combines inputs");
    rf_graph_free(g);
    /* One input per device is fine, and runs: avg divides by 3. */
    g = rf_graph_new();
    xs[1] = ph(g, "b", "cpu:1", s);
    xs[0] = ph(g, "a", "cpu:0", s);
    xs[2] = ph(g, "c", "cpu:2", s);
    rf_output r = rf_reduce(g, "r", xs, 3, reds[i]);
    assert_graph_ok(g);
    uint64_t rng = rf_test_seed() + 10 + (uint64_t)i;
    rf_tensor *in[3], *out;
    rf_feed f[3];
    double want[3];
    for (int k = 0; k < 3; k++) {
      in[k] = rf_test_random_tensor(&rng, RF_FLOAT64, s, 0.5, 2);
      f[k] = (rf_feed){xs[k], in[k]};
    }
    for (int e = 0; e < 3; e++) {
      double v[3] = {rf_tensor_get(in[0], e), rf_tensor_get(in[1], e),
                     rf_tensor_get(in[2], e)};
      double mx = v[0] > v[1] ? v[0] : v[1], mn = v[0] < v[1] ? v[0] : v[1];
      mx = mx > v[2] ? mx : v[2];
      mn = mn < v[2] ? mn : v[2];
      want[e] = reds[i] == RF_REDUCE_MAX    ? mx
                : reds[i] == RF_REDUCE_MIN  ? mn
                : reds[i] == RF_REDUCE_PROD ? v[0] * v[1] * v[2]
                                            : (v[0] + v[1] + v[2]) / 3;
    }
    rf_test_run(g, 3, f, 3, &r, 1, &out);
    assert_tensor_near(out, s, want, 1e-12);
    rf_tensor_release(out);
    for (int k = 0; k < 3; k++) rf_tensor_release(in[k]);
    rf_graph_free(g);
  }
}

/* ---- Broadcast ---- */

/* Broadcast on cpu:1 of a fully known (2, 3) tensor; consumers: two on cpu:1,
 * two on cpu:2, one on cpu:3; a control consumer on cpu:0; a control input. */
static void test_broadcast_structure(void **state) {
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(2, (int64_t)2, (int64_t)3);
  rf_output x = ph(g, "x", "cpu:1", s);
  rf_node *gate = noop(g, "gate", "cpu:2");
  rf_output b = rf_broadcast(g, "bc", x);
  assert_graph_ok(g);
  assert_string_equal(rf_node_device(b.node), "cpu:1");
  assert_ok(rf_graph_add_control_edge(g, gate, b.node));
  ident(g, "s1", "cpu:1", b);
  ident(g, "s2", "cpu:1", b);
  ident(g, "t1", "cpu:2", b);
  ident(g, "t2", "cpu:2", b);
  ident(g, "u1", "cpu:3", b);
  rf_node *after = noop(g, "after", "cpu:0");
  assert_ok(rf_graph_add_control_edge(g, b.node, after));
  assert_graph_ok(g);

  rf_graph *lg = lower(g, 4);
  rf_node *tmp[8];
  assert_int_equal(find_ops(lg, "Broadcast", tmp, 8), 0);
  assert_int_equal(find_ops(lg, "_BroadcastSend", tmp, 8), 1);
  assert_int_equal(find_ops(lg, "_BroadcastRecv", tmp, 8), 2);
  assert_int_equal(find_ops(lg, "Shape", tmp, 8), 0);
  rf_node *send = one_on(lg, "_BroadcastSend", "cpu:1");
  rf_node *r2 = one_on(lg, "_BroadcastRecv", "cpu:2");
  rf_node *r3 = one_on(lg, "_BroadcastRecv", "cpu:3");
  assert_string_equal(rf_node_name(send), "bc/_BroadcastSend");
  assert_string_equal(rf_node_name(r2), "bc/_BroadcastRecv");
  assert_string_equal(rf_node_name(r3), "bc/_BroadcastRecv_1");
  assert_string_equal(rf_node_name(rf_node_input(r3, 0).node), "bc/Const_1");
  assert_input(send, 0, node(lg, "x"), 0);
  rf_node *parts[3] = {send, r2, r3};
  for (int i = 0; i < 3; i++) {
    /* num_devices = distinct devices with data consumers, plus the sender */
    assert_participant_attrs(parts[i], "bc", 3, RF_FLOAT64);
    assert_control(parts[i], node(lg, "gate"));
  }
  /* Same-device consumers read the input itself, after the Send. */
  rf_node *x_node = node(lg, "x");
  const char *same[2] = {"s1", "s2"};
  for (int i = 0; i < 2; i++) {
    assert_input(node(lg, same[i]), 0, x_node, 0);
    assert_control(node(lg, same[i]), send);
  }
  assert_input(node(lg, "t1"), 0, r2, 0);
  assert_input(node(lg, "t2"), 0, r2, 0);
  assert_input(node(lg, "u1"), 0, r3, 0);
  assert_control(node(lg, "after"), send);
  /* Each Recv's shape: an int32 Const on its own device holding (2, 3). */
  rf_node *recvs[2] = {r2, r3};
  const char *devs[2] = {"cpu:2", "cpu:3"};
  for (int i = 0; i < 2; i++) {
    rf_output k = rf_node_input(recvs[i], 0);
    assert_string_equal(rf_node_op(k.node), "Const");
    assert_string_equal(rf_node_device(k.node), devs[i]);
    assert_int_equal(rf_output_dtype(k), RF_INT32);
    rf_shape ks = rf_output_shape(k);
    assert_int_equal(ks.rank, 1);
    assert_int_equal(ks.dims[0], 2);
    rf_shape rs = rf_output_shape((rf_output){recvs[i], 0});
    assert_true(rf_shape_equal(&rs, &s));
  }
  assert_ptr_not_equal(rf_node_input(r2, 0).node, rf_node_input(r3, 0).node);
  rf_graph_free(lg);

  const char *const names[5] = {"s1", "s2", "t1", "t2", "u1"};
  expect_copies(g, 4, x, s, names, 5, 2);
  rf_graph_free(g);
}

/* A partly unknown shape: ONE Shape node on the sender feeds every Recv. */
static void test_broadcast_unknown_shape_uses_one_shape_node(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x = ph(g, "x", "cpu:0", rf_shape_of(2, (int64_t)-1, (int64_t)3));
  rf_output b = rf_broadcast(g, "bu", x);
  ident(g, "y1", "cpu:1", b);
  ident(g, "y2", "cpu:2", b);
  ident(g, "y3", "cpu:3", b);
  assert_graph_ok(g);
  rf_graph *lg = lower(g, 4);
  rf_node *shapes[4], *tmp[4];
  assert_int_equal(find_ops(lg, "Shape", shapes, 4), 1);
  assert_int_equal(find_ops(lg, "Const", tmp, 4), 0);
  assert_string_equal(rf_node_device(shapes[0]), "cpu:0");
  assert_input(shapes[0], 0, node(lg, "x"), 0);
  /* int64: the dims are known only at run time, and may pass INT32_MAX */
  assert_int_equal(rf_output_dtype((rf_output){shapes[0], 0}), RF_INT64);
  const char *devs[3] = {"cpu:1", "cpu:2", "cpu:3"};
  for (int i = 0; i < 3; i++) {
    rf_node *r = one_on(lg, "_BroadcastRecv", devs[i]);
    assert_input(r, 0, shapes[0], 0);
    assert_participant_attrs(r, "bu", 4, RF_FLOAT64);
  }
  rf_graph_free(lg);

  const char *const names[3] = {"y1", "y2", "y3"};
  expect_copies(g, 4, x, rf_shape_of(2, (int64_t)5, (int64_t)3), names, 3, 3);
  rf_graph_free(g);
}

/* Consumers only on the Broadcast's device (and a control consumer
 * elsewhere): the Broadcast disappears. */
static void test_single_device_broadcast_removed(void **state) {
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(1, (int64_t)4);
  rf_output x = ph(g, "x", "cpu:1", s);
  rf_output x2 = ident(g, "x2", "cpu:1", x);
  rf_node *gate = noop(g, "gate", "cpu:1");
  rf_output b = rf_broadcast(g, "lonely", x2);
  assert_ok(rf_graph_add_control_edge(g, gate, b.node));
  ident(g, "y", "cpu:1", b);
  rf_node *after = noop(g, "after", "cpu:0");
  assert_ok(rf_graph_add_control_edge(g, b.node, after));
  assert_graph_ok(g);
  rf_graph *lg = lower(g, 2);
  rf_node *tmp[4];
  assert_null(rf_graph_find_node(lg, "lonely"));
  assert_int_equal(find_ops(lg, "Broadcast", tmp, 4), 0);
  assert_int_equal(find_ops(lg, "_BroadcastSend", tmp, 4), 0);
  assert_int_equal(find_ops(lg, "_BroadcastRecv", tmp, 4), 0);
  assert_input(node(lg, "y"), 0, node(lg, "x2"), 0);
  assert_control(node(lg, "after"), node(lg, "x2"));
  assert_control(node(lg, "y"), node(lg, "gate")); /* its control input kept */
  assert_int_equal(rf_graph_num_nodes(lg), rf_graph_num_nodes(g) - 1);
  rf_graph_free(lg);
  rf_graph_free(g);
}

/* Reduce feeding Broadcast feeding consumers everywhere (the gradient of a
 * Broadcast's shape): both lower in one pass. */
static void test_reduce_then_broadcast(void **state) {
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(1, (int64_t)3);
  rf_output xs[3] = {ph(g, "x0", "cpu:0", s), ph(g, "x1", "cpu:1", s),
                     ph(g, "x2", "cpu:2", s)};
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output r = rf_reduce(g, "r", xs, 3, RF_REDUCE_SUM);
  rf_output b = rf_broadcast(g, "b", r);
  rf_graph_pop_device(g);
  ident(g, "y0", "cpu:0", b);
  ident(g, "y2", "cpu:2", b);
  assert_graph_ok(g);
  rf_graph *lg = lower(g, 3);
  rf_node *recv = one_on(lg, "_ReduceRecv", "cpu:1");
  rf_node *send = one_on(lg, "_BroadcastSend", "cpu:1");
  assert_input(send, 0, recv, 0);
  /* The Reduce's Sends must run whenever the Broadcast's Send does. */
  assert_control(send, one_on(lg, "_ReduceSend", "cpu:0"));
  assert_control(send, one_on(lg, "_ReduceSend", "cpu:2"));
  rf_graph_free(lg);
  rf_graph_free(g);
}

/* ---- errors ---- */

/* Devices known when the Reduce is built: rf_reduce refuses it
 * (tests/test_early_validation.c); moved there later, the lowering does. */
static void test_reduce_without_input_on_its_device(void **state) {
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(1, (int64_t)3);
  rf_output xs[2] = {ph(g, "x1", "cpu:1", s), ph(g, "x2", "cpu:2", s)};
  rf_output r = rf_reduce(g, "misplaced", xs, 2, RF_REDUCE_SUM);
  assert_graph_ok(g);
  assert_ok(rf_node_set_device(r.node, "cpu:0"));
  assert_status(lower_status(g, 3), RF_INVALID_ARGUMENT,
                "No input tensor uses the same device as the Reduce op");
  assert_status(lower_status(g, 3), RF_INVALID_ARGUMENT, "'misplaced'");
  /* worded as rf_reduce words it: the inputs' devices too */
  assert_status(lower_status(g, 3), RF_INVALID_ARGUMENT,
                "node 'misplaced' is on cpu:0, its inputs on cpu:1, cpu:2");
  /* A session reports it before anything runs. */
  assert_status(run_status(g, 3, r), RF_INVALID_ARGUMENT,
                "No input tensor uses the same device");
  rf_graph_free(g);
}

static void test_collective_input_needs_device(void **state) {
  rf_shape s = rf_shape_of(1, (int64_t)3);
  for (int which = 0; which < 7; which++) {
    rf_graph *g = rf_graph_new();
    rf_output x = rf_placeholder(g, "nodev", RF_FLOAT32, s);
    rf_output d = ph(g, "dev", "cpu:1", s);
    rf_output ins[2] = {d, x}, outs[2] = {{NULL, 0}, {NULL, 0}};
    rf_output y = {NULL, 0};
    switch (which) {
      case 0: y = rf_all_reduce(g, "ar", x, RF_REDUCE_SUM, 2, "grp"); break;
      case 1: rf_all_reduce_n(g, "arn", ins, 2, RF_REDUCE_SUM, outs); break;
      case 2: y = rf_reduce(g, "red", ins, 2, RF_REDUCE_SUM); break;
      case 3: y = rf_broadcast(g, "bc", x); break;
      case 4: rf_all_gather_n(g, "ag", ins, 2, outs); break;
      case 5: rf_reduce_scatter_n(g, "rs", ins, 2, RF_REDUCE_SUM, outs); break;
      case 6: y = rf_all_gather(g, "ag1", x, 2, "grp"); break;
    }
    assert_null(y.node);
    assert_null(outs[0].node); /* all or nothing */
    assert_int_equal(rf_graph_num_nodes(g), 2);
    assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                  "Device assignment required for collective ops");
    assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "'nodev'");
    rf_graph_free(g);
  }
}

static void test_incomplete_group_is_a_compile_error(void **state) {
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(1, (int64_t)3);
  rf_output a =
      rf_all_reduce(g, "p0", ph(g, "x0", "cpu:0", s), RF_REDUCE_SUM, 3, "trio");
  rf_all_reduce(g, "p1", ph(g, "x1", "cpu:1", s), RF_REDUCE_SUM, 3, "trio");
  assert_graph_ok(g);
  assert_status(lower_status(g, 3), RF_INVALID_ARGUMENT,
                "collective 'trio' (AllReduce) expects 3 participants but the "
                "graph has 2");
  rf_status *st = run_status(g, 3, a);
  assert_non_null(st);
  assert_non_null(strstr(rf_status_message(st), "'p1' on cpu:1"));
  assert_status(st, RF_INVALID_ARGUMENT, "'trio'");
  rf_graph_free(g);
}

static void test_two_participants_on_one_device(void **state) {
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(1, (int64_t)3);
  /* Built together, they are refused at once, nothing added... */
  rf_output xs[2] = {ph(g, "x0", "cpu:1", s), ph(g, "x1", "cpu:1", s)}, ys[2];
  int before = rf_graph_num_nodes(g);
  rf_all_reduce_n(g, "dup", xs, 2, RF_REDUCE_SUM, ys);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "AllReduce 'dup': participants 0 (input node 'x0') and 1 "
                "(input node 'x1') would both be on cpu:1");
  assert_int_equal(rf_graph_num_nodes(g), before);
  rf_graph_free(g);
  /* ... and under one device scope too. */
  g = rf_graph_new();
  xs[0] = ph(g, "x0", "cpu:0", s);
  xs[1] = ph(g, "x1", "cpu:1", s);
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_all_gather_n(g, "scoped", xs, 2, ys);
  rf_graph_pop_device(g);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "would both be on cpu:1");
  rf_graph_free(g);
  /* Built one by one, only the lowering sees the group. */
  g = rf_graph_new();
  rf_all_reduce(g, "d0", ph(g, "x0", "cpu:1", s), RF_REDUCE_SUM, 2, "dup");
  rf_all_reduce(g, "d1", ph(g, "x1", "cpu:1", s), RF_REDUCE_SUM, 2, "dup");
  expect_lower_error(
      g, 2, "collective 'dup' (AllReduce) has two participants on one device");
  /* A group larger than its num_devices is an error too. */
  g = rf_graph_new();
  rf_all_reduce(g, "q0", ph(g, "y0", "cpu:0", s), RF_REDUCE_SUM, 2, "pair");
  rf_all_reduce(g, "q1", ph(g, "y1", "cpu:1", s), RF_REDUCE_SUM, 2, "pair");
  rf_all_reduce(g, "q2", ph(g, "y2", "cpu:2", s), RF_REDUCE_SUM, 2, "pair");
  expect_lower_error(g, 3,
                     "collective 'pair' (AllReduce) expects 2 participants but "
                     "the graph has 3");
}

/* The participant list of a group's error names every participant with its
 * device, each name capped on its own: long names (under and over the cap)
 * do not cut the list short or lose the devices. */
static void test_group_error_lists_every_participant(void **state) {
  static const size_t lens[] = {80, 150, 1u << 20};
  for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
    size_t len = lens[k];
    rf_graph *g = rf_graph_new();
    rf_shape s = rf_shape_of(1, (int64_t)3);
    char *names[4];
    for (int i = 0; i < 4; i++) {
      names[i] = malloc(len + 1);
      memset(names[i], 'a' + i, len);
      names[i][len] = '\0';
      char x[8];
      snprintf(x, sizeof x, "x%d", i);
      /* participants 1 and 2 share cpu:1 */
      const char *dev = i == 0 ? "cpu:0" : i < 3 ? "cpu:1" : "cpu:2";
      rf_all_reduce(g, names[i], ph(g, x, dev, s), RF_REDUCE_SUM, 4, "grp");
    }
    assert_graph_ok(g);
    rf_status *st = lower_status(g, 3);
    assert_int_equal(rf_status_code(st), RF_INVALID_ARGUMENT);
    const char *m = rf_status_message(st);
    assert_non_null(strstr(
        m,
        "collective 'grp' (AllReduce) has two participants on one device: "));
    static const char *const devs[] = {"cpu:0", "cpu:1", "cpu:1", "cpu:2"};
    for (int i = 0; i < 4; i++) {
      char want[512];
      if (len <= RF_STATUS_QUOTE_MAX)
        snprintf(want, sizeof want, "'%s' on %s", names[i], devs[i]);
      else
        snprintf(want, sizeof want, "'%.*s... (%zu bytes)' on %s",
                 RF_STATUS_QUOTE_MAX, names[i], len, devs[i]);
      assert_non_null(strstr(m, want));
      free(names[i]);
    }
    assert_true(strlen(m) < 4 * (RF_STATUS_QUOTE_MAX + 64) + 128);
    rf_status_free(st);
    rf_graph_free(g);
  }
}

/* Participants of one group that disagree on num_devices or kind. */
static void test_group_disagreement_at_compile(void **state) {
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(2, (int64_t)2, (int64_t)2);
  rf_all_reduce(g, "m0", ph(g, "x0", "cpu:0", s), RF_REDUCE_SUM, 2, "mixed");
  rf_all_gather(g, "m1", ph(g, "x1", "cpu:1", s), 2, "mixed");
  expect_lower_error(g, 2,
                     "collective 'mixed': participants disagree on the "
                     "collective: AllReduce on cpu:0 (node 'm0', AllReduce) "
                     "but AllGather on cpu:1 (node 'm1', AllGather)");
  /* Same kind, different reduction; then different dtype. */
  g = rf_graph_new();
  rf_all_reduce(g, "m0", ph(g, "x0", "cpu:0", s), RF_REDUCE_SUM, 2, "mixed");
  rf_all_reduce(g, "m1", ph(g, "x1", "cpu:1", s), RF_REDUCE_MAX, 2, "mixed");
  expect_lower_error(g, 2, "participants disagree on reduction");
  g = rf_graph_new();
  rf_all_reduce(g, "m0", ph(g, "x0", "cpu:0", s), RF_REDUCE_SUM, 2, "mixed");
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output x1 = rf_placeholder(g, "x1", RF_INT32, s);
  rf_graph_pop_device(g);
  rf_all_reduce(g, "m1", x1, RF_REDUCE_SUM, 2, "mixed");
  expect_lower_error(g, 2,
                     "participants disagree on T: float64 on cpu:0 (node 'm0', "
                     "AllReduce) but int32 on cpu:1 (node 'm1', AllReduce)");
}

static void test_unlowered_stubs_fail_clearly(void **state) {
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(1, (int64_t)2);
  rf_output xs[2] = {ph(g, "x0", "cpu:0", s), ph(g, "x1", "cpu:1", s)};
  rf_output r = rf_reduce(g, "raw_reduce", xs, 2, RF_REDUCE_SUM);
  rf_output b = rf_broadcast(g, "raw_bcast", xs[0]);
  assert_graph_ok(g);
  double v[2] = {1, 2};
  rf_tensor *t;
  assert_ok(rf_tensor_new_copy(RF_FLOAT64, &s, v, &t));
  rf_tensor *ins[2] = {t, t}, *outs[1] = {NULL};
  assert_status(rf__kernel_run_single(r.node, ins, outs), RF_UNIMPLEMENTED,
                "This op should be replaced during graph optimization.");
  assert_null(outs[0]);
  assert_status(rf__kernel_run_single(b.node, ins, outs), RF_UNIMPLEMENTED,
                "This op should be replaced during graph optimization.");
  assert_null(outs[0]);
  assert_status(rf__kernel_run_single(r.node, ins, outs), RF_UNIMPLEMENTED,
                "raw_reduce");
  rf_tensor_release(t);
  rf_graph_free(g);
}

static void test_gradients_that_do_not_exist(void **state) {
  static const rf_reduction reds[] = {RF_REDUCE_MAX, RF_REDUCE_MIN,
                                      RF_REDUCE_PROD, RF_REDUCE_AVG};
  static const char *const red_names[] = {"max", "min", "prod", "avg"};
  rf_shape s = rf_shape_of(2, (int64_t)4, (int64_t)3);
  rf_output dx[2];
  for (int i = 0; i < 4; i++) {
    /* Reduce: only sum and avg have a gradient. */
    rf_graph *g = rf_graph_new();
    rf_output xs[2] = {ph(g, "x0", "cpu:0", s), ph(g, "x1", "cpu:1", s)}, ys[2];
    rf_output r = rf_reduce(g, "r", xs, 2, reds[i]);
    assert_graph_ok(g);
    rf_status *st = rf_gradients(g, &r, 1, xs, 2, NULL, dx);
    if (reds[i] == RF_REDUCE_AVG) {
      assert_ok(st);
    } else {
      assert_non_null(st);
      assert_non_null(strstr(rf_status_message(st), red_names[i]));
      assert_status(st, RF_INVALID_ARGUMENT,
                    "No gradient defined for Reduce except sum and avg");
    }
    rf_graph_free(g);
    /* ReduceScatter: only sum. */
    g = rf_graph_new();
    xs[0] = ph(g, "x0", "cpu:0", s);
    xs[1] = ph(g, "x1", "cpu:1", s);
    rf_reduce_scatter_n(g, "rs", xs, 2, reds[i], ys);
    assert_graph_ok(g);
    assert_status(rf_gradients(g, ys, 2, xs, 2, NULL, dx), RF_INVALID_ARGUMENT,
                  "No gradient defined for ReduceScatter except sum");
    rf_graph_free(g);
  }
  /* AllReduce has gradients for every reduction, but only of floats. */
  rf_graph *g = rf_graph_new();
  rf_output xs[2], ys[2];
  for (int i = 0; i < 2; i++) {
    assert_ok(rf_graph_push_device(g, i ? "cpu:1" : "cpu:0"));
    xs[i] = rf_placeholder(g, i ? "x1" : "x0", RF_INT32, s);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "ar", xs, 2, RF_REDUCE_MAX, ys);
  assert_graph_ok(g);
  assert_status(rf_gradients(g, ys, 2, xs, 2, NULL, dx), RF_INVALID_ARGUMENT,
                "No gradient defined for AllReduce of int32");
  rf_graph_free(g);
}

/* A collective op's gradient runs on the op's devices (AllReduce grad is an
 * AllReduce with shared_name + "#grad1": the graph's first gradient
 * construction, ops/collective_names.h). */
static void test_all_reduce_gradient_structure(void **state) {
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(1, (int64_t)3);
  rf_output xs[2] = {ph(g, "x0", "cpu:2", s), ph(g, "x1", "cpu:0", s)}, ys[2];
  rf_all_reduce_n(g, "ar", xs, 2, RF_REDUCE_SUM, ys);
  rf_output dx[2];
  assert_ok(rf_gradients(g, ys, 2, xs, 2, NULL, dx));
  for (int i = 0; i < 2; i++) {
    assert_string_equal(rf_node_op(dx[i].node), "AllReduce");
    assert_string_equal(rf_node_device(dx[i].node), rf_node_device(xs[i].node));
    assert_participant_attrs(dx[i].node, "ar#grad1", 2, RF_FLOAT64);
  }
  rf_graph_free(g);
}

/* Places every node of g on the device its request names in devs[]. */
static void place_by_request(rf_graph *g, const rf__device_name *devs, int n) {
  for (int i = 0; i < rf_graph_num_nodes(g); i++) {
    rf_node *x = rf_graph_node(g, i);
    rf__device_name d;
    assert_ok(rf__device_name_parse(rf_node_device(x), &d));
    x->assigned_device = -1;
    for (int k = 0; k < n; k++)
      if (rf__device_name_equal(&d, &devs[k])) x->assigned_device = k;
    assert_true(x->assigned_device >= 0);
  }
}

/* No backend joins CPU and GPU devices: lowering and validation say so,
 * naming the node and both devices (the pass run on a device table with a
 * GPU, as a session with GPUs would have). A CPU-only session refuses a GPU
 * request outright. */
static void test_mixed_device_types(void **state) {
  rf__device_name devs[2];
  assert_ok(rf__device_name_parse("cpu:0", &devs[0]));
  assert_ok(rf__device_name_parse("gpu:0", &devs[1]));
  rf_shape s = rf_shape_of(1, (int64_t)3);
  for (int which = 0; which < 3; which++) {
    rf_graph *g = rf_graph_new();
    rf_output xs[2] = {ph(g, "x0", "cpu:0", s), ph(g, "x1", "gpu:0", s)}, y[2];
    const char *want = NULL;
    if (which == 0) {
      rf_reduce(g, "mixed_reduce", xs, 2, RF_REDUCE_SUM);
      want = "node 'mixed_reduce' (Reduce) connects cpu:0 and gpu:0";
    } else if (which == 1) {
      ident(g, "on_gpu", "gpu:0", rf_broadcast(g, "mixed_bcast", xs[0]));
      want = "node 'mixed_bcast' (Broadcast) connects cpu:0 and gpu:0";
    } else {
      rf_all_reduce_n(g, "mixed_ar", xs, 2, RF_REDUCE_SUM, y);
      want = "collective 'mixed_ar' (AllReduce) mixes device types";
    }
    assert_graph_ok(g);
    place_by_request(g, devs, 2);
    rf_status *st = rf__lower_collectives(g, devs, 2);
    if (!st) st = rf__validate_collectives(g, devs, 2);
    assert_status(st, RF_UNIMPLEMENTED, want);
    if (which == 2) {
      assert_status(lower_status(g, 2), RF_INVALID_ARGUMENT, "gpu:0");
    }
    rf_graph_free(g);
  }
}

/* Names have no length limit: two long names that differ only at the end
 * are two collectives (the builders once cut names at 199 bytes, merging
 * them into one group), and so are their gradients. */
static void test_long_collective_names(void **state) {
  char a[401], b[401];
  memset(a, 'g', 400);
  a[400] = '\0';
  memcpy(b, a, sizeof a);
  b[399] = 'h';
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_of(1, (int64_t)3);
  rf_output xs[2] = {ph(g, "x0", "cpu:0", s), ph(g, "x1", "cpu:1", s)};
  rf_output ya[2], yb[2], dx[2];
  rf_all_reduce_n(g, a, xs, 2, RF_REDUCE_SUM, ya);
  rf_all_reduce_n(g, b, xs, 2, RF_REDUCE_SUM, yb);
  assert_graph_ok(g);
  const char *sn;
  assert_ok(rf_node_attr_string(yb[1].node, "shared_name", &sn));
  assert_string_equal(sn, b);
  assert_int_equal(strlen(rf_node_name(yb[1].node)), 402);
  rf_output ys[4] = {ya[0], ya[1], yb[0], yb[1]};
  assert_ok(rf_gradients(g, ys, 4, xs, 2, NULL, dx));
  assert_string_equal(rf_node_op(dx[0].node), "AddN");
  rf_graph *lg = lower(g, 2);
  rf_graph_free(lg);
  /* Reduce with a long name lowers to participants named after it. */
  a[399] = 'r'; /* a Reduce's shared_name is its node name */
  rf_output r = rf_reduce(g, a, xs, 2, RF_REDUCE_SUM);
  assert_graph_ok(g);
  lg = lower(g, 2);
  rf_node *recv = one_on(lg, "_ReduceRecv", rf_node_device(r.node));
  assert_int_equal(strlen(rf_node_name(recv)), 400 + strlen("/_ReduceRecv"));
  rf_graph_free(lg);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_error_lists_every_participant),
      cmocka_unit_test(test_reduce_structure),
      cmocka_unit_test(test_reduce_sums_inputs_per_device),
      cmocka_unit_test(test_reduce_single_device),
      cmocka_unit_test(test_reduce_non_sum_inputs_sharing_a_device),
      cmocka_unit_test(test_broadcast_structure),
      cmocka_unit_test(test_broadcast_unknown_shape_uses_one_shape_node),
      cmocka_unit_test(test_single_device_broadcast_removed),
      cmocka_unit_test(test_reduce_then_broadcast),
      cmocka_unit_test(test_reduce_without_input_on_its_device),
      cmocka_unit_test(test_collective_input_needs_device),
      cmocka_unit_test(test_incomplete_group_is_a_compile_error),
      cmocka_unit_test(test_two_participants_on_one_device),
      cmocka_unit_test(test_group_disagreement_at_compile),
      cmocka_unit_test(test_unlowered_stubs_fail_clearly),
      cmocka_unit_test(test_gradients_that_do_not_exist),
      cmocka_unit_test(test_all_reduce_gradient_structure),
      cmocka_unit_test(test_long_collective_names),
      cmocka_unit_test(test_mixed_device_types),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
