/* tests/test_math_grad.c - the math ops' gradient functions called directly
 * (as the gradient builder would) and the nodes they add run through a
 * session, against the analytic gradient computed here in float64: Add, Sub,
 * Mul, Div over every broadcast pattern, with shapes known and hidden; MatMul
 * with all four transpose combinations; Neg, AddN, Cast, and the internal
 * _SumToShapeOf / _BroadcastToShapeOf pair. (Finite-difference checks of
 * the whole gradient builder live in the gradient tests.) */
#include "math_ref.h"
#include "ops/math_ops.h"
#include "testutil.h"

#define SHAPE(...)                                           \
  rf_shape_make((int)(sizeof((int64_t[]){__VA_ARGS__}) / 8), \
                (int64_t[]){__VA_ARGS__})
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Calls the grad fn of y's node with incoming gradient dy; dx gets one entry
 * per input. */
static void call_grad(rf_graph *g, rf_output y, rf_output dy, rf_output *dx) {
  rf__grad_ctx c = {.g = g, .op = y.node, .dy = &dy, .dx = dx};
  assert_non_null(y.node->op->grad);
  assert_ok(y.node->op->grad(&c));
  assert_graph_ok(g);
}

static void expect_values(const rf_tensor *t, rf_shape shape,
                          const double *want) {
  assert_tensor_near(t, shape, want, 1e-12);
}

typedef enum arith { ADD, SUB, MUL, DIV } arith;

/* d(x op y)/dx and /dy at (x, y). */
static void partials(arith op, double x, double y, double *px, double *py) {
  switch (op) {
    case ADD: *px = 1, *py = 1; break;
    case SUB: *px = 1, *py = -1; break;
    case MUL: *px = y, *py = x; break;
    default: *px = 1 / y, *py = -x / (y * y); break;
  }
}

static void check_binary_grad(arith op, rf_shape xs, rf_shape ys, bool hide,
                              uint64_t *rng) {
  rf_graph *g = rf_graph_new();
  rf_output x =
      rf_placeholder(g, "x", RF_FLOAT64, hide ? rf_shape_unknown() : xs);
  rf_output y =
      rf_placeholder(g, "y", RF_FLOAT64, hide ? rf_shape_unknown() : ys);
  rf_output z = op == ADD   ? rf_add(g, "z", x, y)
                : op == SUB ? rf_sub(g, "z", x, y)
                : op == MUL ? rf_mul(g, "z", x, y)
                            : rf_div(g, "z", x, y);
  rf_shape zs = ref_bcast_shape(&xs, &ys);
  rf_output dz = rf_placeholder(g, "dz", RF_FLOAT64, rf_output_shape(z));
  rf_output dx[2] = {{NULL, 0}, {NULL, 0}};
  call_grad(g, z, dz, dx);
  assert_non_null(dx[0].node);
  assert_non_null(dx[1].node);
  rf_tensor *tx = rf_test_random_tensor(rng, RF_FLOAT64, xs, 0.5, 2);
  rf_tensor *ty = rf_test_random_tensor(rng, RF_FLOAT64, ys, 0.5, 2);
  rf_tensor *tdz = rf_test_random_tensor(rng, RF_FLOAT64, zs, -1, 1);
  rf_feed feeds[] = {{x, tx}, {y, ty}, {dz, tdz}};
  rf_tensor *res[2];
  rf_test_run(g, 1, feeds, 3, dx, 2, res);
  double *wx = calloc((size_t)rf_tensor_num_elements(tx) + 1, sizeof *wx);
  double *wy = calloc((size_t)rf_tensor_num_elements(ty) + 1, sizeof *wy);
  for (int64_t i = 0; i < rf_tensor_num_elements(tdz); i++) {
    int64_t ix = ref_bcast_index(&xs, &zs, i),
            iy = ref_bcast_index(&ys, &zs, i);
    double px, py, d = rf_tensor_get(tdz, i);
    partials(op, rf_tensor_get(tx, ix), rf_tensor_get(ty, iy), &px, &py);
    wx[ix] += d * px;
    wy[iy] += d * py;
  }
  expect_values(res[0], xs, wx);
  expect_values(res[1], ys, wy);
  free(wx);
  free(wy);
  for (int i = 0; i < 2; i++) rf_tensor_release(res[i]);
  rf_tensor_release(tx);
  rf_tensor_release(ty);
  rf_tensor_release(tdz);
  rf_graph_free(g);
}

static void test_broadcasting_binary_grads(void **state) {
  uint64_t rng = rf_test_seed();
  const rf_shape pairs[][2] = {
      {SHAPE(3, 4), SHAPE(3, 4)},
      {SHAPE(3, 4), rf_shape_scalar()},
      {rf_shape_scalar(), SHAPE(3, 4)},
      {SHAPE(3, 4), SHAPE(4)},
      {SHAPE(3, 1), SHAPE(3, 4)},
      {SHAPE(2, 3, 4), SHAPE(3, 1)},
      {SHAPE(3, 1), SHAPE(1, 4)},
      {SHAPE(2, 1, 4), SHAPE(1, 3, 1)},
      {SHAPE(1), SHAPE(5)},
      {SHAPE(0, 3), SHAPE(3)},
  };
  for (int op = ADD; op <= DIV; op++)
    for (int p = 0; p < NELEM(pairs); p++)
      for (int hide = 0; hide < 2; hide++)
        check_binary_grad((arith)op, pairs[p][0], pairs[p][1], hide, &rng);
}

/* op(M)[r][c] of a row-major (rows x cols) array stored transposed if t. */
static double el(const double *m, int64_t cols, bool t, int64_t r, int64_t c) {
  return t ? m[c * cols + r] : m[r * cols + c];
}

static void test_matmul_grads(void **state) {
  uint64_t rng = rf_test_seed() + 1;
  const int64_t m = 3, k = 4, n = 5;
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t & 2;
    rf_shape as = ta ? SHAPE(k, m) : SHAPE(m, k);
    rf_shape bs = tb ? SHAPE(n, k) : SHAPE(k, n);
    rf_graph *g = rf_graph_new();
    rf_output a = rf_placeholder(g, "a", RF_FLOAT64, as);
    rf_output b = rf_placeholder(g, "b", RF_FLOAT64, bs);
    rf_output c = rf_matmul(g, "c", a, b, ta, tb);
    rf_output dc = rf_placeholder(g, "dc", RF_FLOAT64, SHAPE(m, n));
    rf_output d[2] = {{NULL, 0}, {NULL, 0}};
    call_grad(g, c, dc, d);
    rf_tensor *tA = rf_test_random_tensor(&rng, RF_FLOAT64, as, -1, 1);
    rf_tensor *tB = rf_test_random_tensor(&rng, RF_FLOAT64, bs, -1, 1);
    rf_tensor *tC = rf_test_random_tensor(&rng, RF_FLOAT64, SHAPE(m, n), -1, 1);
    rf_feed feeds[] = {{a, tA}, {b, tB}, {dc, tC}};
    rf_tensor *res[2];
    rf_test_run(g, 1, feeds, 3, d, 2, res);
    const double *A = rf_tensor_data(tA), *B = rf_tensor_data(tB),
                 *G = rf_tensor_data(tC);
    double wa[12] = {0}, wb[20] = {0};
    /* dC/dop(A)[i][q] = sum_j G[i][j] op(B)[q][j]; stored back transposed. */
    for (int64_t i = 0; i < m; i++)
      for (int64_t q = 0; q < k; q++)
        for (int64_t j = 0; j < n; j++) {
          double ga = G[i * n + j] * el(B, bs.dims[1], tb, q, j);
          double gb = G[i * n + j] * el(A, as.dims[1], ta, i, q);
          wa[ta ? q * m + i : i * k + q] += ga;
          wb[tb ? j * k + q : q * n + j] += gb;
        }
    expect_values(res[0], as, wa);
    expect_values(res[1], bs, wb);
    for (int i = 0; i < 2; i++) rf_tensor_release(res[i]);
    rf_tensor_release(tA);
    rf_tensor_release(tB);
    rf_tensor_release(tC);
    rf_graph_free(g);
  }
}

/* Neg, AddN, Cast and the sum/broadcast pair on one graph. */
static void test_unary_grads(void **state) {
  uint64_t rng = rf_test_seed() + 2;
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, SHAPE(2, 3));
  rf_output row = rf_placeholder(g, "row", RF_FLOAT32, SHAPE(3));
  rf_output dy = rf_placeholder(g, "dy", RF_FLOAT32, SHAPE(2, 3));
  rf_output drow = rf_placeholder(g, "drow", RF_FLOAT32, SHAPE(3));
  rf_output dy64 = rf_placeholder(g, "dy64", RF_FLOAT64, SHAPE(2, 3));

  rf_output dneg, dsum[3], dcast, dcast_int, dsum_to[2], dbcast[2];
  call_grad(g, rf_neg(g, NULL, x), dy, &dneg);
  rf_output xs[3] = {x, x, x};
  call_grad(g, rf_add_n(g, NULL, xs, 3), dy, dsum);
  call_grad(g, rf_cast(g, NULL, x, RF_FLOAT64), dy64, &dcast);
  dcast_int = (rf_output){NULL, 0};
  call_grad(g, rf_cast(g, NULL, x, RF_INT32),
            rf_placeholder(g, NULL, RF_INT32, SHAPE(2, 3)), &dcast_int);
  assert_null(dcast_int.node); /* no gradient through an integer */
  dsum_to[1] = dbcast[1] = (rf_output){NULL, 0};
  call_grad(g, rf__sum_to_shape_of(g, NULL, x, row), drow, dsum_to);
  call_grad(g, rf__broadcast_to_shape_of(g, NULL, row, x), dy, dbcast);
  assert_null(dsum_to[1].node); /* `like` only lends its shape */
  assert_null(dbcast[1].node);
  assert_int_equal(rf_output_dtype(dcast), RF_FLOAT32);

  rf_tensor *tx = rf_test_random_tensor(&rng, RF_FLOAT32, SHAPE(2, 3), -1, 1);
  rf_tensor *tr = rf_test_random_tensor(&rng, RF_FLOAT32, SHAPE(3), -1, 1);
  rf_tensor *tdy = rf_test_random_tensor(&rng, RF_FLOAT32, SHAPE(2, 3), -1, 1);
  rf_tensor *tdr = rf_test_random_tensor(&rng, RF_FLOAT32, SHAPE(3), -1, 1);
  rf_tensor *td64 = rf_test_random_tensor(&rng, RF_FLOAT64, SHAPE(2, 3), -1, 1);
  rf_feed feeds[] = {{x, tx}, {row, tr}, {dy, tdy}, {drow, tdr}, {dy64, td64}};
  rf_output fetches[] = {dneg, dsum[0], dsum[2], dcast, dsum_to[0], dbcast[0]};
  rf_tensor *res[6];
  rf_test_run(g, 1, feeds, 5, fetches, 6, res);
  double neg[6], same[6], cast[6], bc[6], sum[3] = {0};
  for (int i = 0; i < 6; i++) {
    same[i] = rf_tensor_get(tdy, i);
    neg[i] = -same[i];
    cast[i] = (float)rf_tensor_get(td64, i);
    bc[i] = rf_tensor_get(tdr, i % 3);   /* drow broadcast to (2, 3) */
    sum[i % 3] += rf_tensor_get(tdy, i); /* dy summed down to (3) */
  }
  assert_tensor_near(res[0], SHAPE(2, 3), neg, 0);
  assert_tensor_near(res[1], SHAPE(2, 3), same, 0);
  assert_tensor_near(res[2], SHAPE(2, 3), same, 0);
  assert_tensor_near(res[3], SHAPE(2, 3), cast, 0);
  assert_tensor_near(res[4], SHAPE(2, 3), bc, 0);
  assert_tensor_near(res[5], SHAPE(3), sum, 1e-6);
  for (int i = 0; i < 6; i++) rf_tensor_release(res[i]);
  rf_tensor_release(tx);
  rf_tensor_release(tr);
  rf_tensor_release(tdy);
  rf_tensor_release(tdr);
  rf_tensor_release(td64);
  rf_graph_free(g);
}

/* No incoming gradient: nothing flows, nothing is added. */
static void test_no_incoming_gradient(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, SHAPE(2, 2));
  rf_output outs[] = {rf_add(g, NULL, x, x), rf_mul(g, NULL, x, x),
                      rf_matmul(g, NULL, x, x, false, false),
                      rf_neg(g, NULL, x)};
  int before = rf_graph_num_nodes(g);
  for (int i = 0; i < NELEM(outs); i++) {
    rf_output dx[2] = {{NULL, 0}, {NULL, 0}};
    call_grad(g, outs[i], (rf_output){NULL, 0}, dx);
    assert_null(dx[0].node);
    assert_null(dx[1].node);
  }
  assert_int_equal(rf_graph_num_nodes(g), before);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_broadcasting_binary_grads),
      cmocka_unit_test(test_matmul_grads),
      cmocka_unit_test(test_unary_grads),
      cmocka_unit_test(test_no_incoming_gradient),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
