/* tests/test_batch_matmul.c - BatchMatMul through a session against a
 * float64 reference written here: every adj_x/adj_y combination, batch
 * dims that broadcast (one side, both sides, ranks that differ), size-1 and
 * empty dims, k = 0, for float16/bfloat16/float32/float64 (float tolerance)
 * and int32/int64 (exact, wrapping around, no gradient); its gradients against
 * central finite differences in float64 (first and second order, shapes known
 * and unknown); and the errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

typedef struct bmm_case {
  const char *name;
  rf_shape x, y;
} bmm_case;

/* x, y as stored (adj applied by the op). */
static const bmm_case cases[] = {
    {"plain", {3, {2, 3, 4}}, {3, {2, 4, 5}}},
    {"y broadcast", {3, {3, 2, 4}}, {2, {4, 3}}},
    {"x broadcast", {2, {2, 4}}, {4, {2, 3, 4, 1}}},
    {"both broadcast", {4, {2, 1, 3, 2}}, {3, {3, 2, 2}}},
    {"size-1 batch", {3, {1, 1, 1}}, {3, {4, 1, 1}}},
    {"empty batch", {3, {0, 2, 3}}, {3, {1, 3, 2}}},
    {"k = 0", {3, {2, 3, 0}}, {3, {2, 0, 2}}},
};

/* The stored shape for the case's logical (m,k)/(k,n) when adjointed. */
static rf_shape stored(rf_shape s, bool adj) {
  if (adj) {
    int64_t t = s.dims[s.rank - 1];
    s.dims[s.rank - 1] = s.dims[s.rank - 2];
    s.dims[s.rank - 2] = t;
  }
  return s;
}

/* Reference: out[b, i, j] = sum_q X[bx, i, q] Y[by, q, j]. */
static double *reference(const rf_tensor *x, const rf_tensor *y, bool ax,
                         bool ay, rf_shape *out) {
  rf_shape xs = rf_tensor_shape(x), ys = rf_tensor_shape(y);
  int64_t m = xs.dims[xs.rank - (ax ? 1 : 2)],
          k = xs.dims[xs.rank - (ax ? 2 : 1)];
  int64_t n = ys.dims[ys.rank - (ay ? 2 : 1)];
  int br = xs.rank > ys.rank ? xs.rank - 2 : ys.rank - 2;
  rf_shape o = rf_shape_scalar();
  o.rank = br + 2;
  for (int i = 0; i < br; i++) {
    int jx = i - (br - (xs.rank - 2)), jy = i - (br - (ys.rank - 2));
    int64_t dx = jx >= 0 ? xs.dims[jx] : 1, dy = jy >= 0 ? ys.dims[jy] : 1;
    o.dims[i] = dx == 1 ? dy : dx;
  }
  o.dims[br] = m, o.dims[br + 1] = n;
  *out = o;
  int64_t batch = 1;
  for (int i = 0; i < br; i++) batch *= o.dims[i];
  double *r = calloc((size_t)(batch * m * n + 1), sizeof *r);
  for (int64_t b = 0; b < batch; b++) {
    int64_t bx = 0, by = 0, rest = b, sx = 1, sy = 1;
    for (int i = br - 1; i >= 0; i--) {
      int64_t idx = rest % o.dims[i];
      rest /= o.dims[i];
      int jx = i - (br - (xs.rank - 2)), jy = i - (br - (ys.rank - 2));
      if (jx >= 0) {
        bx += (xs.dims[jx] == 1 ? 0 : idx) * sx;
        sx *= xs.dims[jx];
      }
      if (jy >= 0) {
        by += (ys.dims[jy] == 1 ? 0 : idx) * sy;
        sy *= ys.dims[jy];
      }
    }
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0;
        for (int64_t q = 0; q < k; q++) {
          int64_t xi = bx * m * k + (ax ? q * m + i : i * k + q);
          int64_t yi = by * k * n + (ay ? j * k + q : q * n + j);
          s += rf_tensor_get(x, xi) * rf_tensor_get(y, yi);
        }
        r[(b * m + i) * n + j] = s;
      }
  }
  return r;
}

static void test_values(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(31);
  const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32, RF_FLOAT64};
  for (int d = 0; d < 4; d++)
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
      for (int adj = 0; adj < 4; adj++) {
        bool ax = adj & 1, ay = adj & 2;
        rf_shape xs = stored(cases[c].x, ax), ys = stored(cases[c].y, ay);
        rf_tensor *x = rf_test_random_tensor(&rng, dts[d], xs, -1, 1);
        rf_tensor *y = rf_test_random_tensor(&rng, dts[d], ys, -1, 1);
        rf_graph *g = rf_graph_new();
        rf_output px = rf_placeholder(g, "x", dts[d], xs);
        rf_output py = rf_placeholder(g, "y", dts[d], ys);
        rf_output z = rf_batch_matmul(g, NULL, px, py, ax, ay);
        assert_graph_ok(g);
        rf_shape want;
        double *ref = reference(x, y, ax, ay, &want);
        rf_shape stat = rf_output_shape(z);
        assert_true(rf_shape_equal(&stat, &want));
        rf_feed f[2] = {{px, x}, {py, y}};
        rf_tensor *out;
        rf_test_run(g, 1, f, 2, &z, 1, &out);
        double tol = dts[d] == RF_FLOAT64   ? 1e-12
                     : dts[d] == RF_FLOAT32 ? 1e-5
                                            : 2e-2;
        assert_tensor_near(out, want, ref, tol);
        free(ref);
        rf_tensor_release(out);
        rf_tensor_release(x);
        rf_tensor_release(y);
        rf_graph_free(g);
      }
}

/* Integer reference in the dtype's wrap-around arithmetic (two's
 * complement, as MatMul): out[b, i, j] = sum_q X[bx, i, q] Y[by, q, j]. */
static int64_t *int_reference(const rf_tensor *x, const rf_tensor *y, bool ax,
                              bool ay, rf_shape o) {
  rf_shape xs = rf_tensor_shape(x), ys = rf_tensor_shape(y);
  bool i32 = rf_tensor_dtype(x) == RF_INT32;
  int64_t m = o.dims[o.rank - 2], n = o.dims[o.rank - 1];
  int64_t k = xs.dims[xs.rank - (ax ? 2 : 1)];
  int br = o.rank - 2;
  int64_t batch = 1;
  for (int i = 0; i < br; i++) batch *= o.dims[i];
  int64_t *r = calloc((size_t)(batch * m * n + 1), sizeof *r);
  const int32_t *x32 = rf_tensor_data(x), *y32 = rf_tensor_data(y);
  const int64_t *x64 = rf_tensor_data(x), *y64 = rf_tensor_data(y);
  for (int64_t b = 0; b < batch; b++) {
    int64_t bx = 0, by = 0, rest = b, sx = 1, sy = 1;
    for (int i = br - 1; i >= 0; i--) {
      int64_t idx = rest % o.dims[i];
      rest /= o.dims[i];
      int jx = i - (br - (xs.rank - 2)), jy = i - (br - (ys.rank - 2));
      if (jx >= 0) {
        bx += (xs.dims[jx] == 1 ? 0 : idx) * sx;
        sx *= xs.dims[jx];
      }
      if (jy >= 0) {
        by += (ys.dims[jy] == 1 ? 0 : idx) * sy;
        sy *= ys.dims[jy];
      }
    }
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        uint64_t s = 0;
        uint32_t s32 = 0;
        for (int64_t q = 0; q < k; q++) {
          int64_t xi = bx * m * k + (ax ? q * m + i : i * k + q);
          int64_t yi = by * k * n + (ay ? j * k + q : q * n + j);
          if (i32)
            s32 += (uint32_t)x32[xi] * (uint32_t)y32[yi];
          else
            s += (uint64_t)x64[xi] * (uint64_t)y64[yi];
        }
        r[(b * m + i) * n + j] = i32 ? (int64_t)(int32_t)s32 : (int64_t)s;
      }
  }
  return r;
}

/* int32 and int64: exact products, small values and values over the whole
 * range (the sums wrap around); no gradient flows through them. */
static void test_int_values(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(34);
  const rf_dtype dts[] = {RF_INT32, RF_INT64};
  for (int d = 0; d < 2; d++)
    for (int big = 0; big < 2; big++)
      for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int adj = 0; adj < 4; adj++) {
          bool ax = adj & 1, ay = adj & 2;
          rf_shape xs = stored(cases[c].x, ax), ys = stored(cases[c].y, ay);
          double hi = !big ? 100 : d ? 9.0e18 : 2147483648.0;
          rf_tensor *x = rf_test_random_tensor(&rng, dts[d], xs, -hi, hi);
          rf_tensor *y = rf_test_random_tensor(&rng, dts[d], ys, -hi, hi);
          rf_graph *g = rf_graph_new();
          rf_output px = rf_placeholder(g, "x", dts[d], xs);
          rf_output py = rf_placeholder(g, "y", dts[d], ys);
          rf_output z = rf_batch_matmul(g, NULL, px, py, ax, ay);
          assert_graph_ok(g);
          rf_shape want;
          free(reference(x, y, ax, ay, &want));
          int64_t *ref = int_reference(x, y, ax, ay, want);
          rf_feed f[2] = {{px, x}, {py, y}};
          rf_tensor *out;
          rf_test_run(g, 1, f, 2, &z, 1, &out);
          rf_shape got = rf_tensor_shape(out);
          assert_true(rf_shape_equal(&got, &want));
          assert_int_equal(rf_tensor_dtype(out), dts[d]);
          for (int64_t i = 0; i < rf_tensor_num_elements(out); i++) {
            int64_t v = d ? ((const int64_t *)rf_tensor_data(out))[i]
                          : ((const int32_t *)rf_tensor_data(out))[i];
            if (v != ref[i])
              fail_msg("%s %s adj %d%d [%lld]: %lld, want %lld",
                       rf_dtype_name(dts[d]), cases[c].name, ax, ay,
                       (long long)i, (long long)v, (long long)ref[i]);
          }
          /* integers carry no gradient: dx and dy are invalid outputs */
          rf_output l =
              rf_sum(g, NULL, rf_cast(g, NULL, z, RF_FLOAT64), NULL, -1, false);
          rf_output in[2] = {px, py}, dxy[2];
          assert_ok(rf_gradients(g, &l, 1, in, 2, NULL, dxy));
          assert_null(dxy[0].node);
          assert_null(dxy[1].node);
          /* nor from an integer loss straight through the product */
          rf_output li = rf_sum(g, NULL, z, NULL, -1, false);
          assert_ok(rf_gradients(g, &li, 1, in, 2, NULL, dxy));
          assert_null(dxy[0].node);
          assert_null(dxy[1].node);
          free(ref);
          rf_tensor_release(out);
          rf_tensor_release(x);
          rf_tensor_release(y);
          rf_graph_free(g);
        }
}

static double run_y(rf_session *s, rf_feed *f, rf_output y) {
  rf_tensor *v;
  assert_ok(rf_session_run(s, f, 2, &y, 1, NULL, 0, &v));
  double r = rf_tensor_get(v, 0);
  rf_tensor_release(v);
  return r;
}

static rf_output weighted(rf_graph *g, rf_output z, rf_shape s, uint64_t *rng) {
  rf_tensor *r = rf_test_random_tensor(rng, RF_FLOAT64, s, -1, 1);
  rf_output y = rf_sum(g, NULL, rf_mul(g, NULL, z, rf_const(g, NULL, r)), NULL,
                       -1, false);
  rf_tensor_release(r);
  return y;
}

static void check_grad(const bmm_case *c, bool ax, bool ay, bool unknown,
                       bool second, uint64_t *rng) {
  rf_shape xs = stored(c->x, ax), ys = stored(c->y, ay);
  rf_shape shapes[2] = {xs, ys};
  rf_graph *g = rf_graph_new();
  rf_output x[2], dx[2];
  rf_feed f[2];
  for (int j = 0; j < 2; j++) {
    x[j] = rf_placeholder(g, NULL, RF_FLOAT64,
                          unknown ? rf_shape_unknown() : shapes[j]);
    f[j] = (rf_feed){x[j],
                     rf_test_random_tensor(rng, RF_FLOAT64, shapes[j], -1, 1)};
  }
  rf_output z = rf_batch_matmul(g, NULL, x[0], x[1], ax, ay);
  rf_shape zs;
  free(reference(f[0].value, f[1].value, ax, ay, &zs));
  if (second) { /* z = d sum(bmm^2 * r1) / dx */
    rf_output inner = weighted(g, rf_mul(g, NULL, z, z), zs, rng);
    assert_ok(rf_gradients(g, &inner, 1, x, 1, NULL, dx));
    z = dx[0];
    zs = xs;
  }
  rf_output loss = weighted(g, z, zs, rng);
  assert_ok(rf_gradients(g, &loss, 1, x, 2, NULL, dx));
  assert_graph_ok(g);
  rf_session *s = rf_test_cpu_session(g, 1);
  rf_tensor *got[2];
  assert_ok(rf_session_run(s, f, 2, dx, 2, NULL, 0, got));
  for (int j = 0; j < 2; j++) {
    rf_shape gs = rf_tensor_shape(got[j]);
    if (!rf_shape_equal(&gs, &shapes[j])) fail_msg("%s: dx shape", c->name);
    rf_tensor *orig = f[j].value;
    for (int64_t i = 0; i < rf_tensor_num_elements(orig); i++) {
      double v[2];
      for (int side = 0; side < 2; side++) {
        rf_tensor *p;
        assert_ok(rf_tensor_new_copy(RF_FLOAT64, &shapes[j],
                                     rf_tensor_data(orig), &p));
        ((double *)rf_tensor_mutable_data(p))[i] += side ? -1e-6 : 1e-6;
        f[j].value = p;
        v[side] = run_y(s, f, loss);
        rf_tensor_release(p);
      }
      f[j].value = orig;
      double want = (v[0] - v[1]) / 2e-6, have = rf_tensor_get(got[j], i);
      if (!(fabs(have - want) <= 1e-6 * fmax(1, fabs(want))))
        fail_msg(
            "%s adj %d%d%s%s: dx%d[%lld]: finite difference %.12g, "
            "gradient %.12g",
            c->name, ax, ay, unknown ? " (unknown shapes)" : "",
            second ? " (second order)" : "", j, (long long)i, want, have);
    }
    rf_tensor_release(got[j]);
  }
  for (int j = 0; j < 2; j++) rf_tensor_release(f[j].value);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_gradients(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(32);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int adj = 0; adj < 4; adj++)
      for (int unknown = 0; unknown < 2; unknown++)
        for (int second = 0; second < 2; second++)
          check_grad(&cases[c], adj & 1, adj & 2, unknown, second, &rng);
}

static void test_errors(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_output a = rf_placeholder(g, "a", RF_FLOAT32, rf_shape_of(3, 2, 3, 4));
  rf_output v = rf_placeholder(g, "v", RF_FLOAT32, rf_shape_of(1, 4));
  rf_output b = rf_placeholder(g, "b", RF_FLOAT32, rf_shape_of(3, 3, 4, 5));
  rf_output c = rf_placeholder(g, "c", RF_FLOAT32, rf_shape_of(3, 2, 5, 5));
  rf_output i = rf_placeholder(g, "i", RF_INT8, rf_shape_of(2, 2, 2));
  static const char *subs[] = {"rank >= 2", "do not broadcast",
                               "inner dimensions differ", "attr 'T'"};
  for (int k = 0; k < 4; k++) {
    rf_output z = k == 0   ? rf_batch_matmul(g, "bad", a, v, false, false)
                  : k == 1 ? rf_batch_matmul(g, "bad", a, b, false, false)
                  : k == 2 ? rf_batch_matmul(g, "bad", a, c, false, false)
                           : rf_batch_matmul(g, "bad", i, i, false, false);
    assert_null(z.node);
    rf_status *st = rf_graph_status(g);
    if (!strstr(rf_status_message(st), subs[k]) ||
        !strstr(rf_status_message(st), "'bad' (BatchMatMul)"))
      fail_msg("case %d: \"%s\" lacks %s", k, rf_status_message(st), subs[k]);
    rf_status_free(st);
    rf_graph_clear_status(g);
  }
  /* Only the run knows: the kernel refuses with node, op and device. */
  rf_output u = rf_placeholder(g, "u", RF_FLOAT32, rf_shape_unknown());
  rf_output z = rf_batch_matmul(g, "late", a, u, false, false);
  assert_graph_ok(g);
  uint64_t rng = rf_test_rng(33);
  rf_tensor *ta =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(3, 2, 3, 4), -1, 1);
  rf_tensor *tu =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(3, 3, 4, 5), -1, 1);
  rf_feed f[2] = {{a, ta}, {u, tu}};
  rf_session *s = rf_test_cpu_session(g, 1);
  const char *rs[] = {"node 'late' (BatchMatMul) on cpu:0", "do not broadcast"};
  rf_test_expect_run_error(s, f, 2, &z, 1, RF_INVALID_ARGUMENT, rs, 2);
  rf_session_free(s);
  rf_tensor_release(ta);
  rf_tensor_release(tu);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_values),
      cmocka_unit_test(test_int_values),
      cmocka_unit_test(test_gradients),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
