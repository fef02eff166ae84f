/* tests/test_batch_norm.c - BatchNorm (training) and BatchNormInference
 * against a float64 reference here for every float dtype; their gradients
 * against central finite differences in float64 (batch 1, size-1 dims,
 * C = 1, an unknown shape, gradients reaching the batch statistics); an
 * empty batch; the moving averages after several steps and inference with
 * them; synchronized batch norm over 4 CPU devices against one device over
 * the concatenated batch (forward, gradients, moving averages) and the
 * per-device default against per-slice statistics; the errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* y, and the batch mean and biased variance (training: mean_in NULL) or
 * with the given statistics, for x of rows * c elements. */
static void bn_ref(const double *x, int64_t rows, int64_t c, const double *gm,
                   const double *bt, const double *mean_in,
                   const double *var_in, double eps, double *y, double *mean,
                   double *var) {
  for (int64_t j = 0; j < c; j++) {
    double m = 0, v = 0;
    if (mean_in) {
      m = mean_in[j];
      v = var_in[j];
    } else {
      for (int64_t r = 0; r < rows; r++) m += x[r * c + j];
      m /= (double)rows;
      for (int64_t r = 0; r < rows; r++)
        v += (x[r * c + j] - m) * (x[r * c + j] - m);
      v /= (double)rows;
    }
    if (mean) mean[j] = m;
    if (var) var[j] = v;
    for (int64_t r = 0; r < rows; r++)
      y[r * c + j] = (x[r * c + j] - m) / sqrt(v + eps) * gm[j] + bt[j];
  }
}

static int64_t last_dim(rf_shape s) { return s.dims[s.rank - 1]; }

static void test_training_values(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(61);
  const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32, RF_FLOAT64};
  const rf_shape shapes[] = {rf_shape_of(2, 9, 5), rf_shape_of(4, 2, 3, 2, 4),
                             rf_shape_of(2, 7, 1), rf_shape_of(4, 1, 1, 1, 6),
                             rf_shape_of(3, 1, 5, 3)};
  for (int d = 0; d < 4; d++)
    for (int k = 0; k < 5; k++) {
      rf_shape s = shapes[k], cs = rf_shape_of(1, last_dim(s));
      int64_t c = last_dim(s), n = rf_shape_num_elements(&s);
      rf_tensor *x = rf_test_random_tensor(&rng, dts[d], s, -3, 5);
      rf_tensor *gm = rf_test_random_tensor(&rng, dts[d], cs, 0.5, 2);
      rf_tensor *bt = rf_test_random_tensor(&rng, dts[d], cs, -1, 1);
      rf_graph *g = rf_graph_new();
      rf_output px = rf_placeholder(g, "x", dts[d], s), out[3];
      out[0] =
          rf_batch_norm_training(g, "bn", px, rf_const(g, NULL, gm),
                                 rf_const(g, NULL, bt), 1e-3, &out[1], &out[2]);
      assert_graph_ok(g);
      rf_feed f = {px, x};
      rf_tensor *got[3];
      rf_test_run(g, 2, &f, 1, out, 3, got);
      double *xd = rf_test_to_doubles(x), *gd = rf_test_to_doubles(gm),
             *bd = rf_test_to_doubles(bt), y[64], m[8], v[8];
      bn_ref(xd, n / c, c, gd, bd, NULL, NULL, 1e-3, y, m, v);
      double tol = dts[d] == RF_FLOAT64 ? 1e-12 : 4 * rf_test_tolerance(dts[d]);
      assert_tensor_near(got[0], s, y, tol);
      assert_tensor_near(got[1], cs, m, tol);
      assert_tensor_near(got[2], cs, v, tol);
      for (int i = 0; i < 3; i++) rf_tensor_release(got[i]);
      free(xd);
      free(gd);
      free(bd);
      rf_tensor_release(x);
      rf_tensor_release(gm);
      rf_tensor_release(bt);
      rf_graph_free(g);
    }
}

static void test_inference_values(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(62);
  const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32, RF_FLOAT64};
  const rf_shape shapes[] = {rf_shape_of(2, 6, 5), rf_shape_of(4, 2, 2, 3, 3),
                             rf_shape_of(2, 1, 1)};
  for (int d = 0; d < 4; d++)
    for (int k = 0; k < 3; k++) {
      rf_shape s = shapes[k], cs = rf_shape_of(1, last_dim(s));
      int64_t c = last_dim(s), n = rf_shape_num_elements(&s);
      rf_tensor *t[5] = {rf_test_random_tensor(&rng, dts[d], s, -3, 5),
                         rf_test_random_tensor(&rng, dts[d], cs, 0.5, 2),
                         rf_test_random_tensor(&rng, dts[d], cs, -1, 1),
                         rf_test_random_tensor(&rng, dts[d], cs, -1, 1),
                         rf_test_random_tensor(&rng, dts[d], cs, 0.2, 3)};
      rf_graph *g = rf_graph_new();
      rf_output in[5];
      for (int i = 0; i < 5; i++) in[i] = rf_const(g, NULL, t[i]);
      rf_output y = rf_batch_norm_inference(g, NULL, in[0], in[1], in[2], in[3],
                                            in[4], 0.01);
      assert_graph_ok(g);
      rf_tensor *got;
      rf_test_run(g, 1, NULL, 0, &y, 1, &got);
      double *dd[5], want[64];
      for (int i = 0; i < 5; i++) dd[i] = rf_test_to_doubles(t[i]);
      bn_ref(dd[0], n / c, c, dd[1], dd[2], dd[3], dd[4], 0.01, want, NULL,
             NULL);
      assert_tensor_near(
          got, s, want,
          dts[d] == RF_FLOAT64 ? 1e-12 : 4 * rf_test_tolerance(dts[d]));
      rf_tensor_release(got);
      for (int i = 0; i < 5; i++) {
        free(dd[i]);
        rf_tensor_release(t[i]);
      }
      rf_graph_free(g);
    }
}

/* Checks d loss / d in[k] (fetched as dx[k]) against central finite
 * differences of loss over every element of every feed. */
static void check_fd(rf_graph *g, rf_feed *f, int nf, rf_output loss,
                     const rf_output *dx, int ncpu, const char *what) {
  rf_session *sess = rf_test_cpu_session(g, ncpu);
  rf_tensor *got[8];
  assert_ok(rf_session_run(sess, f, nf, dx, nf, NULL, 0, got));
  for (int k = 0; k < nf; k++) {
    rf_tensor *orig = f[k].value;
    rf_shape ks = rf_tensor_shape(orig);
    for (int64_t i = 0; i < rf_tensor_num_elements(orig); i++) {
      double v[2];
      for (int side = 0; side < 2; side++) {
        rf_tensor *p, *o;
        assert_ok(
            rf_tensor_new_copy(RF_FLOAT64, &ks, rf_tensor_data(orig), &p));
        ((double *)rf_tensor_mutable_data(p))[i] += side ? -1e-6 : 1e-6;
        f[k].value = p;
        assert_ok(rf_session_run(sess, f, nf, &loss, 1, NULL, 0, &o));
        v[side] = rf_tensor_get(o, 0);
        rf_tensor_release(o);
        rf_tensor_release(p);
      }
      f[k].value = orig;
      double want = (v[0] - v[1]) / 2e-6, have = rf_tensor_get(got[k], i);
      if (!(fabs(have - want) <= 1e-6 * fmax(1, fabs(want))))
        fail_msg(
            "%s: d input %d [%lld]: finite difference %.12g, gradient "
            "%.12g",
            what, k, (long long)i, want, have);
    }
  }
  for (int k = 0; k < nf; k++) rf_tensor_release(got[k]);
  rf_session_free(sess);
}

/* sum(r * y) (+ sum(rm * mean) + sum(rv * variance) when stats) */
static rf_output weighted(rf_graph *g, uint64_t *rng, rf_output y, rf_shape s) {
  rf_tensor *r = rf_test_random_tensor(rng, RF_FLOAT64, s, -1, 1);
  rf_output l = rf_sum(g, NULL, rf_mul(g, NULL, y, rf_const(g, NULL, r)), NULL,
                       -1, false);
  rf_tensor_release(r);
  return l;
}

static void fd_training(rf_shape s, bool unknown, bool stats, uint64_t *rng) {
  rf_shape cs = rf_shape_of(1, last_dim(s));
  rf_graph *g = rf_graph_new();
  rf_output in[3] = {
      rf_placeholder(g, "x", RF_FLOAT64, unknown ? rf_shape_unknown() : s),
      rf_placeholder(g, "gamma", RF_FLOAT64, cs),
      rf_placeholder(g, "beta", RF_FLOAT64, cs)};
  rf_feed f[3] = {{in[0], rf_test_random_tensor(rng, RF_FLOAT64, s, -3, 3)},
                  {in[1], rf_test_random_tensor(rng, RF_FLOAT64, cs, 0.5, 2)},
                  {in[2], rf_test_random_tensor(rng, RF_FLOAT64, cs, -1, 1)}};
  rf_output m, v;
  rf_output y =
      rf_batch_norm_training(g, NULL, in[0], in[1], in[2], 0.01, &m, &v);
  rf_output l = weighted(g, rng, y, s);
  if (stats)
    l = rf_add(
        g, NULL, l,
        rf_add(g, NULL, weighted(g, rng, m, cs), weighted(g, rng, v, cs)));
  rf_output dx[3];
  assert_graph_ok(g);
  assert_ok(rf_gradients(g, &l, 1, in, 3, NULL, dx));
  char what[96];
  rf_shape_format(&s, what, sizeof what);
  strcat(what, stats ? " (with stats)" : "");
  check_fd(g, f, 3, l, dx, 2, what);
  for (int k = 0; k < 3; k++) rf_tensor_release(f[k].value);
  rf_graph_free(g);
}

static void test_training_gradients(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(63);
  fd_training(rf_shape_of(2, 5, 3), false, false, &rng);
  fd_training(rf_shape_of(2, 5, 3), true, true, &rng);
  fd_training(rf_shape_of(4, 2, 3, 2, 2), false, false, &rng); /* NHWC */
  fd_training(rf_shape_of(2, 1, 4), false, false, &rng);       /* batch 1 */
  fd_training(rf_shape_of(2, 6, 1), false, true, &rng);        /* C = 1 */
  fd_training(rf_shape_of(4, 3, 1, 1, 2), false, false, &rng); /* 1 dims */
  for (int t = 0; t < 3; t++) {
    int64_t a = 1 + (int64_t)(rf_test_rand(&rng) % 4),
            b = 1 + (int64_t)(rf_test_rand(&rng) % 3),
            c = 1 + (int64_t)(rf_test_rand(&rng) % 4);
    fd_training(rf_shape_of(3, a, b, c), t == 1, t == 2, &rng);
  }
}

static void fd_inference(rf_shape s, uint64_t *rng) {
  rf_shape cs = rf_shape_of(1, last_dim(s));
  rf_graph *g = rf_graph_new();
  static const char *const names[] = {"x", "gamma", "beta", "mean", "var"};
  rf_output in[5];
  rf_feed f[5];
  for (int i = 0; i < 5; i++) {
    in[i] = rf_placeholder(g, names[i], RF_FLOAT64, i ? cs : s);
    f[i] = (rf_feed){in[i], rf_test_random_tensor(rng, RF_FLOAT64, i ? cs : s,
                                                  i == 4 ? 0.3 : -2, 2)};
  }
  rf_output y =
      rf_batch_norm_inference(g, NULL, in[0], in[1], in[2], in[3], in[4], 0.01);
  rf_output l = weighted(g, rng, y, s), dx[5];
  assert_graph_ok(g);
  assert_ok(rf_gradients(g, &l, 1, in, 5, NULL, dx));
  char what[96];
  rf_shape_format(&s, what, sizeof what);
  strcat(what, " inference");
  check_fd(g, f, 5, l, dx, 1, what);
  for (int k = 0; k < 5; k++) rf_tensor_release(f[k].value);
  rf_graph_free(g);
}

static void test_inference_gradients(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(64);
  fd_inference(rf_shape_of(2, 4, 3), &rng);
  fd_inference(rf_shape_of(4, 2, 1, 3, 2), &rng);
  fd_inference(rf_shape_of(2, 1, 1), &rng);
}

/* rows = 0: y and dx empty, the batch statistics NaN, dgamma and dbeta
 * zeros. */
static void test_empty_batch(void **state) {
  (void)state;
  rf_shape s = rf_shape_of(3, 0, 2, 3), cs = rf_shape_of(1, 3);
  uint64_t rng = rf_test_rng(65);
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, s);
  rf_output gm = rf_placeholder(g, "g", RF_FLOAT32, cs);
  rf_output bt = rf_placeholder(g, "b", RF_FLOAT32, cs);
  rf_output m, v;
  rf_output y = rf_batch_norm_training(g, NULL, x, gm, bt, 1e-3, &m, &v);
  rf_output l = rf_sum(g, NULL, y, NULL, -1, false);
  rf_output in[3] = {x, gm, bt}, d[3];
  assert_ok(rf_gradients(g, &l, 1, in, 3, NULL, d));
  rf_output fetch[6] = {y, d[0], d[1], d[2], m, v};
  rf_feed f[3] = {{x, rf_test_random_tensor(&rng, RF_FLOAT32, s, 1, 2)},
                  {gm, rf_test_random_tensor(&rng, RF_FLOAT32, cs, 1, 2)},
                  {bt, rf_test_random_tensor(&rng, RF_FLOAT32, cs, 1, 2)}};
  rf_tensor *out[6];
  rf_test_run(g, 1, f, 3, fetch, 6, out);
  double zeros[3] = {0, 0, 0};
  assert_tensor_near(out[0], s, zeros, 0);
  assert_tensor_near(out[1], s, zeros, 0);
  assert_tensor_near(out[2], cs, zeros, 0);
  assert_tensor_near(out[3], cs, zeros, 0);
  for (int k = 4; k < 6; k++)
    for (int j = 0; j < 3; j++) assert_true(isnan(rf_tensor_get(out[k], j)));
  for (int i = 0; i < 6; i++) rf_tensor_release(out[i]);
  for (int i = 0; i < 3; i++) rf_tensor_release(f[i].value);
  rf_graph_free(g);
}

/* A [c] float64 variable on `device`, with an assign to `init`. */
static rf_output moving_var(rf_graph *g, const char *name, const char *device,
                            int64_t c, double init, rf_node **assign) {
  assert_ok(rf_graph_push_device(g, device));
  rf_output v = rf_variable(g, name, RF_FLOAT64, rf_shape_of(1, c));
  rf_tensor *t;
  rf_shape cs = rf_shape_of(1, c);
  assert_ok(rf_tensor_new(RF_FLOAT64, &cs, NULL, &t));
  for (int64_t j = 0; j < c; j++)
    ((double *)rf_tensor_mutable_data(t))[j] = init;
  *assign = rf_assign(g, NULL, v, rf_const(g, NULL, t));
  rf_tensor_release(t);
  rf_graph_pop_device(g);
  return v;
}

/* Three training steps of rf_batch_norm update the moving averages as the
 * recursion here; inference mode then normalises with them. */
static void test_moving_averages(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(66);
  enum { C = 3 };
  rf_shape s = rf_shape_of(3, 5, 2, C), cs = rf_shape_of(1, C);
  const double mom = 0.9, eps = 1e-3;
  rf_graph *g = rf_graph_new();
  rf_node *init[2];
  rf_output mm = moving_var(g, "mm", "cpu:0", C, 0, &init[0]);
  rf_output mv = moving_var(g, "mv", "cpu:0", C, 1, &init[1]);
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, s);
  rf_tensor *gm = rf_test_random_tensor(&rng, RF_FLOAT64, cs, 0.5, 2);
  rf_tensor *bt = rf_test_random_tensor(&rng, RF_FLOAT64, cs, -1, 1);
  rf_output pg = rf_const(g, NULL, gm), pb = rf_const(g, NULL, bt);
  rf_batch_norm_result tr, inf;
  rf_batch_norm(g, "bn", x, pg, pb, mm, mv, true, mom, eps, &tr);
  rf_batch_norm(g, "bn_inf", x, pg, pb, mm, mv, false, mom, eps, &inf);
  assert_graph_ok(g);
  assert_non_null(tr.update);
  assert_null(inf.update);
  rf_session *sess = rf_test_cpu_session(g, 1);
  assert_ok(rf_session_run(sess, NULL, 0, NULL, 0, init, 2, NULL));
  double wm[C] = {0}, wv[C] = {1, 1, 1};
  const double *gd = rf_tensor_data(gm), *bd = rf_tensor_data(bt);
  for (int step = 0; step < 3; step++) {
    rf_feed f = {x, rf_test_random_tensor(&rng, RF_FLOAT64, s, -2, 4)};
    rf_tensor *y;
    assert_ok(rf_session_run(sess, &f, 1, &tr.y, 1, &tr.update, 1, &y));
    double want[30], m[C], v[C];
    bn_ref(rf_tensor_data(f.value), 10, C, gd, bd, NULL, NULL, eps, want, m, v);
    assert_tensor_near(y, s, want, 1e-12);
    for (int j = 0; j < C; j++) {
      wm[j] = mom * wm[j] + (1 - mom) * m[j];
      wv[j] = mom * wv[j] + (1 - mom) * v[j];
    }
    rf_tensor_release(y);
    rf_tensor_release(f.value);
  }
  rf_output reads[3] = {inf.mean, inf.variance, inf.y};
  rf_feed f = {x, rf_test_random_tensor(&rng, RF_FLOAT64, s, -2, 4)};
  rf_tensor *got[3];
  assert_ok(rf_session_run(sess, &f, 1, reads, 3, NULL, 0, got));
  assert_tensor_near(got[0], cs, wm, 1e-12);
  assert_tensor_near(got[1], cs, wv, 1e-12);
  double want[30];
  bn_ref(rf_tensor_data(f.value), 10, C, gd, bd, wm, wv, eps, want, NULL, NULL);
  assert_tensor_near(got[2], s, want, 1e-12);
  for (int i = 0; i < 3; i++) rf_tensor_release(got[i]);
  rf_tensor_release(f.value);
  rf_tensor_release(gm);
  rf_tensor_release(bt);
  rf_session_free(sess);
  rf_graph_free(g);
}

enum { NDEV = 4, SC = 3 };
static const int64_t slice_rows[NDEV] = {3, 1, 2, 0};

/* Synchronized batch norm over 4 CPU devices (uneven slices, one empty)
 * gives what one device gives over the concatenated batch: y, the
 * gradients for x, gamma and beta, and the moving averages after two steps;
 * the per-device default instead normalises each slice by itself. */
static void test_sync_matches_single(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(67);
  const double mom = 0.8, eps = 1e-3;
  rf_shape cs = rf_shape_of(1, SC);
  int64_t total = 0;
  for (int i = 0; i < NDEV; i++) total += slice_rows[i];
  rf_shape whole = rf_shape_of(4, total, 2, 1, SC);
  /* the single-device graph */
  rf_graph *g1 = rf_graph_new();
  rf_output x1 = rf_placeholder(g1, "x", RF_FLOAT64, whole);
  rf_output gm1 = rf_placeholder(g1, "gamma", RF_FLOAT64, cs);
  rf_output bt1 = rf_placeholder(g1, "beta", RF_FLOAT64, cs);
  rf_node *init1[2];
  rf_output mm1 = moving_var(g1, "mm", "", SC, 0, &init1[0]);
  rf_output mv1 = moving_var(g1, "mv", "", SC, 1, &init1[1]);
  rf_batch_norm_result r1;
  rf_batch_norm(g1, "bn", x1, gm1, bt1, mm1, mv1, true, mom, eps, &r1);
  rf_tensor *w = rf_test_random_tensor(&rng, RF_FLOAT64, whole, -1, 1);
  rf_output l1 = rf_sum(g1, NULL, rf_mul(g1, NULL, r1.y, rf_const(g1, NULL, w)),
                        NULL, -1, false);
  rf_output in1[3] = {x1, gm1, bt1}, d1[3];
  assert_ok(rf_gradients(g1, &l1, 1, in1, 3, NULL, d1));
  rf_output rd1[2] = {rf_read_variable(g1, NULL, mm1),
                      rf_read_variable(g1, NULL, mv1)};
  assert_graph_ok(g1);
  /* the 4-device graph: slice i on cpu:i, gamma and beta on cpu:0 */
  rf_graph *g4 = rf_graph_new();
  rf_output xs[NDEV], gms[NDEV], bts[NDEV], mms[NDEV], mvs[NDEV], d4[NDEV + 2];
  rf_node *init4[2 * NDEV];
  assert_ok(rf_graph_push_device(g4, "cpu:0"));
  rf_output gm4 = rf_placeholder(g4, "gamma", RF_FLOAT64, cs);
  rf_output bt4 = rf_placeholder(g4, "beta", RF_FLOAT64, cs);
  rf_graph_pop_device(g4);
  for (int i = 0; i < NDEV; i++) {
    char dev[16], nm[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    assert_ok(rf_graph_push_device(g4, dev));
    snprintf(nm, sizeof nm, "x%d", i);
    xs[i] = rf_placeholder(g4, nm, RF_FLOAT64,
                           rf_shape_of(4, slice_rows[i], 2, 1, SC));
    rf_graph_pop_device(g4);
    snprintf(nm, sizeof nm, "mm%d", i);
    mms[i] = moving_var(g4, nm, dev, SC, 0, &init4[2 * i]);
    snprintf(nm, sizeof nm, "mv%d", i);
    mvs[i] = moving_var(g4, nm, dev, SC, 1, &init4[2 * i + 1]);
    gms[i] = gm4;
    bts[i] = bt4;
  }
  rf_batch_norm_result r4[NDEV];
  rf_sync_batch_norm_n(g4, "sbn", NDEV, xs, gms, bts, mms, mvs, mom, eps, r4);
  assert_graph_ok(g4);
  rf_output parts[NDEV], in4[NDEV + 2], rd4[2 * NDEV];
  rf_node *upd4[NDEV];
  const double *wd = rf_tensor_data(w);
  int64_t row = 0, per_row = 2 * SC;
  for (int i = 0; i < NDEV; i++) {
    assert_string_equal(rf_node_device(r4[i].y.node),
                        rf_node_device(xs[i].node));
    rf_shape ss = rf_shape_of(4, slice_rows[i], 2, 1, SC);
    rf_tensor *wi;
    assert_ok(rf_tensor_new_copy(RF_FLOAT64, &ss, wd + row * per_row, &wi));
    row += slice_rows[i];
    parts[i] =
        rf_sum(g4, NULL, rf_mul(g4, NULL, r4[i].y, rf_const(g4, NULL, wi)),
               NULL, -1, false);
    rf_tensor_release(wi);
    in4[i] = xs[i];
    upd4[i] = r4[i].update;
    rd4[2 * i] = rf_read_variable(g4, NULL, mms[i]);
    rd4[2 * i + 1] = rf_read_variable(g4, NULL, mvs[i]);
  }
  in4[NDEV] = gm4;
  in4[NDEV + 1] = bt4;
  rf_output l4 = rf_add_n(g4, NULL, parts, NDEV);
  assert_ok(rf_gradients(g4, &l4, 1, in4, NDEV + 2, NULL, d4));
  assert_graph_ok(g4);
  /* forward: sums, counts, squared deviations; backward: the gradients of
   * the sums and of the squared deviations (none for the counts) */
  int all_reduces = 0;
  for (int i = 0; i < rf_graph_num_nodes(g4); i++)
    all_reduces += !strcmp(rf_node_op(rf_graph_node(g4, i)), "AllReduce");
  assert_int_equal(all_reduces, 5 * NDEV);
  rf_session *s1 = rf_test_cpu_session(g1, 1),
             *s4 = rf_test_cpu_session(g4, NDEV);
  assert_ok(rf_session_run(s1, NULL, 0, NULL, 0, init1, 2, NULL));
  assert_ok(rf_session_run(s4, NULL, 0, NULL, 0, init4, 2 * NDEV, NULL));
  for (int step = 0; step < 2; step++) {
    rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT64, whole, -2, 5);
    rf_tensor *gv = rf_test_random_tensor(&rng, RF_FLOAT64, cs, 0.5, 2);
    rf_tensor *bv = rf_test_random_tensor(&rng, RF_FLOAT64, cs, -1, 1);
    rf_feed f1[3] = {{x1, xv}, {gm1, gv}, {bt1, bv}};
    rf_output fetch1[4] = {r1.y, d1[0], d1[1], d1[2]};
    rf_tensor *o1[4];
    assert_ok(rf_session_run(s1, f1, 3, fetch1, 4, &r1.update, 1, o1));
    rf_feed f4[NDEV + 2];
    rf_output fetch4[3 * NDEV + 2];
    rf_tensor *o4[3 * NDEV + 2];
    const double *xd = rf_tensor_data(xv);
    row = 0;
    for (int i = 0; i < NDEV; i++) {
      rf_shape ss = rf_shape_of(4, slice_rows[i], 2, 1, SC);
      rf_tensor *xi;
      assert_ok(rf_tensor_new_copy(RF_FLOAT64, &ss, xd + row * per_row, &xi));
      row += slice_rows[i];
      f4[i] = (rf_feed){xs[i], xi};
      fetch4[i] = r4[i].y;
      fetch4[NDEV + i] = d4[i];
    }
    f4[NDEV] = (rf_feed){gm4, gv};
    f4[NDEV + 1] = (rf_feed){bt4, bv};
    fetch4[2 * NDEV] = d4[NDEV];
    fetch4[2 * NDEV + 1] = d4[NDEV + 1];
    assert_ok(
        rf_session_run(s4, f4, NDEV + 2, fetch4, 2 * NDEV + 2, upd4, NDEV, o4));
    /* y and dx: slice i of the single-device results */
    const double *y1 = rf_tensor_data(o1[0]), *dx1 = rf_tensor_data(o1[1]);
    row = 0;
    for (int i = 0; i < NDEV; i++) {
      rf_shape ss = rf_shape_of(4, slice_rows[i], 2, 1, SC);
      assert_tensor_near(o4[i], ss, y1 + row * per_row, 1e-12);
      assert_tensor_near(o4[NDEV + i], ss, dx1 + row * per_row, 1e-10);
      row += slice_rows[i];
    }
    assert_tensor_near(o4[2 * NDEV], cs, rf_tensor_data(o1[2]), 1e-10);
    assert_tensor_near(o4[2 * NDEV + 1], cs, rf_tensor_data(o1[3]), 1e-10);
    for (int i = 0; i < 4; i++) rf_tensor_release(o1[i]);
    for (int i = 0; i < 2 * NDEV + 2; i++) rf_tensor_release(o4[i]);
    for (int i = 0; i < NDEV; i++) rf_tensor_release(f4[i].value);
    rf_tensor_release(xv);
    rf_tensor_release(gv);
    rf_tensor_release(bv);
  }
  /* every replica's moving averages are the single device's */
  rf_tensor *m1[2], *m4[2 * NDEV];
  assert_ok(rf_session_run(s1, NULL, 0, rd1, 2, NULL, 0, m1));
  assert_ok(rf_session_run(s4, NULL, 0, rd4, 2 * NDEV, NULL, 0, m4));
  for (int i = 0; i < 2 * NDEV; i++) {
    assert_tensor_near(m4[i], cs, rf_tensor_data(m1[i % 2]), 1e-12);
    rf_tensor_release(m4[i]);
  }
  rf_tensor_release(m1[0]);
  rf_tensor_release(m1[1]);
  rf_tensor_release(w);
  rf_session_free(s1);
  rf_session_free(s4);
  rf_graph_free(g1);
  rf_graph_free(g4);
}

/* Synchronized batch norm of the narrower float dtypes (statistics in
 * float32 for float16 and bfloat16) over 2 devices against the float64
 * reference over the whole batch. */
static void test_sync_dtypes(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(70);
  const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32};
  rf_shape cs = rf_shape_of(1, SC),
           sh[2] = {rf_shape_of(2, 5, SC), rf_shape_of(2, 3, SC)};
  for (int d = 0; d < 3; d++) {
    rf_graph *g = rf_graph_new();
    rf_tensor *gm = rf_test_random_tensor(&rng, dts[d], cs, 0.5, 2);
    rf_tensor *bt = rf_test_random_tensor(&rng, dts[d], cs, -1, 1);
    rf_output xs[2], gms[2], bts[2];
    rf_feed f[2];
    assert_ok(rf_graph_push_device(g, "cpu:0"));
    gms[0] = gms[1] = rf_const(g, NULL, gm);
    bts[0] = bts[1] = rf_const(g, NULL, bt);
    rf_graph_pop_device(g);
    double whole[24];
    for (int i = 0; i < 2; i++) {
      assert_ok(rf_graph_push_device(g, i ? "cpu:1" : "cpu:0"));
      xs[i] = rf_placeholder(g, NULL, dts[d], sh[i]);
      rf_graph_pop_device(g);
      f[i] =
          (rf_feed){xs[i], rf_test_random_tensor(&rng, dts[d], sh[i], -2, 6)};
      double *xd = rf_test_to_doubles(f[i].value);
      memcpy(whole + (i ? 5 * SC : 0), xd,
             sizeof(double) * rf_shape_num_elements(&sh[i]));
      free(xd);
    }
    rf_batch_norm_result r[2];
    rf_sync_batch_norm_n(g, NULL, 2, xs, gms, bts, NULL, NULL, 0.9, 1e-3, r);
    assert_graph_ok(g);
    rf_output fetch[4] = {r[0].y, r[1].y, r[0].mean, r[1].variance};
    rf_tensor *got[4];
    rf_test_run(g, 2, f, 2, fetch, 4, got);
    double *gd = rf_test_to_doubles(gm), *bd = rf_test_to_doubles(bt), want[24],
           m[SC], v[SC];
    bn_ref(whole, 8, SC, gd, bd, NULL, NULL, 1e-3, want, m, v);
    double tol = 4 * rf_test_tolerance(dts[d]);
    assert_tensor_near(got[0], sh[0], want, tol);
    assert_tensor_near(got[1], sh[1], want + 5 * SC, tol);
    assert_int_equal(rf_tensor_dtype(got[2]), dts[d]);
    assert_tensor_near(got[2], cs, m, tol);
    assert_tensor_near(got[3], cs, v, tol);
    for (int i = 0; i < 4; i++) rf_tensor_release(got[i]);
    for (int i = 0; i < 2; i++) rf_tensor_release(f[i].value);
    free(gd);
    free(bd);
    rf_tensor_release(gm);
    rf_tensor_release(bt);
    rf_graph_free(g);
  }
}

/* The default under data parallelism: rf_batch_norm on each replica uses
 * that replica's statistics (which differ from the global batch's). */
static void test_unsynced_per_device(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(68);
  rf_shape cs = rf_shape_of(1, SC);
  rf_graph *g = rf_graph_new();
  rf_tensor *gm = rf_test_random_tensor(&rng, RF_FLOAT64, cs, 0.5, 2);
  rf_tensor *bt = rf_test_random_tensor(&rng, RF_FLOAT64, cs, -1, 1);
  rf_output y[2];
  rf_feed f[2];
  for (int i = 0; i < 2; i++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    rf_shape s = rf_shape_of(2, 4 + i, SC);
    rf_output x = rf_placeholder(g, NULL, RF_FLOAT64, s);
    /* slices of different means, so per-device and global differ */
    f[i] = (rf_feed){
        x, rf_test_random_tensor(&rng, RF_FLOAT64, s, 3 * i, 3 * i + 2)};
    rf_batch_norm_result r;
    rf_batch_norm(g, NULL, x, rf_const(g, NULL, gm), rf_const(g, NULL, bt),
                  (rf_output){NULL, 0}, (rf_output){NULL, 0}, true, 0.99, 1e-3,
                  &r);
    y[i] = r.y;
    rf_graph_pop_device(g);
  }
  assert_graph_ok(g);
  rf_tensor *got[2];
  rf_test_run(g, 2, f, 2, y, 2, got);
  for (int i = 0; i < 2; i++) {
    double want[32];
    bn_ref(rf_tensor_data(f[i].value), 4 + i, SC, rf_tensor_data(gm),
           rf_tensor_data(bt), NULL, NULL, 1e-3, want, NULL, NULL);
    assert_tensor_near(got[i], rf_shape_of(2, 4 + i, SC), want, 1e-12);
    rf_tensor_release(got[i]);
    rf_tensor_release(f[i].value);
  }
  rf_tensor_release(gm);
  rf_tensor_release(bt);
  rf_graph_free(g);
}

/* _BatchNormGrad has no gradient: a second order is refused, not zero. */
static void test_second_order_refused(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, rf_shape_of(2, 2, 3));
  rf_output c = rf_placeholder(g, "c", RF_FLOAT64, rf_shape_of(1, 3));
  rf_output y = rf_batch_norm_training(g, NULL, x, c, c, 1e-3, NULL, NULL);
  rf_output l = rf_sum(g, NULL, rf_mul(g, NULL, y, y), NULL, -1, false), dx;
  assert_ok(rf_gradients(g, &l, 1, &x, 1, NULL, &dx));
  rf_output l2 = rf_sum(g, NULL, dx, NULL, -1, false), d2;
  rf_status *st = rf_gradients(g, &l2, 1, &x, 1, NULL, &d2);
  assert_non_null(st);
  if (!strstr(rf_status_message(st), "_BatchNormGrad"))
    fail_msg("\"%s\" does not name _BatchNormGrad", rf_status_message(st));
  rf_status_free(st);
  rf_graph_free(g);
}

static void expect_graph_error(rf_graph *g, const char *sub) {
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, sub);
  rf_graph_clear_status(g);
}

static void test_errors(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(3, 2, 2, 3));
  rf_output c3 = rf_placeholder(g, "c3", RF_FLOAT32, rf_shape_of(1, 3));
  rf_output c4 = rf_placeholder(g, "c4", RF_FLOAT32, rf_shape_of(1, 4));
  rf_output v3 = rf_placeholder(g, "v3", RF_FLOAT32, rf_shape_of(1, 3));
  rf_output d3 = rf_placeholder(g, "d3", RF_FLOAT64, rf_shape_of(1, 3));
  rf_output x1 = rf_placeholder(g, "x1", RF_FLOAT32, rf_shape_of(1, 3));
  rf_output xi = rf_placeholder(g, "xi", RF_INT32, rf_shape_of(2, 2, 3));
  rf_output ci = rf_placeholder(g, "ci", RF_INT32, rf_shape_of(1, 3));
  assert_null(
      rf_batch_norm_training(g, "bad", x, c4, c3, 1e-3, NULL, NULL).node);
  rf_status *st = rf_graph_status(g);
  assert_non_null(strstr(rf_status_message(st), "'bad' (BatchNorm)"));
  rf_status_free(st);
  expect_graph_error(g, "gamma (4) must be [C]");
  assert_null(
      rf_batch_norm_training(g, NULL, x1, c3, c3, 1e-3, NULL, NULL).node);
  expect_graph_error(g, "rank >= 2");
  assert_null(rf_batch_norm_training(g, NULL, x, c3, c3, -1, NULL, NULL).node);
  expect_graph_error(g, "epsilon -1");
  assert_null(
      rf_batch_norm_training(g, NULL, xi, ci, ci, 1e-3, NULL, NULL).node);
  expect_graph_error(g, "int32");
  assert_null(
      rf_batch_norm_training(g, NULL, x, d3, c3, 1e-3, NULL, NULL).node);
  expect_graph_error(g, NULL);
  assert_null(rf_batch_norm_inference(g, "inf", x, c3, c3, c3, c4, 1e-3).node);
  expect_graph_error(g, "variance (4) must be [C]");
  assert_null(rf_batch_norm_inference(g, NULL, x, c3, c3, c4, v3, 1e-3).node);
  expect_graph_error(g, "mean (4)");
  /* the layer and sync builders */
  rf_batch_norm_result r;
  rf_batch_norm(g, "l", x, c3, c3, (rf_output){NULL, 0}, (rf_output){NULL, 0},
                false, 0.9, 1e-3, &r);
  expect_graph_error(g, "inference needs moving_mean");
  assert_null(r.y.node);
  rf_batch_norm(g, "l", x, c3, c3, (rf_output){NULL, 0}, (rf_output){NULL, 0},
                true, 1.5, 1e-3, &r);
  expect_graph_error(g, "momentum 1.5");
  /* unnamed: no empty quotes in the message */
  rf_batch_norm(g, NULL, x, c3, c3, (rf_output){NULL, 0}, (rf_output){NULL, 0},
                false, 0.9, 1e-3, &r);
  expect_graph_error(g, "rf_batch_norm: inference needs moving_mean");
  rf_moving_average_update(g, NULL, c3, c3, 2);
  expect_graph_error(g, "rf_moving_average_update: momentum 2 must be");
  rf_output xs[2] = {x, xi}, cs[2] = {c3, c3};
  rf_batch_norm_result rs[2];
  rf_sync_batch_norm_n(g, "s", 2, xs, cs, cs, NULL, NULL, 0.9, 1e-3, rs);
  expect_graph_error(g, "xs[1] ('xi'");
  rf_sync_batch_norm_n(g, "s", 0, xs, cs, cs, NULL, NULL, 0.9, 1e-3, rs);
  expect_graph_error(g, "n must be in 1..1024");
  rf_sync_batch_norm_n(g, NULL, 0, xs, cs, cs, NULL, NULL, 0.9, 1e-3, rs);
  expect_graph_error(g, "rf_sync_batch_norm_n: n must be in 1..1024");
  xs[1] = x;
  /* no devices: the collective builder refuses */
  rf_sync_batch_norm_n(g, "s", 2, xs, cs, cs, NULL, NULL, 0.9, 1e-3, rs);
  expect_graph_error(g, "Device assignment required");
  /* gamma's shape only known when run: the kernel refuses it, naming the
   * node, op and device */
  rf_output u = rf_placeholder(g, "u", RF_FLOAT32, rf_shape_unknown());
  rf_output y = rf_batch_norm_training(g, "late", x, u, c3, 1e-3, NULL, NULL);
  assert_graph_ok(g);
  rf_session *sess = rf_test_cpu_session(g, 1);
  uint64_t rng = rf_test_rng(69);
  rf_feed f[3] = {
      {x,
       rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(3, 2, 2, 3), -1, 1)},
      {u, rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, 2), -1, 1)},
      {c3, rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, 3), -1, 1)}};
  const char *subs[] = {"late", "BatchNorm", "cpu:0", "gamma is not [C]"};
  rf_test_expect_run_error(sess, f, 3, &y, 1, RF_INVALID_ARGUMENT, subs, 4);
  for (int i = 0; i < 3; i++) rf_tensor_release(f[i].value);
  rf_session_free(sess);
  rf_graph_free(g);
}

/* rf_moving_average_update with a value of another dtype or shape than the
 * variable's, or of an integer dtype, is refused naming the update (it
 * named an inner Mul or Assign and left nodes behind); nothing is
 * added. */
static void test_moving_average_update_dtype(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output mv = rf_variable(g, "mv", RF_FLOAT32, rf_shape_of(1, 3));
  rf_output iv = rf_variable(g, "iv", RF_INT32, rf_shape_of(1, 3));
  rf_output d3 = rf_placeholder(g, "d3", RF_FLOAT64, rf_shape_of(1, 3));
  rf_output i3 = rf_placeholder(g, "i3", RF_INT32, rf_shape_of(1, 3));
  int before = rf_graph_num_nodes(g);
  assert_null(rf_moving_average_update(g, "mau", mv, d3, 0.5));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "rf_moving_average_update 'mau': value is float64, the "
                "variable 'mv' float32");
  rf_graph_clear_status(g);
  assert_null(rf_moving_average_update(g, "imau", iv, i3, 0.5));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "rf_moving_average_update 'imau': value is int32");
  rf_graph_clear_status(g);
  rf_output f4 = rf_placeholder(g, "f4", RF_FLOAT32, rf_shape_of(1, 4));
  before = rf_graph_num_nodes(g);
  assert_null(rf_moving_average_update(g, "smau", mv, f4, 0.5));
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "rf_moving_average_update 'smau': value has shape (4) but the "
                "variable 'mv' has shape (3)");
  rf_graph_clear_status(g);
  assert_int_equal(rf_graph_num_nodes(g), before);
  rf_graph_free(g);
}

/* "outs[i]: as rf_batch_norm's, on device i": each replica's update (the
 * NoOp grouping its two moving-average assigns) requests device i too; it
 * requested none (so ran on the default device, a control edge across
 * devices per replica). rf_batch_norm's update is on the variables'. */
static void test_sync_updates_on_replica_devices(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output xs[3], gs[3], bs[3], mm[3], mv[3];
  for (int i = 0; i < 3; i++) {
    char dev[16], n1[16], n2[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    snprintf(n1, sizeof n1, "mm%d", i);
    snprintf(n2, sizeof n2, "mv%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    xs[i] = rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_of(2, 4, 3));
    gs[i] = rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_of(1, 3));
    bs[i] = rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_of(1, 3));
    mm[i] = rf_variable(g, n1, RF_FLOAT32, rf_shape_of(1, 3));
    mv[i] = rf_variable(g, n2, RF_FLOAT32, rf_shape_of(1, 3));
    rf_graph_pop_device(g);
  }
  rf_batch_norm_result outs[3];
  rf_sync_batch_norm_n(g, "sbn", 3, xs, gs, bs, mm, mv, 0.9, 1e-3, outs);
  assert_graph_ok(g);
  for (int i = 0; i < 3; i++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", i);
    assert_string_equal(rf_node_device(outs[i].y.node), dev);
    assert_non_null(outs[i].update);
    assert_string_equal(rf_node_device(outs[i].update), dev);
  }
  rf_batch_norm_result r;
  rf_batch_norm(g, "l", xs[2], gs[2], bs[2], mm[2], mv[2], true, 0.9, 1e-3, &r);
  assert_graph_ok(g);
  assert_string_equal(rf_node_device(r.update), "cpu:2");
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_training_values),
      cmocka_unit_test(test_inference_values),
      cmocka_unit_test(test_training_gradients),
      cmocka_unit_test(test_inference_gradients),
      cmocka_unit_test(test_empty_batch),
      cmocka_unit_test(test_moving_averages),
      cmocka_unit_test(test_sync_matches_single),
      cmocka_unit_test(test_sync_dtypes),
      cmocka_unit_test(test_unsynced_per_device),
      cmocka_unit_test(test_second_order_refused),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_moving_average_update_dtype),
      cmocka_unit_test(test_sync_updates_on_replica_devices),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
