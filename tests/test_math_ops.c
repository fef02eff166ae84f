/* tests/test_math_ops.c - Add, Sub, Mul, Div, Equal, Neg, AddN and the
 * internal _SumToShapeOf and _BroadcastToShapeOf through sessions: every dtype
 * each op accepts, fresh random data, shapes with 0, 1 and odd element counts
 * and every broadcast pattern, against references computed in the test
 * (math_ref.h); shape inference with unknown dims; and every error path.
 * Element-wise results of one rounding are compared exactly; sums use
 * rf_test_tolerance. */
#include <stdio.h>
#include <stdlib.h>

#include "math_ref.h"
#include "ops/math_ops.h"
#include "testutil.h"

#define SHAPE(...)                                           \
  rf_shape_make((int)(sizeof((int64_t[]){__VA_ARGS__}) / 8), \
                (int64_t[]){__VA_ARGS__})
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MAX_CASES 32

static const rf_output no_output = {NULL, 0};

/* Fails with context unless got == want (or both NaN). */
static void expect_exact(long double got, long double want, const char *what,
                         rf_dtype dt, int c, int64_t i) {
  if (got == want || (isnan(got) && isnan(want))) return;
  fail_msg("%s %s case %d element %lld: got %.21Lg, want %.21Lg", what,
           rf_dtype_name(dt), c, (long long)i, got, want);
}

/* Fails unless |got - want| <= tol * (1 + scale). */
static void expect_near(long double got, long double want, long double scale,
                        double tol, const char *what, rf_dtype dt, int c,
                        int64_t i) {
  if (got == want || fabsl(got - want) <= tol * (1 + scale)) return;
  fail_msg("%s %s case %d element %lld: got %.21Lg, want %.21Lg (tol %g)", what,
           rf_dtype_name(dt), c, (long long)i, got, want, tol);
}

static void expect_shape(const rf_tensor *t, rf_shape want) {
  rf_shape got = rf_tensor_shape(t);
  if (rf_shape_equal(&got, &want)) return;
  char a[128], b[128];
  rf_shape_format(&got, a, sizeof a);
  rf_shape_format(&want, b, sizeof b);
  fail_msg("shape %s, want %s", a, b);
}

/* ---- broadcasting binary arithmetic ---- */

typedef struct shape_pair {
  rf_shape a, b;
} shape_pair;

static int binary_cases(shape_pair *c) {
  int n = 0;
#define PAIR(A, B) c[n++] = (shape_pair){A, B}
  PAIR(SHAPE(0), SHAPE(0));
  PAIR(rf_shape_scalar(), rf_shape_scalar());
  PAIR(SHAPE(1), SHAPE(1));
  PAIR(SHAPE(7), SHAPE(7));
  PAIR(SHAPE(3, 5), SHAPE(3, 5));
  PAIR(SHAPE(1037), SHAPE(1037));
  PAIR(rf_shape_scalar(), SHAPE(4, 3));       /* scalar a */
  PAIR(SHAPE(4, 3), rf_shape_scalar());       /* scalar b */
  PAIR(SHAPE(4, 3), SHAPE(3));                /* row, rank mismatch */
  PAIR(SHAPE(4, 3), SHAPE(1, 3));             /* row */
  PAIR(SHAPE(4, 3), SHAPE(4, 1));             /* column */
  PAIR(SHAPE(4, 1), SHAPE(4, 3));             /* column on a */
  PAIR(SHAPE(2, 3, 4), SHAPE(3, 1));          /* rank mismatch, column */
  PAIR(SHAPE(4, 1), SHAPE(1, 5));             /* outer product */
  PAIR(SHAPE(2, 1, 3), SHAPE(1, 4, 1));       /* both broadcast twice */
  PAIR(SHAPE(3, 1, 5, 2), SHAPE(1, 4, 5, 1)); /* several loop dims */
  PAIR(SHAPE(1, 1), SHAPE(2, 5, 7));          /* one element vs many */
  PAIR(SHAPE(2, 0, 3), SHAPE(1, 3));          /* empty output */
  PAIR(SHAPE(0, 1), SHAPE(1, 6));             /* empty output */
  PAIR(SHAPE(33, 65), SHAPE(65));             /* many rows */
  /* Large enough for the thread pool to split the loop. */
  PAIR(SHAPE(30011), SHAPE(30011));
  PAIR(SHAPE(160, 201), SHAPE(201));
  PAIR(SHAPE(160, 1), SHAPE(1, 201));
#undef PAIR
  return n;
}

/* EQUAL last: the seeds of the tests are rf_test_seed() + the op. */
typedef enum binary { ADD, SUB, MUL, DIV, EQUAL } binary;
static const char *const binary_names[] = {"Add", "Sub", "Mul", "Div", "Equal"};

static rf_output build_binary(rf_graph *g, binary op, rf_output a,
                              rf_output b) {
  switch (op) {
    case ADD: return rf_add(g, NULL, a, b);
    case SUB: return rf_sub(g, NULL, a, b);
    case MUL: return rf_mul(g, NULL, a, b);
    case DIV: return rf_div(g, NULL, a, b);
    default: return rf_equal(g, NULL, a, b);
  }
}

/* The exact result rounded once to dt; integers wrap, divide truncating. */
static long double ref_binary(binary op, rf_dtype dt, long double x,
                              long double y) {
  if (op == EQUAL) return x == y;
  if (rf_dtype_is_integer(dt)) {
    __int128 a = (__int128)x, b = (__int128)y, r;
    switch (op) {
      case ADD: r = a + b; break;
      case SUB: r = a - b; break;
      case MUL: r = a * b; break;
      default: r = a / b; break; /* C truncates toward zero */
    }
    return (long double)ref_wrap(dt, r);
  }
  /* In double: exact or correctly rounded for these inputs, and rounding
   * that result again to dt gives the once-rounded value (doubles have more
   * than 2p+2 bits for p = 24, 11, 8). */
  double a = (double)x, b = (double)y, r;
  switch (op) {
    case ADD: r = a + b; break;
    case SUB: r = a - b; break;
    case MUL: r = a * b; break;
    default: r = a / b; break;
  }
  return ref_round(dt, r);
}

/* Divisors: small, never zero, so quotients are interesting. */
static rf_tensor *random_divisor(uint64_t *rng, rf_dtype dt, rf_shape s) {
  bool u = dt == RF_UINT8;
  rf_tensor *t = rf_test_random_tensor(rng, dt, s, u ? 1 : -20, 20);
  for (int64_t i = 0; i < rf_tensor_num_elements(t); i++)
    if (rf_tensor_get(t, i) == 0) rf_tensor_set(t, i, 7);
  return t;
}

/* Equal's operands: few distinct values, so some are equal. */
static rf_tensor *small_values(uint64_t *rng, rf_dtype dt, rf_shape s) {
  rf_tensor *t = rf_test_random_tensor(rng, dt, s, 0, 1);
  for (int64_t i = 0; i < rf_tensor_num_elements(t); i++)
    rf_tensor_set(t, i, floor(rf_test_uniform(rng, 0, dt == RF_BOOL ? 2 : 3)));
  return t;
}

/* Random operands of shapes c->a and c->b for op, with the edge cases each
 * op must get right in element 0: INT_MIN / -1 for Div, NaN for Equal. */
static void binary_operands(binary op, rf_dtype dt, const shape_pair *c,
                            uint64_t *rng, rf_tensor **ta, rf_tensor **tb) {
  if (op == EQUAL) {
    *ta = small_values(rng, dt, c->a);
    *tb = small_values(rng, dt, c->b);
  } else {
    double lo = rf_dtype_size(dt) == 2 ? -8 : -100, hi = -lo;
    *ta = ref_random(rng, dt, c->a, lo, hi);
    *tb = op == DIV && rf_dtype_is_integer(dt)
              ? random_divisor(rng, dt, c->b)
              : ref_random(rng, dt, c->b, lo, hi);
  }
  if (rf_tensor_num_elements(*ta) == 0 || rf_tensor_num_elements(*tb) == 0)
    return;
  if (op == DIV && dt != RF_UINT8 && rf_dtype_is_integer(dt)) {
    ref_set_int(*ta, 0, ref_int_min(dt)); /* INT_MIN / -1 must wrap */
    ref_set_int(*tb, 0, -1);
  }
  if (op == EQUAL && rf_dtype_is_float(dt)) {
    rf_tensor_set(*ta, 0, NAN); /* NaN equals nothing */
    rf_tensor_set(*tb, 0, NAN);
  }
}

/* Every case of binary_cases in one session. Odd cases hide the shapes from
 * the graph (Equal: a's only): the kernel broadcasts what it is given at
 * run time. */
static void check_binary(binary op, rf_dtype dt, uint64_t *rng) {
  shape_pair cs[MAX_CASES];
  int n = binary_cases(cs);
  rf_graph *g = rf_graph_new();
  rf_feed feeds[2 * MAX_CASES];
  rf_output outs[MAX_CASES];
  rf_dtype odt = op == EQUAL ? RF_BOOL : dt;
  for (int c = 0; c < n; c++) {
    rf_shape sa = c % 2 ? rf_shape_unknown() : cs[c].a;
    rf_shape sb = c % 2 && op != EQUAL ? rf_shape_unknown() : cs[c].b;
    rf_output a = rf_placeholder(g, NULL, dt, sa);
    rf_output b = rf_placeholder(g, NULL, dt, sb);
    outs[c] = build_binary(g, op, a, b);
    assert_graph_ok(g);
    assert_int_equal(rf_output_dtype(outs[c]), odt);
    rf_shape want = ref_bcast_shape(&cs[c].a, &cs[c].b);
    rf_shape inferred = rf_output_shape(outs[c]);
    if (c % 2 == 0) assert_true(rf_shape_equal(&inferred, &want));
    rf_tensor *ta, *tb;
    binary_operands(op, dt, &cs[c], rng, &ta, &tb);
    feeds[2 * c] = (rf_feed){a, ta};
    feeds[2 * c + 1] = (rf_feed){b, tb};
  }
  rf_tensor *res[MAX_CASES];
  rf_test_run(g, 1, feeds, 2 * n, outs, n, res);
  for (int c = 0; c < n; c++) {
    rf_tensor *ta = feeds[2 * c].value, *tb = feeds[2 * c + 1].value;
    rf_shape os = ref_bcast_shape(&cs[c].a, &cs[c].b);
    expect_shape(res[c], os);
    assert_int_equal(rf_tensor_dtype(res[c]), odt);
    for (int64_t i = 0; i < rf_tensor_num_elements(res[c]); i++) {
      long double x = ref_get(ta, ref_bcast_index(&cs[c].a, &os, i));
      long double y = ref_get(tb, ref_bcast_index(&cs[c].b, &os, i));
      expect_exact(ref_get(res[c], i), ref_binary(op, dt, x, y),
                   binary_names[op], dt, c, i);
    }
    rf_tensor_release(ta);
    rf_tensor_release(tb);
    rf_tensor_release(res[c]);
  }
  rf_graph_free(g);
}

static void check_every_numeric_dtype(binary op) {
  uint64_t rng = rf_test_seed() + op;
  for (int d = 0; d < NELEM(ref_numeric_dtypes); d++)
    check_binary(op, ref_numeric_dtypes[d], &rng);
  if (op == EQUAL) check_binary(op, RF_BOOL, &rng);
}

static void test_add(void **state) { check_every_numeric_dtype(ADD); }
static void test_sub(void **state) { check_every_numeric_dtype(SUB); }
static void test_mul(void **state) { check_every_numeric_dtype(MUL); }
static void test_div(void **state) { check_every_numeric_dtype(DIV); }
static void test_equal(void **state) { check_every_numeric_dtype(EQUAL); }

/* ---- Neg ---- */

static void test_neg(void **state) {
  uint64_t rng = rf_test_seed() + 5;
  const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32, RF_FLOAT64,
                          RF_INT8,    RF_INT32,    RF_INT64};
  const rf_shape shapes[] = {rf_shape_scalar(), SHAPE(0),    SHAPE(1),
                             SHAPE(7),          SHAPE(3, 5), SHAPE(2001),
                             SHAPE(50001)};
  for (int d = 0; d < NELEM(dts); d++) {
    for (int s = 0; s < NELEM(shapes); s++) {
      rf_graph *g = rf_graph_new();
      rf_output x = rf_placeholder(g, "x", dts[d], shapes[s]);
      rf_output y = rf_neg(g, NULL, x);
      rf_tensor *tx = ref_random(&rng, dts[d], shapes[s], -100, 100);
      int64_t n = rf_tensor_num_elements(tx);
      if (n > 0 && rf_dtype_is_integer(dts[d]))
        ref_set_int(tx, 0, ref_int_min(dts[d])); /* -INT_MIN wraps */
      if (n > 1 && rf_dtype_is_float(dts[d])) rf_tensor_set(tx, 1, 0.0);
      rf_feed f = {x, tx};
      rf_tensor *ty;
      rf_test_run(g, 1, &f, 1, &y, 1, &ty);
      expect_shape(ty, shapes[s]);
      for (int64_t i = 0; i < n; i++) {
        long double v = ref_get(tx, i);
        long double want = rf_dtype_is_integer(dts[d])
                               ? (long double)ref_wrap(dts[d], -(__int128)v)
                               : -v;
        expect_exact(ref_get(ty, i), want, "Neg", dts[d], s, i);
        if (v == 0 && rf_dtype_is_float(dts[d]))
          assert_true(signbit((double)ref_get(ty, i))); /* -(+0) is -0 */
      }
      rf_tensor_release(tx);
      rf_tensor_release(ty);
      rf_graph_free(g);
    }
  }
}

/* ---- AddN ---- */

static void check_add_n(rf_dtype dt, int k, rf_shape s, uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  rf_output xs[8];
  rf_feed feeds[8];
  for (int j = 0; j < k; j++) {
    xs[j] = rf_placeholder(g, NULL, dt, j % 2 ? rf_shape_unknown() : s);
    feeds[j] = (rf_feed){xs[j], ref_random(rng, dt, s, -100, 100)};
  }
  rf_output y = rf_add_n(g, NULL, xs, k);
  assert_graph_ok(g);
  rf_tensor *ty;
  rf_test_run(g, 1, feeds, k, &y, 1, &ty);
  expect_shape(ty, s);
  assert_int_equal(rf_tensor_dtype(ty), dt);
  for (int64_t i = 0; i < rf_tensor_num_elements(ty); i++) {
    __int128 isum = 0;
    long double sum = 0, scale = 0;
    for (int j = 0; j < k; j++) {
      long double v = ref_get(feeds[j].value, i);
      isum += (__int128)v;
      sum += v;
      scale += fabsl(v);
    }
    if (rf_dtype_is_integer(dt))
      expect_exact(ref_get(ty, i), (long double)ref_wrap(dt, isum), "AddN", dt,
                   k, i);
    else
      expect_near(ref_get(ty, i), ref_round(dt, sum), scale,
                  rf_test_tolerance(dt), "AddN", dt, k, i);
  }
  for (int j = 0; j < k; j++) rf_tensor_release(feeds[j].value);
  rf_tensor_release(ty);
  rf_graph_free(g);
}

static void test_add_n(void **state) {
  uint64_t rng = rf_test_seed() + 6;
  const int ks[] = {1, 2, 3, 5};
  const rf_shape shapes[] = {SHAPE(0),    rf_shape_scalar(), SHAPE(1),
                             SHAPE(2, 7), SHAPE(613),        SHAPE(30011)};
  for (int d = 0; d < NELEM(ref_numeric_dtypes); d++)
    for (int k = 0; k < NELEM(ks); k++)
      for (int s = 0; s < NELEM(shapes); s++)
        check_add_n(ref_numeric_dtypes[d], ks[k], shapes[s], &rng);
}

/* ---- _SumToShapeOf, _BroadcastToShapeOf ---- */

typedef rf_output (*binary_fn)(rf_graph *, const char *, rf_output, rf_output);

/* op(x, like) on placeholders fed tx and tl (their shapes hidden from the
 * graph when hide): the result, which must have like's shape. */
static rf_tensor *run_x_like(binary_fn op, rf_tensor *tx, rf_tensor *tl,
                             bool hide) {
  rf_shape xs = rf_tensor_shape(tx), ls = rf_tensor_shape(tl);
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", rf_tensor_dtype(tx),
                               hide ? rf_shape_unknown() : xs);
  rf_output like = rf_placeholder(g, "like", rf_tensor_dtype(tl),
                                  hide ? rf_shape_unknown() : ls);
  rf_output y = op(g, NULL, x, like);
  assert_graph_ok(g);
  rf_feed feeds[2] = {{x, tx}, {like, tl}};
  rf_tensor *ty;
  rf_test_run(g, 1, feeds, 2, &y, 1, &ty);
  expect_shape(ty, ls);
  rf_graph_free(g);
  return ty;
}

static void check_sum_to(rf_dtype dt, rf_shape xs, rf_shape ls, bool hide,
                         uint64_t *rng) {
  rf_tensor *tx = ref_random(rng, dt, xs, -10, 10);
  rf_tensor *tl = rf_test_random_tensor(rng, RF_BOOL, ls, 0, 1);
  rf_tensor *ty = run_x_like(rf__sum_to_shape_of, tx, tl, hide);
  int64_t n = rf_tensor_num_elements(ty);
  long double *sum = calloc((size_t)n + 1, sizeof *sum);
  long double *scale = calloc((size_t)n + 1, sizeof *scale);
  __int128 *isum = calloc((size_t)n + 1, sizeof *isum);
  for (int64_t i = 0; i < rf_tensor_num_elements(tx); i++) {
    int64_t o = ref_bcast_index(&ls, &xs, i);
    long double v = ref_get(tx, i);
    sum[o] += v;
    scale[o] += fabsl(v);
    isum[o] += (__int128)v;
  }
  for (int64_t i = 0; i < n; i++) {
    if (rf_dtype_is_integer(dt))
      expect_exact(ref_get(ty, i), (long double)ref_wrap(dt, isum[i]),
                   "_SumToShapeOf", dt, 0, i);
    else
      expect_near(ref_get(ty, i), ref_round(dt, sum[i]), scale[i],
                  rf_test_tolerance(dt), "_SumToShapeOf", dt, 0, i);
  }
  free(isum);
  free(sum);
  free(scale);
  rf_tensor_release(tx);
  rf_tensor_release(tl);
  rf_tensor_release(ty);
}

static void test_sum_to_shape_of(void **state) {
  uint64_t rng = rf_test_seed() + 7;
  const shape_pair cases[] = {
      {SHAPE(4, 3), SHAPE(3)},
      {SHAPE(4, 3), SHAPE(1, 3)},
      {SHAPE(4, 3), SHAPE(4, 1)},
      {SHAPE(4, 3), rf_shape_scalar()},
      {SHAPE(4, 3), SHAPE(4, 3)},
      {SHAPE(2, 3, 4), SHAPE(3, 1)},
      {SHAPE(2, 3, 4), SHAPE(2, 1, 4)},
      {SHAPE(2, 3, 4), SHAPE(2, 1, 1)},
      {SHAPE(2, 3, 4), SHAPE(1, 4)},
      {SHAPE(0, 3), SHAPE(3)},
      {SHAPE(5), SHAPE(1)},
      {SHAPE(1, 5), SHAPE(5)},
      {SHAPE(3, 1, 2, 5), SHAPE(1, 2, 1)},
      {SHAPE(300, 7), SHAPE(7)},
      {SHAPE(7, 300), SHAPE(7, 1)},
      {SHAPE(3, 4, 5, 6), SHAPE(3, 1, 5, 1)},
      {SHAPE(2, 3, 4, 5, 6), SHAPE(3, 1, 5, 1)},
      {SHAPE(9, 2, 37), SHAPE(9, 1, 37)},
      {SHAPE(40, 1000), SHAPE(40, 1)},
      {SHAPE(40, 7, 200), SHAPE(40, 1, 200)},
  };
  for (int d = 0; d < NELEM(ref_numeric_dtypes); d++)
    for (int c = 0; c < NELEM(cases); c++)
      check_sum_to(ref_numeric_dtypes[d], cases[c].a, cases[c].b, c % 2, &rng);
}

static void check_broadcast_to(rf_dtype dt, rf_shape xs, rf_shape ls, bool hide,
                               uint64_t *rng) {
  rf_tensor *tx = dt == RF_BOOL ? small_values(rng, dt, xs)
                                : ref_random(rng, dt, xs, -10, 10);
  rf_tensor *tl = ref_random(rng, RF_INT8, ls, 0, 0);
  rf_tensor *ty = run_x_like(rf__broadcast_to_shape_of, tx, tl, hide);
  assert_int_equal(rf_tensor_dtype(ty), dt);
  for (int64_t i = 0; i < rf_tensor_num_elements(ty); i++)
    expect_exact(ref_get(ty, i), ref_get(tx, ref_bcast_index(&xs, &ls, i)),
                 "_BroadcastToShapeOf", dt, 0, i);
  rf_tensor_release(tx);
  rf_tensor_release(tl);
  rf_tensor_release(ty);
}

static void test_broadcast_to_shape_of(void **state) {
  uint64_t rng = rf_test_seed() + 12;
  const shape_pair cases[] = {
      {SHAPE(3), SHAPE(4, 3)},          {SHAPE(4, 1), SHAPE(4, 3)},
      {rf_shape_scalar(), SHAPE(2, 3)}, {SHAPE(1, 3), SHAPE(2, 4, 3)},
      {SHAPE(2, 1, 4), SHAPE(2, 3, 4)}, {SHAPE(2, 3), SHAPE(2, 3)},
      {SHAPE(3), SHAPE(0, 3)},          {SHAPE(1), SHAPE(5)},
      {SHAPE(7, 1), SHAPE(7, 3000)},    {SHAPE(3000), SHAPE(20, 3000)},
  };
  for (int d = 0; d < NELEM(ref_numeric_dtypes); d++)
    for (int c = 0; c < NELEM(cases); c++)
      check_broadcast_to(ref_numeric_dtypes[d], cases[c].a, cases[c].b, c % 2,
                         &rng);
  check_broadcast_to(RF_BOOL, SHAPE(4, 1), SHAPE(4, 5), false, &rng);
}

/* ---- shape inference ---- */

static void expect_inferred(rf_shape a, rf_shape b, rf_shape want) {
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "a", RF_FLOAT32, a);
  rf_output y = rf_placeholder(g, "b", RF_FLOAT32, b);
  rf_output z = rf_mul(g, NULL, x, y);
  assert_graph_ok(g);
  rf_shape got = rf_output_shape(z);
  if (!rf_shape_equal(&got, &want)) {
    char s[128], w[128];
    rf_shape_format(&got, s, sizeof s);
    rf_shape_format(&want, w, sizeof w);
    fail_msg("inferred %s, want %s", s, w);
  }
  rf_graph_free(g);
}

static void test_broadcast_shape_inference(void **state) {
  const int64_t U = RF_UNKNOWN_DIM;
  expect_inferred(SHAPE(U, 3), SHAPE(3), SHAPE(U, 3));
  expect_inferred(SHAPE(U, 1), SHAPE(1, 4), SHAPE(U, 4));
  expect_inferred(SHAPE(5, U), SHAPE(U), SHAPE(5, U));
  expect_inferred(SHAPE(U), SHAPE(1), SHAPE(U));
  expect_inferred(SHAPE(2, U), SHAPE(3), SHAPE(2, 3));
  expect_inferred(SHAPE(U, U), SHAPE(4, 1), SHAPE(4, U));
  expect_inferred(rf_shape_unknown(), SHAPE(3), rf_shape_unknown());
  expect_inferred(rf_shape_scalar(), SHAPE(U, 2), SHAPE(U, 2));
}

/* ---- errors ---- */

static void expect_build_error(rf_graph *g, const char *sub) {
  assert_status(rf_graph_status(g), RF_INVALID_ARGUMENT, sub);
  rf_graph_free(g);
}

/* op on placeholders of dtype dt and shapes sa, sb must fail to build with
 * a message containing sub. */
static void expect_op_build_error(binary_fn op, rf_dtype dt, rf_shape sa,
                                  rf_shape sb, const char *sub) {
  rf_graph *g = rf_graph_new();
  rf_output a = rf_placeholder(g, "a", dt, sa);
  rf_output b = rf_placeholder(g, "b", dt, sb);
  assert_null(op(g, "z", a, b).node);
  expect_build_error(g, sub);
}

/* op on placeholders fed ta and tb (consumed; their shapes hidden from the
 * graph unless known) builds, and the kernel fails with INVALID_ARGUMENT
 * containing sub, giving no output. */
static void expect_op_run_error(binary_fn op, rf_tensor *ta, rf_tensor *tb,
                                bool known, const char *sub) {
  rf_graph *g = rf_graph_new();
  rf_shape sa = rf_tensor_shape(ta), sb = rf_tensor_shape(tb);
  rf_output a = rf_placeholder(g, "a", rf_tensor_dtype(ta),
                               known ? sa : rf_shape_unknown());
  rf_output b = rf_placeholder(g, "b", rf_tensor_dtype(tb),
                               known ? sb : rf_shape_unknown());
  rf_output z = op(g, "z", a, b);
  assert_graph_ok(g);
  rf_feed feeds[] = {{a, ta}, {b, tb}};
  rf_tensor *out = NULL;
  assert_status(rf_test_try_run(g, feeds, 2, &z, 1, &out), RF_INVALID_ARGUMENT,
                sub);
  assert_null(out);
  rf_tensor_release(ta);
  rf_tensor_release(tb);
  rf_graph_free(g);
}

/* Random float32 tensors of shapes sa and sb for expect_op_run_error. */
static void expect_float_run_error(binary_fn op, rf_shape sa, rf_shape sb,
                                   const char *sub, uint64_t *rng) {
  expect_op_run_error(op, rf_test_random_tensor(rng, RF_FLOAT32, sa, 0, 1),
                      rf_test_random_tensor(rng, RF_FLOAT32, sb, 0, 1), false,
                      sub);
}

static rf_output add_n_of_two(rf_graph *g, const char *name, rf_output a,
                              rf_output b) {
  rf_output xs[] = {a, b};
  return rf_add_n(g, name, xs, 2);
}

static void test_incompatible_shapes_at_build(void **state) {
  const binary_fn fns[] = {rf_add, rf_sub, rf_mul, rf_div, rf_equal};
  for (int f = 0; f < NELEM(fns); f++)
    expect_op_build_error(fns[f], RF_INT32, SHAPE(2, 3), SHAPE(4, 3),
                          "Incompatible shapes: (2, 3) vs. (4, 3)");
  expect_op_build_error(rf_add, RF_FLOAT32, SHAPE(RF_UNKNOWN_DIM, 3),
                        SHAPE(2, 4), "Incompatible shapes: (?, 3) vs. (2, 4)");
}

static void test_incompatible_shapes_at_run_time(void **state) {
  uint64_t rng = rf_test_seed() + 8;
  expect_float_run_error(rf_add, SHAPE(2, 3), SHAPE(4, 3),
                         "Incompatible shapes: (2, 3) vs. (4, 3)", &rng);
}

static void test_dtype_mismatch(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output a = rf_placeholder(g, "a", RF_FLOAT32, SHAPE(3));
  rf_output b = rf_placeholder(g, "b", RF_INT32, SHAPE(3));
  assert_null(rf_add(g, "z", a, b).node);
  expect_build_error(g, NULL);

  g = rf_graph_new();
  a = rf_placeholder(g, "a", RF_FLOAT64, SHAPE(3));
  b = rf_placeholder(g, "b", RF_FLOAT32, SHAPE(3));
  assert_null(add_n_of_two(g, "z", a, b).node);
  expect_build_error(g, NULL);
}

static void test_unsupported_dtypes(void **state) {
  expect_op_build_error(rf_add, RF_BOOL, SHAPE(3), SHAPE(3), NULL);
  rf_graph *g = rf_graph_new();
  rf_output a = rf_placeholder(g, "a", RF_UINT8, SHAPE(3));
  assert_null(rf_neg(g, "z", a).node);
  expect_build_error(g, NULL);
}

static void test_add_n_errors(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output xs[3];
  xs[0] = rf_placeholder(g, "a", RF_FLOAT32, SHAPE(2, 3));
  xs[1] = rf_placeholder(g, "b", RF_FLOAT32, SHAPE(2, 3));
  xs[2] = rf_placeholder(g, "c", RF_FLOAT32, SHAPE(3, 2));
  assert_null(rf_add_n(g, "z", xs, 3).node);
  expect_build_error(g, "input 0 is (2, 3), input 2 is (3, 2)");

  g = rf_graph_new();
  assert_null(rf_add_n(g, "z", xs, 0).node);
  expect_build_error(g, "at least one input");

  /* Shapes known only at run time. */
  uint64_t rng = rf_test_seed() + 9;
  expect_float_run_error(add_n_of_two, SHAPE(2, 3), SHAPE(6),
                         "input 0 is (2, 3), input 1 is (6)", &rng);
}

static void test_integer_division_by_zero(void **state) {
  uint64_t rng = rf_test_seed() + 10;
  for (int d = 0; d < NELEM(ref_int_dtypes); d++) {
    rf_dtype dt = ref_int_dtypes[d];
    /* A zero among the divisors, and a zero scalar broadcast. */
    const rf_shape bshapes[] = {SHAPE(5), rf_shape_scalar()};
    for (int s = 0; s < 2; s++) {
      rf_tensor *ta = ref_random(&rng, dt, SHAPE(5), 0, 0);
      rf_tensor *tb = random_divisor(&rng, dt, bshapes[s]);
      ref_set_int(tb, rf_tensor_num_elements(tb) - 1, 0);
      expect_op_run_error(rf_div, ta, tb, true, "Integer division by zero");
    }
  }
}

static void test_broadcast_to_shape_of_errors(void **state) {
  expect_op_build_error(rf__broadcast_to_shape_of, RF_FLOAT32, SHAPE(4, 3),
                        SHAPE(3), "cannot broadcast shape (4, 3) to shape (3)");
  uint64_t rng = rf_test_seed() + 13;
  expect_float_run_error(rf__broadcast_to_shape_of, SHAPE(2), SHAPE(2, 3),
                         "cannot broadcast shape (2) to shape (2, 3)", &rng);
}

static void test_sum_to_shape_of_errors(void **state) {
  expect_op_build_error(rf__sum_to_shape_of, RF_FLOAT32, SHAPE(4, 3),
                        SHAPE(2, 3),
                        "cannot sum shape (4, 3) down to shape (2, 3)");
  uint64_t rng = rf_test_seed() + 11;
  expect_float_run_error(rf__sum_to_shape_of, SHAPE(3), SHAPE(2, 3),
                         "cannot sum shape (3) down to shape (2, 3)", &rng);
}

/* An invalid input (a failed op's result) is an error naming the op. */
static void test_invalid_input(void **state) {
  const binary_fn fns[] = {rf_add, rf_sub, rf_mul, rf_div, rf_equal};
  const char *const names[] = {"Add", "Sub", "Mul", "Div", "Equal"};
  for (int f = 0; f < NELEM(fns); f++) {
    rf_graph *g = rf_graph_new();
    rf_output a = rf_placeholder(g, "a", RF_FLOAT32, SHAPE(2));
    assert_null(fns[f](g, "z", a, no_output).node);
    expect_build_error(g, names[f]);
  }
  rf_graph *g = rf_graph_new();
  assert_null(rf_neg(g, "z", no_output).node);
  expect_build_error(g, "Neg");
  g = rf_graph_new();
  assert_null(rf_matmul(g, "z", no_output, no_output, false, false).node);
  expect_build_error(g, "MatMul");
  g = rf_graph_new();
  assert_null(rf_cast(g, "z", no_output, RF_FLOAT32).node);
  expect_build_error(g, "Cast");
  g = rf_graph_new();
  rf_output xs[2] = {rf_placeholder(g, "a", RF_FLOAT32, SHAPE(2)), no_output};
  assert_null(rf_add_n(g, "z", xs, 2).node);
  expect_build_error(g, "AddN");
}

/* An op function on a graph that already failed adds nothing. */
static void test_sticky_graph_error(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output a = rf_placeholder(g, "a", RF_FLOAT32, SHAPE(2));
  rf_output b = rf_placeholder(g, "b", RF_FLOAT32, SHAPE(3));
  assert_null(rf_add(g, "bad", a, b).node);
  int before = rf_graph_num_nodes(g);
  assert_null(rf_mul(g, "later", a, a).node);
  assert_null(rf_add(g, "invalid", no_output, a).node);
  assert_int_equal(rf_graph_num_nodes(g), before);
  expect_build_error(g, "Incompatible shapes");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_add),
      cmocka_unit_test(test_sub),
      cmocka_unit_test(test_mul),
      cmocka_unit_test(test_div),
      cmocka_unit_test(test_equal),
      cmocka_unit_test(test_neg),
      cmocka_unit_test(test_add_n),
      cmocka_unit_test(test_sum_to_shape_of),
      cmocka_unit_test(test_broadcast_to_shape_of),
      cmocka_unit_test(test_broadcast_shape_inference),
      cmocka_unit_test(test_incompatible_shapes_at_build),
      cmocka_unit_test(test_incompatible_shapes_at_run_time),
      cmocka_unit_test(test_dtype_mismatch),
      cmocka_unit_test(test_unsupported_dtypes),
      cmocka_unit_test(test_add_n_errors),
      cmocka_unit_test(test_integer_division_by_zero),
      cmocka_unit_test(test_sum_to_shape_of_errors),
      cmocka_unit_test(test_broadcast_to_shape_of_errors),
      cmocka_unit_test(test_invalid_input),
      cmocka_unit_test(test_sticky_graph_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
