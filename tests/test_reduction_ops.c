/* tests/test_reduction_ops.c - Sum, Mean, ArgMax and the gradient ops
 * _SumGrad / _MeanGrad, run through sessions against float64 / int64
 * references computed here: every dtype, every axes subset of rank-3 tensors,
 * ranks 0..4, keep_dims both ways, empty and one-element tensors, shapes known
 * only at run time, integer wrap-around, accuracy of long sums, and every
 * error at build and at run time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static const rf_dtype numeric[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                   RF_FLOAT64, RF_INT8,     RF_UINT8,
                                   RF_INT32,   RF_INT64};
#define NUM_NUMERIC (int)(sizeof numeric / sizeof numeric[0])

static int64_t irand(uint64_t *rng, int64_t lo, int64_t hi) {
  return lo + (int64_t)(rf_test_rand(rng) % (uint64_t)(hi - lo + 1));
}

/* The low bits of v as dtype dt stores them (two's complement). */
static double wrap_int(rf_dtype dt, int64_t v) {
  uint64_t u = (uint64_t)v;
  switch (dt) {
    case RF_INT8: return (double)((int64_t)(u & 0xff) - (u & 0x80 ? 256 : 0));
    case RF_UINT8: return (double)(u & 0xff);
    case RF_INT32:
      return (double)((int64_t)(u & 0xffffffffu) -
                      (u & 0x80000000u ? 4294967296LL : 0));
    default: return (double)v;
  }
}

/* The row-major index, among the kept axes (not in mask), of element i of a
 * tensor of dims: where element i lands in a reduction over mask. */
static int64_t kept_index(int64_t i, const int64_t *dims, int rank,
                          uint32_t mask) {
  int64_t idx[RF_MAX_RANK], o = 0;
  for (int k = rank - 1; k >= 0; k--) {
    idx[k] = i % dims[k];
    i /= dims[k];
  }
  for (int k = 0; k < rank; k++)
    if (!(mask >> k & 1)) o = o * dims[k] + idx[k];
  return o;
}

/* Reference Sum / Mean of x (row-major over dims) over the axes in mask:
 * float64 for floats, exact int64 then wrapped for integers, integer means
 * truncated. Returns a malloc'ed array of *n elements. */
static double *ref_reduce(const double *x, const int64_t *dims, int rank,
                          uint32_t mask, bool mean, rf_dtype dt, int64_t *n) {
  int64_t total = 1, count = 1, nout = 1;
  for (int k = 0; k < rank; k++) {
    total *= dims[k];
    if (mask >> k & 1)
      count *= dims[k];
    else
      nout *= dims[k];
  }
  /* long double, so the reference is more exact than what it checks. */
  long double *fs = calloc((size_t)nout + 1, sizeof(long double));
  int64_t *is = calloc((size_t)nout + 1, sizeof(int64_t));
  for (int64_t i = 0; i < total; i++) {
    int64_t o = kept_index(i, dims, rank, mask);
    fs[o] += x[i];
    is[o] += (int64_t)x[i];
  }
  double *out = calloc((size_t)nout + 1, sizeof(double));
  for (int64_t o = 0; o < nout; o++) {
    if (rf_dtype_is_float(dt))
      out[o] = mean ? (double)(fs[o] / (long double)count) : (double)fs[o];
    else
      out[o] = wrap_int(dt, mean ? is[o] / count : is[o]);
  }
  free(fs);
  free(is);
  *n = nout;
  return out;
}

/* The shape reducing dims over mask gives. */
static rf_shape reduced_shape(const int64_t *dims, int rank, uint32_t mask,
                              bool keep) {
  int64_t out[RF_MAX_RANK];
  int n = 0;
  for (int k = 0; k < rank; k++) {
    if (!(mask >> k & 1))
      out[n++] = dims[k];
    else if (keep)
      out[n++] = 1;
  }
  return rf_shape_make(n, out);
}

/* An internal reduction-gradient node (_SumGrad / _MeanGrad) built by hand
 * the way the gradient functions build it. */
static rf_output reduce_grad_node(rf_graph *g, const char *op, rf_output dy,
                                  rf_output x, const int64_t *axes, int naxes,
                                  bool all_axes, bool keep_dims) {
  static const int64_t none = 0;
  rf_node_builder *b = rf_node_builder_new(g, op, NULL);
  rf_node_builder_input(b, dy);
  rf_node_builder_input(b, x);
  rf_node_builder_attr_dtype(b, "T", rf_output_dtype(x));
  rf_node_builder_attr_int_list(b, "axes", naxes ? axes : &none, naxes);
  rf_node_builder_attr_bool(b, "all_axes", all_axes);
  rf_node_builder_attr_bool(b, "keep_dims", keep_dims);
  rf_node *n = NULL;
  assert_ok(rf_node_builder_finish(b, &n));
  rf_output o = {n, 0};
  return o;
}

/* Axes of mask in random order, each written as k or k - rank at random. */
static int axes_of(uint64_t *rng, uint32_t mask, int rank, int64_t *axes) {
  int n = 0;
  for (int k = 0; k < rank; k++)
    if (mask >> k & 1) axes[n++] = rf_test_rand(rng) & 1 ? k : k - rank;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rf_test_rand(rng) % (uint64_t)(i + 1));
    int64_t t = axes[i];
    axes[i] = axes[j];
    axes[j] = t;
  }
  return n;
}

/* Expected dx of _SumGrad / _MeanGrad: dy broadcast back (/ count). */
static double *ref_reduce_grad(const double *dy, const int64_t *dims, int rank,
                               uint32_t mask, bool mean, rf_dtype dt) {
  int64_t total = 1, count = 1;
  for (int k = 0; k < rank; k++) {
    total *= dims[k];
    if (mask >> k & 1) count *= dims[k];
  }
  double *dx = calloc((size_t)total + 1, sizeof(double));
  for (int64_t i = 0; i < total; i++) {
    double v = dy[kept_index(i, dims, rank, mask)];
    if (mean)
      v = rf_dtype_is_float(dt) ? v / (double)count : trunc(v / (double)count);
    dx[i] = v;
  }
  return dx;
}

/* Every subset of the axes of a rank-3 tensor, Sum and Mean, keep_dims both
 * ways, with the gradient ops of each, in one session per (dtype, shape). */
static void check_rank3(uint64_t *rng, rf_dtype dt, const int64_t *dims) {
  enum { N = 8 * 2 * 2 };
  rf_shape xs = rf_shape_make(3, dims);
  rf_tensor *x =
      rf_test_random_tensor(rng, dt, xs, dt == RF_UINT8 ? 0 : -100, 100);
  if (rf_dtype_is_float(dt)) { /* keep float sums in a comfortable range */
    for (int64_t i = 0; i < rf_tensor_num_elements(x); i++)
      rf_tensor_set(x, i, rf_tensor_get(x, i) / 100.0);
  }
  double *xd = rf_test_to_doubles(x);
  rf_graph *g = rf_graph_new();
  rf_output xp = rf_placeholder(g, "x", dt, xs);
  rf_output fetch[2 * N];
  rf_feed feeds[1 + N];
  rf_tensor *dys[N];
  uint32_t masks[N];
  int nf = 0;
  feeds[nf++] = (rf_feed){xp, x};
  /* An integer mean over nothing is an error (tested on its own below). */
  bool int_empty = !rf_dtype_is_float(dt) && rf_tensor_num_elements(x) == 0;
  for (int i = 0; i < N; i++) {
    uint32_t mask = (uint32_t)(i % 8);
    bool keep = (i / 8) % 2, mean = i / 16 && !int_empty;
    int64_t axes[3];
    int na = axes_of(rng, mask, 3, axes);
    masks[i] = mask;
    fetch[i] = mean ? rf_mean(g, NULL, xp, axes, na, keep)
                    : rf_sum(g, NULL, xp, axes, na, keep);
    rf_shape want = reduced_shape(dims, 3, mask, keep);
    rf_shape got = rf_output_shape(fetch[i]);
    assert_true(rf_shape_equal(&got, &want));
    dys[i] = rf_test_random_tensor(rng, dt, want, dt == RF_UINT8 ? 0 : -50, 50);
    rf_output dyp = rf_placeholder(g, NULL, dt, want);
    feeds[nf++] = (rf_feed){dyp, dys[i]};
    fetch[N + i] = reduce_grad_node(g, mean ? "_MeanGrad" : "_SumGrad", dyp, xp,
                                    axes, na, false, keep);
  }
  assert_graph_ok(g);
  rf_tensor *outs[2 * N];
  rf_test_run(g, 1, feeds, nf, fetch, 2 * N, outs);
  for (int i = 0; i < N; i++) {
    bool keep = (i / 8) % 2, mean = i / 16 && !int_empty;
    int64_t n;
    double *want = ref_reduce(xd, dims, 3, masks[i], mean, dt, &n);
    assert_tensor_near(outs[i], reduced_shape(dims, 3, masks[i], keep), want,
                       rf_test_tolerance(dt));
    free(want);
    double *dyd = rf_test_to_doubles(dys[i]);
    double *dx = ref_reduce_grad(dyd, dims, 3, masks[i], mean, dt);
    assert_tensor_near(outs[N + i], xs, dx, rf_test_tolerance(dt));
    free(dx);
    free(dyd);
    rf_tensor_release(outs[i]);
    rf_tensor_release(outs[N + i]);
    rf_tensor_release(dys[i]);
  }
  free(xd);
  rf_tensor_release(x);
  rf_graph_free(g);
}

static void test_rank3_every_axes_subset(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(1);
  for (int d = 0; d < NUM_NUMERIC; d++) {
    int64_t odd[3] = {irand(&rng, 1, 5), irand(&rng, 1, 5), irand(&rng, 2, 7)};
    int64_t with_one[3] = {3, 1, 5};
    int64_t empty[3] = {2, 0, 3};
    check_rank3(&rng, numeric[d], odd);
    check_rank3(&rng, numeric[d], with_one);
    check_rank3(&rng, numeric[d], empty);
  }
}

/* Ranks 0..4 with 0- and 1-element dims, random axes (or all of them),
 * through placeholders of unknown shape: the kernels see the rank only at
 * run time. */
static void test_ranks_0_to_4_shapes_at_run_time(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(2);
  for (int d = 0; d < NUM_NUMERIC; d++) {
    rf_dtype dt = numeric[d];
    for (int rank = 0; rank <= 4; rank++) {
      for (int trial = 0; trial < 3; trial++) {
        int64_t dims[4];
        for (int k = 0; k < rank; k++)
          dims[k] = trial == 0 ? irand(&rng, 0, 2) : irand(&rng, 1, 4);
        rf_shape xs = rf_shape_make(rank, dims);
        rf_tensor *x = rf_test_random_tensor(&rng, dt, xs, 0, 50);
        double *xd = rf_test_to_doubles(x);
        uint32_t mask = (uint32_t)(rf_test_rand(&rng) & ((1u << rank) - 1));
        bool all = trial == 2, keep = rf_test_rand(&rng) & 1;
        if (all) mask = (1u << rank) - 1;
        int64_t axes[4];
        int na = all ? -1 : axes_of(&rng, mask, rank, axes);
        int64_t count = 1;
        for (int k = 0; k < rank; k++)
          if (mask >> k & 1) count *= dims[k];
        bool mean = (trial == 1) && (rf_dtype_is_float(dt) || count > 0);
        rf_graph *g = rf_graph_new();
        rf_output xp = rf_placeholder(g, "x", dt, rf_shape_unknown());
        rf_output y = mean ? rf_mean(g, "y", xp, axes, na, keep)
                           : rf_sum(g, "y", xp, axes, na, keep);
        rf_shape built = rf_output_shape(y);
        if (all && !keep)
          assert_int_equal(built.rank, 0);
        else
          assert_int_equal(built.rank, RF_UNKNOWN_RANK);
        rf_feed feed = {xp, x};
        rf_tensor *out;
        rf_test_run(g, 1, &feed, 1, &y, 1, &out);
        int64_t n;
        double *want = ref_reduce(xd, dims, rank, mask, mean, dt, &n);
        assert_tensor_near(out, reduced_shape(dims, rank, mask, keep), want,
                           rf_test_tolerance(dt));
        free(want);
        free(xd);
        rf_tensor_release(out);
        rf_tensor_release(x);
        rf_graph_free(g);
      }
    }
  }
}

/* Runs op(x) over `axes` on x given as values; one fetch. */
static rf_tensor *reduce_values(const char *op, rf_dtype dt, int rank,
                                const int64_t *dims, const double *values,
                                const int64_t *axes, int naxes) {
  rf_shape s = rf_shape_make(rank, dims);
  rf_tensor *x = NULL;
  assert_ok(rf_tensor_new(dt, &s, NULL, &x));
  for (int64_t i = 0; i < rf_tensor_num_elements(x); i++)
    rf_tensor_set(x, i, values[i]);
  rf_graph *g = rf_graph_new();
  rf_output c = rf_const(g, "x", x);
  rf_output y = strcmp(op, "Sum") == 0
                    ? rf_sum(g, NULL, c, axes, naxes, false)
                    : rf_mean(g, NULL, c, axes, naxes, false);
  rf_tensor *out;
  rf_test_run(g, 1, NULL, 0, &y, 1, &out);
  rf_graph_free(g);
  rf_tensor_release(x);
  return out;
}

/* Integer sums wrap as two's complement; means use the exact sum and
 * truncate toward zero. */
static void test_integer_wrap_and_truncation(void **state) {
  (void)state;
  int64_t two = 2, three = 3;
  rf_tensor *t =
      reduce_values("Sum", RF_INT8, 1, &two, (double[]){100, 100}, NULL, -1);
  assert_int_equal(((const int8_t *)rf_tensor_data(t))[0], -56);
  rf_tensor_release(t);
  t = reduce_values("Sum", RF_UINT8, 1, &two, (double[]){200, 100}, NULL, -1);
  assert_int_equal(((const uint8_t *)rf_tensor_data(t))[0], 44);
  rf_tensor_release(t);
  t = reduce_values("Sum", RF_INT32, 1, &two, (double[]){2147483647.0, 2.0},
                    NULL, -1);
  assert_int_equal(((const int32_t *)rf_tensor_data(t))[0], -2147483647);
  rf_tensor_release(t);
  /* int64: INT64_MAX + 1 wraps to INT64_MIN, built bit-exactly. */
  int64_t big[2] = {INT64_MAX, 1};
  rf_shape s = rf_shape_of(1, (int64_t)2);
  rf_tensor *x;
  assert_ok(rf_tensor_new_copy(RF_INT64, &s, big, &x));
  rf_graph *g = rf_graph_new();
  rf_output y = rf_sum(g, NULL, rf_const(g, "x", x), NULL, -1, false);
  rf_test_run(g, 1, NULL, 0, &y, 1, &t);
  assert_true(((const int64_t *)rf_tensor_data(t))[0] == INT64_MIN);
  rf_tensor_release(t);
  rf_graph_free(g);
  rf_tensor_release(x);
  /* Means: (100+100+100)/3 in int8 without overflow; -7/2 -> -3. */
  t = reduce_values("Mean", RF_INT8, 1, &three, (double[]){100, 100, 100}, NULL,
                    -1);
  assert_int_equal(((const int8_t *)rf_tensor_data(t))[0], 100);
  rf_tensor_release(t);
  t = reduce_values("Mean", RF_INT32, 1, &two, (double[]){-3, -4}, NULL, -1);
  assert_int_equal(((const int32_t *)rf_tensor_data(t))[0], -3);
  rf_tensor_release(t);
  t = reduce_values("Mean", RF_UINT8, 1, &two, (double[]){255, 254}, NULL, -1);
  assert_int_equal(((const uint8_t *)rf_tensor_data(t))[0], 254);
  rf_tensor_release(t);
}

/* Long sums stay accurate: float32 adds in double, and 16-bit floats do not
 * stall where their own precision would (2048 for float16, 256 for
 * bfloat16). */
static void test_long_sums_are_accurate(void **state) {
  (void)state;
  int64_t n = 1000003;
  double *v = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = (double)0.1f;
  rf_tensor *t = reduce_values("Sum", RF_FLOAT32, 1, &n, v, NULL, -1);
  double want = (double)0.1f * (double)n;
  assert_true(fabs(rf_tensor_get(t, 0) - want) <= 1e-7 * want);
  rf_tensor_release(t);
  t = reduce_values("Mean", RF_FLOAT32, 1, &n, v, NULL, -1);
  assert_true(rf_tensor_get(t, 0) == (double)0.1f);
  rf_tensor_release(t);
  for (int64_t i = 0; i < 4096; i++) v[i] = 1;
  int64_t n16 = 4096, nb = 1024;
  t = reduce_values("Sum", RF_FLOAT16, 1, &n16, v, NULL, -1);
  assert_true(rf_tensor_get(t, 0) == 4096.0);
  rf_tensor_release(t);
  t = reduce_values("Sum", RF_BFLOAT16, 1, &nb, v, NULL, -1);
  assert_true(rf_tensor_get(t, 0) == 1024.0);
  rf_tensor_release(t);
  free(v);
}

/* Runs fetches ys of g once with num_threads pool threads. */
static void run_threads(rf_graph *g, int num_threads, const rf_feed *feed,
                        const rf_output *ys, int n, rf_tensor **outs) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_threads = num_threads;
  rf_session *s;
  assert_graph_ok(g);
  assert_ok(rf_session_new(g, &o, &s));
  assert_ok(rf_session_run(s, feed, 1, ys, n, NULL, 0, outs));
  rf_session_free(s);
}

/* Each sum in got within tol of want relative to the result, plus a
 * rounding allowance relative to the magnitudes of its terms (absum: a long
 * sum of +-1000 values that nearly cancels, -32.6 from 40,000 terms,
 * carries rounding of the terms' size, so a tolerance relative to the
 * result alone failed for some seeds). acc: the accumulator's precision
 * (float32 for the 16-bit types). */
static void assert_sums_near(const rf_tensor *got, rf_dtype dt,
                             const double *want, const double *absum) {
  double tol = rf_test_tolerance(dt), acc = dt == RF_FLOAT64        ? 1e-15
                                            : rf_dtype_is_float(dt) ? 1e-6
                                                                    : 0;
  for (int64_t i = 0; i < rf_tensor_num_elements(got); i++) {
    double g = rf_tensor_get(got, i);
    if (fabs(g - want[i]) > tol * (1.0 + fabs(want[i])) + acc * absum[i])
      fail_msg("sum %lld: got %.17g, want %.17g (terms' magnitudes %.17g)",
               (long long)i, g, want[i], absum[i]);
  }
}

/* Shapes that take the parallel paths: few long rows (split into chunks),
 * few column blocks over many rows (split too), wide column blocks, several
 * separate reduced groups. The bits do not depend on the thread count. */
static void test_large_shapes(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(5);
  static const int64_t shapes[][3] = {
      {3, 150001, 1}, {2, 300, 517}, {2, 20000, 7}, {5, 33, 1030}};
  rf_dtype dts[] = {RF_FLOAT32, RF_INT32, RF_FLOAT64, RF_BFLOAT16};
  for (int si = 0; si < 4; si++) {
    rf_dtype dt = dts[si];
    rf_shape xs = rf_shape_make(3, shapes[si]);
    rf_tensor *x = rf_test_random_tensor(&rng, dt, xs, -1000, 1000);
    double *xd = rf_test_to_doubles(x),
           *xa = malloc(sizeof(double) * (size_t)rf_tensor_num_elements(x));
    assert_non_null(xa);
    for (int64_t i = 0; i < rf_tensor_num_elements(x); i++) xa[i] = fabs(xd[i]);
    rf_graph *g = rf_graph_new();
    rf_output xp = rf_placeholder(g, "x", dt, xs);
    rf_output ys[7];
    for (uint32_t m = 1; m < 8; m++) {
      int64_t axes[3];
      int na = axes_of(&rng, m, 3, axes);
      ys[m - 1] = rf_sum(g, NULL, xp, axes, na, false);
    }
    rf_feed feed = {xp, x};
    rf_tensor *outs[7], *serial[7];
    run_threads(g, 3, &feed, ys, 7, outs);
    run_threads(g, 1, &feed, ys, 7, serial);
    for (uint32_t m = 1; m < 8; m++) {
      int64_t n;
      double *want = ref_reduce(xd, shapes[si], 3, m, false, dt, &n);
      double *absum = ref_reduce(xa, shapes[si], 3, m, false, RF_FLOAT64, &n);
      rf_shape rs = reduced_shape(shapes[si], 3, m, false),
               got_shape = rf_tensor_shape(outs[m - 1]);
      assert_true(rf_shape_equal(&got_shape, &rs));
      /* bfloat16 keeps 8 bits: its sums of many +-1000 values are compared
       * at its own precision. */
      assert_sums_near(outs[m - 1], dt, want, absum);
      free(absum);
      assert_int_equal(rf_tensor_nbytes(outs[m - 1]),
                       rf_tensor_nbytes(serial[m - 1]));
      assert_memory_equal(rf_tensor_data(outs[m - 1]),
                          rf_tensor_data(serial[m - 1]),
                          rf_tensor_nbytes(outs[m - 1]));
      free(want);
      rf_tensor_release(outs[m - 1]);
      rf_tensor_release(serial[m - 1]);
    }
    free(xd);
    free(xa);
    rf_tensor_release(x);
    rf_graph_free(g);
  }
}

/* numpy's argmax: first index of the largest value, a NaN counting as the
 * largest (the first NaN wins). */
static int64_t ref_argmax(const double *x, int64_t n, int64_t stride) {
  int64_t best = 0;
  for (int64_t r = 0; r < n; r++) {
    double v = x[r * stride];
    if (isnan(v)) return r;
    if (v > x[best * stride]) best = r;
  }
  return best;
}

static void test_argmax_every_dtype_and_axis(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(6);
  for (int d = 0; d < NUM_NUMERIC; d++) {
    rf_dtype dt = numeric[d];
    for (int trial = 0; trial < 6; trial++) {
      int rank = 1 + trial % 4;
      int64_t dims[4];
      for (int k = 0; k < rank; k++) dims[k] = irand(&rng, 1, 5);
      if (trial == 5) { /* wide rows: the column-block path */
        rank = 3;
        dims[0] = 2, dims[1] = 5, dims[2] = 300;
      }
      rf_shape xs = rf_shape_make(rank, dims);
      /* Few distinct values, so ties are common. */
      rf_tensor *x = rf_test_random_tensor(&rng, dt, xs, 0, 4);
      if (rf_dtype_is_float(dt) && trial % 2)
        for (int64_t i = 0; i < rf_tensor_num_elements(x); i++)
          if (rf_test_rand(&rng) % 6 == 0) rf_tensor_set(x, i, NAN);
      double *xd = rf_test_to_doubles(x);
      rf_graph *g = rf_graph_new();
      rf_output xp = rf_placeholder(g, "x", dt, xs);
      rf_output ys[8];
      for (int k = -rank; k < rank; k++) {
        ys[k + rank] = rf_argmax(g, NULL, xp, k);
        assert_int_equal(rf_output_dtype(ys[k + rank]), RF_INT64);
      }
      rf_feed feed = {xp, x};
      rf_tensor *outs[8];
      rf_test_run(g, 1, &feed, 1, ys, 2 * rank, outs);
      for (int k = -rank; k < rank; k++) {
        int ax = k < 0 ? k + rank : k;
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < ax; i++) outer *= dims[i];
        for (int i = ax + 1; i < rank; i++) inner *= dims[i];
        double *want = malloc(sizeof(double) * (size_t)(outer * inner));
        for (int64_t o = 0; o < outer; o++)
          for (int64_t j = 0; j < inner; j++)
            want[o * inner + j] = (double)ref_argmax(
                xd + o * dims[ax] * inner + j, dims[ax], inner);
        rf_tensor *out = outs[k + rank];
        assert_int_equal(rf_tensor_dtype(out), RF_INT64);
        assert_tensor_near(out, reduced_shape(dims, rank, 1u << ax, false),
                           want, 0);
        rf_shape built = rf_output_shape(ys[k + rank]);
        rf_shape got = rf_tensor_shape(out);
        assert_true(rf_shape_equal(&built, &got));
        free(want);
        rf_tensor_release(out);
      }
      free(xd);
      rf_tensor_release(x);
      rf_graph_free(g);
    }
  }
}

/* Sums over nothing are 0, float means over nothing NaN; empty outputs. */
static void test_empty_reductions(void **state) {
  (void)state;
  int64_t dims[2] = {3, 0}, axis1 = 1, axis0 = 0;
  rf_graph *g = rf_graph_new();
  rf_shape s = rf_shape_make(2, dims);
  rf_tensor *xf, *xi;
  assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, &xf));
  assert_ok(rf_tensor_new(RF_INT32, &s, NULL, &xi));
  rf_output cf = rf_const(g, "xf", xf), ci = rf_const(g, "xi", xi);
  rf_output ys[5] = {rf_sum(g, NULL, cf, &axis1, 1, false),
                     rf_mean(g, NULL, cf, &axis1, 1, true),
                     rf_sum(g, NULL, ci, &axis1, 1, false),
                     rf_mean(g, NULL, ci, &axis0, 1, false),
                     rf_argmax(g, NULL, cf, 0)};
  rf_tensor *outs[5];
  rf_test_run(g, 1, NULL, 0, ys, 5, outs);
  double zeros[3] = {0, 0, 0}, nans[3] = {NAN, NAN, NAN};
  assert_tensor_near(outs[0], rf_shape_of(1, (int64_t)3), zeros, 0);
  assert_tensor_near(outs[1], rf_shape_of(2, (int64_t)3, (int64_t)1), nans, 0);
  assert_tensor_near(outs[2], rf_shape_of(1, (int64_t)3), zeros, 0);
  assert_tensor_near(outs[3], rf_shape_of(1, (int64_t)0), zeros, 0);
  assert_tensor_near(outs[4], rf_shape_of(1, (int64_t)0), zeros, 0);
  for (int i = 0; i < 5; i++) rf_tensor_release(outs[i]);
  rf_graph_free(g);
  rf_tensor_release(xf);
  rf_tensor_release(xi);
}

/* Builds one op on a placeholder of shape xs (which: 0 Sum, 1 Mean, 2 ArgMax
 * with axis naxes); returns the graph's status. */
static rf_status *build_error(rf_shape xs, rf_dtype dt, int which,
                              const int64_t *axes, int naxes) {
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", dt, xs);
  rf_output y = which == 0   ? rf_sum(g, "y", x, axes, naxes, false)
                : which == 1 ? rf_mean(g, "y", x, axes, naxes, true)
                             : rf_argmax(g, "y", x, naxes);
  assert_null(y.node);
  rf_status *st = rf_graph_status(g);
  rf_graph_free(g);
  return st;
}

static void test_build_time_errors(void **state) {
  (void)state;
  rf_shape m = rf_shape_of(2, (int64_t)3, (int64_t)4);
  int64_t ax2 = 2, axm3 = -3, dup[2] = {1, -1};
  assert_status(build_error(m, RF_FLOAT32, 0, &ax2, 1), RF_INVALID_ARGUMENT,
                "axis 2 is out of range");
  assert_status(build_error(m, RF_INT32, 1, &axm3, 1), RF_INVALID_ARGUMENT,
                "axis -3 is out of range");
  assert_status(build_error(m, RF_FLOAT64, 0, dup, 2), RF_INVALID_ARGUMENT,
                "given twice");
  assert_status(build_error(rf_shape_scalar(), RF_FLOAT32, 0, &ax2, 1),
                RF_INVALID_ARGUMENT, "out of range");
  assert_status(build_error(m, RF_FLOAT32, 0, NULL, 1), RF_INVALID_ARGUMENT,
                "axes is NULL");
  assert_status(build_error(m, RF_BOOL, 0, NULL, -1), RF_INVALID_ARGUMENT,
                "bool");
  assert_status(build_error(m, RF_FLOAT32, 2, NULL, 2), RF_INVALID_ARGUMENT,
                "axis 2 is out of range");
  assert_status(build_error(m, RF_FLOAT32, 2, NULL, -3), RF_INVALID_ARGUMENT,
                "axis -3 is out of range");
  assert_status(build_error(rf_shape_scalar(), RF_INT8, 2, NULL, 0),
                RF_INVALID_ARGUMENT, "rank >= 1");
  assert_status(
      build_error(rf_shape_of(2, (int64_t)3, (int64_t)0), RF_INT8, 2, NULL, 1),
      RF_INVALID_ARGUMENT, "length 0");
  /* dy of the wrong shape for _SumGrad. */
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, m);
  rf_output dy =
      rf_placeholder(g, "dy", RF_FLOAT32, rf_shape_of(1, (int64_t)4));
  rf_node_builder *b = rf_node_builder_new(g, "_SumGrad", "dx");
  rf_node_builder_input(b, dy);
  rf_node_builder_input(b, x);
  rf_node_builder_attr_dtype(b, "T", RF_FLOAT32);
  rf_node_builder_attr_int_list(b, "axes", &ax2, 0);
  rf_node *n = NULL;
  assert_status(rf_node_builder_finish(b, &n), RF_INVALID_ARGUMENT,
                "dy has shape (4)");
  assert_null(n);
  rf_graph_free(g);
}

/* Feeds a placeholder of unknown shape with x and runs the op (which as in
 * build_error); returns the run's status. */
static rf_status *run_error(rf_tensor *x, int which, const int64_t *axes,
                            int naxes) {
  rf_graph *g = rf_graph_new();
  rf_output xp = rf_placeholder(g, "x", rf_tensor_dtype(x), rf_shape_unknown());
  rf_output y = which == 0   ? rf_sum(g, "red", xp, axes, naxes, false)
                : which == 1 ? rf_mean(g, "red", xp, axes, naxes, false)
                             : rf_argmax(g, "red", xp, naxes);
  assert_graph_ok(g);
  rf_feed feed = {xp, x};
  rf_tensor *out = NULL;
  rf_status *st = rf_test_try_run(g, &feed, 1, &y, 1, &out);
  assert_null(out);
  rf_graph_free(g);
  return st;
}

static void test_run_time_errors(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(9);
  rf_tensor *m = rf_test_random_tensor(
      &rng, RF_FLOAT32, rf_shape_of(2, (int64_t)3, (int64_t)4), 0, 1);
  rf_tensor *e = rf_test_random_tensor(
      &rng, RF_INT32, rf_shape_of(2, (int64_t)3, (int64_t)0), 0, 1);
  rf_tensor *sc =
      rf_test_random_tensor(&rng, RF_INT64, rf_shape_scalar(), 0, 1);
  int64_t ax2 = 2, dup[2] = {0, -2}, ax1 = 1;
  rf_status *st = run_error(m, 0, &ax2, 1);
  assert_true(strstr(rf_status_message(st), "red") != NULL);
  assert_status(st, RF_INVALID_ARGUMENT, "axis 2 is out of range");
  assert_status(run_error(m, 1, dup, 2), RF_INVALID_ARGUMENT, "given twice");
  assert_status(run_error(e, 1, &ax1, 1), RF_INVALID_ARGUMENT,
                "mean of an empty set");
  assert_status(run_error(e, 2, NULL, 1), RF_INVALID_ARGUMENT, "length 0");
  assert_status(run_error(m, 2, NULL, -3), RF_INVALID_ARGUMENT,
                "axis -3 is out of range");
  assert_status(run_error(sc, 2, NULL, 0), RF_INVALID_ARGUMENT, "rank >= 1");
  rf_tensor_release(m);
  rf_tensor_release(e);
  rf_tensor_release(sc);
}

/* Kernels whose scratch buffers can fail: several passes, split rows, split
 * columns, the scaled dy of _MeanGrad. */
static void test_allocation_failures(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(10);
  rf_shape s4 = rf_shape_of(4, 2, 3, 4, 5), rows = rf_shape_of(2, 3, 140000),
           cols = rf_shape_of(3, 2, 50000, 3);
  rf_tensor *x4 = rf_test_random_tensor(&rng, RF_FLOAT32, s4, -1, 1);
  rf_tensor *xr = rf_test_random_tensor(&rng, RF_INT32, rows, -9, 9);
  rf_tensor *xc = rf_test_random_tensor(&rng, RF_FLOAT64, cols, -1, 1);
  rf_graph *g = rf_graph_new();
  rf_output p4 = rf_placeholder(g, "x4", RF_FLOAT32, s4);
  rf_output pr = rf_placeholder(g, "xr", RF_INT32, rows);
  rf_output pc = rf_placeholder(g, "xc", RF_FLOAT64, cols);
  int64_t a02[2] = {0, 2}, a1 = 1;
  rf_output m4 = rf_mean(g, NULL, p4, a02, 2, false);
  rf_output dy = rf_placeholder(g, "dy", RF_FLOAT32, rf_output_shape(m4));
  rf_output ys[4] = {
      m4, rf_sum(g, NULL, pr, &a1, 1, false), rf_sum(g, NULL, pc, &a1, 1, true),
      reduce_grad_node(g, "_MeanGrad", dy, p4, a02, 2, false, false)};
  assert_graph_ok(g);
  rf_shape dys = rf_output_shape(m4);
  rf_tensor *dyv = rf_test_random_tensor(&rng, RF_FLOAT32, dys, -1, 1);
  rf_tensor *in[4][2] = {{x4}, {xr}, {xc}, {dyv, x4}};
  for (int i = 0; i < 4; i++) rf_test_kernel_under_faults(ys[i].node, in[i]);
  rf_tensor_release(x4);
  rf_tensor_release(xr);
  rf_tensor_release(xc);
  rf_tensor_release(dyv);
  rf_graph_free(g);
}

/* Gradients of Sum and Mean through rf_gradients (weighted by a fed gy),
 * second-order gradients of _SumGrad / _MeanGrad with respect to their dy,
 * and ArgMax stopping gradients without an error. */
static void test_gradients_through_rf_gradients(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(11);
  int64_t dims[3] = {2, 3, 4}, ax[2] = {-1, 0};
  rf_shape xs = rf_shape_make(3, dims);
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, xs);
  rf_output u = rf_placeholder(g, "u", RF_FLOAT64, rf_shape_unknown());
  rf_output ys[4] = {
      rf_sum(g, NULL, x, ax, 2, false), rf_mean(g, NULL, x, ax, 2, true),
      rf_mean(g, NULL, u, NULL, -1, false), rf_argmax(g, NULL, x, 1)};
  rf_shape gs[3] = {reduced_shape(dims, 3, 5, false),
                    reduced_shape(dims, 3, 5, true), rf_shape_scalar()};
  rf_output gys[3], dx[4], ddy[2];
  for (int i = 0; i < 3; i++) {
    gys[i] = rf_placeholder(g, NULL, RF_FLOAT64, gs[i]);
    assert_ok(rf_gradients(g, &ys[i], 1, i == 2 ? &u : &x, 1, &gys[i], &dx[i]));
  }
  assert_ok(rf_gradients(g, &ys[3], 1, &x, 1, NULL, &dx[3]));
  assert_null(dx[3].node);
  /* d(sum(dx * w))/d(gy) = reduce(w): _SumGrad's own gradient. */
  rf_output w = rf_placeholder(g, "w", RF_FLOAT64, xs);
  for (int i = 0; i < 2; i++)
    assert_ok(rf_gradients(g, &dx[i], 1, &gys[i], 1, &w, &ddy[i]));
  rf_tensor *xv = rf_test_random_tensor(&rng, RF_FLOAT64, xs, -1, 1);
  rf_tensor *wv = rf_test_random_tensor(&rng, RF_FLOAT64, xs, -1, 1);
  rf_tensor *gv[3];
  rf_feed feeds[6] = {{x, xv}, {u, xv}, {w, wv}};
  for (int i = 0; i < 3; i++) {
    gv[i] = rf_test_random_tensor(&rng, RF_FLOAT64, gs[i], -1, 1);
    feeds[3 + i] = (rf_feed){gys[i], gv[i]};
  }
  rf_output fetch[5] = {dx[0], dx[1], dx[2], ddy[0], ddy[1]};
  rf_tensor *o[5];
  rf_test_run(g, 1, feeds, 6, fetch, 5, o);
  for (int i = 0; i < 3; i++) {
    double *gd = rf_test_to_doubles(gv[i]);
    double *want =
        ref_reduce_grad(gd, dims, 3, i == 2 ? 7 : 5, i > 0, RF_FLOAT64);
    assert_tensor_near(o[i], xs, want, 1e-12);
    free(want);
    free(gd);
  }
  double *wd = rf_test_to_doubles(wv);
  for (int i = 0; i < 2; i++) {
    int64_t n;
    double *want = ref_reduce(wd, dims, 3, 5, i == 1, RF_FLOAT64, &n);
    assert_tensor_near(o[3 + i], gs[i], want, 1e-12);
    free(want);
  }
  free(wd);
  for (int i = 0; i < 5; i++) rf_tensor_release(o[i]);
  for (int i = 0; i < 3; i++) rf_tensor_release(gv[i]);
  rf_tensor_release(xv);
  rf_tensor_release(wv);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rank3_every_axes_subset),
      cmocka_unit_test(test_ranks_0_to_4_shapes_at_run_time),
      cmocka_unit_test(test_integer_wrap_and_truncation),
      cmocka_unit_test(test_long_sums_are_accurate),
      cmocka_unit_test(test_large_shapes),
      cmocka_unit_test(test_argmax_every_dtype_and_axis),
      cmocka_unit_test(test_empty_reductions),
      cmocka_unit_test(test_build_time_errors),
      cmocka_unit_test(test_run_time_errors),
      cmocka_unit_test(test_allocation_failures),
      cmocka_unit_test(test_gradients_through_rf_gradients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
