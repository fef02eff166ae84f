/* tests/test_gpu_sync_batch_norm.c - synchronized batch norm
 * (rf_sync_batch_norm_n) over 4 virtual GPU devices of one GPU against the
 * same graph over 4 CPU devices: y, the gradients for x, gamma and beta
 * (through the all-reduces of the backward pass) and the moving averages
 * after two training steps, for every float dtype, uneven slices (one
 * empty). The GPU devices meet in the CUDA-kernel collective backend (NCCL
 * with several GPUs), so the statistics' float sums may round in another
 * order: the dtype's tolerance. Skips without a GPU (tests/gpu_compare.h);
 * RF_GPU_TEST_ON_CPU=1 runs the GPU half on cpu:4..7. */
#include "gpu_compare.h"

enum { NDEV = 4, C = 5 };
static const int64_t rows[NDEV] = {3, 0, 5, 2};

typedef struct sbn_graph {
  rf_graph *g;
  rf_output x[NDEV], gamma, beta, fetch[2 * NDEV + 2], reads[2 * NDEV];
  rf_node *init[2 * NDEV], *update[NDEV];
} sbn_graph;

/* The graph on devices prefix:first .. prefix:first+3 (gamma and beta on
 * the first), its loss sum(y_i * w_i) over the replicas. */
static void build(sbn_graph *s, rf_dtype dt, const char *prefix, int first,
                  rf_tensor *const *w) {
  rf_graph *g = s->g = rf_graph_new();
  rf_shape cs = rf_shape_of(1, (int64_t)C);
  char dev[NDEV][16], nm[32];
  for (int i = 0; i < NDEV; i++)
    snprintf(dev[i], sizeof dev[i], "%s:%d", prefix, first + i);
  assert_ok(rf_graph_push_device(g, dev[0]));
  s->gamma = rf_placeholder(g, "gamma", dt, cs);
  s->beta = rf_placeholder(g, "beta", dt, cs);
  rf_graph_pop_device(g);
  rf_output gms[NDEV], bts[NDEV], mm[NDEV], mv[NDEV];
  for (int i = 0; i < NDEV; i++) {
    assert_ok(rf_graph_push_device(g, dev[i]));
    snprintf(nm, sizeof nm, "x%d", i);
    s->x[i] = rf_placeholder(g, nm, dt, rf_shape_of(4, rows[i], 2, 1, C));
    for (int k = 0; k < 2; k++) {
      snprintf(nm, sizeof nm, "%s%d", k ? "mv" : "mm", i);
      rf_output v = rf_variable(g, nm, dt, cs);
      rf_tensor *t;
      assert_ok(rf_tensor_new(dt, &cs, NULL, &t));
      for (int j = 0; j < C; j++) rf_tensor_set(t, j, k);
      s->init[2 * i + k] = rf_assign(g, NULL, v, rf_const(g, NULL, t));
      s->reads[2 * i + k] = rf_read_variable(g, NULL, v);
      rf_tensor_release(t);
      (k ? mv : mm)[i] = v;
    }
    rf_graph_pop_device(g);
    gms[i] = s->gamma;
    bts[i] = s->beta;
  }
  rf_batch_norm_result r[NDEV];
  rf_sync_batch_norm_n(g, "sbn", NDEV, s->x, gms, bts, mm, mv, 0.8, 1e-3, r);
  assert_graph_ok(g);
  rf_output parts[NDEV], in[NDEV + 2], d[NDEV + 2];
  for (int i = 0; i < NDEV; i++) {
    assert_ok(rf_graph_push_device(g, dev[i]));
    parts[i] = rf_sum(g, NULL, rf_mul(g, NULL, r[i].y, rf_const(g, NULL, w[i])),
                      NULL, -1, false);
    rf_graph_pop_device(g);
    in[i] = s->x[i];
    s->update[i] = r[i].update;
    s->fetch[i] = r[i].y;
  }
  in[NDEV] = s->gamma;
  in[NDEV + 1] = s->beta;
  assert_ok(rf_graph_push_device(g, dev[0]));
  rf_output loss = rf_add_n(g, NULL, parts, NDEV);
  rf_graph_pop_device(g);
  assert_ok(rf_gradients(g, &loss, 1, in, NDEV + 2, NULL, d));
  for (int i = 0; i < NDEV + 2; i++) s->fetch[NDEV + i] = d[i];
  assert_graph_ok(g);
}

static void check_dtype(rf_dtype dt, uint64_t *rng) {
  rf_tensor *w[NDEV], *xs[2][NDEV], *gm[2], *bt[2];
  rf_shape cs = rf_shape_of(1, (int64_t)C);
  for (int i = 0; i < NDEV; i++)
    w[i] = gc_random(rng, dt, rf_shape_of(4, rows[i], 2, 1, C), -1, 1);
  for (int step = 0; step < 2; step++) {
    for (int i = 0; i < NDEV; i++)
      xs[step][i] = gc_random(rng, dt, rf_shape_of(4, rows[i], 2, 1, C), -2, 4);
    gm[step] = gc_random(rng, dt, cs, 0.5, 2);
    bt[step] = gc_random(rng, dt, cs, -1, 1);
  }
  sbn_graph s[2];
  build(&s[0], dt, "cpu", 0, w);
  build(&s[1], dt, gc_on_cpu() ? "cpu" : "gpu", gc_on_cpu() ? NDEV : 0, w);
  rf_tensor *got[2][3][2 * NDEV + 2];
  for (int k = 0; k < 2; k++) {
    rf_session_options o;
    rf_session_options_init(&o);
    o.num_threads = 2;
    o.num_cpu_devices = k == 0 ? NDEV : gc_on_cpu() ? 2 * NDEV : 1;
    if (k == 1 && !gc_on_cpu()) o.num_gpu_devices = NDEV;
    rf_session *sess;
    assert_ok(rf_session_new(s[k].g, &o, &sess));
    assert_ok(
        rf_session_run(sess, NULL, 0, NULL, 0, s[k].init, 2 * NDEV, NULL));
    for (int step = 0; step < 2; step++) {
      rf_feed f[NDEV + 2];
      for (int i = 0; i < NDEV; i++) f[i] = (rf_feed){s[k].x[i], xs[step][i]};
      f[NDEV] = (rf_feed){s[k].gamma, gm[step]};
      f[NDEV + 1] = (rf_feed){s[k].beta, bt[step]};
      assert_ok(rf_session_run(sess, f, NDEV + 2, s[k].fetch, 2 * NDEV + 2,
                               s[k].update, NDEV, got[k][step]));
    }
    /* the moving averages after the two updates (fewer than 2 * NDEV + 2
     * fetches: the rest stay NULL) */
    memset(got[k][2], 0, sizeof got[k][2]);
    assert_ok(rf_session_run(sess, NULL, 0, s[k].reads, 2 * NDEV, NULL, 0,
                             got[k][2]));
    rf_session_free(sess);
  }
  double tol = dt == RF_FLOAT64 ? 1e-10 : 8 * rf_test_tolerance(dt);
  for (int step = 0; step < 3; step++)
    for (int i = 0; i < 2 * NDEV + 2; i++) {
      rf_tensor *a = got[0][step][i], *b = got[1][step][i];
      if (!a) continue;
      int64_t n = rf_tensor_num_elements(a);
      assert_int_equal(rf_tensor_num_elements(b), n);
      assert_int_equal(rf_tensor_dtype(b), dt);
      for (int64_t j = 0; j < n; j++) {
        double x = rf_tensor_get(a, j), y = rf_tensor_get(b, j);
        if (!(fabs(x - y) <= tol * fmax(1, fabs(x))))
          fail_msg(
              "%s, step %d (2: moving averages), fetch %d [%lld]: CPU "
              "%.9g, GPU %.9g",
              rf_dtype_name(dt), step, i, (long long)j, x, y);
      }
      rf_tensor_release(a);
      rf_tensor_release(b);
    }
  for (int step = 0; step < 2; step++) {
    for (int i = 0; i < NDEV; i++) rf_tensor_release(xs[step][i]);
    rf_tensor_release(gm[step]);
    rf_tensor_release(bt[step]);
  }
  for (int i = 0; i < NDEV; i++) rf_tensor_release(w[i]);
  rf_graph_free(s[0].g);
  rf_graph_free(s[1].g);
}

static void test_sync_batch_norm(void **state) {
  (void)state;
  gc_need_gpu();
  uint64_t rng = gc_rng(131);
  static const rf_dtype dts[] = {RF_FLOAT32, RF_FLOAT64, RF_FLOAT16,
                                 RF_BFLOAT16};
  for (int d = 0; d < 4; d++) check_dtype(dts[d], &rng);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sync_batch_norm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
