/* tests/test_scheduling.c - how the executor places work on threads: cheap
 * nodes run inline on the thread that made them ready (a step of cheap nodes,
 * a small all-reduce included, never leaves the calling thread), an expensive
 * kernel on one device never delays another device's start, a lone device's
 * expensive work goes to the pool while the caller waits, the expensive
 * continuations of a collective's participants go to idle workers (fan-out),
 * and long chains
 * of cheap nodes (on one device, or hopping between two) run without growing
 * the C stack. Test ops are registered here with explicit costs. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "kernels/kernel.h"
#include "ops/op_registry.h"
#include "runtime/families.h"
#include "ringflow/collectives.h"
#include "device/device.h"
#include "testutil.h"

static rf_status *scalar_shape(rf__shape_ctx *c) {
  c->output_shapes[0] = rf_shape_scalar();
  return NULL;
}

static rf_status *same_shape(rf__shape_ctx *c) {
  c->output_shapes[0] = c->input_shapes[0];
  return NULL;
}

static const rf__op_spec specs[] = {
    {.name = "SchedConst",
     .outputs = "y: float64",
     .attrs = "value: float = 0",
     .shape = scalar_shape},
    {.name = "SchedIdentity",
     .inputs = "x: T",
     .outputs = "y: T",
     .attrs = "T: type",
     .shape = same_shape},
    {.name = "SchedSet",
     .inputs = "x: float64",
     .outputs = "y: float64",
     .shape = same_shape},
    {.name = "SchedWait",
     .inputs = "x: float64",
     .outputs = "y: float64",
     .attrs = "want: int = 1",
     .shape = same_shape},
    {.name = "SchedRecord",
     .inputs = "x: T",
     .outputs = "y: T",
     .attrs = "T: type",
     .shape = same_shape},
    {.name = "SchedRecordDear",
     .inputs = "x: T",
     .outputs = "y: T",
     .attrs = "T: type",
     .shape = same_shape},
};

/* SchedSet calls in the current run; SchedWait waits for `want` of them. */
static atomic_int sets;
/* The thread that ran SchedRecord, per device index. */
#define MAX_DEV 8
static pthread_t recorded[MAX_DEV];
static atomic_int records;

static rf_status *k_const(rf__kernel_ctx *ctx) {
  double v;
  RF_CHECK(rf__attrs_get_float(&ctx->node->attrs, "value", &v));
  rf_shape s = rf_shape_scalar();
  rf_tensor *t;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, RF_FLOAT64, &s, &t));
  *(double *)t->data = v;
  return NULL;
}

static rf_status *k_identity(rf__kernel_ctx *ctx) {
  rf__kernel_forward_input(ctx, 0, 0);
  return NULL;
}

static rf_status *k_set(rf__kernel_ctx *ctx) {
  atomic_fetch_add(&sets, 1);
  rf__kernel_forward_input(ctx, 0, 0);
  return NULL;
}

/* Blocks its thread until `want` SchedSet kernels ran (which kernels must
 * never do; here it stands for a long kernel): if the other devices' starts
 * waited behind it, they never come, and it gives up after a minute. */
static rf_status *k_wait(rf__kernel_ctx *ctx) {
  int64_t want;
  RF_CHECK(rf__attrs_get_int(&ctx->node->attrs, "want", &want));
  struct timespec nap = {0, 100000};
  for (int i = 0; i < 600000 && atomic_load(&sets) < want; i++)
    nanosleep(&nap, NULL);
  if (atomic_load(&sets) < want)
    return rf__kernel_error(ctx, RF_DEADLINE_EXCEEDED,
                            "only %d of %lld other devices started",
                            atomic_load(&sets), (long long)want);
  rf__kernel_forward_input(ctx, 0, 0);
  return NULL;
}

static rf_status *k_record(rf__kernel_ctx *ctx) {
  int d = ctx->device->index;
  if (d < MAX_DEV) recorded[d] = pthread_self();
  atomic_fetch_add(&records, 1);
  rf__kernel_forward_input(ctx, 0, 0);
  return NULL;
}

static const rf__kernel_def kernels[] = {
    {.op = "SchedConst",
     .device_type = RF_DEVICE_CPU,
     .compute = k_const,
     .cost = RF_COST_CHEAP},
    {.op = "SchedIdentity",
     .device_type = RF_DEVICE_CPU,
     .compute = k_identity,
     .cost = RF_COST_CHEAP},
    {.op = "SchedSet", .device_type = RF_DEVICE_CPU, .compute = k_set},
    {.op = "SchedWait", .device_type = RF_DEVICE_CPU, .compute = k_wait},
    {.op = "SchedRecord",
     .device_type = RF_DEVICE_CPU,
     .compute = k_record,
     .cost = RF_COST_CHEAP},
    {.op = "SchedRecordDear",
     .device_type = RF_DEVICE_CPU,
     .compute = k_record},
};

static int setup(void **state) {
  (void)state;
  static int done;
  if (done) return 0;
  done = 1;
  assert_ok(rf__registry_init());
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    assert_ok(rf__op_register(&specs[i]));
  for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
    assert_ok(rf__kernel_register(&kernels[i]));
  return 0;
}

static rf_node *finish(rf_node_builder *b) {
  rf_node *n = NULL;
  assert_ok(rf_node_builder_finish(b, &n));
  return n;
}

static rf_output const_node(rf_graph *g, const char *device, double v) {
  rf_node_builder *b = rf_node_builder_new(g, "SchedConst", NULL);
  rf_node_builder_device(b, device);
  rf_node_builder_attr_float(b, "value", v);
  return (rf_output){finish(b), 0};
}

static rf_output unary(rf_graph *g, const char *op, const char *device,
                       rf_output x) {
  rf_node_builder *b = rf_node_builder_new(g, op, NULL);
  rf_node_builder_device(b, device);
  rf_node_builder_input(b, x);
  return (rf_output){finish(b), 0};
}

static rf_session *session(const rf_graph *g, int devices, int threads) {
  return rf_test_threads_session(g, devices, threads);
}

/* One device runs a kernel that holds its thread until every other device
 * has run an (expensive) kernel: the step completes only if no device's
 * start waits behind it, whether the slow device is the first one (kept by
 * the calling thread) or the last. With one pool thread the calling thread
 * and the worker share the devices; with n-1 every device may need its own. */
static void test_slow_device_does_not_delay_starts(void **state) {
  (void)state;
  for (int n = 2; n <= 4; n++) {
    int slow_at[2] = {0, n - 1}, threads_of[2] = {1, n - 1};
    for (int w = 0; w < 2; w++) {
      for (int t = 0; t < 2; t++) {
        rf_graph *g = rf_graph_new();
        rf_output y[MAX_DEV];
        for (int d = 0; d < n; d++) {
          char dev[16];
          snprintf(dev, sizeof dev, "cpu:%d", d);
          rf_output c = const_node(g, dev, d + 1);
          if (d != slow_at[w]) {
            y[d] = unary(g, "SchedSet", dev, c);
            continue;
          }
          rf_node_builder *b = rf_node_builder_new(g, "SchedWait", NULL);
          rf_node_builder_device(b, dev);
          rf_node_builder_input(b, c);
          rf_node_builder_attr_int(b, "want", n - 1);
          y[d] = (rf_output){finish(b), 0};
        }
        rf_session *s = session(g, n, threads_of[t]);
        for (int step = 0; step < 3; step++) {
          atomic_store(&sets, 0);
          rf_tensor *out[MAX_DEV];
          assert_ok(rf_session_run(s, NULL, 0, y, n, NULL, 0, out));
          for (int d = 0; d < n; d++) {
            assert_true(rf_tensor_get(out[d], 0) == d + 1);
            rf_tensor_release(out[d]);
          }
          assert_int_equal(atomic_load(&sets), n - 1);
        }
        rf_session_free(s);
        rf_graph_free(g);
      }
    }
  }
}

/* Fed inputs, an all-reduce of a small tensor and a recording node on each
 * of 4 devices: every node is cheap, so the whole step - every device's
 * start, the collective and what follows it on every device - runs on the
 * calling thread, with the pool's workers idle. The sums are checked too. */
static void test_cheap_step_stays_on_caller(void **state) {
  (void)state;
  enum { N = 4, LEN = 257 };
  rf_graph *g = rf_graph_new();
  rf_output xs[N], ys[N], rec[N];
  for (int d = 0; d < N; d++) {
    char dev[16], name[16];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    snprintf(name, sizeof name, "x%d", d);
    assert_ok(rf_graph_push_device(g, dev));
    xs[d] = rf_placeholder(g, name, RF_FLOAT32, rf_shape_of(1, (int64_t)LEN));
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "ar", xs, N, RF_REDUCE_SUM, ys);
  for (int d = 0; d < N; d++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    rf_node_builder *b = rf_node_builder_new(g, "SchedRecord", NULL);
    rf_node_builder_device(b, dev);
    rf_node_builder_input(b, ys[d]);
    rec[d] = (rf_output){finish(b), 0};
  }
  assert_graph_ok(g);
  uint64_t rng = rf_test_seed() | 1;
  rf_feed feeds[N];
  double want[LEN] = {0};
  for (int d = 0; d < N; d++) {
    rf_tensor *t = rf_test_random_tensor(&rng, RF_FLOAT32,
                                         rf_shape_of(1, (int64_t)LEN), -4, 4);
    for (int i = 0; i < LEN; i++) want[i] += rf_tensor_get(t, i);
    feeds[d] = (rf_feed){xs[d], t};
  }
  rf_session *s = session(g, N, 2);
  for (int step = 0; step < 5; step++) {
    atomic_store(&records, 0);
    for (int d = 0; d < N; d++) recorded[d] = (pthread_t)0;
    rf_tensor *out[N];
    assert_ok(rf_session_run(s, feeds, N, rec, N, NULL, 0, out));
    assert_int_equal(atomic_load(&records), N);
    for (int d = 0; d < N; d++) {
      assert_true(pthread_equal(recorded[d], pthread_self()));
      assert_tensor_near(out[d], rf_shape_of(1, (int64_t)LEN), want, 1e-4);
      rf_tensor_release(out[d]);
    }
  }
  for (int d = 0; d < N; d++) rf_tensor_release(feeds[d].value);
  rf_session_free(s);
  rf_graph_free(g);
}

/* An all-reduce of a small tensor (cheap: it completes on the calling
 * thread), then on one device a kernel that holds its thread until every
 * other device has run an expensive kernel after the all-reduce: the thread
 * that completes the collective delivers each participant's result in turn,
 * so the step completes only if a device's expensive continuation goes to an
 * idle worker instead of running before the next participant hears of its
 * result. For every position of the slow device; values checked too. */
static void test_collective_completions_fan_out(void **state) {
  (void)state;
  enum { N = 4 };
  for (int slow = 0; slow < N; slow++) {
    rf_graph *g = rf_graph_new();
    rf_output xs[N], ys[N], out_nodes[N];
    for (int d = 0; d < N; d++) {
      char dev[16];
      snprintf(dev, sizeof dev, "cpu:%d", d);
      xs[d] = const_node(g, dev, d + 1);
    }
    rf_all_reduce_n(g, "ar", xs, N, RF_REDUCE_SUM, ys);
    for (int d = 0; d < N; d++) {
      char dev[16];
      snprintf(dev, sizeof dev, "cpu:%d", d);
      if (d != slow) {
        out_nodes[d] = unary(g, "SchedSet", dev, ys[d]);
        continue;
      }
      rf_node_builder *b = rf_node_builder_new(g, "SchedWait", NULL);
      rf_node_builder_device(b, dev);
      rf_node_builder_input(b, ys[d]);
      rf_node_builder_attr_int(b, "want", N - 1);
      out_nodes[d] = (rf_output){finish(b), 0};
    }
    assert_graph_ok(g);
    rf_session *s = session(g, N, 2);
    for (int step = 0; step < 3; step++) {
      atomic_store(&sets, 0);
      rf_tensor *out[N];
      assert_ok(rf_session_run(s, NULL, 0, out_nodes, N, NULL, 0, out));
      for (int d = 0; d < N; d++) {
        assert_true(rf_tensor_get(out[d], 0) == N * (N + 1) / 2);
        rf_tensor_release(out[d]);
      }
      assert_int_equal(atomic_load(&sets), N - 1);
    }
    rf_session_free(s);
    rf_graph_free(g);
  }
}

/* The threads that ran device 0's and device 1's SchedRecordDear in each of
 * `steps` steps of a graph where `devices` (1 or 2) devices each run one. */
static void record_dear(int devices, int steps, pthread_t *ran0,
                        pthread_t *ran1) {
  rf_graph *g = rf_graph_new();
  rf_output rec[2];
  for (int d = 0; d < devices; d++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", d);
    rec[d] = unary(g, "SchedRecordDear", dev, const_node(g, dev, d + 1));
  }
  rf_session *s = session(g, devices, 2);
  for (int step = 0; step < steps; step++) {
    /* let the workers finish the last step and wait for work */
    struct timespec nap = {0, 2000000};
    nanosleep(&nap, NULL);
    rf_tensor *out[2];
    assert_ok(rf_session_run(s, NULL, 0, rec, devices, NULL, 0, out));
    for (int d = 0; d < devices; d++) {
      assert_true(rf_tensor_get(out[d], 0) == d + 1);
      rf_tensor_release(out[d]);
    }
    ran0[step] = recorded[0];
    if (ran1) ran1[step] = recorded[1];
  }
  rf_session_free(s);
  rf_graph_free(g);
}

/* A lone device's expensive work goes to an idle pool worker, the caller
 * only waits (three threads computing on two cores let the kernel stack two
 * of them on one core); with two devices the caller keeps the first one's
 * and the second goes to the pool. Idleness is a race with the previous
 * step's workers, so one step of ten in the pool is enough for the first. */
static void test_lone_device_goes_to_the_pool(void **state) {
  (void)state;
  enum { STEPS = 10 };
  pthread_t ran0[STEPS], ran1[STEPS];
  record_dear(1, STEPS, ran0, NULL);
  int pooled = 0;
  for (int i = 0; i < STEPS; i++)
    pooled += !pthread_equal(ran0[i], pthread_self());
  assert_true(pooled >= 1);
  record_dear(2, STEPS, ran0, ran1);
  for (int i = 0; i < STEPS; i++) {
    assert_true(pthread_equal(ran0[i], pthread_self()));
    assert_false(pthread_equal(ran1[i], pthread_self()));
  }
}

/* 100,000 cheap nodes in a chain on one device, beside a second device:
 * they run inline one after another from a local stack, not recursively. */
static void test_long_cheap_chain(void **state) {
  (void)state;
  enum { LEN = 100000 };
  rf_graph *g = rf_graph_new();
  rf_output x = const_node(g, "cpu:0", 7);
  for (int i = 0; i < LEN; i++) x = unary(g, "SchedIdentity", "cpu:0", x);
  rf_output z = unary(g, "SchedIdentity", "cpu:1", const_node(g, "cpu:1", 3));
  rf_output fetch[2] = {x, z};
  rf_session *s = session(g, 2, 2);
  for (int step = 0; step < 2; step++) {
    rf_tensor *out[2];
    assert_ok(rf_session_run(s, NULL, 0, fetch, 2, NULL, 0, out));
    assert_true(rf_tensor_get(out[0], 0) == 7);
    assert_true(rf_tensor_get(out[1], 0) == 3);
    rf_tensor_release(out[0]);
    rf_tensor_release(out[1]);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

/* A chain of cheap nodes hopping between two devices at every node: each
 * _Send completes the other device's pending _Recv, whose completion runs
 * the next hop on the same thread; nesting is bounded (deeper completions
 * continue on the pool), so thousands of hops neither overflow the C stack
 * nor deadlock, with one pool thread or two. */
static void test_cheap_chain_across_devices(void **state) {
  (void)state;
  enum { HOPS = 3000 };
  for (int threads = 1; threads <= 2; threads++) {
    rf_graph *g = rf_graph_new();
    rf_output x = const_node(g, "cpu:0", 5);
    for (int i = 1; i <= HOPS; i++)
      x = unary(g, "SchedIdentity", i % 2 ? "cpu:1" : "cpu:0", x);
    rf_session *s = session(g, 2, threads);
    for (int step = 0; step < 2; step++) {
      rf_tensor *out = NULL;
      assert_ok(rf_session_run(s, NULL, 0, &x, 1, NULL, 0, &out));
      assert_true(rf_tensor_get(out, 0) == 5);
      rf_tensor_release(out);
    }
    rf_session_free(s);
    rf_graph_free(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_slow_device_does_not_delay_starts, setup),
      cmocka_unit_test_setup(test_cheap_step_stays_on_caller, setup),
      cmocka_unit_test_setup(test_collective_completions_fan_out, setup),
      cmocka_unit_test_setup(test_lone_device_goes_to_the_pool, setup),
      cmocka_unit_test_setup(test_long_cheap_chain, setup),
      cmocka_unit_test_setup(test_cheap_chain_across_devices, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
