/* tests/test_many_inputs.c - ops with more inputs than a kernel's 32-bit
 * host-memory masks cover (rf__kernel_def.host_memory_inputs: inputs past 31
 * are device memory, which on CPU devices is host memory): AddN and Concat
 * of 40 tensors made on four CPU devices (so inputs past 31 cross devices),
 * against a float64 reference on fresh random data, for 33, 40 and 64
 * inputs. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

#define MAXN 64
#define NDEV 4

/* xs[j] a placeholder [3, 2] on cpu:(j % NDEV), fed vals[j]; y on cpu:1. */
static void check(int n, bool concat, uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  rf_output xs[MAXN];
  rf_feed feeds[MAXN];
  rf_shape s = rf_shape_of(2, 3, 2);
  for (int j = 0; j < n; j++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", j % NDEV);
    assert_ok(rf_graph_push_device(g, dev));
    rf_output x = rf_placeholder(g, NULL, RF_FLOAT32, s);
    xs[j] = rf_identity(g, NULL, x); /* computed on that device */
    rf_graph_pop_device(g);
    feeds[j] = (rf_feed){x, rf_test_random_tensor(rng, RF_FLOAT32, s, -1, 1)};
  }
  assert_ok(rf_graph_push_device(g, "cpu:1"));
  rf_output y = concat ? rf_concat(g, "y", xs, n, 1) : rf_add_n(g, "y", xs, n);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  rf_tensor *ty = NULL;
  rf_test_run(g, NDEV, feeds, n, &y, 1, &ty);
  double *want = calloc((size_t)(6 * n), sizeof(double));
  assert_non_null(want);
  for (int j = 0; j < n; j++) {
    double *v = rf_test_to_doubles(feeds[j].value);
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 2; c++) {
        if (concat) /* y[r, 2j + c] */
          want[r * 2 * n + 2 * j + c] = v[r * 2 + c];
        else
          want[r * 2 + c] += v[r * 2 + c];
      }
    free(v);
  }
  rf_shape ys = concat ? rf_shape_of(2, 3, 2 * n) : s;
  assert_tensor_near(ty, ys, want, rf_test_tolerance(RF_FLOAT32) * n);
  free(want);
  rf_tensor_release(ty);
  for (int j = 0; j < n; j++) rf_tensor_release(feeds[j].value);
  rf_graph_free(g);
}

static void test_add_n_of_many(void **state) {
  uint64_t rng = rf_test_seed();
  const int ns[] = {33, 40, 64};
  for (int i = 0; i < 3; i++) check(ns[i], false, &rng);
}

static void test_concat_of_many(void **state) {
  uint64_t rng = rf_test_seed();
  const int ns[] = {33, 40, 64};
  for (int i = 0; i < 3; i++) check(ns[i], true, &rng);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_add_n_of_many),
      cmocka_unit_test(test_concat_of_many),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
