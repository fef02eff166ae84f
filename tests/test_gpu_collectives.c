/* tests/test_gpu_collectives.c - the reference collective matrix of
 * tests/test_collectives.c (included below) on 8 virtual GPU devices of one
 * physical GPU (the CUDA-kernel backend): every test runs twice from the same
 * seed, first on 8 CPU devices (recording every fetched tensor), then on
 * gpu:0..gpu:7, where each fetched tensor must equal the CPU's - bit for bit
 * for the collectives themselves (the GPU reduces in the CPU's order and
 * arithmetic), to 1e-12 for gradient graphs (other GPU ops may sum in another
 * order). Besides the float64 references inside each test. Plus: a mismatched
 * shape fails naming 'shape' and the session keeps working; large odd-sized
 * tensors (many blocks, byte-granular gathers) agree with the CPU; chains of
 * dependent collectives and kernels on 64 MiB a device give exact results
 * (the collectives complete in stream order).
 *
 * With several physical GPUs (gpu:i on GPU i % count) the groups whose
 * devices are on distinct GPUs run through NCCL instead (the sets {1,2,0},
 * {1,0}, and all 8 on an 8-GPU machine), and NCCL reduces floats in its own
 * order: there float fetches must agree with the CPU's to the dtype's
 * tolerance (times 8 ranks) instead of bit for bit; integers stay exact.
 *
 * Without a GPU (or a CUDA build) every test skips ("GPU tests skipped:
 * <reason>"); RF_GPU_TEST_ON_CPU=1 runs the GPU pass on CPU devices instead,
 * which checks this harness on a machine without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#ifdef RF_HAVE_NCCL
#include "comm/gpu/gpu_coll.h"
#endif
#ifdef RF_HAVE_CUDA
#include "device/gpu/gpu.h"
#endif

/* ---- the hooks test_collectives.c calls ---- */

static int on_cpu(void) {
  const char *e = getenv("RF_GPU_TEST_ON_CPU");
  return e && e[0] == '1';
}

enum { DIRECT, RECORD, COMPARE };
static const char *prefix = "gpu";
static int mode = DIRECT;
static double compare_tol; /* < 0: bytes must be equal */
static rf_tensor *recorded[4096];
static int num_recorded, num_compared;

static void device_name(int id, char *buf) {
  sprintf(buf, "%s:%d", prefix, id);
}

static rf_session_options options(void) {
  rf_session_options o;
  rf_session_options_init(&o);
  if (strcmp(prefix, "gpu") == 0) {
    o.num_cpu_devices = 1;
    o.num_gpu_devices = 8; /* all on one physical GPU here */
  } else {
    o.num_cpu_devices = 8;
  }
  return o;
}

/* Whether some groups may run through NCCL (two or more physical GPUs
 * behind gpu:0..7), whose float reductions round in NCCL's own order. */
static int nccl_may_run(void) {
#ifdef RF_HAVE_NCCL
  static int count = -1;
  if (on_cpu()) return 0;
  if (count < 0) {
    rf_status *st = rf__gpu_count(&count);
    if (st) count = 0;
    rf_status_free(st);
  }
  return count > 1;
#else
  return 0;
#endif
}

static void compare(const rf_tensor *want, const rf_tensor *got) {
  rf_shape ws = rf_tensor_shape(want), gs = rf_tensor_shape(got);
  rf_dtype dt = rf_tensor_dtype(want);
  assert_int_equal(rf_tensor_dtype(got), dt);
  assert_true(rf_shape_equal(&ws, &gs));
  double tol = compare_tol;
  if (tol < 0 && rf_dtype_is_float(dt) && nccl_may_run())
    tol = rf_test_tolerance(dt) * 8;
  if (tol < 0) {
    if (memcmp(rf_tensor_data(got), rf_tensor_data(want),
               rf_tensor_nbytes(want)) != 0) {
      double *w = rf_test_to_doubles(want);
      assert_tensor_near(got, ws, w, 0); /* names the element */
      free(w);
      fail_msg("fetch %d (%s): bytes differ from the CPU's", num_compared,
               rf_dtype_name(rf_tensor_dtype(want)));
    }
  } else {
    double *w = rf_test_to_doubles(want);
    assert_tensor_near(got, ws, w, tol);
    free(w);
  }
}

static void run_session(rf_graph *g, const rf_feed *feeds, int nfeeds,
                        const rf_output *fetches, int n, rf_tensor **outs) {
  assert_graph_ok(g);
  rf_session_options o = options();
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  assert_ok(rf_session_run(s, feeds, nfeeds, fetches, n, NULL, 0, outs));
  rf_session_free(s);
  for (int i = 0; i < n; i++) {
    if (mode == RECORD) {
      assert_true(num_recorded < (int)(sizeof recorded / sizeof *recorded));
      recorded[num_recorded++] = rf_tensor_retain(outs[i]);
    } else if (mode == COMPARE) {
      assert_true(num_compared < num_recorded);
      compare(recorded[num_compared], outs[i]);
      num_compared++;
    }
  }
}

#define RF_COLLECTIVES_HOOKS 1
#include "test_collectives.c"

/* ---- running every test on CPU, then GPU ---- */

static void need_gpu(void) {
  if (!on_cpu()) rf_test_need_gpu();
}

static const char *gpu_prefix(void) { return on_cpu() ? "cpu" : "gpu"; }

static void cpu_then_gpu(void (*test)(void **), double tol) {
  need_gpu();
  prefix = "cpu";
  mode = RECORD;
  num_recorded = num_compared = 0;
  test(NULL);
  prefix = gpu_prefix();
  mode = COMPARE;
  compare_tol = tol;
  test(NULL);
  assert_int_equal(num_compared, num_recorded);
  for (int i = 0; i < num_recorded; i++) rf_tensor_release(recorded[i]);
  num_recorded = num_compared = 0;
  mode = DIRECT;
}

#define EXACT -1.0
#define BOTH(name, tol) \
  static void gpu_##name(void **state) { cpu_then_gpu(name, tol); }
BOTH(test_all_reduce_matrix, EXACT)
BOTH(test_reduce_matrix, EXACT)
BOTH(test_broadcast_matrix, EXACT)
BOTH(test_all_gather_reduce_scatter, EXACT)
BOTH(test_all_reduce_gradient, 1e-12)
BOTH(test_reduce_and_broadcast_gradients, 1e-12)
BOTH(test_single_device_broadcast, EXACT)
BOTH(test_all_reduce_and_reduce_broadcast_agree, EXACT)
BOTH(test_fetching_one_participant_runs_all, EXACT)
BOTH(test_other_reduction_gradients, 1e-12)
BOTH(test_gradient_through_peers, 1e-12)

/* ---- beyond the matrix ---- */

/* Unknown shapes fed (3) and (4): the run fails naming 'shape' and both
 * devices; the same session then runs agreeing shapes, several steps (the
 * devices' caches reuse the collective's buffers). */
static void test_mismatched_shape(void **state) {
  need_gpu();
  prefix = gpu_prefix();
  uint64_t rng = rf_test_seed() + 20;
  rf_graph *g = rf_graph_new();
  rf_output xs[2], ys[2];
  char dev[2][16];
  for (int i = 0; i < 2; i++) {
    char name[8];
    sprintf(name, "x%d", i);
    device_name(i, dev[i]);
    assert_ok(rf_graph_push_device(g, dev[i]));
    xs[i] = rf_placeholder(g, name, RF_FLOAT32, rf_shape_of(1, (int64_t)-1));
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "shapes", xs, 2, RF_REDUCE_SUM, ys);
  assert_graph_ok(g);
  rf_session_options o = options();
  /* Uncaptured: the steps after the error check the executor's collective. */
  o.gpu_graphs = 0;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  rf_tensor *a = rf_test_random_tensor(&rng, RF_FLOAT32,
                                       rf_shape_of(1, (int64_t)3), -1, 1);
  rf_tensor *b = rf_test_random_tensor(&rng, RF_FLOAT32,
                                       rf_shape_of(1, (int64_t)4), -1, 1);
  rf_feed feeds[2] = {{xs[0], a}, {xs[1], b}};
  rf_tensor *out[2] = {NULL, NULL};
  rf_status *st = rf_session_run(s, feeds, 2, ys, 2, NULL, 0, out);
  const char *msg = st ? rf_status_message(st) : "";
  assert_non_null(strstr(msg, dev[0]));
  assert_non_null(strstr(msg, dev[1]));
  assert_status(st, RF_INVALID_ARGUMENT, "disagree on shape");
  for (int step = 0; step < 3; step++) {
    rf_tensor *c = rf_test_random_tensor(&rng, RF_FLOAT32,
                                         rf_shape_of(1, (int64_t)3), -1, 1);
    feeds[1].value = c;
    assert_ok(rf_session_run(s, feeds, 2, ys, 2, NULL, 0, out));
    double sum[3];
    for (int e = 0; e < 3; e++)
      sum[e] =
          (double)((float)rf_tensor_get(a, e) + (float)rf_tensor_get(c, e));
    for (int i = 0; i < 2; i++) {
      assert_tensor_near(out[i], rf_shape_of(1, (int64_t)3), sum, 0);
      rf_tensor_release(out[i]);
    }
    rf_tensor_release(c);
  }
  rf_tensor_release(a);
  rf_tensor_release(b);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Large, odd-sized inputs on all 8 devices: every collective at once, for a
 * float and a 1-byte dtype (gathers move single bytes). */
static void large_case(void **state) {
  (void)state;
  uint64_t rng = rf_test_seed() + 21;
  const rf_dtype dts[] = {RF_FLOAT32, RF_INT8, RF_BFLOAT16};
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
    rf_shape shape = rf_shape_of(2, (int64_t)8 * 13, (int64_t)1001);
    rf_graph *g = rf_graph_new();
    rf_output xs[8], f[33];
    rf_tensor *in[8], *out[33];
    rf_feed feeds[8];
    for (int i = 0; i < 8; i++) {
      char dev[16], name[8];
      device_name(i, dev);
      sprintf(name, "x%d", i);
      assert_ok(rf_graph_push_device(g, dev));
      xs[i] = rf_placeholder(g, name, dts[d], shape);
      rf_graph_pop_device(g);
      in[i] = rf_test_random_tensor(&rng, dts[d], shape, -3, 3);
      feeds[i] = (rf_feed){xs[i], in[i]};
    }
    rf_all_reduce_n(g, "ar", xs, 8, RF_REDUCE_AVG, f);
    rf_all_gather_n(g, "ag", xs, 8, f + 8);
    rf_reduce_scatter_n(g, "rs", xs, 8, RF_REDUCE_MAX, f + 16);
    char dev[16];
    device_name(5, dev);
    assert_ok(rf_graph_push_device(g, dev));
    f[24] = rf_reduce(g, "red", xs, 8, RF_REDUCE_PROD);
    rf_output b = rf_broadcast(g, "bc", xs[5]);
    rf_graph_pop_device(g);
    for (int i = 0; i < 8; i++) {
      device_name(i, dev);
      assert_ok(rf_graph_push_device(g, dev));
      f[25 + i] = rf_identity(g, NULL, b);
      rf_graph_pop_device(g);
    }
    run_session(g, feeds, 8, f, 33, out);
    for (int i = 0; i < 33; i++) rf_tensor_release(out[i]);
    for (int i = 0; i < 8; i++) rf_tensor_release(in[i]);
    rf_graph_free(g);
  }
}

static void test_large_tensors(void **state) {
  cpu_then_gpu(large_case, EXACT);
}

/* Collectives complete in stream order (their dones fire at the launch):
 * on each device a kernel consumes the all-reduce's output right away, a
 * second all-reduce takes those results, an all-gather the second's, and a
 * Sum of the gathered values is fetched - on 8M float64 elements a device,
 * so a missing wait would read half-written buffers. Each step feeds new
 * values (step + 1) * (i + 1), so stale data from the step before cannot
 * pass, and buffers released at one step's launches are reused by the
 * next. n devices on one GPU (the CUDA-kernel backend), or gpu:0 alone
 * through a one-rank NCCL communicator. */
static void stream_order_case(int n, bool nccl) {
  const int64_t count = 8 << 20;
  rf_graph *g = rf_graph_new();
  rf_output v[8], xs[8], ys[8], zs[8], ws[8], gs[8], sums[8];
  rf_tensor *dims = NULL;
  assert_ok(rf_tensor_new(RF_INT64, &(rf_shape){1, {1}}, NULL, &dims));
  rf_tensor_set(dims, 0, (double)count);
  for (int i = 0; i < n; i++) {
    char dev[16], name[16];
    device_name(i, dev);
    assert_ok(rf_graph_push_device(g, dev));
    sprintf(name, "v%d", i);
    v[i] = rf_placeholder(g, name, RF_FLOAT64, rf_shape_scalar());
    sprintf(name, "dims%d", i);
    xs[i] = rf_fill(g, NULL, rf_const(g, name, dims), v[i]);
    rf_graph_pop_device(g);
  }
  rf_tensor_release(dims);
  rf_all_reduce_n(g, "first", xs, n, RF_REDUCE_SUM, ys);
  for (int i = 0; i < n; i++) {
    char dev[16];
    device_name(i, dev);
    assert_ok(rf_graph_push_device(g, dev));
    zs[i] = rf_add(g, NULL, ys[i], ys[i]);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "second", zs, n, RF_REDUCE_SUM, ws);
  rf_all_gather_n(g, "gather", ws, n, gs);
  for (int i = 0; i < n; i++) {
    char dev[16];
    device_name(i, dev);
    assert_ok(rf_graph_push_device(g, dev));
    sums[i] = rf_sum(g, NULL, gs[i], NULL, -1, false);
    rf_graph_pop_device(g);
  }
  assert_graph_ok(g);
  rf_session_options o = options();
  /* Uncaptured: the executor's own stream order is what is checked. */
  o.gpu_graphs = 0;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
#ifdef RF_HAVE_NCCL
  rf__gpu_coll_nccl_for_single(nccl);
#else
  assert_false(nccl);
#endif
  for (int step = 0; step < 4; step++) {
    rf_tensor *in[8], *out[8];
    rf_feed feeds[8];
    double first = 0;
    for (int i = 0; i < n; i++) {
      double x = (step + 1) * (i + 1);
      assert_ok(rf_tensor_new_scalar(RF_FLOAT64, x, &in[i]));
      feeds[i] = (rf_feed){v[i], in[i]};
      first += x;
    }
    rf_status *st = rf_session_run(s, feeds, n, sums, n, NULL, 0, out);
#ifdef RF_HAVE_NCCL
    if (st) rf__gpu_coll_nccl_for_single(false);
#endif
    assert_ok(st);
    double want = 2 * first * n * (double)count * n; /* exact in float64 */
    for (int i = 0; i < n; i++) {
      assert_tensor_near(out[i], rf_shape_scalar(), &want, 0);
      rf_tensor_release(out[i]);
      rf_tensor_release(in[i]);
    }
  }
#ifdef RF_HAVE_NCCL
  rf__gpu_coll_nccl_for_single(false);
#endif
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_stream_order(void **state) {
  need_gpu();
  prefix = gpu_prefix();
  stream_order_case(4, false);
#ifdef RF_HAVE_NCCL
  if (!on_cpu()) stream_order_case(1, true);
#endif
}

/* One participant per collective, sent through NCCL (a one-rank
 * communicator: NCCL refuses two ranks on one GPU), three steps so the
 * cached communicator is reused: every result equals the input. This is the
 * only part of the NCCL backend a one-GPU machine can run. */
static void test_nccl_one_rank(void **state) {
  need_gpu();
#ifdef RF_HAVE_NCCL
  if (on_cpu()) skip();
  prefix = "gpu";
  uint64_t rng = rf_test_seed() + 22;
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "gpu:3"));
  rf_shape shape = rf_shape_of(2, (int64_t)6, (int64_t)5);
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, shape), f[4];
  rf_all_reduce_n(g, "ar", &x, 1, RF_REDUCE_AVG, &f[0]);
  rf_all_gather_n(g, "ag", &x, 1, &f[1]);
  rf_reduce_scatter_n(g, "rs", &x, 1, RF_REDUCE_MAX, &f[2]);
  f[3] = rf_reduce(g, "red", &x, 1, RF_REDUCE_PROD);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  rf_session_options o = options();
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  rf__gpu_coll_nccl_for_single(true);
  for (int step = 0; step < 3; step++) {
    rf_tensor *in = rf_test_random_tensor(&rng, RF_FLOAT32, shape, -2, 2);
    rf_tensor *out[4];
    rf_feed feed = {x, in};
    rf_status *st = rf_session_run(s, &feed, 1, f, 4, NULL, 0, out);
    if (st) rf__gpu_coll_nccl_for_single(false);
    assert_ok(st);
    double *want = rf_test_to_doubles(in);
    for (int i = 0; i < 4; i++) {
      assert_tensor_near(out[i], shape, want, 0);
      rf_tensor_release(out[i]);
    }
    free(want);
    rf_tensor_release(in);
  }
  rf__gpu_coll_nccl_for_single(false);
  rf_session_free(s);
  rf_graph_free(g);
#else
  printf("GPU tests skipped: built without NCCL\n");
  skip();
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gpu_test_all_reduce_matrix),
      cmocka_unit_test(gpu_test_reduce_matrix),
      cmocka_unit_test(gpu_test_broadcast_matrix),
      cmocka_unit_test(gpu_test_all_gather_reduce_scatter),
      cmocka_unit_test(gpu_test_all_reduce_gradient),
      cmocka_unit_test(gpu_test_reduce_and_broadcast_gradients),
      cmocka_unit_test(gpu_test_single_device_broadcast),
      cmocka_unit_test(gpu_test_all_reduce_and_reduce_broadcast_agree),
      cmocka_unit_test(gpu_test_fetching_one_participant_runs_all),
      cmocka_unit_test(gpu_test_other_reduction_gradients),
      cmocka_unit_test(gpu_test_gradient_through_peers),
      cmocka_unit_test(test_mismatched_shape),
      cmocka_unit_test(test_large_tensors),
      cmocka_unit_test(test_nccl_one_rank),
      cmocka_unit_test(test_stream_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
