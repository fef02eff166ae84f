/* tests/test_collective_default_names.c - collectives built without a name
 * (rf_all_reduce_n, rf_all_gather_n and rf_reduce_scatter_n with name NULL)
 * get a generated shared name of their own each time: several in one graph,
 * and one beside a user's collective named like a generated name (its
 * nodes' names, or only its shared name), each reduce their own inputs,
 * against sums computed here. */
#include <stdio.h>

#include "ringflow/collectives.h"
#include "testutil.h"

#define N 3    /* devices */
#define ROWS 2 /* per device */

typedef void (*build_fn)(rf_graph *g, const char *name, const rf_output *in,
                         rf_output *out);

static void all_reduce(rf_graph *g, const char *name, const rf_output *in,
                       rf_output *out) {
  rf_all_reduce_n(g, name, in, N, RF_REDUCE_SUM, out);
}
static void all_gather(rf_graph *g, const char *name, const rf_output *in,
                       rf_output *out) {
  rf_all_gather_n(g, name, in, N, out);
}
static void reduce_scatter(rf_graph *g, const char *name, const rf_output *in,
                           rf_output *out) {
  rf_reduce_scatter_n(g, name, in, N, RF_REDUCE_SUM, out);
}

/* A named collective built one participant at a time (rf_all_reduce, nodes
 * mine_<name>_<d>: no node is named like the shared name); unnamed: as
 * all_reduce. */
static void single_all_reduce(rf_graph *g, const char *name,
                              const rf_output *in, rf_output *out) {
  if (!name) {
    all_reduce(g, name, in, out);
    return;
  }
  for (int d = 0; d < N; d++) {
    char node[64];
    snprintf(node, sizeof node, "mine_%s_%d", name, d);
    out[d] = rf_all_reduce(g, node, in[d], RF_REDUCE_SUM, N, name);
  }
}

/* Collective c's input on device d: constants distinct per (c, d, row). */
static double value(int c, int d, int r) { return 100.0 * c + 10.0 * d + r; }

/* Builds `count` collectives of one kind on cpu:0..N-1, named names[c]
 * (NULL: generated), runs them and checks every device's result. */
static void check(build_fn build, int kind, const char *const *names,
                  int count) {
  rf_graph *g = rf_graph_new();
  rf_output outs[4][N];
  for (int c = 0; c < count; c++) {
    rf_output in[N];
    for (int d = 0; d < N; d++) {
      char dev[16];
      snprintf(dev, sizeof dev, "cpu:%d", d);
      assert_ok(rf_graph_push_device(g, dev));
      rf_shape shape = rf_shape_of(1, N * ROWS);
      rf_tensor *t;
      assert_ok(rf_tensor_new(RF_FLOAT64, &shape, NULL, &t));
      for (int r = 0; r < N * ROWS; r++) rf_tensor_set(t, r, value(c, d, r));
      in[d] = rf_const(g, NULL, t);
      rf_tensor_release(t);
      rf_graph_pop_device(g);
    }
    build(g, names[c], in, outs[c]);
  }
  rf_status *st = rf_graph_status(g);
  assert_ok(st);
  rf_output fetch[4 * N];
  for (int c = 0; c < count; c++)
    for (int d = 0; d < N; d++) fetch[c * N + d] = outs[c][d];
  rf_tensor *got[4 * N];
  rf_test_run(g, N, NULL, 0, fetch, count * N, got);
  for (int c = 0; c < count; c++)
    for (int d = 0; d < N; d++) {
      const rf_tensor *t = got[c * N + d];
      double want[N * N * ROWS];
      int64_t len = 0;
      if (kind == 0) { /* all-reduce: the sum over devices */
        for (int r = 0; r < N * ROWS; r++) {
          want[r] = 0;
          for (int e = 0; e < N; e++) want[r] += value(c, e, r);
        }
        len = N * ROWS;
      } else if (kind == 1) { /* all-gather: every device's input in order */
        for (int e = 0; e < N; e++)
          for (int r = 0; r < N * ROWS; r++)
            want[e * N * ROWS + r] = value(c, e, r);
        len = N * N * ROWS;
      } else { /* reduce-scatter: device d's rows of the sum */
        for (int r = 0; r < ROWS; r++) {
          want[r] = 0;
          for (int e = 0; e < N; e++) want[r] += value(c, e, d * ROWS + r);
        }
        len = ROWS;
      }
      rf_test_assert_near(t, rf_shape_of(1, len), want, 0, __FILE__, __LINE__);
    }
  for (int i = 0; i < count * N; i++) rf_tensor_release(got[i]);
  rf_graph_free(g);
}

static const char *const unnamed[] = {NULL, NULL, NULL};

static void test_two_unnamed_all_reduces(void **state) {
  (void)state;
  check(all_reduce, 0, unnamed, 3);
}

static void test_two_unnamed_all_gathers(void **state) {
  (void)state;
  check(all_gather, 1, unnamed, 3);
}

static void test_two_unnamed_reduce_scatters(void **state) {
  (void)state;
  check(reduce_scatter, 2, unnamed, 3);
}

/* Users' collectives named like generated ones, then unnamed ones. */
static void test_beside_user_names(void **state) {
  (void)state;
  const char *names[] = {"AllReduce", "AllReduce_1", NULL, NULL};
  check(all_reduce, 0, names, 4);
}

/* Users' collectives whose shared names only (not their nodes' names) are
 * like generated ones, then unnamed ones: each unnamed call is still a
 * collective of its own. */
static void test_beside_user_shared_names(void **state) {
  (void)state;
  const char *names[] = {"AllReduce", "AllReduce_1", NULL, NULL};
  check(single_all_reduce, 0, names, 4);
}

/* in[d]: the scalar d + 1 on cpu:d. */
static void scalars_on_devices(rf_graph *g, rf_output *in) {
  for (int d = 0; d < N; d++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    assert_ok(rf_graph_push_device(g, dev));
    in[d] = rf_const_scalar(g, NULL, RF_FLOAT32, d + 1);
    rf_graph_pop_device(g);
  }
}

/* Two collectives built apart under one name (an all-reduce's, and a
 * Reduce's or a Broadcast's node name, which lowering makes its pieces'
 * shared name) are refused when built, ALREADY_EXISTS naming the other; they
 * used to build and fail every run as one group that disagrees. An unnamed
 * Reduce or Broadcast skips a name that is a collective's. */
static void test_one_name_two_collectives(void **state) {
  (void)state;
  for (int order = 0; order < 4; order++) {
    rf_graph *g = rf_graph_new();
    rf_output in[N], out[N];
    scalars_on_devices(g, in);
    bool bcast = order % 2 == 1, all_reduce_first = order < 2;
    const char *other = bcast ? "Broadcast" : "Reduce";
    if (all_reduce_first) {
      rf_all_reduce_n(g, "g", in, N, RF_REDUCE_SUM, out);
      assert_ok(rf_graph_status(g));
    }
    rf_output r = bcast ? rf_broadcast(g, "g", in[0])
                        : rf_reduce(g, "g", in, N, RF_REDUCE_SUM);
    if (all_reduce_first) {
      assert_null(r.node);
      char want[128];
      snprintf(want, sizeof want,
               "node 'g' (%s): the name is already another collective's: "
               "node 'g_0' (AllReduce)",
               other);
      assert_status(rf_graph_status(g), RF_ALREADY_EXISTS, want);
    } else {
      assert_non_null(r.node);
      rf_all_reduce_n(g, "g", in, N, RF_REDUCE_SUM, out);
      char want[128];
      snprintf(want, sizeof want,
               "collective 'g' (AllReduce): the name is already another "
               "collective's: node 'g' (%s)",
               other);
      assert_status(rf_graph_status(g), RF_ALREADY_EXISTS, want);
    }
    rf_graph_free(g);
  }
  /* unnamed: "Reduce" is an all-reduce's name and Reduce_0..2 its nodes' */
  rf_graph *g = rf_graph_new();
  rf_output in[N], out[N];
  scalars_on_devices(g, in);
  rf_all_reduce_n(g, "Reduce", in, N, RF_REDUCE_SUM, out);
  rf_output r = rf_reduce(g, NULL, in, N, RF_REDUCE_SUM);
  assert_ok(rf_graph_status(g));
  assert_string_equal(rf_node_name(r.node), "Reduce_3");
  rf_tensor *got[2];
  rf_output fetch[2] = {out[1], r};
  rf_test_run(g, N, NULL, 0, fetch, 2, got);
  assert_true(rf_tensor_get(got[0], 0) == 6.0);
  assert_true(rf_tensor_get(got[1], 0) == 6.0);
  rf_tensor_release(got[0]);
  rf_tensor_release(got[1]);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two_unnamed_all_reduces),
      cmocka_unit_test(test_two_unnamed_all_gathers),
      cmocka_unit_test(test_two_unnamed_reduce_scatters),
      cmocka_unit_test(test_beside_user_names),
      cmocka_unit_test(test_beside_user_shared_names),
      cmocka_unit_test(test_one_name_two_collectives),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
