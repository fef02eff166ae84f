/* tests/test_collective_grad_devices.c - gradients through collectives whose
 * consumers have no device (a loss built outside any device scope: such a
 * node runs on its placed input's device, docs/PYTHON.md "Devices"). The
 * gradient participants are on the forward participants' devices, so the
 * incoming gradients need none: rf_gradients must not fail with "Device
 * assignment required". Checked against float64 references on random data
 * for all-reduce, all-gather, reduce-scatter, broadcast and reduce. */
#include <stdio.h>
#include <stdlib.h>

#include "ringflow/collectives.h"
#include "ringflow/gradients.h"
#include "ringflow/ops.h"
#include "testutil.h"

#define N 3 /* devices */
#define D 4 /* elements a participant */

/* sum(y) (square: + sum(y * y)), built with no device. Without the square
 * y's gradient has one contribution, passed on as it is (no AddN on the
 * collective's device). */
static rf_output loss_term(rf_graph *g, rf_output y, bool square) {
  rf_output t[2] = {rf_sum(g, NULL, y, NULL, -1, false),
                    rf_sum(g, NULL, rf_mul(g, NULL, y, y), NULL, -1, false)};
  return square ? rf_add_n(g, NULL, t, 2) : t[0];
}

typedef enum { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, REDUCE } kind;

static void check(kind k) {
  rf_graph *g = rf_graph_new();
  int len = k == REDUCE_SCATTER ? N * D : D;
  rf_output x[N], y[N], terms[N + 1];
  for (int i = 0; i < N; i++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    x[i] = rf_placeholder(g, NULL, RF_FLOAT64, rf_shape_of(1, len));
    rf_graph_pop_device(g);
  }
  int nt = N;
  if (k == ALL_REDUCE) rf_all_reduce_n(g, "c", x, N, RF_REDUCE_SUM, y);
  if (k == ALL_GATHER) rf_all_gather_n(g, "c", x, N, y);
  if (k == REDUCE_SCATTER) rf_reduce_scatter_n(g, "c", x, N, RF_REDUCE_SUM, y);
  if (k == BROADCAST) { /* consumed unscoped and on cpu:1 */
    rf_output b = rf_broadcast(g, "c", x[0]);
    terms[0] = loss_term(g, b, true);
    assert_ok(rf_graph_push_device(g, "cpu:1"));
    terms[1] = rf_sum(g, NULL, b, NULL, -1, false);
    rf_graph_pop_device(g);
    nt = 2;
  } else if (k == REDUCE) { /* on cpu:1, consumed unscoped */
    assert_ok(rf_graph_push_device(g, "cpu:1"));
    rf_output r = rf_reduce(g, "c", x, N, RF_REDUCE_SUM);
    rf_graph_pop_device(g);
    terms[0] = loss_term(g, r, false);
    nt = 1;
  } else {
    for (int i = 0; i < N; i++) terms[i] = loss_term(g, y[i], i > 0);
  }
  rf_output loss = rf_add_n(g, NULL, terms, nt);
  assert_graph_ok(g);
  rf_output dx[N];
  int nx = k == BROADCAST ? 1 : N;
  assert_ok(rf_gradients(g, &loss, 1, x, nx, NULL, dx));

  uint64_t rng = rf_test_rng(17 + (uint64_t)k);
  rf_feed f[N];
  double *v[N];
  for (int i = 0; i < N; i++) {
    f[i] = (rf_feed){x[i], rf_test_random_tensor(&rng, RF_FLOAT64,
                                                 rf_shape_of(1, len), -1, 1)};
    v[i] = rf_test_to_doubles(f[i].value);
  }
  rf_tensor *out[N] = {NULL};
  rf_test_run(g, N, f, N, dx, nx, out);
  double want[N * D];
  for (int i = 0; i < nx; i++) {
    for (int e = 0; e < len; e++) {
      double s = 0; /* the sum over the participants at e */
      for (int j = 0; j < N; j++) s += v[j][e];
      switch (k) { /* d/dx of the loss above (participant 0 unsquared) */
        case ALL_REDUCE: want[e] = 1 + (N - 1) * (1 + 2 * s); break;
        case ALL_GATHER: want[e] = 1 + (N - 1) * (1 + 2 * v[i][e]); break;
        case REDUCE_SCATTER: want[e] = 1 + (e >= D ? 2 * s : 0); break;
        case BROADCAST: want[e] = 2 + 2 * v[0][e]; break;
        case REDUCE: want[e] = 1; break;
      }
    }
    assert_tensor_near(out[i], rf_shape_of(1, len), want, 1e-12);
  }
  for (int i = 0; i < N; i++) {
    rf_tensor_release(out[i]);
    rf_tensor_release(f[i].value);
    free(v[i]);
  }
  rf_graph_free(g);
}

static void test_all_reduce(void **state) {
  (void)state;
  check(ALL_REDUCE);
}

static void test_all_gather(void **state) {
  (void)state;
  check(ALL_GATHER);
}

static void test_reduce_scatter(void **state) {
  (void)state;
  check(REDUCE_SCATTER);
}

static void test_broadcast(void **state) {
  (void)state;
  check(BROADCAST);
}

static void test_reduce(void **state) {
  (void)state;
  check(REDUCE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_reduce),     cmocka_unit_test(test_all_gather),
      cmocka_unit_test(test_reduce_scatter), cmocka_unit_test(test_broadcast),
      cmocka_unit_test(test_reduce),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
