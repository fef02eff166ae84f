/* tests/test_session_run_cache.c - rf_session_run remembers its recent
 * requests (session.c, "recent requests"): a repeated request finds its plan
 * with no name lookup and no allocation of its own, and never a stale one:
 * another fetch or feed order, another output of a node, a node that now has
 * another name (as one made at a freed node's address), nodes of another
 * graph with the session graph's names, new feed shapes, more requests than
 * are remembered, two threads at once, and allocation failures. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "graph/graph.h"
#include "ringflow/debug.h"

static uint64_t rng;

static int setup(void **state) {
  (void)state;
  if (!rng) rng = rf_test_seed();
  return 0;
}

static rf_tensor *random_vec(int n) {
  return rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(1, (int64_t)n),
                               -10, 10);
}

/* got == a * ka + b * kb elementwise (exact: small integers times doubles
 * of the same magnitude are checked in float64). */
static void assert_lin(const rf_tensor *got, const rf_tensor *a, double ka,
                       const rf_tensor *b, double kb) {
  int64_t n = rf_tensor_num_elements(a);
  double *want = rf_test_to_doubles(a);
  double *bv = b ? rf_test_to_doubles(b) : NULL;
  for (int64_t i = 0; i < n; i++)
    want[i] = want[i] * ka + (bv ? bv[i] * kb : 0);
  assert_tensor_near(got, rf_tensor_shape(a), want, 1e-12);
  free(want);
  free(bv);
}

/* The graph the tests run: a, b fed (float64, any length); y = a * 2,
 * z = a * 3 + b, and p, q the two halves of a (Split). */
typedef struct model {
  rf_graph *g;
  rf_output a, b, y, z, halves[2];
  rf_node *split, *noop;
} model;

static model make_model(void) {
  model m;
  m.g = rf_graph_new();
  rf_shape any = rf_shape_of(1, (int64_t)-1);
  m.a = rf_placeholder(m.g, "in/a", RF_FLOAT64, any);
  m.b = rf_placeholder(m.g, "in/b", RF_FLOAT64, any);
  m.y = rf_mul(m.g, "out/y", m.a, rf_const_scalar(m.g, "k2", RF_FLOAT64, 2));
  m.z = rf_add(
      m.g, "out/z",
      rf_mul(m.g, "a3", m.a, rf_const_scalar(m.g, "k3", RF_FLOAT64, 3)), m.b);
  m.split = rf_split(m.g, "out/split", m.a, 2, 0, m.halves);
  m.noop = rf_noop(m.g, "noop");
  assert_graph_ok(m.g);
  return m;
}

/* A repeated request allocates nothing of its own: with values that are
 * only forwarded (Identity of a feed), a step allocates nothing at all.
 * Before the request cache each run allocated its key and arrays. */
static void test_repeated_run_allocates_nothing(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, rf_shape_of(1, (int64_t)-1));
  rf_output y = rf_identity(g, "y", x);
  rf_node *noop = rf_noop(g, "noop");
  assert_graph_ok(g);
  rf_session *s = rf_test_cpu_session(g, 1);
  rf_tensor *xv = random_vec(5);
  rf_feed f = {x, xv};
  for (int i = 0; i < 20; i++) {
    rf_tensor *out = NULL;
    int64_t before = rf_debug_allocation_count();
    assert_ok(rf_session_run(s, &f, 1, &y, 1, &noop, 1, &out));
    int64_t made = rf_debug_allocation_count() - before;
    if (i >= 2) assert_int_equal(made, 0);
    assert_lin(out, xv, 1, NULL, 0);
    rf_tensor_release(out);
  }
  rf_tensor_release(xv);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Fetch order, feed order and output index each make another request. */
static void test_orders_and_indices(void **state) {
  (void)state;
  model m = make_model();
  rf_session *s = rf_test_cpu_session(m.g, 1);
  for (int round = 0; round < 3; round++) {
    rf_tensor *av = random_vec(4), *bv = random_vec(4), *out[2];
    rf_feed ab[2] = {{m.a, av}, {m.b, bv}}, ba[2] = {{m.b, bv}, {m.a, av}};
    rf_output yz[2] = {m.y, m.z}, zy[2] = {m.z, m.y};
    assert_ok(rf_session_run(s, ab, 2, yz, 2, NULL, 0, out));
    assert_lin(out[0], av, 2, NULL, 0);
    assert_lin(out[1], av, 3, bv, 1);
    rf_tensor_release(out[0]);
    rf_tensor_release(out[1]);
    assert_ok(rf_session_run(s, ab, 2, zy, 2, NULL, 0, out));
    assert_lin(out[0], av, 3, bv, 1);
    assert_lin(out[1], av, 2, NULL, 0);
    rf_tensor_release(out[0]);
    rf_tensor_release(out[1]);
    /* the same names fed in the other order: a and b keep their values */
    assert_ok(rf_session_run(s, ba, 2, zy, 2, NULL, 0, out));
    assert_lin(out[0], av, 3, bv, 1);
    rf_tensor_release(out[0]);
    rf_tensor_release(out[1]);
    /* the two outputs of one node */
    double *a = rf_test_to_doubles(av);
    for (int k = 0; k < 2; k++) {
      assert_ok(rf_session_run(s, ab, 1, &m.halves[k], 1, NULL, 0, out));
      assert_tensor_near(out[0], rf_shape_of(1, (int64_t)2), a + 2 * k, 0);
      rf_tensor_release(out[0]);
    }
    free(a);
    rf_tensor_release(av);
    rf_tensor_release(bv);
  }
  rf_session_free(s);
  rf_graph_free(m.g);
}

/* A node the caller passes again whose name is now another (what a node
 * made at a freed node's address looks like): the request resolves by the
 * new name. Nodes of another graph with the session graph's names resolve
 * by name too. */
static void test_same_pointer_other_name(void **state) {
  (void)state;
  model m = make_model();
  rf_session *s = rf_test_cpu_session(m.g, 1);
  model other = make_model(); /* its nodes: same names, other addresses */
  rf_tensor *av = random_vec(6), *bv = random_vec(6), *out = NULL;
  rf_feed ab[2] = {{other.a, av}, {other.b, bv}};
  rf_output fetch = other.y;
  assert_ok(rf_session_run(s, ab, 2, &fetch, 1, NULL, 0, &out));
  assert_lin(out, av, 2, NULL, 0);
  rf_tensor_release(out);
  /* Swap the names of other's y and z: fetch.node is the same pointer,
   * now named "out/z". */
  char *tmp = other.y.node->name;
  other.y.node->name = other.z.node->name;
  other.z.node->name = tmp;
  assert_ok(rf_session_run(s, ab, 2, &fetch, 1, NULL, 0, &out));
  assert_lin(out, av, 3, bv, 1);
  rf_tensor_release(out);
  /* And the feeds: other's a now named "in/b" and b "in/a". */
  tmp = other.a.node->name;
  other.a.node->name = other.b.node->name;
  other.b.node->name = tmp;
  assert_ok(rf_session_run(s, ab, 2, &fetch, 1, NULL, 0, &out));
  assert_lin(out, bv, 3, av, 1);
  rf_tensor_release(out);
  /* A name the session's graph does not have: the same error as ever. */
  tmp = other.y.node->name;
  other.y.node->name = "not/there";
  assert_status(rf_session_run(s, ab, 2, &fetch, 1, NULL, 0, &out),
                RF_NOT_FOUND, "node 'not/there' is not in the session's graph");
  other.y.node->name = tmp;
  rf_tensor_release(av);
  rf_tensor_release(bv);
  rf_session_free(s);
  rf_graph_free(other.g);
  rf_graph_free(m.g);
}

/* A repeated request checks every feed again: new shapes run, wrong ones
 * fail with the message of a first run, and the request still works after. */
static void test_feed_checks_every_run(void **state) {
  (void)state;
  model m = make_model();
  rf_session *s = rf_test_cpu_session(m.g, 1);
  for (int n = 1; n <= 6; n++) {
    rf_tensor *av = random_vec(n), *bv = random_vec(n), *out = NULL;
    rf_feed ab[2] = {{m.a, av}, {m.b, bv}};
    assert_ok(rf_session_run(s, ab, 2, &m.z, 1, &m.noop, 1, &out));
    assert_lin(out, av, 3, bv, 1);
    rf_tensor_release(out);
    rf_tensor_release(av);
    rf_tensor_release(bv);
  }
  rf_tensor *av = random_vec(3), *f32 = NULL, *mat = NULL, *out = NULL;
  rf_shape s3 = rf_shape_of(1, (int64_t)3), s33 = rf_shape_of(2, 3, 3);
  assert_ok(rf_tensor_new(RF_FLOAT32, &s3, NULL, &f32));
  assert_ok(rf_tensor_new(RF_FLOAT64, &s33, NULL, &mat));
  rf_feed ab[2] = {{m.a, av}, {m.b, f32}};
  assert_status(rf_session_run(s, ab, 2, &m.z, 1, &m.noop, 1, &out),
                RF_INVALID_ARGUMENT,
                "feed for node 'in/b' (Placeholder) output 0: a float32 tensor "
                "was fed, the output is float64");
  ab[1].value = mat;
  assert_status(rf_session_run(s, ab, 2, &m.z, 1, &m.noop, 1, &out),
                RF_INVALID_ARGUMENT,
                "feed for node 'in/b' (Placeholder) output 0: shape (3, 3) is "
                "not compatible with the node's shape (?)");
  ab[1].value = NULL;
  assert_status(rf_session_run(s, ab, 2, &m.z, 1, &m.noop, 1, &out),
                RF_INVALID_ARGUMENT,
                "feed 1 for node 'in/b' output 0 has no value");
  assert_null(out);
  ab[1].value = av;
  assert_ok(rf_session_run(s, ab, 2, &m.z, 1, &m.noop, 1, &out));
  assert_lin(out, av, 4, NULL, 0);
  rf_tensor_release(out);
  rf_tensor_release(av);
  rf_tensor_release(f32);
  rf_tensor_release(mat);
  rf_session_free(s);
  rf_graph_free(m.g);
}

/* More requests than a session remembers, in turn, several times. */
static void test_more_requests_than_remembered(void **state) {
  (void)state;
  model m = make_model();
  rf_session *s = rf_test_cpu_session(m.g, 1);
  rf_output outs[4] = {m.y, m.z, m.halves[0], m.halves[1]};
  for (int round = 0; round < 4; round++) {
    rf_tensor *av = random_vec(2), *bv = random_vec(2);
    double *a = rf_test_to_doubles(av);
    /* 4 single fetches, 12 ordered pairs: 16 requests */
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) {
        rf_output f[2] = {outs[i], outs[j]};
        int n = i == j ? 1 : 2;
        rf_feed ab[2] = {{m.a, av}, {m.b, bv}};
        rf_tensor *out[2] = {NULL, NULL};
        assert_ok(rf_session_run(s, ab, 2, f, n, NULL, 0, out));
        for (int k = 0; k < n; k++) {
          int which = k == 0 ? i : j;
          if (which == 0) assert_lin(out[k], av, 2, NULL, 0);
          if (which == 1) assert_lin(out[k], av, 3, bv, 1);
          if (which >= 2)
            assert_tensor_near(out[k], rf_shape_of(1, (int64_t)1),
                               a + (which - 2), 0);
          rf_tensor_release(out[k]);
        }
      }
    free(a);
    rf_tensor_release(av);
    rf_tensor_release(bv);
  }
  rf_session_free(s);
  rf_graph_free(m.g);
}

/* Two threads run one session with requests that replace each other in
 * the session's memory. */
typedef struct worker {
  rf_session *s;
  const model *m;
  int which, bad;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  const model *m = w->m;
  rf_output outs[2] = {m->y, m->z};
  for (int i = 0; i < 300 && !w->bad; i++) {
    double a = w->which * 1000 + i, b = 7;
    rf_tensor *av = NULL, *bv = NULL, *out[2] = {NULL, NULL};
    rf_shape one = rf_shape_of(1, (int64_t)1);
    rf_status *made = rf_tensor_new_copy(RF_FLOAT64, &one, &a, &av);
    if (!made) made = rf_tensor_new_copy(RF_FLOAT64, &one, &b, &bv);
    if (made) { /* cmocka's asserts are for the main thread only */
      rf_status_free(made);
      rf_tensor_release(av);
      w->bad = 1;
      break;
    }
    rf_feed ab[2] = {{m->a, av}, {m->b, bv}}, ba[2] = {{m->b, bv}, {m->a, av}};
    rf_output f[2] = {outs[i % 2], outs[(i / 2) % 2]};
    int n = 1 + (i / 4) % 2;
    rf_status *st =
        rf_session_run(w->s, (i / 8) % 2 ? ba : ab, 2, f, n, NULL, 0, out);
    if (st) {
      rf_status_free(st);
      w->bad = 1;
    }
    for (int k = 0; k < n && !w->bad; k++) {
      double want = f[k].node == m->y.node ? a * 2 : a * 3 + b;
      if (rf_tensor_get(out[k], 0) != want) w->bad = 1;
    }
    for (int k = 0; k < n; k++) rf_tensor_release(out[k]);
    rf_tensor_release(av);
    rf_tensor_release(bv);
  }
  return NULL;
}

static void test_two_threads(void **state) {
  (void)state;
  model m = make_model();
  rf_session *s = rf_test_cpu_session(m.g, 2);
  worker w[2] = {{s, &m, 0, 0}, {s, &m, 1, 0}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  assert_int_equal(w[0].bad, 0);
  assert_int_equal(w[1].bad, 0);
  rf_session_free(s);
  rf_graph_free(m.g);
}

/* The k-th allocation of a new request's first run fails, for every k up
 * to its success: RESOURCE_EXHAUSTED or the right values, nothing leaked,
 * and the request then runs (remembered or not). */
static void test_allocation_failures(void **state) {
  (void)state;
  model m = make_model();
  rf_tensor *av = random_vec(3), *bv = random_vec(3);
  rf_feed ab[2] = {{m.a, av}, {m.b, bv}};
  rf_session *warm = rf_test_cpu_session(m.g, 1); /* one-time tables */
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(warm, ab, 2, &m.z, 1, &m.noop, 1, &out));
  rf_tensor_release(out);
  rf_session_free(warm);
  bool done = false;
  for (int64_t k = 1; !done && k < 100000; k++) {
    rf_default_allocator_trim();
    int64_t live = rf_debug_live_allocations();
    rf_session *s = rf_test_cpu_session(m.g, 1);
    out = NULL;
    int64_t count = rf_debug_allocation_count();
    rf_debug_fail_allocation_once(k);
    rf_status *st = rf_session_run(s, ab, 2, &m.z, 1, &m.noop, 1, &out);
    rf_debug_fail_allocation_once(0);
    done = rf_debug_allocation_count() - count < k; /* k-th not reached */
    if (st) {
      assert_int_equal(rf_status_code(st), RF_RESOURCE_EXHAUSTED);
      rf_status_free(st);
      assert_null(out);
    } else {
      assert_lin(out, av, 3, bv, 1);
      rf_tensor_release(out);
    }
    for (int i = 0; i < 3; i++) {
      assert_ok(rf_session_run(s, ab, 2, &m.z, 1, &m.noop, 1, &out));
      assert_lin(out, av, 3, bv, 1);
      rf_tensor_release(out);
    }
    rf_session_free(s);
    rf_default_allocator_trim();
    assert_int_equal(rf_debug_live_allocations(), live);
  }
  assert_true(done);
  rf_tensor_release(av);
  rf_tensor_release(bv);
  rf_graph_free(m.g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_repeated_run_allocates_nothing, setup),
      cmocka_unit_test_setup(test_orders_and_indices, setup),
      cmocka_unit_test_setup(test_same_pointer_other_name, setup),
      cmocka_unit_test_setup(test_feed_checks_every_run, setup),
      cmocka_unit_test_setup(test_more_requests_than_remembered, setup),
      cmocka_unit_test_setup(test_two_threads, setup),
      cmocka_unit_test_setup(test_allocation_failures, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
