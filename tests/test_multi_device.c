/* tests/test_multi_device.c - graphs spread over several devices give the
 * same results as on one: chains and diamonds crossing devices, random DAGs
 * against a float64 reference, one _Send/_Recv pair per (output, device),
 * crossing control edges, 8 devices on a 2-thread pool, and long chains of
 * crossings (deep nesting of completions). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "passes/pass_registry.h"
#include "runtime/session_internal.h"
#include "runtime_test_ops.h"

static uint64_t rng;

static int setup(void **state) {
  rt_register();
  if (!rng) rng = rf_test_seed();
  return 0;
}

static const char *dev_name(int d, char *buf) {
  if (d < 0) return NULL;
  sprintf(buf, "cpu:%d", d);
  return buf;
}

/* Runs fetch with x fed; returns the value (new reference). */
static rf_tensor *run1(rf_session *s, rf_output x, rf_tensor *xv,
                       rf_output fetch) {
  rf_feed f = {x, xv};
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(s, &f, xv ? 1 : 0, &fetch, 1, NULL, 0, &out));
  return out;
}

/* x -> AddOne x n, node i on device dev(i) (-1: none). */
static rf_output chain(rf_graph *g, rf_output x, int n, int ndev, int stride) {
  char buf[16];
  rf_output y = x;
  for (int i = 0; i < n; i++)
    y = rt_unary_node(g, "TestAddOne", NULL,
                      dev_name(ndev ? (i / stride) % ndev : -1, buf), y);
  return y;
}

static void test_chain_same_as_one_device(void **state) {
  rf_shape shape = rf_shape_of(2, (int64_t)3, (int64_t)4);
  for (int ndev = 1; ndev <= 4; ndev++) {
    rf_graph *g = rf_graph_new();
    rf_output x = rt_placeholder_node(g, "x", NULL, shape);
    rf_output y = chain(g, x, 40, ndev, 1 + ndev % 3);
    rf_session *s = rt_session(g, ndev, 2);
    rf_graph *g1 = rf_graph_new(); /* the same chain, no devices */
    rf_output x1 = rt_placeholder_node(g1, "x", NULL, shape);
    rf_output y1 = chain(g1, x1, 40, 0, 1);
    rf_session *s1 = rt_session(g1, 1, 1);
    for (int run = 0; run < 3; run++) {
      rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT64, shape, -5, 5);
      rf_tensor *a = run1(s, x, xv, y), *b = run1(s1, x1, xv, y1);
      double *want = rf_test_to_doubles(xv);
      for (int i = 0; i < 12; i++)
        for (int k = 0; k < 40; k++) want[i] += 1; /* as the chain rounds */
      assert_tensor_near(a, shape, want, 0);
      assert_tensor_near(b, shape, want, 0);
      assert_memory_equal(rf_tensor_data(a), rf_tensor_data(b), 12 * 8);
      free(want);
      rf_tensor_release(a);
      rf_tensor_release(b);
      rf_tensor_release(xv);
    }
    rf_session_free(s);
    rf_session_free(s1);
    rf_graph_free(g);
    rf_graph_free(g1);
  }
}

static void test_diamond_across_devices(void **state) {
  rf_shape shape = rf_shape_of(1, (int64_t)7);
  rf_graph *g = rf_graph_new();
  rf_output x = rt_placeholder_node(g, "x", "cpu:0", shape);
  rf_output b = rt_unary_node(g, "TestAddOne", "b", "cpu:1", x);
  rf_output c = rt_unary_node(g, "TestAddOne", "c", "cpu:2", x);
  rf_output c2 = rt_unary_node(g, "TestAddOne", "c2", "cpu:2", c);
  rf_output d = rt_add_node(g, "d", "cpu:3", b, c2);
  rf_output e = rt_add_node(g, "e", "cpu:0", d, x); /* back to the start */
  rf_session *s = rt_session(g, 4, 2);
  for (int run = 0; run < 5; run++) {
    rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT64, shape, -5, 5);
    rf_tensor *out = run1(s, x, xv, e);
    double *want = rf_test_to_doubles(xv);
    for (int i = 0; i < 7; i++)
      want[i] = (want[i] + 1) + (want[i] + 2) + want[i];
    assert_tensor_near(out, shape, want, 1e-12);
    free(want);
    rf_tensor_release(out);
    rf_tensor_release(xv);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

/* The compiled plan of the session's only signature. */
static rf__plan *only_plan(rf_session *s) {
  assert_int_equal(HASH_COUNT(s->cache), 1);
  return s->cache;
}

static int count_op(const rf_graph *g, const char *op, int device) {
  int n = 0;
  for (int i = 0; i < g->num_ids; i++) {
    const rf_node *v = g->nodes[i];
    if (v && strcmp(v->op->name, op) == 0 &&
        (device < 0 || v->assigned_device == device))
      n++;
  }
  return n;
}

static void test_one_pair_per_output_and_device(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output a = rt_const_node(g, "a", "cpu:0", 2, rf_shape_scalar());
  rf_output outs[6];
  /* Three consumers on cpu:1, two on cpu:2, one on cpu:0. */
  const char *devs[6] = {"cpu:1", "cpu:1", "cpu:1", "cpu:2", "cpu:2", "cpu:0"};
  for (int i = 0; i < 6; i++)
    outs[i] = rt_unary_node(g, "TestWhere", NULL, devs[i], a);
  rf_session *s = rt_session(g, 3, 1);
  rf_tensor *vals[6] = {0};
  assert_ok(rf_session_run(s, NULL, 0, outs, 6, NULL, 0, vals));
  const int want_dev[6] = {1, 1, 1, 2, 2, 0};
  for (int i = 0; i < 6; i++) {
    assert_true(rf_tensor_get(vals[i], 0) == 200 + want_dev[i]);
    rf_tensor_release(vals[i]);
  }
  const rf_graph *cg = only_plan(s)->graph;
  assert_int_equal(count_op(cg, "_Send", 0), 2);
  assert_int_equal(count_op(cg, "_Send", -1), 2); /* _Retvals follow */
  assert_int_equal(count_op(cg, "_Recv", 1), 1);
  assert_int_equal(count_op(cg, "_Recv", 2), 1);
  /* No edge crosses devices and keys are unique. */
  for (int i = 0; i < cg->num_ids; i++) {
    const rf_node *v = cg->nodes[i];
    if (!v) continue;
    for (int k = 0; k < v->num_out_edges; k++)
      assert_int_equal(v->out_edges[k]->dst->assigned_device,
                       v->assigned_device);
    if (strcmp(v->op->name, "_Send") != 0) continue;
    const char *key, *other;
    assert_ok(rf__attrs_get_string(&v->attrs, "key", &key));
    for (int j = i + 1; j < cg->num_ids; j++) {
      const rf_node *w = cg->nodes[j];
      if (!w || strcmp(w->op->name, "_Send") != 0) continue;
      assert_ok(rf__attrs_get_string(&w->attrs, "key", &other));
      assert_string_not_equal(key, other);
    }
  }
  rf_session_free(s);
  rf_graph_free(g);
}

/* A control edge across devices: the target on cpu:1 waits for a node on
 * cpu:0 through _Token -> _Send ... _Recv -(control)-> target. */
static void test_control_edge_across_devices(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output c = rt_const_node(g, "c", "cpu:0", 1, rf_shape_scalar());
  rf_output slow = rt_unary_node(g, "TestSleep", "slow", "cpu:0", c);
  rf_output c1 = rt_const_node(g, "c1", "cpu:1", 1, rf_shape_scalar());
  rf_output w = rt_unary_node(g, "TestWhere", "w", "cpu:1", c1);
  assert_ok(rf_graph_add_control_edge(g, slow.node, w.node));
  rf_session *s = rt_session(g, 2, 2);
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(s, NULL, 0, &w, 1, NULL, 0, &out));
  assert_true(rf_tensor_get(out, 0) == 101);
  rf_tensor_release(out);
  const rf_graph *cg = only_plan(s)->graph;
  assert_int_equal(count_op(cg, "_Token", 0), 1);
  assert_int_equal(count_op(cg, "TestSleep", 0), 1); /* kept by the edge */
  const rf_node *wn = rf_graph_find_node(cg, "w");
  bool from_recv = false;
  for (int k = 0; k < wn->num_in_edges; k++) {
    const rf__edge *e = wn->in_edges[k];
    if (e->dst_in == RF_CONTROL_SLOT)
      from_recv = strcmp(e->src->op->name, "_Recv") == 0;
  }
  assert_true(from_recv);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Random DAGs over random devices against a float64 reference. */
static void test_random_dags(void **state) {
  enum { N = 120 };
  for (int trial = 0; trial < 6; trial++) {
    int ndev = 1 + (int)(rf_test_rand(&rng) % 6);
    rf_graph *g = rf_graph_new();
    rf_output nodes[N];
    double ref[N];
    char buf[16];
    nodes[0] = rt_placeholder_node(g, "x", NULL, rf_shape_scalar());
    double x = floor(rf_test_uniform(&rng, -100, 100));
    ref[0] = x;
    for (int i = 1; i < N; i++) {
      int dev = (int)(rf_test_rand(&rng) % (uint64_t)(ndev + 1)) - 1;
      int a = (int)(rf_test_rand(&rng) % (uint64_t)i);
      int b = (int)(rf_test_rand(&rng) % (uint64_t)i);
      if (rf_test_rand(&rng) % 2) {
        nodes[i] =
            rt_unary_node(g, "TestAddOne", NULL, dev_name(dev, buf), nodes[a]);
        ref[i] = ref[a] + 1;
      } else {
        nodes[i] = rt_add_node(g, NULL, dev_name(dev, buf), nodes[a], nodes[b]);
        ref[i] = ref[a] + ref[b];
      }
    }
    rf_session *s = rt_session(g, ndev, 2);
    rf_tensor *xv = NULL;
    assert_ok(rf_tensor_new_scalar(RF_FLOAT64, x, &xv));
    /* Fetch the last 10 nodes at once. */
    rf_feed f = {nodes[0], xv};
    rf_tensor *outs[10] = {0};
    assert_ok(rf_session_run(s, &f, 1, nodes + N - 10, 10, NULL, 0, outs));
    for (int i = 0; i < 10; i++) {
      double want = ref[N - 10 + i];
      assert_tensor_near(outs[i], rf_shape_scalar(), &want, 1e-12);
      rf_tensor_release(outs[i]);
    }
    rf_tensor_release(xv);
    rf_session_free(s);
    rf_graph_free(g);
  }
}

/* 8 devices on 2 threads: a chain crossing every device, many times. */
static void test_eight_devices_two_threads(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x = rt_placeholder_node(g, "x", NULL, rf_shape_of(1, (int64_t)3));
  rf_output y = chain(g, x, 8 * 25, 8, 1);
  /* Plus a branch that waits on a slow node, so receives sit pending. */
  rf_output slow = rt_unary_node(g, "TestSleep", NULL, "cpu:7", x);
  rf_output z = rt_add_node(g, "z", "cpu:3", y, slow);
  rf_session *s = rt_session(g, 8, 2);
  for (int run = 0; run < 10; run++) {
    rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT64,
                                          rf_shape_of(1, (int64_t)3), -5, 5);
    rf_tensor *out = run1(s, x, xv, z);
    double *want = rf_test_to_doubles(xv);
    for (int i = 0; i < 3; i++) want[i] = 2 * want[i] + 200;
    assert_tensor_near(out, rf_shape_of(1, (int64_t)3), want, 1e-12);
    free(want);
    rf_tensor_release(out);
    rf_tensor_release(xv);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

/* A chain bouncing between two devices 2000 times: completions nest one per
 * crossing unless the executor bounds the depth. Also on a 1-thread pool. */
static void test_long_chain_of_crossings(void **state) {
  for (int threads = 1; threads <= 2; threads++) {
    rf_graph *g = rf_graph_new();
    rf_output c = rt_const_node(g, "c", "cpu:0", 0, rf_shape_scalar());
    rf_output y = chain(g, c, 2000, 2, 1);
    rf_session *s = rt_session(g, 2, threads);
    for (int run = 0; run < 3; run++) {
      rf_tensor *out = run1(s, c, NULL, y);
      double want = 2000;
      assert_tensor_near(out, rf_shape_scalar(), &want, 0);
      rf_tensor_release(out);
    }
    rf_session_free(s);
    rf_graph_free(g);
  }
}

/* Wide fan-out and fan-in across devices (many ready nodes at once). */
static void test_fan_out_fan_in(void **state) {
  enum { W = 500 };
  rf_graph *g = rf_graph_new();
  rf_output x = rt_placeholder_node(g, "x", "cpu:0", rf_shape_scalar());
  rf_output sum = rt_unary_node(g, "TestAddOne", "s0", "cpu:1", x);
  char buf[16];
  for (int i = 0; i < W; i++) {
    rf_output leaf =
        rt_unary_node(g, "TestAddOne", NULL, dev_name(i % 4, buf), x);
    sum = rt_add_node(g, NULL, dev_name((i + 1) % 4, buf), sum, leaf);
  }
  rf_session *s = rt_session(g, 4, 2);
  rf_tensor *xv = NULL;
  assert_ok(rf_tensor_new_scalar(RF_FLOAT64, 3, &xv));
  rf_tensor *out = run1(s, x, xv, sum);
  double want = (3 + 1) + W * (3 + 1);
  assert_tensor_near(out, rf_shape_scalar(), &want, 0);
  rf_tensor_release(out);
  rf_tensor_release(xv);
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_chain_same_as_one_device, setup),
      cmocka_unit_test_setup(test_diamond_across_devices, setup),
      cmocka_unit_test_setup(test_one_pair_per_output_and_device, setup),
      cmocka_unit_test_setup(test_control_edge_across_devices, setup),
      cmocka_unit_test_setup(test_random_dags, setup),
      cmocka_unit_test_setup(test_eight_devices_two_threads, setup),
      cmocka_unit_test_setup(test_long_chain_of_crossings, setup),
      cmocka_unit_test_setup(test_fan_out_fan_in, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
