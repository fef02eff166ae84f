/* tests/test_pool_grad_ops.c - the public builders of the pools' gradient
 * ops, rf_max_pool_grad and rf_avg_pool_grad (README's op list), through a
 * session against a float64 reference computed here (SAME and VALID
 * padding, stride below, equal to and above the window, float32 and
 * float64), and equal to what rf_gradients builds; their build errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

typedef struct geom {
  int64_t n, h, w, c, kh, kw, sh, sw;
  const char *padding;
} geom;

static int64_t out_dim(int64_t in, int64_t k, int64_t s, bool same) {
  return same ? (in + s - 1) / s : (in - k) / s + 1;
}

static int64_t pad_before(int64_t in, int64_t out, int64_t k, int64_t s) {
  int64_t total = (out - 1) * s + k - in;
  return total > 0 ? total / 2 : 0;
}

/* dx of MaxPool (max true: to each window's first maximum, row-major) or
 * AvgPool (spread over the window's input elements) for dy, in float64. */
static double *reference(const geom *q, const double *x, const double *dy,
                         bool max) {
  bool same = strcmp(q->padding, "SAME") == 0;
  int64_t oh = out_dim(q->h, q->kh, q->sh, same);
  int64_t ow = out_dim(q->w, q->kw, q->sw, same);
  int64_t ph = same ? pad_before(q->h, oh, q->kh, q->sh) : 0;
  int64_t pw = same ? pad_before(q->w, ow, q->kw, q->sw) : 0;
  double *dx = calloc((size_t)(q->n * q->h * q->w * q->c), sizeof *dx);
  assert_non_null(dx);
  for (int64_t b = 0; b < q->n; b++)
    for (int64_t i = 0; i < oh; i++)
      for (int64_t j = 0; j < ow; j++)
        for (int64_t ch = 0; ch < q->c; ch++) {
          double g = dy[((b * oh + i) * ow + j) * q->c + ch];
          int64_t best = -1, count = 0;
          for (int64_t u = 0; u < q->kh; u++)
            for (int64_t v = 0; v < q->kw; v++) {
              int64_t r = i * q->sh - ph + u, s = j * q->sw - pw + v;
              if (r < 0 || r >= q->h || s < 0 || s >= q->w) continue;
              int64_t at = ((b * q->h + r) * q->w + s) * q->c + ch;
              count++;
              if (best < 0 || x[at] > x[best]) best = at;
            }
          if (max) {
            dx[best] += g;
            continue;
          }
          for (int64_t u = 0; u < q->kh; u++)
            for (int64_t v = 0; v < q->kw; v++) {
              int64_t r = i * q->sh - ph + u, s = j * q->sw - pw + v;
              if (r < 0 || r >= q->h || s < 0 || s >= q->w) continue;
              dx[((b * q->h + r) * q->w + s) * q->c + ch] += g / count;
            }
        }
  return dx;
}

static void check(const geom *q, rf_dtype dt, uint64_t *rng) {
  int64_t ksize[4] = {1, q->kh, q->kw, 1}, strides[4] = {1, q->sh, q->sw, 1};
  rf_graph *g = rf_graph_new();
  rf_shape xs = rf_shape_of(4, q->n, q->h, q->w, q->c);
  rf_output x = rf_placeholder(g, "x", dt, xs);
  rf_output mp = rf_max_pool(g, "mp", x, ksize, strides, q->padding);
  rf_output ap = rf_avg_pool(g, "ap", x, ksize, strides, q->padding);
  rf_shape ys = rf_output_shape(mp);
  rf_output dy = rf_placeholder(g, "dy", dt, ys);
  rf_output sizes = rf_shape_of_op(g, "sizes", x, RF_INT32);
  rf_output mg =
      rf_max_pool_grad(g, "mg", x, mp, dy, ksize, strides, q->padding);
  rf_output ag =
      rf_avg_pool_grad(g, "ag", sizes, dy, ksize, strides, q->padding);
  assert_graph_ok(g);
  rf_shape mgs = rf_output_shape(mg);
  assert_true(rf_shape_equal(&mgs, &xs));
  /* What rf_gradients builds, for comparison. */
  rf_output ys2[2] = {mp, ap}, dys[2] = {dy, dy}, gm, ga;
  assert_ok(rf_gradients(g, &ys2[0], 1, &x, 1, &dys[0], &gm));
  assert_ok(rf_gradients(g, &ys2[1], 1, &x, 1, &dys[1], &ga));
  rf_tensor *tx = rf_test_random_tensor(rng, dt, xs, -2, 2);
  rf_tensor *tdy = rf_test_random_tensor(rng, dt, ys, -1, 1);
  rf_feed feeds[2] = {{x, tx}, {dy, tdy}};
  rf_output fetch[4] = {mg, ag, gm, ga};
  rf_tensor *got[4];
  rf_test_run(g, 1, feeds, 2, fetch, 4, got);
  double *dx = rf_test_to_doubles(tx), *ddy = rf_test_to_doubles(tdy);
  double *wmax = reference(q, dx, ddy, true);
  double *wavg = reference(q, dx, ddy, false);
  double tol = rf_test_tolerance(dt);
  assert_tensor_near(got[0], xs, wmax, tol);
  assert_tensor_near(got[1], xs, wavg, tol);
  double *gm_vals = rf_test_to_doubles(got[2]);
  double *ga_vals = rf_test_to_doubles(got[3]);
  assert_tensor_near(got[0], xs, gm_vals, 0);
  assert_tensor_near(got[1], xs, ga_vals, 0);
  free(gm_vals);
  free(ga_vals);
  free(wmax);
  free(wavg);
  free(dx);
  free(ddy);
  for (int i = 0; i < 4; i++) rf_tensor_release(got[i]);
  rf_tensor_release(tx);
  rf_tensor_release(tdy);
  rf_graph_free(g);
}

static void test_pool_grads_against_reference(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(61);
  const geom cases[] = {
      {2, 5, 6, 3, 2, 2, 2, 2, "VALID"}, {1, 5, 6, 2, 3, 2, 2, 1, "SAME"},
      {2, 7, 4, 1, 2, 3, 3, 4, "SAME"},  {1, 4, 4, 2, 3, 3, 1, 1, "VALID"},
      {1, 1, 1, 1, 1, 1, 1, 1, "SAME"},  {0, 3, 3, 2, 2, 2, 1, 1, "VALID"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    check(&cases[i], RF_FLOAT32, &rng);
    check(&cases[i], RF_FLOAT64, &rng);
  }
}

static void test_pool_grad_build_errors(void **state) {
  (void)state;
  int64_t k[4] = {1, 2, 2, 1}, s[4] = {1, 2, 2, 1};
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(4, 1, 4, 4, 1));
  rf_output y = rf_max_pool(g, "y", x, k, s, "VALID");
  rf_output bad =
      rf_placeholder(g, "bad", RF_FLOAT64, rf_shape_of(4, 1, 2, 2, 1));
  rf_output r = rf_max_pool_grad(g, "mg", x, y, bad, k, s, "VALID");
  assert_null(r.node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "'mg'");
  rf_graph_clear_status(g);
  r = rf_max_pool_grad(g, "mg2", x, y, y, NULL, s, "VALID");
  assert_null(r.node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "ksize is required");
  rf_graph_clear_status(g);
  /* orig_input_shape must be int32. */
  rf_output sz = rf_placeholder(g, "sz", RF_INT64, rf_shape_of(1, 4));
  r = rf_avg_pool_grad(g, "ag", sz, y, k, s, "VALID");
  assert_null(r.node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "'ag'");
  rf_graph_clear_status(g);
  r = rf_avg_pool_grad(g, "ag2", sz, y, k, s, "FULL");
  assert_null(r.node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, "ag2");
  rf_graph_clear_status(g);
  /* Shapes known at build time are checked then, as the kernels would:
   * a grad or orig_output the window does not give. */
  rf_output g3 =
      rf_placeholder(g, "g3", RF_FLOAT32, rf_shape_of(4, 1, 2, 2, 3));
  r = rf_max_pool_grad(g, "mg3", x, y, g3, k, s, "VALID");
  assert_null(r.node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'mg3' (MaxPoolGrad): grad has shape (1, 2, 2, 3); the "
                "window gives (1, 2, 2, 1)");
  rf_graph_clear_status(g);
  r = rf_max_pool_grad(g, "mg4", x, g3, y, k, s, "VALID");
  assert_null(r.node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "orig_output has shape (1, 2, 2, 3)");
  rf_graph_clear_status(g);
  const int32_t dims[4] = {1, 6, 6, 1};
  rf_tensor *dt;
  rf_shape v = rf_shape_of(1, 4);
  assert_ok(rf_tensor_new_copy(RF_INT32, &v, dims, &dt));
  r = rf_avg_pool_grad(g, "ag3", rf_const(g, "dims", dt), y, k, s, "VALID");
  rf_tensor_release(dt);
  assert_null(r.node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "node 'ag3' (AvgPoolGrad): grad has shape (1, 2, 2, 1); the "
                "window gives (1, 3, 3, 1)");
  rf_graph_clear_status(g);
  /* unknown dims are left to the run */
  rf_output u = rf_placeholder(g, "u", RF_FLOAT32,
                               rf_shape_of(4, -1, -1, -1, (int64_t)1));
  assert_non_null(rf_max_pool_grad(g, "mg5", x, y, u, k, s, "VALID").node);
  assert_graph_ok(g);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pool_grads_against_reference),
      cmocka_unit_test(test_pool_grad_build_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
