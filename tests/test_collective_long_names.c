/* tests/test_collective_long_names.c - collective names of any length stay
 * distinct where participants meet at run time: two independent
 * collectives whose names share their first 600, 5000 or 100000 characters
 * (and differ only after that) run in one step, each with its own
 * participants and values, for all-reduce, all-gather and reduce + broadcast
 * (whose shared names are their node names), against float64 references. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringflow/collectives.h"
#include "testutil.h"

#define N 3

/* A name of len characters: `len - 1` times 'n', then `last`. */
static char *long_name(size_t len, char last) {
  char *s = malloc(len + 1);
  memset(s, 'n', len - 1);
  s[len - 1] = last;
  s[len] = '\0';
  return s;
}

static void placeholders(rf_graph *g, rf_output *xs) {
  for (int i = 0; i < N; i++) {
    char dev[16];
    sprintf(dev, "cpu:%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    xs[i] = rf_placeholder(g, NULL, RF_FLOAT64, rf_shape_of(1, (int64_t)4));
    rf_graph_pop_device(g);
  }
}

static void run_case(size_t len, uint64_t *rng) {
  char *a = long_name(len, 'a'), *b = long_name(len, 'b');
  char *ra = long_name(len, 'c'), *rb = long_name(len, 'd');
  rf_graph *g = rf_graph_new();
  rf_output xs[N], ys[N], ya[N], yb[N], ga[N], gb[N];
  placeholders(g, xs);
  placeholders(g, ys);
  rf_all_reduce_n(g, a, xs, N, RF_REDUCE_SUM, ya);
  rf_all_reduce_n(g, b, ys, N, RF_REDUCE_MAX, yb);
  rf_all_gather_n(g, ra, xs, N, ga); /* node names ra_0.. */
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output r1 = rf_reduce(g, rb, xs, N, RF_REDUCE_SUM); /* node name rb */
  rf_output r2 = rf_reduce(g, NULL, ys, N, RF_REDUCE_SUM);
  rf_graph_pop_device(g);
  /* Broadcast named like the reduce but for one last character. */
  rb[len - 1] = 'e';
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output bc = rf_broadcast(g, rb, r2);
  rf_graph_pop_device(g);
  for (int i = 0; i < N; i++) {
    char dev[16];
    sprintf(dev, "cpu:%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    gb[i] = rf_identity(g, NULL, bc);
    rf_graph_pop_device(g);
  }
  assert_graph_ok(g);
  rf_tensor *xin[N], *yin[N];
  rf_feed feeds[2 * N];
  double sum_x[4] = {0}, max_y[4], sum_y[4] = {0};
  for (int i = 0; i < N; i++) {
    xin[i] = rf_test_random_tensor(rng, RF_FLOAT64, rf_shape_of(1, 4), -1, 1);
    yin[i] = rf_test_random_tensor(rng, RF_FLOAT64, rf_shape_of(1, 4), -1, 1);
    feeds[i] = (rf_feed){xs[i], xin[i]};
    feeds[N + i] = (rf_feed){ys[i], yin[i]};
    for (int e = 0; e < 4; e++) {
      double x = rf_tensor_get(xin[i], e), y = rf_tensor_get(yin[i], e);
      sum_x[e] += x;
      sum_y[e] += y;
      max_y[e] = i == 0 || y > max_y[e] ? y : max_y[e];
    }
  }
  rf_output fetch[4 * N + 1];
  int nf = 0;
  for (int i = 0; i < N; i++) {
    fetch[nf++] = ya[i];
    fetch[nf++] = yb[i];
    fetch[nf++] = ga[i];
    fetch[nf++] = gb[i];
  }
  fetch[nf++] = r1;
  rf_tensor *out[4 * N + 1];
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = N;
  o.collective_timeout_ms = 60000;
  rf_session *s;
  assert_ok(rf_session_new(g, &o, &s));
  rf_status *st = rf_session_run(s, feeds, 2 * N, fetch, nf, NULL, 0, out);
  if (st) { /* the end says why: the names fill the start */
    const char *m = rf_status_message(st);
    size_t k = strlen(m);
    fail_msg("names of %zu characters: ...%s", len, k > 300 ? m + k - 300 : m);
  }
  double gathered[4 * N];
  for (int i = 0; i < N; i++)
    for (int e = 0; e < 4; e++) gathered[4 * i + e] = rf_tensor_get(xin[i], e);
  for (int i = 0; i < N; i++) {
    assert_tensor_near(out[4 * i], rf_shape_of(1, 4), sum_x, 1e-12);
    assert_tensor_near(out[4 * i + 1], rf_shape_of(1, 4), max_y, 0);
    assert_tensor_near(out[4 * i + 2], rf_shape_of(1, 4 * N), gathered, 0);
    assert_tensor_near(out[4 * i + 3], rf_shape_of(1, 4), sum_y, 1e-12);
  }
  assert_tensor_near(out[4 * N], rf_shape_of(1, 4), sum_x, 1e-12);
  for (int i = 0; i < nf; i++) rf_tensor_release(out[i]);
  rf_session_free(s);
  for (int i = 0; i < N; i++) {
    rf_tensor_release(xin[i]);
    rf_tensor_release(yin[i]);
  }
  rf_graph_free(g);
  free(a);
  free(b);
  free(ra);
  free(rb);
}

static void test_names_of_600_characters(void **state) {
  uint64_t rng = rf_test_rng(1);
  run_case(600, &rng);
}

static void test_names_of_5000_characters(void **state) {
  uint64_t rng = rf_test_rng(2);
  run_case(5000, &rng);
}

static void test_names_of_100000_characters(void **state) {
  uint64_t rng = rf_test_rng(3);
  run_case(100000, &rng);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names_of_600_characters),
      cmocka_unit_test(test_names_of_5000_characters),
      cmocka_unit_test(test_names_of_100000_characters),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
