/* tests/test_fuse_epilogues.c - MatMul epilogues
 * (rf_session_options.matmul_epilogues, passes/fuse_epilogues.c): a
 * two-layer MLP (ReLU after the first layer, a squared-sum loss) and its
 * gradients, built through the public API, on fresh random data. With
 * RF_MATMUL_EPILOGUES_ALL on a CPU device the lowered graph holds one
 * _FusedMatMulBiasRelu, one _FusedMatMulBias and two _FusedMatMulBiasGrad
 * (no BiasAdd, Relu or _BiasAddGrad left), the run gives the unfused run's
 * results bit for bit (float32, float16, bfloat16; the second layer's
 * weights plain and transposed) and matches a float64 reference (float32);
 * the default (RF_MATMUL_EPILOGUES_AUTO: float32 on GPU devices) fuses
 * nothing on CPU devices, nor do RF_MATMUL_EPILOGUES_GPU and _OFF,
 * nor float64. A product or sum read elsewhere is left unfused (or fused
 * without the ReLU), a bad option value is INVALID_ARGUMENT, and a bias of
 * the wrong length fed at run time fails naming the fused node. The fused
 * kernels fail under allocation faults without output or leak. The GPU
 * path is tests/test_gpu_fuse_epilogues.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static uint64_t rng;

static int setup(void **state) {
  (void)state;
  rng = rf_test_seed();
  return 0;
}

enum { NFETCH = 8 }; /* loss, h, z, dx, dW1, db1, dW2, db2 */

typedef struct mlp {
  rf_graph *g;
  rf_dtype dt;
  int64_t B, I, H, O;
  bool tb2; /* W2 stored (O, H), used transposed */
  rf_output x, w1, b1, w2, b2, pre1, h, z, loss;
  rf_output fetch[NFETCH];
  rf_tensor *in[5]; /* x, w1, b1, w2, b2 */
} mlp;

static int64_t dim(int64_t lo, int64_t hi) {
  return lo + (int64_t)(rf_test_rand(&rng) % (uint64_t)(hi - lo + 1));
}

/* extra: 1 also reads layer 1's product with a Relu; 2 also reads its sum
 * with a Sigmoid. unknown_bias: b1's length unknown until fed. */
static void build(mlp *m, rf_dtype dt, bool tb2, int extra, bool unknown_bias) {
  memset(m, 0, sizeof *m);
  m->g = rf_graph_new();
  m->dt = dt, m->tb2 = tb2;
  m->B = dim(3, 9), m->I = dim(2, 7), m->H = dim(2, 8), m->O = dim(2, 5);
  rf_graph *g = m->g;
  m->x = rf_placeholder(g, "x", dt, rf_shape_of(2, m->B, m->I));
  m->w1 = rf_placeholder(g, "w1", dt, rf_shape_of(2, m->I, m->H));
  m->b1 = rf_placeholder(g, "b1", dt,
                         rf_shape_of(1, unknown_bias ? (int64_t)-1 : m->H));
  m->w2 = rf_placeholder(
      g, "w2", dt,
      tb2 ? rf_shape_of(2, m->O, m->H) : rf_shape_of(2, m->H, m->O));
  m->b2 = rf_placeholder(g, "b2", dt, rf_shape_of(1, m->O));
  rf_output p1 = rf_matmul(g, "mm1", m->x, m->w1, false, false);
  m->pre1 = rf_bias_add(g, "ba1", p1, m->b1);
  m->h = rf_relu(g, "relu1", m->pre1);
  rf_output side = {NULL, 0};
  if (extra == 1) side = rf_relu(g, "side", p1);
  if (extra == 2) side = rf_sigmoid(g, "side", m->pre1);
  rf_output p2 = rf_matmul(g, "mm2", m->h, m->w2, false, tb2);
  m->z = rf_bias_add(g, "ba2", p2, m->b2);
  m->loss = rf_sum(g, "loss", rf_mul(g, NULL, m->z, m->z), NULL, -1, false);
  if (side.node)
    m->loss = rf_add(g, NULL, m->loss, rf_sum(g, NULL, side, NULL, -1, false));
  assert_graph_ok(g);
  rf_output xs[5] = {m->x, m->w1, m->b1, m->w2, m->b2}, dxs[5];
  assert_ok(rf_gradients(g, &m->loss, 1, xs, 5, NULL, dxs));
  rf_output f[NFETCH] = {m->loss, m->h,   m->z,   dxs[0],
                         dxs[1],  dxs[2], dxs[3], dxs[4]};
  memcpy(m->fetch, f, sizeof f);
  rf_shape shapes[5] = {
      rf_shape_of(2, m->B, m->I), rf_shape_of(2, m->I, m->H),
      rf_shape_of(1, m->H),
      tb2 ? rf_shape_of(2, m->O, m->H) : rf_shape_of(2, m->H, m->O),
      rf_shape_of(1, m->O)};
  for (int i = 0; i < 5; i++)
    m->in[i] = rf_test_random_tensor(&rng, dt, shapes[i], -1, 1);
}

static void free_mlp(mlp *m) {
  for (int i = 0; i < 5; i++) rf_tensor_release(m->in[i]);
  rf_graph_free(m->g);
}

static void options(rf_session_options *o, int mode) {
  rf_session_options_init(o);
  o->matmul_epilogues = mode;
}

/* Runs the step on cpu:0 under `mode`, fetching everything. */
static rf_status *try_run(mlp *m, int mode, rf_tensor **out) {
  rf_session_options o;
  options(&o, mode);
  rf_session *s = NULL;
  rf_status *st = rf_session_new(m->g, &o, &s);
  if (st) return st;
  rf_feed feeds[5] = {{m->x, m->in[0]},
                      {m->w1, m->in[1]},
                      {m->b1, m->in[2]},
                      {m->w2, m->in[3]},
                      {m->b2, m->in[4]}};
  st = rf_session_run(s, feeds, 5, m->fetch, NFETCH, NULL, 0, out);
  rf_session_free(s);
  return st;
}

static void run(mlp *m, int mode, rf_tensor **out) {
  assert_ok(try_run(m, mode, out));
}

/* Nodes of `op` after lowering under `mode`. */
static int count(const mlp *m, int mode, const char *op) {
  rf_session_options o;
  options(&o, mode);
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(m->g, &o, &low));
  int n = 0;
  for (int i = 0; i < rf_graph_num_nodes(low); i++)
    n += strcmp(rf_node_op(rf_graph_node(low, i)), op) == 0;
  rf_graph_free(low);
  return n;
}

static int fused_count(const mlp *m, int mode) {
  return count(m, mode, "_FusedMatMulBiasRelu") +
         count(m, mode, "_FusedMatMulBias") +
         count(m, mode, "_FusedMatMulBiasGrad");
}

static void assert_same_bits(rf_tensor *const *a, rf_tensor *const *b) {
  for (int i = 0; i < NFETCH; i++) {
    rf_shape sa = rf_tensor_shape(a[i]), sb = rf_tensor_shape(b[i]);
    assert_true(rf_shape_equal(&sa, &sb));
    if (memcmp(rf_tensor_data(a[i]), rf_tensor_data(b[i]),
               rf_tensor_nbytes(a[i])) != 0)
      fail_msg("fetch %d differs between fused and unfused runs", i);
  }
}

static void release_all(rf_tensor **t) {
  for (int i = 0; i < NFETCH; i++) rf_tensor_release(t[i]);
}

/* y (r, c) = op(a) op(b), row-major, double. */
static void mm(const double *a, const double *b, double *y, int64_t r,
               int64_t k, int64_t c, bool ta, int64_t lda, bool tb,
               int64_t ldb) {
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < c; j++) {
      double s = 0;
      for (int64_t q = 0; q < k; q++)
        s += (ta ? a[q * lda + i] : a[i * lda + q]) *
             (tb ? b[j * ldb + q] : b[q * ldb + j]);
      y[i * c + j] = s;
    }
}

/* The float64 forward and backward pass, against the run's fetches. */
static void check_reference(const mlp *m, rf_tensor *const *out, double tol) {
  int64_t B = m->B, I = m->I, H = m->H, O = m->O;
  double *x = rf_test_to_doubles(m->in[0]), *w1 = rf_test_to_doubles(m->in[1]);
  double *b1 = rf_test_to_doubles(m->in[2]), *w2 = rf_test_to_doubles(m->in[3]);
  double *b2 = rf_test_to_doubles(m->in[4]);
  double *pre = calloc((size_t)(B * H), sizeof *pre);
  double *h = calloc((size_t)(B * H), sizeof *h);
  double *z = calloc((size_t)(B * O), sizeof *z);
  double *dpre = calloc((size_t)(B * H), sizeof *dpre);
  double *dx = calloc((size_t)(B * I), sizeof *dx);
  double *dw1 = calloc((size_t)(I * H), sizeof *dw1);
  double *dw2 = calloc((size_t)(H * O), sizeof *dw2);
  double *db1 = calloc((size_t)H, sizeof *db1), *db2 = calloc((size_t)O, 8);
  double loss = 0;
  mm(x, w1, pre, B, I, H, false, I, false, H);
  for (int64_t i = 0; i < B * H; i++) {
    pre[i] += b1[i % H];
    h[i] = pre[i] > 0 ? pre[i] : 0;
  }
  mm(h, w2, z, B, H, O, false, H, m->tb2, m->tb2 ? H : O);
  for (int64_t i = 0; i < B * O; i++) {
    z[i] += b2[i % O];
    loss += z[i] * z[i];
  }
  /* dz = 2z; dW2 = h^T dz (or dz^T h transposed); dh = dz W2^T. */
  double *dz = calloc((size_t)(B * O), sizeof *dz);
  for (int64_t i = 0; i < B * O; i++) dz[i] = 2 * z[i], db2[i % O] += dz[i];
  if (m->tb2)
    mm(dz, h, dw2, O, B, H, true, O, false, H);
  else
    mm(h, dz, dw2, H, B, O, true, H, false, O);
  mm(dz, w2, dpre, B, O, H, false, O, !m->tb2, m->tb2 ? H : O);
  for (int64_t i = 0; i < B * H; i++) {
    dpre[i] = pre[i] > 0 ? dpre[i] : 0;
    db1[i % H] += dpre[i];
  }
  mm(x, dpre, dw1, I, B, H, true, I, false, H);
  mm(dpre, w1, dx, B, H, I, false, H, true, H);
  assert_tensor_near(out[0], rf_shape_scalar(), &loss, tol);
  assert_tensor_near(out[1], rf_shape_of(2, B, H), h, tol);
  assert_tensor_near(out[2], rf_shape_of(2, B, O), z, tol);
  assert_tensor_near(out[3], rf_shape_of(2, B, I), dx, tol);
  assert_tensor_near(out[4], rf_shape_of(2, I, H), dw1, tol);
  assert_tensor_near(out[5], rf_shape_of(1, H), db1, tol);
  assert_tensor_near(
      out[6], m->tb2 ? rf_shape_of(2, O, H) : rf_shape_of(2, H, O), dw2, tol);
  assert_tensor_near(out[7], rf_shape_of(1, O), db2, tol);
  free(x), free(w1), free(b1), free(w2), free(b2), free(pre), free(h);
  free(z), free(dz), free(dpre), free(dx), free(dw1), free(dw2), free(db1);
  free(db2);
}

/* Fused on cpu:0 (ALL) against unfused (OFF): the same bits, the float64
 * reference for float32, and the expected nodes in the lowered graph. */
static void check_mlp(rf_dtype dt, bool tb2) {
  mlp m;
  build(&m, dt, tb2, 0, false);
  assert_int_equal(count(&m, RF_MATMUL_EPILOGUES_ALL, "_FusedMatMulBiasRelu"),
                   1);
  assert_int_equal(count(&m, RF_MATMUL_EPILOGUES_ALL, "_FusedMatMulBias"), 1);
  assert_int_equal(count(&m, RF_MATMUL_EPILOGUES_ALL, "_FusedMatMulBiasGrad"),
                   2);
  assert_int_equal(count(&m, RF_MATMUL_EPILOGUES_ALL, "BiasAdd"), 0);
  assert_int_equal(count(&m, RF_MATMUL_EPILOGUES_ALL, "Relu"), 0);
  assert_int_equal(count(&m, RF_MATMUL_EPILOGUES_ALL, "_BiasAddGrad"), 0);
  /* The default (AUTO) and GPU fuse on GPU devices only; OFF nowhere. */
  rf_session_options dflt_opts;
  rf_session_options_init(&dflt_opts);
  assert_int_equal(dflt_opts.matmul_epilogues, RF_MATMUL_EPILOGUES_AUTO);
  assert_int_equal(fused_count(&m, RF_MATMUL_EPILOGUES_AUTO), 0);
  assert_int_equal(fused_count(&m, RF_MATMUL_EPILOGUES_GPU), 0);
  assert_int_equal(fused_count(&m, RF_MATMUL_EPILOGUES_OFF), 0);
  assert_int_equal(count(&m, RF_MATMUL_EPILOGUES_OFF, "_BiasAddGrad"), 2);
  rf_tensor *fused[NFETCH] = {0}, *plain[NFETCH] = {0}, *dflt[NFETCH] = {0};
  run(&m, RF_MATMUL_EPILOGUES_ALL, fused);
  run(&m, RF_MATMUL_EPILOGUES_OFF, plain);
  run(&m, RF_MATMUL_EPILOGUES_GPU, dflt);
  assert_same_bits(fused, plain);
  assert_same_bits(dflt, plain);
  if (dt == RF_FLOAT32) check_reference(&m, fused, 1e-5);
  release_all(fused), release_all(plain), release_all(dflt);
  free_mlp(&m);
}

static void test_mlp_float32(void **state) {
  (void)state;
  check_mlp(RF_FLOAT32, false);
}
static void test_mlp_float32_transposed_weights(void **state) {
  (void)state;
  check_mlp(RF_FLOAT32, true);
}
static void test_mlp_float16(void **state) {
  (void)state;
  check_mlp(RF_FLOAT16, false);
}
static void test_mlp_bfloat16(void **state) {
  (void)state;
  check_mlp(RF_BFLOAT16, true);
}

static void test_float64_not_fused(void **state) {
  (void)state;
  mlp m;
  build(&m, RF_FLOAT64, false, 0, false);
  assert_int_equal(fused_count(&m, RF_MATMUL_EPILOGUES_ALL), 0);
  free_mlp(&m);
}

/* Layer 1's product read by another Relu: layer 2 and its gradients fuse,
 * layer 1 not, nor b1's gradient (dW1's MatMul reads the product's
 * gradient, which the other Relu's adds to). Its sum read by a Sigmoid:
 * the bias fuses, the ReLU stays, both gradients fuse. Values as unfused. */
static void test_other_readers(void **state) {
  (void)state;
  for (int extra = 1; extra <= 2; extra++) {
    mlp m;
    build(&m, RF_FLOAT32, false, extra, false);
    int mode = RF_MATMUL_EPILOGUES_ALL;
    assert_int_equal(count(&m, mode, "_FusedMatMulBiasRelu"), 0);
    assert_int_equal(count(&m, mode, "_FusedMatMulBias"), extra == 1 ? 1 : 2);
    assert_int_equal(count(&m, mode, "Relu"), extra == 1 ? 2 : 1);
    assert_int_equal(count(&m, mode, "BiasAdd"), extra == 1 ? 1 : 0);
    assert_int_equal(count(&m, mode, "_FusedMatMulBiasGrad"),
                     extra == 1 ? 1 : 2);
    rf_tensor *fused[NFETCH] = {0}, *plain[NFETCH] = {0};
    run(&m, mode, fused);
    run(&m, RF_MATMUL_EPILOGUES_OFF, plain);
    assert_same_bits(fused, plain);
    release_all(fused), release_all(plain);
    free_mlp(&m);
  }
}

static void test_bad_option(void **state) {
  (void)state;
  mlp m;
  build(&m, RF_FLOAT32, false, 0, false);
  rf_session_options o;
  options(&o, 4);
  rf_graph *low = NULL;
  assert_status(rf_graph_lower(m.g, &o, &low), RF_INVALID_ARGUMENT,
                "matmul_epilogues must be");
  assert_null(low);
  rf_tensor *out[NFETCH] = {0};
  assert_status(try_run(&m, -1, out), RF_INVALID_ARGUMENT,
                "matmul_epilogues must be");
  assert_null(out[0]);
  free_mlp(&m);
}

/* b1's length is unknown until fed: a wrong one fails in the fused node
 * with BiasAdd's message, and the session runs again afterwards. */
static void test_bias_mismatch_names_fused_node(void **state) {
  (void)state;
  mlp m;
  build(&m, RF_FLOAT32, false, 0, true);
  assert_int_equal(count(&m, RF_MATMUL_EPILOGUES_ALL, "_FusedMatMulBiasRelu"),
                   1);
  rf_tensor *good = m.in[2];
  m.in[2] =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, m.H + 1), -1, 1);
  rf_tensor *out[NFETCH] = {0};
  rf_status *st = try_run(&m, RF_MATMUL_EPILOGUES_ALL, out);
  assert_non_null(st);
  assert_int_equal(rf_status_code(st), RF_INVALID_ARGUMENT);
  assert_non_null(strstr(rf_status_message(st), "_FusedMatMulBiasRelu"));
  assert_non_null(strstr(rf_status_message(st), "does not match"));
  rf_status_free(st);
  assert_null(out[0]);
  rf_tensor_release(m.in[2]);
  m.in[2] = good;
  rf_tensor *fused[NFETCH] = {0}, *plain[NFETCH] = {0};
  run(&m, RF_MATMUL_EPILOGUES_ALL, fused);
  run(&m, RF_MATMUL_EPILOGUES_OFF, plain);
  assert_same_bits(fused, plain);
  release_all(fused), release_all(plain);
  free_mlp(&m);
}

/* Each fused node's kernel under allocation faults: RESOURCE_EXHAUSTED, no
 * output and no leak at every failure point (the nested kernels'
 * intermediates are released). */
static void test_fused_kernels_under_faults(void **state) {
  (void)state;
  mlp m;
  build(&m, RF_FLOAT32, false, 0, false);
  rf_session_options o;
  options(&o, RF_MATMUL_EPILOGUES_ALL);
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(m.g, &o, &low));
  int fused = 0;
  for (int i = 0; i < rf_graph_num_nodes(low); i++) {
    rf_node *n = rf_graph_node(low, i);
    if (strncmp(rf_node_op(n), "_FusedMatMul", 12) != 0) continue;
    rf_tensor *in[3];
    int k = rf_node_num_inputs(n);
    assert_true(k <= 3);
    for (int j = 0; j < k; j++)
      in[j] = rf_test_random_tensor(
          &rng, RF_FLOAT32, rf_output_shape(rf_node_input(n, j)), -1, 1);
    rf_test_kernel_under_faults(n, in);
    for (int j = 0; j < k; j++) rf_tensor_release(in[j]);
    fused++;
  }
  assert_int_equal(fused, 4);
  rf_graph_free(low);
  free_mlp(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp_float32),
      cmocka_unit_test(test_mlp_float32_transposed_weights),
      cmocka_unit_test(test_mlp_float16),
      cmocka_unit_test(test_mlp_bfloat16),
      cmocka_unit_test(test_float64_not_fused),
      cmocka_unit_test(test_other_readers),
      cmocka_unit_test(test_bad_option),
      cmocka_unit_test(test_bias_mismatch_names_fused_node),
      cmocka_unit_test(test_fused_kernels_under_faults),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
