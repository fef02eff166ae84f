/* tests/test_soak.c - 2,000 data-parallel training steps on 4 virtual
 * devices (a small MLP, all-reduce of gradients, Adam on variables): resident
 * memory must stay flat after warm-up, and the library's live allocation count
 * must not grow step over step. Under AddressSanitizer (whose quarantine holds
 * freed memory) only the allocation count is checked. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ringflow/collectives.h"
#include "ringflow/debug.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif

#define DEVICES 4
#define ROWS 16
#define IN 32
#define HIDDEN 32
#define CLASSES 4

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

typedef struct replica {
  rf_output x, y, loss;
  rf_node *updates[4];
} replica;

static void build(rf_graph *g, replica *r) {
  rf_output grads[DEVICES][4], synced[4][DEVICES], vars[DEVICES][4];
  const int64_t shapes[4][2] = {
      {IN, HIDDEN}, {HIDDEN, 0}, {HIDDEN, CLASSES}, {CLASSES, 0}};
  for (int d = 0; d < DEVICES; d++) {
    char dev[8];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    rf_graph_push_device(g, dev);
    r[d].x = rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_of(2, ROWS, IN));
    r[d].y = rf_placeholder(g, NULL, RF_INT32, rf_shape_of(1, ROWS));
    rf_output reads[4];
    for (int p = 0; p < 4; p++) {
      rf_shape s = shapes[p][1] ? rf_shape_of(2, shapes[p][0], shapes[p][1])
                                : rf_shape_of(1, shapes[p][0]);
      vars[d][p] = rf_variable(g, NULL, RF_FLOAT32, s);
      reads[p] = rf_read_variable(g, NULL, vars[d][p]);
    }
    rf_output h = rf_relu(
        g, NULL,
        rf_bias_add(g, NULL, rf_matmul(g, NULL, r[d].x, reads[0], false, false),
                    reads[1]));
    rf_output logits = rf_bias_add(
        g, NULL, rf_matmul(g, NULL, h, reads[2], false, false), reads[3]);
    r[d].loss = rf_mean(
        g, NULL, rf_sparse_softmax_cross_entropy(g, NULL, logits, r[d].y), NULL,
        -1, false);
    rf_graph_pop_device(g);
    assert_ok(rf_gradients(g, &r[d].loss, 1, reads, 4, NULL, grads[d]));
  }
  for (int p = 0; p < 4; p++) {
    rf_output per[DEVICES];
    for (int d = 0; d < DEVICES; d++) per[d] = grads[d][p];
    char name[16];
    snprintf(name, sizeof name, "g%d", p);
    rf_all_reduce_n(g, name, per, DEVICES, RF_REDUCE_AVG, synced[p]);
  }
  for (int d = 0; d < DEVICES; d++) {
    char dev[8];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    rf_graph_push_device(g, dev);
    for (int p = 0; p < 4; p++)
      r[d].updates[p] = rf_apply_gradient_descent(
          g, NULL, vars[d][p], rf_const_scalar(g, NULL, RF_FLOAT32, 0.05),
          synced[p][d]);
    rf_graph_pop_device(g);
  }
}

/* Assigns small random values to every variable through Assign nodes. */
static rf_node *build_init(rf_graph *g) {
  rf_node *init = rf_noop(g, "init");
  uint64_t rng = 7;
  for (int id = 0; id < rf_graph_num_nodes(g); id++) {
    rf_node *n = rf_graph_node(g, id);
    if (strcmp(rf_node_op(n), "Variable") != 0) continue;
    rf_output v = {n, 0};
    rf_shape s;
    assert_ok(rf_node_attr_shape(n, "shape", &s));
    rf_tensor *t = rf_test_random_tensor(&rng, RF_FLOAT32, s, -0.3, 0.3);
    rf_graph_push_device(g, rf_node_device(n));
    rf_node *a = rf_assign(g, NULL, v, rf_const(g, NULL, t));
    rf_graph_pop_device(g);
    rf_tensor_release(t);
    assert_ok(rf_graph_add_control_edge(g, a, init));
  }
  return init;
}

static void test_memory_stays_flat(void **state) {
  rf_graph *g = rf_graph_new();
  replica r[DEVICES];
  build(g, r);
  rf_node *init = build_init(g);
  rf_node *train = rf_noop(g, "train");
  for (int d = 0; d < DEVICES; d++)
    for (int p = 0; p < 4; p++)
      assert_ok(rf_graph_add_control_edge(g, r[d].updates[p], train));
  assert_graph_ok(g);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = DEVICES;
  rf_session *s;
  assert_ok(rf_session_new(g, &o, &s));
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL));
  uint64_t rng = rf_test_seed();
  rf_tensor *xs[DEVICES], *ys[DEVICES];
  rf_feed feeds[2 * DEVICES];
  for (int d = 0; d < DEVICES; d++) {
    xs[d] =
        rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, ROWS, IN), 0, 1);
    ys[d] =
        rf_test_random_tensor(&rng, RF_INT32, rf_shape_of(1, ROWS), 0, CLASSES);
    feeds[2 * d] = (rf_feed){r[d].x, xs[d]};
    feeds[2 * d + 1] = (rf_feed){r[d].y, ys[d]};
  }
  long rss_warm = 0;
  int64_t live_warm = 0;
  double first = 0, last = 0;
  for (int step = 0; step < 2000; step++) {
    rf_tensor *loss;
    assert_ok(
        rf_session_run(s, feeds, 2 * DEVICES, &r[0].loss, 1, &train, 1, &loss));
    if (step == 0) first = rf_tensor_get(loss, 0);
    last = rf_tensor_get(loss, 0);
    rf_tensor_release(loss);
    if (step == 200) {
      rss_warm = rss_kib();
      live_warm = rf_debug_live_allocations();
    }
  }
  long rss_end = rss_kib();
  int64_t live_end = rf_debug_live_allocations();
  fprintf(stderr,
          "loss %.4f -> %.4f; RSS %ld KiB after warm-up, %ld KiB at the end; "
          "live allocations %lld -> %lld\n",
          first, last, rss_warm, rss_end, (long long)live_warm,
          (long long)live_end);
  assert_true(last < first); /* it trains */
  assert_true(live_end <= live_warm + 16);
  if (!UNDER_SANITIZER)
    assert_true(rss_end - rss_warm < 1024); /* < 1 MiB over 1,800 steps */
  for (int d = 0; d < DEVICES; d++) {
    rf_tensor_release(xs[d]);
    rf_tensor_release(ys[d]);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_memory_stays_flat),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
