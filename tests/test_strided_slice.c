/* tests/test_strided_slice.c - rf_strided_slice through a session against an
 * independent reference (CPython's slice.indices algorithm applied per dim
 * and the elements gathered by index), on random shapes (size-0 and size-1
 * dims), random begin/end (negative, past the ends), strides (negative,
 * larger than the dim) and masks, every dtype, with the input's shape known
 * at build time (the output's shape is then inferred) or only at run time;
 * named edge cases (empty result, reversal, all dims shrunk to a scalar, no
 * arguments); its gradient against central finite differences in float64,
 * first and second order; the errors, at build and at run time; and the
 * kernel under allocation faults. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static const rf_dtype all_dtypes[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                      RF_FLOAT64, RF_INT8,     RF_UINT8,
                                      RF_INT32,   RF_INT64,    RF_BOOL};

typedef struct ss_case {
  int n;
  int64_t begin[RF_MAX_RANK], end[RF_MAX_RANK], strides[RF_MAX_RANK];
  int64_t begin_mask, end_mask, shrink;
} ss_case;

/* CPython's PySlice_AdjustIndices for one dim: the indices taken, in order,
 * into idx; returns how many. Masked begin/end are Python's None. */
static int64_t python_indices(int64_t d, int64_t b, bool b_none, int64_t e,
                              bool e_none, int64_t s, int64_t *idx) {
  int64_t start, stop;
  if (b_none) {
    start = s < 0 ? d - 1 : 0;
  } else {
    start = b;
    if (start < 0) {
      start += d;
      if (start < 0) start = s < 0 ? -1 : 0;
    } else if (start >= d) {
      start = s < 0 ? d - 1 : d;
    }
  }
  if (e_none) {
    stop = s < 0 ? -1 : d;
  } else {
    stop = e;
    if (stop < 0) {
      stop += d;
      if (stop < 0) stop = s < 0 ? -1 : 0;
    } else if (stop >= d) {
      stop = s < 0 ? d - 1 : d;
    }
  }
  int64_t n = 0;
  for (int64_t i = start; s > 0 ? i < stop : i > stop; i += s) idx[n++] = i;
  return n;
}

/* The reference: out shape and values (doubles) of x[c]. */
static double *reference(const rf_tensor *x, const ss_case *c, rf_shape *out) {
  rf_shape xs = rf_tensor_shape(x);
  int64_t idx[RF_MAX_RANK][64], cnt[RF_MAX_RANK];
  out->rank = 0;
  for (int i = 0; i < xs.rank; i++) {
    int64_t d = xs.dims[i];
    if (i >= c->n) {
      for (int64_t k = 0; k < d; k++) idx[i][k] = k;
      cnt[i] = d;
    } else if (c->shrink >> i & 1) {
      idx[i][0] = c->begin[i] < 0 ? c->begin[i] + d : c->begin[i];
      cnt[i] = 1;
      continue;
    } else {
      cnt[i] = python_indices(d, c->begin[i], c->begin_mask >> i & 1, c->end[i],
                              c->end_mask >> i & 1, c->strides[i], idx[i]);
    }
    out->dims[out->rank++] = cnt[i];
  }
  int64_t total = 1;
  for (int i = 0; i < xs.rank; i++) total *= cnt[i];
  double *vals = rf_test_to_doubles(x), *want = calloc((size_t)total + 1, 8);
  int64_t xstride[RF_MAX_RANK], st = 1;
  for (int i = xs.rank - 1; i >= 0; i--) {
    xstride[i] = st;
    st *= xs.dims[i];
  }
  for (int64_t o = 0; o < total; o++) {
    int64_t rest = o, off = 0;
    for (int i = xs.rank - 1; i >= 0; i--) {
      off += idx[i][rest % cnt[i]] * xstride[i];
      rest /= cnt[i];
    }
    want[o] = vals[off];
  }
  free(vals);
  return want;
}

static rf_output slice(rf_graph *g, rf_output x, const ss_case *c) {
  return rf_strided_slice(g, NULL, x, c->begin, c->end, c->strides, c->n,
                          c->begin_mask, c->end_mask, c->shrink);
}

/* Runs x[c] with x's shape known or not at build time; checks the inferred
 * shape and the values against the reference. */
static void check_forward(rf_tensor *x, const ss_case *c, bool known,
                          const char *what) {
  rf_shape want_shape;
  double *want = reference(x, c, &want_shape);
  rf_graph *g = rf_graph_new();
  rf_dtype dt = rf_tensor_dtype(x);
  rf_output p = rf_placeholder(g, "x", dt,
                               known ? rf_tensor_shape(x) : rf_shape_unknown());
  rf_output y = slice(g, p, c);
  assert_graph_ok(g);
  if (known) {
    rf_shape inferred = rf_output_shape(y);
    if (!rf_shape_equal(&inferred, &want_shape)) fail_msg("%s: shape", what);
  }
  rf_feed f = {p, x};
  rf_tensor *got = NULL;
  rf_test_run(g, 1, &f, 1, &y, 1, &got);
  assert_int_equal(rf_tensor_dtype(got), dt);
  assert_tensor_near(got, want_shape, want, 0);
  rf_tensor_release(got);
  free(want);
  rf_graph_free(g);
}

static int64_t rand_in(uint64_t *rng, int64_t lo, int64_t hi) {
  return lo + (int64_t)(rf_test_rand(rng) % (uint64_t)(hi - lo + 1));
}

static ss_case random_case(uint64_t *rng, rf_shape xs) {
  ss_case c = {.n = (int)rand_in(rng, 0, xs.rank)};
  for (int i = 0; i < c.n; i++) {
    int64_t d = xs.dims[i];
    c.begin[i] = rand_in(rng, -d - 2, d + 2);
    c.end[i] = rand_in(rng, -d - 2, d + 2);
    c.strides[i] = rand_in(rng, 1, 3) * (rf_test_rand(rng) & 1 ? -1 : 1);
    if (rf_test_rand(rng) % 6 == 0) c.strides[i] = (d + 2) * c.strides[i];
    if (rf_test_rand(rng) % 4 == 0) c.begin_mask |= 1 << i;
    if (rf_test_rand(rng) % 4 == 0) c.end_mask |= 1 << i;
    if (d > 0 && rf_test_rand(rng) % 5 == 0) { /* a valid shrink */
      c.shrink |= 1 << i;
      c.strides[i] = 1;
      c.begin[i] = rand_in(rng, -d, d - 1);
    }
  }
  return c;
}

static void test_random(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(41);
  for (int k = 0; k < 300; k++) {
    rf_shape xs = rf_shape_scalar();
    xs.rank = (int)rand_in(&rng, 0, 4);
    for (int i = 0; i < xs.rank; i++) {
      int64_t r = rand_in(&rng, 0, 9);
      xs.dims[i] = r == 0 ? 0 : r < 3 ? 1 : r;
    }
    rf_dtype dt = all_dtypes[k % 9];
    rf_tensor *x = rf_test_random_tensor(&rng, dt, xs, -50, 50);
    ss_case c = random_case(&rng, xs);
    char what[64];
    snprintf(what, sizeof what, "case %d (%s)", k, rf_dtype_name(dt));
    check_forward(x, &c, k % 2 == 0, what);
    rf_tensor_release(x);
  }
}

static void test_edge_cases(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(42);
  rf_tensor *x =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(3, 4, 1, 5), -9, 9);
  const ss_case cases[] = {
      /* empty: begin past end with a positive stride */
      {1, {3}, {1}, {1}, 0, 0, 0},
      /* stride larger than the dim: one element */
      {3, {0, 0, 1}, {4, 1, 5}, {7, 1, 9}, 0, 0, 0},
      /* the whole tensor reversed in every dim */
      {3, {0, 0, 0}, {0, 0, 0}, {-1, -1, -1}, 7, 7, 0},
      /* every dim shrunk: a scalar, indices from the end */
      {3, {-1, 0, -5}, {0, 0, 0}, {1, 1, 1}, 0, 0, 7},
      /* the size-1 dim kept, masked end, negative begin */
      {2, {-3, -1}, {0, 0}, {2, 1}, 0, 3, 0},
      /* no arguments: a copy */
      {0, {0}, {0}, {0}, 0, 0, 0},
      /* negative stride with end -1 past the front (clamped: empty) */
      {1, {2}, {-10}, {-1}, 0, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int known = 0; known < 2; known++) {
      char what[32];
      snprintf(what, sizeof what, "edge case %zu", i);
      check_forward(x, &cases[i], known, what);
    }
  /* The scalar case's shape is rank 0; the empty one's (0, 1, 5). */
  rf_graph *g = rf_graph_new();
  rf_output p = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(3, 4, 1, 5));
  rf_shape s0 = rf_output_shape(slice(g, p, &cases[3]));
  rf_shape s1 = rf_output_shape(slice(g, p, &cases[0]));
  assert_int_equal(s0.rank, 0);
  rf_shape want = rf_shape_of(3, 0, 1, 5);
  assert_true(rf_shape_equal(&s1, &want));
  rf_graph_free(g);
  rf_tensor_release(x);
}

/* ---- gradients against finite differences ---- */

static double run_scalar(rf_session *s, rf_feed *f, rf_output y) {
  rf_tensor *v = NULL;
  assert_ok(rf_session_run(s, f, 1, &y, 1, NULL, 0, &v));
  double r = rf_tensor_get(v, 0);
  rf_tensor_release(v);
  return r;
}

/* y = sum(f(x) * r), f = x[c] or (second) d sum(x[c]^2 * r1) / dx. */
static void check_gradient(rf_shape xs, const ss_case *c, bool known,
                           bool second, uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  rf_output x =
      rf_placeholder(g, "x", RF_FLOAT64, known ? xs : rf_shape_unknown());
  rf_tensor *xv = rf_test_random_tensor(rng, RF_FLOAT64, xs, -1, 1);
  rf_shape ys;
  free(reference(xv, c, &ys));
  rf_output f = slice(g, x, c), dx;
  if (second) {
    rf_tensor *r1 = rf_test_random_tensor(rng, RF_FLOAT64, ys, -1, 1);
    rf_output in = rf_sum(
        g, NULL, rf_mul(g, NULL, rf_mul(g, NULL, f, f), rf_const(g, NULL, r1)),
        NULL, -1, false);
    rf_tensor_release(r1);
    assert_ok(rf_gradients(g, &in, 1, &x, 1, NULL, &dx));
    f = dx;
    ys = xs;
  }
  rf_tensor *r = rf_test_random_tensor(rng, RF_FLOAT64, ys, -1, 1);
  rf_output y = rf_sum(g, NULL, rf_mul(g, NULL, f, rf_const(g, NULL, r)), NULL,
                       -1, false);
  rf_tensor_release(r);
  assert_ok(rf_gradients(g, &y, 1, &x, 1, NULL, &dx));
  assert_graph_ok(g);
  rf_session *s = rf_test_cpu_session(g, 1);
  rf_feed feed = {x, xv};
  rf_tensor *got = NULL;
  assert_ok(rf_session_run(s, &feed, 1, &dx, 1, NULL, 0, &got));
  rf_shape gs = rf_tensor_shape(got);
  assert_true(rf_shape_equal(&gs, &xs));
  const double h = 1e-6;
  for (int64_t i = 0; i < rf_tensor_num_elements(xv); i++) {
    double yv[2];
    for (int side = 0; side < 2; side++) {
      rf_tensor *p = NULL;
      assert_ok(rf_tensor_new_copy(RF_FLOAT64, &xs, rf_tensor_data(xv), &p));
      ((double *)rf_tensor_mutable_data(p))[i] += side ? -h : h;
      feed.value = p;
      yv[side] = run_scalar(s, &feed, y);
      rf_tensor_release(p);
    }
    double want = (yv[0] - yv[1]) / (2 * h), have = rf_tensor_get(got, i);
    if (!(fabs(have - want) <= 1e-6 * fmax(1.0, fabs(want))))
      fail_msg("dx[%lld]%s%s: finite difference %.12g, gradient %.12g",
               (long long)i, known ? "" : " (unknown shape)",
               second ? " (second order)" : "", want, have);
  }
  rf_tensor_release(got);
  rf_tensor_release(xv);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_gradients(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(43);
  const rf_shape shapes[] = {rf_shape_of(3, 4, 1, 5), rf_shape_of(1, 7),
                             rf_shape_of(2, 3, 0)};
  const ss_case cases[] = {
      {3, {-1, 0, 1}, {0, 1, 5}, {-2, 1, 2}, 1, 0, 0}, /* reversed, strided */
      {2, {1, 0}, {3, 0}, {1, 1}, 0, 0, 2},            /* shrink the 1 dim */
      {1, {3}, {1}, {1}, 0, 0, 0},                     /* empty */
      {3, {0, 0, 4}, {0, 0, 0}, {9, 1, -9}, 0, 7, 0},  /* stride > dim */
  };
  for (int k = 0; k < 4; k++)
    for (int known = 0; known < 2; known++)
      for (int second = 0; second < 2; second++)
        check_gradient(shapes[0], &cases[k], known, second, &rng);
  const ss_case every_other = {1, {-1}, {0}, {-2}, 0, 1, 0};
  check_gradient(shapes[1], &every_other, true, false, &rng);
  check_gradient(shapes[1], &every_other, false, true, &rng);
  const ss_case on_empty = {2, {1, 0}, {0, 0}, {1, 1}, 2, 2, 1};
  check_gradient(shapes[2], &on_empty, true, false, &rng);
}

/* ---- errors ---- */

static void expect_build_error(const ss_case *c, rf_shape xs, const char *sub) {
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, xs);
  rf_output y = slice(g, x, c);
  assert_null(y.node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, sub);
  rf_graph_free(g);
}

static void test_errors(void **state) {
  (void)state;
  rf_shape xs = rf_shape_of(2, 3, 4);
  const ss_case zero = {2, {0, 0}, {3, 4}, {1, 0}, 0, 0, 0};
  expect_build_error(&zero, xs, "dimension 1: stride 0");
  const ss_case too_many = {3, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, 0, 0, 0};
  expect_build_error(&too_many, xs,
                     "begin, end and strides have 3 entries for an input of "
                     "rank 2");
  const ss_case out = {2, {0, -5}, {1, 0}, {1, 1}, 0, 0, 2};
  expect_build_error(&out, xs,
                     "dimension 1: index -5 is outside a dimension of size 4");
  const ss_case neg = {1, {0}, {1}, {-1}, 0, 0, 1};
  expect_build_error(&neg, xs, "its stride must be positive, got -1");
  const ss_case mask = {1, {0}, {1}, {1}, 2, 0, 0};
  expect_build_error(&mask, xs,
                     "begin_mask 2 has bits at or past the 1 sliced "
                     "dimensions");
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, xs);
  int64_t b[1] = {0};
  assert_null(rf_strided_slice(g, NULL, x, b, NULL, NULL, 1, 0, 0, 0).node);
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT,
                "begin and end must hold n entries each");
  rf_graph_free(g);

  /* Known only at run time: the kernel refuses with the same message,
   * naming the node. */
  g = rf_graph_new();
  x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_unknown());
  rf_output y = rf_strided_slice(g, "cut", x, out.begin, out.end, out.strides,
                                 2, 0, 0, 2);
  assert_graph_ok(g);
  uint64_t rng = rf_test_rng(44);
  rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT32, xs, -1, 1);
  rf_feed f = {x, xv};
  rf_tensor *got = NULL;
  rf_status *st = rf_test_try_run(g, &f, 1, &y, 1, &got);
  assert_null(got);
  assert_status(st, RF_INVALID_ARGUMENT, "cut");
  st = rf_test_try_run(g, &f, 1, &y, 1, &got);
  assert_status(st, RF_INVALID_ARGUMENT,
                "dimension 1: index -5 is outside a dimension of size 4");
  rf_tensor_release(xv);
  rf_graph_free(g);
}

static void test_allocation_faults(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(45);
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_INT32, rf_shape_of(2, 6, 5));
  const ss_case c = {2, {-1, 1}, {0, 5}, {-2, 3}, 1, 0, 0};
  rf_output y = slice(g, x, &c);
  assert_graph_ok(g);
  rf_tensor *xv =
      rf_test_random_tensor(&rng, RF_INT32, rf_shape_of(2, 6, 5), -9, 9);
  rf_test_kernel_under_faults(y.node, &xv);
  rf_tensor_release(xv);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random),
      cmocka_unit_test(test_edge_cases),
      cmocka_unit_test(test_gradients),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_allocation_faults),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
