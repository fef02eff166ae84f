/* tests/test_umbrella_header.c - ringflow/ringflow.h is "the whole public
 * API": a program that includes only it (through testutil.h) builds a
 * collective (ringflow/collectives.h) and saves and loads its graph as JSON
 * (ringflow/graph_io.h), then runs the loaded graph: the all-reduce's sums
 * against sums computed here on random data. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define N 3
#define LEN 5

static void test_collectives_and_graph_io_through_ringflow_h(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(0x0b1a);
  rf_graph *g = rf_graph_new();
  rf_output in[N], out[N];
  double want[LEN] = {0};
  for (int d = 0; d < N; d++) {
    char dev[8] = "cpu:0";
    dev[4] = (char)('0' + d);
    assert_ok(rf_graph_push_device(g, dev));
    rf_tensor *t =
        rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(1, LEN), -4, 4);
    for (int i = 0; i < LEN; i++) want[i] += rf_tensor_get(t, i);
    in[d] = rf_const(g, NULL, t);
    rf_tensor_release(t);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "sum", in, N, RF_REDUCE_SUM, out);
  assert_graph_ok(g);
  char *json = NULL;
  assert_ok(rf_graph_to_json(g, &json));
  rf_graph *loaded = NULL;
  assert_ok(rf_graph_from_json(json, strlen(json), &loaded));
  rf_string_free(json);
  rf_output fetch[N];
  for (int d = 0; d < N; d++) {
    fetch[d].node = rf_graph_find_node(loaded, rf_node_name(out[d].node));
    assert_non_null(fetch[d].node);
    fetch[d].index = out[d].index;
  }
  rf_tensor *got[N];
  rf_test_run(loaded, N, NULL, 0, fetch, N, got);
  for (int d = 0; d < N; d++) {
    assert_tensor_near(got[d], rf_shape_of(1, LEN), want, 1e-12);
    rf_tensor_release(got[d]);
  }
  rf_graph_free(loaded);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collectives_and_graph_io_through_ringflow_h),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
