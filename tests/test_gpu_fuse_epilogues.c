/* tests/test_gpu_fuse_epilogues.c - MatMul epilogues on a GPU
 * (rf_session_options.matmul_epilogues, kernels/cuda/fused_matmul.cu): a
 * two-layer MLP (ReLU after the first layer, squared-sum loss) and its
 * gradients on gpu:0, on fresh random data. With RF_MATMUL_EPILOGUES_GPU the
 * lowered graph holds one _FusedMatMulBiasRelu, one _FusedMatMulBias and
 * two _FusedMatMulBiasGrad (none with RF_MATMUL_EPILOGUES_OFF; with the
 * default, RF_MATMUL_EPILOGUES_AUTO, the same in float32 only); the fused
 * run matches the same graph on cpu:0 and the unfused GPU run, each element
 * within a tolerance of its fetch's largest value (near: a sum's rounding is
 * relative to its terms) (float32: every fetch, with TF32 off at 1e-4, with
 * allow_tf32 at TF32's; float16/bfloat16: the forward values and the last
 * layer's gradients, which no ReLU mask decides: a product rounded before
 * its bias (unfused) or not (fused) may put an element a hair on the other
 * side of zero). Sizes that are multiples of 16 must take the cuBLASLt forward
 * epilogues (no fallback in the log); odd sizes may fall back and must
 * still be right. A step replayed as a CUDA graph (gpu_graphs) gives the
 * uncaptured step's bits. Skips without a GPU ("GPU tests skipped: ...");
 * RF_GPU_TEST_ON_CPU=1 runs it with cpu:1 standing in for gpu:0 (and
 * RF_MATMUL_EPILOGUES_ALL for the default), which checks the test itself
 * on a machine without a GPU. */
#include <math.h>
#include <pthread.h>
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

/* ---- the device under test ---- */

static bool on_cpu(void) {
  const char *e = getenv("RF_GPU_TEST_ON_CPU");
  return e && e[0] == '1';
}

static const char *device(void) { return on_cpu() ? "cpu:1" : "gpu:0"; }

static void need_gpu(void) {
  if (!on_cpu()) rf_test_need_gpu();
}

/* ---- fallbacks reported through the log sink ---- */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int fallbacks_forward, fallbacks_grad;

static void on_log(rf_log_level level, const char *msg, void *user) {
  (void)level, (void)user;
  if (!strstr(msg, "runs the unfused kernels")) return;
  printf("  log: %s\n", msg);
  pthread_mutex_lock(&log_mu);
  if (strstr(msg, "(_FusedMatMulBiasGrad)"))
    fallbacks_grad++;
  else
    fallbacks_forward++;
  pthread_mutex_unlock(&log_mu);
}

/* ---- the model ---- */

enum { NFETCH = 8 }; /* loss, h, z, dx, dW1, db1, dW2, db2 */

typedef struct dims {
  int64_t B, I, H, O;
} dims;

typedef struct mlp {
  rf_graph *g;
  rf_dtype dt;
  bool tb2;
  dims d;
  rf_output in[5]; /* x, w1, b1, w2, b2 */
  rf_output fetch[NFETCH];
} mlp;

static void build(mlp *m, const char *device, rf_dtype dt, bool tb2, dims d) {
  memset(m, 0, sizeof *m);
  m->g = rf_graph_new();
  m->dt = dt, m->tb2 = tb2, m->d = d;
  rf_graph *g = m->g;
  assert_ok(rf_graph_push_device(g, device));
  rf_output x = rf_placeholder(g, "x", dt, rf_shape_of(2, d.B, d.I));
  rf_output w1 = rf_placeholder(g, "w1", dt, rf_shape_of(2, d.I, d.H));
  rf_output b1 = rf_placeholder(g, "b1", dt, rf_shape_of(1, d.H));
  rf_output w2 = rf_placeholder(
      g, "w2", dt, tb2 ? rf_shape_of(2, d.O, d.H) : rf_shape_of(2, d.H, d.O));
  rf_output b2 = rf_placeholder(g, "b2", dt, rf_shape_of(1, d.O));
  rf_output h = rf_relu(
      g, NULL, rf_bias_add(g, NULL, rf_matmul(g, NULL, x, w1, 0, 0), b1));
  rf_output z = rf_bias_add(g, NULL, rf_matmul(g, NULL, h, w2, false, tb2), b2);
  rf_output loss = rf_sum(g, NULL, rf_mul(g, NULL, z, z), NULL, -1, false);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  rf_output xs[5] = {x, w1, b1, w2, b2}, dxs[5];
  assert_ok(rf_gradients(g, &loss, 1, xs, 5, NULL, dxs));
  memcpy(m->in, xs, sizeof xs);
  rf_output f[NFETCH] = {loss, h, z, dxs[0], dxs[1], dxs[2], dxs[3], dxs[4]};
  memcpy(m->fetch, f, sizeof f);
}

/* Uniform in [-1, 1) ([-0.5, 0.5) for the 16-bit floats, whose loss would
 * overflow float16 otherwise); dyadic: multiples of 1/8 in [-1, 1], whose
 * first layer's sums are exact in float32 in any order, so every device
 * sees the same ReLU mask. */
static void inputs(const mlp *m, rf_tensor **t, bool dyadic) {
  dims d = m->d;
  rf_shape s[5] = {rf_shape_of(2, d.B, d.I), rf_shape_of(2, d.I, d.H),
                   rf_shape_of(1, d.H),
                   m->tb2 ? rf_shape_of(2, d.O, d.H) : rf_shape_of(2, d.H, d.O),
                   rf_shape_of(1, d.O)};
  double r = m->dt == RF_FLOAT32 ? 1.0 : 0.5;
  for (int i = 0; i < 5; i++) {
    t[i] = rf_test_random_tensor(&rng, m->dt, s[i], -r, r);
    for (int64_t k = 0; dyadic && k < rf_tensor_num_elements(t[i]); k++)
      rf_tensor_set(t[i], k, floor(rf_tensor_get(t[i], k) * 8 + 0.5) / 8);
  }
}

static rf_session_options options(bool gpu, int mode, int tf32, int graphs) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_gpu_devices = gpu && !on_cpu() ? 1 : 0;
  o.num_cpu_devices = gpu && on_cpu() ? 2 : 1;
  o.matmul_epilogues = gpu && on_cpu() && mode == RF_MATMUL_EPILOGUES_GPU
                           ? RF_MATMUL_EPILOGUES_ALL
                           : mode;
  o.allow_tf32 = tf32;
  o.gpu_graphs = graphs;
  return o;
}

/* runs steps of the session on the same inputs; out gets the last's. */
static void run(const mlp *m, rf_session_options o, rf_tensor *const *in,
                int steps, rf_tensor **out) {
  rf_session *s = NULL;
  assert_ok(rf_session_new(m->g, &o, &s));
  rf_feed feeds[5];
  for (int i = 0; i < 5; i++) feeds[i] = (rf_feed){m->in[i], in[i]};
  for (int t = 0; t < steps; t++) {
    if (t > 0)
      for (int i = 0; i < NFETCH; i++) rf_tensor_release(out[i]);
    assert_ok(rf_session_run(s, feeds, 5, m->fetch, NFETCH, NULL, 0, out));
  }
  rf_session_free(s);
}

static int count_fused(const mlp *m, int mode) {
  rf_session_options o = options(true, mode, 0, 0);
  rf_graph *low = NULL;
  assert_ok(rf_graph_lower(m->g, &o, &low));
  int n = 0;
  for (int i = 0; i < rf_graph_num_nodes(low); i++)
    n += strncmp(rf_node_op(rf_graph_node(low, i)), "_FusedMatMul", 12) == 0;
  rf_graph_free(low);
  return n;
}

static void release_all(rf_tensor **t, int n) {
  for (int i = 0; i < n; i++) rf_tensor_release(t[i]);
}

/* got[i] near want[i] for the fetches listed in which: each element within
 * tol of the fetch's scale, 1 + its largest |want|. Not of each element's
 * own 1 + |want|: a gradient's element is a sum of terms far larger than
 * itself, and the rounding of a sum, in whatever order a library takes, is
 * relative to its terms. bench/fuse_epilogues_tolerance.py measures it on
 * this model: one float32 run (B 256 I 512 H 64 O 16, dyadic data) 8.8e-5 of
 * 1 + |want| off the exact dW1 (session 10's cuBLASLt run: -1.53156 for
 * -1.53125, 1.2e-4), but under 5e-7 of the largest |want|; fused against
 * unfused, float16's dW2 1.2e-2 and bfloat16's 1.8e-1 of 1 + |want|, but
 * 6.6e-4 and 4.8e-3 of the largest. */
static void near(rf_tensor *const *got, rf_tensor *const *want,
                 const int *which, int n, double tol, const char *what) {
  for (int j = 0; j < n; j++) {
    int i = which[j];
    double *w = rf_test_to_doubles(want[i]);
    int64_t count = rf_tensor_num_elements(want[i]);
    double scale = 1;
    for (int64_t e = 0; e < count; e++)
      if (fabs(w[e]) + 1 > scale) scale = fabs(w[e]) + 1;
    printf("  %s: fetch %d (scale %g)\n", what, i, scale);
    rf_shape ws = rf_tensor_shape(want[i]), gs = rf_tensor_shape(got[i]);
    assert_true(rf_shape_equal(&gs, &ws));
    for (int64_t e = 0; e < count; e++) {
      double g = rf_tensor_get(got[i], e);
      if (!(fabs(g - w[e]) <= tol * scale))
        fail_msg(
            "%s: fetch %d element %lld: got %.9g, want %.9g (tol %g of "
            "%g)",
            what, i, (long long)e, g, w[e], tol, scale);
    }
    free(w);
  }
}

/* Fused on gpu:0 against cpu:0 and against unfused gpu:0, on one data
 * set; returns the forward fallbacks the fused run logged. */
static int compare(const mlp *gm, const mlp *cm, bool dyadic) {
  rf_tensor *in[5], *fused[NFETCH], *plain[NFETCH], *cpu[NFETCH];
  inputs(gm, in, dyadic);
  pthread_mutex_lock(&log_mu);
  int before = fallbacks_forward;
  pthread_mutex_unlock(&log_mu);
  run(gm, options(true, RF_MATMUL_EPILOGUES_GPU, 0, 0), in, 1, fused);
  pthread_mutex_lock(&log_mu);
  int forward_fallbacks = fallbacks_forward - before;
  pthread_mutex_unlock(&log_mu);
  run(gm, options(true, RF_MATMUL_EPILOGUES_OFF, 0, 0), in, 1, plain);
  run(cm, options(false, RF_MATMUL_EPILOGUES_OFF, 0, 0), in, 1, cpu);
  /* The ReLU mask decides dx, dW1 and db1 (fetches 3-5). */
  static const int all[] = {0, 1, 2, 3, 4, 5, 6, 7};
  static const int no_mask[] = {0, 1, 2, 6, 7};
  const int *which = dyadic ? all : no_mask;
  int n = dyadic ? NFETCH : 5;
  double tol = gm->dt == RF_FLOAT32 ? 1e-4 : rf_test_tolerance(gm->dt);
  near(fused, cpu, which, n, tol, "fused gpu vs cpu");
  near(fused, plain, which, n, tol, "fused vs unfused gpu");
  release_all(fused, NFETCH), release_all(plain, NFETCH);
  release_all(cpu, NFETCH), release_all(in, 5);
  return forward_fallbacks;
}

/* One case: uniform data, and for float32 dyadic data too. */
static void check(rf_dtype dt, bool tb2, dims d, bool aligned) {
  printf("%s, B %lld I %lld H %lld O %lld%s\n", rf_dtype_name(dt),
         (long long)d.B, (long long)d.I, (long long)d.H, (long long)d.O,
         tb2 ? ", W2 transposed" : "");
  mlp gm, cm;
  build(&gm, device(), dt, tb2, d);
  build(&cm, "cpu:0", dt, tb2, d);
  assert_int_equal(count_fused(&gm, RF_MATMUL_EPILOGUES_GPU), 4);
  assert_int_equal(count_fused(&gm, RF_MATMUL_EPILOGUES_OFF), 0);
  /* The default (AUTO) fuses float32 products alone, on GPU devices. */
  rf_session_options dflt;
  rf_session_options_init(&dflt);
  assert_int_equal(dflt.matmul_epilogues, RF_MATMUL_EPILOGUES_AUTO);
  if (!on_cpu())
    assert_int_equal(count_fused(&gm, RF_MATMUL_EPILOGUES_AUTO),
                     dt == RF_FLOAT32 ? 4 : 0);
  int fallbacks = compare(&gm, &cm, false);
  if (dt == RF_FLOAT32) fallbacks += compare(&gm, &cm, true);
  if (aligned) assert_int_equal(fallbacks, 0);
  rf_graph_free(gm.g), rf_graph_free(cm.g);
}

static void test_float32(void **state) {
  (void)state;
  need_gpu();
  check(RF_FLOAT32, false, (dims){256, 512, 64, 16}, true);
  check(RF_FLOAT32, true, (dims){128, 96, 48, 32}, true);
}

static void test_float16(void **state) {
  (void)state;
  need_gpu();
  check(RF_FLOAT16, false, (dims){256, 192, 64, 16}, true);
  check(RF_FLOAT16, true, (dims){64, 32, 32, 16}, true);
}

static void test_bfloat16(void **state) {
  (void)state;
  need_gpu();
  check(RF_BFLOAT16, false, (dims){256, 192, 64, 16}, true);
  check(RF_BFLOAT16, true, (dims){64, 32, 32, 16}, true);
}

/* Leading dimensions of odd sizes: cuBLASLt may take them or not. */
static void test_odd_sizes(void **state) {
  (void)state;
  need_gpu();
  check(RF_FLOAT32, false, (dims){37, 13, 7, 3}, false);
  check(RF_FLOAT16, true, (dims){9, 5, 11, 3}, false);
  check(RF_BFLOAT16, false, (dims){1, 1, 1, 1}, false);
}

/* allow_tf32: float32 products on TF32 tensor cores, fused ones too; the
 * results stay within TF32's error of the CPU's. */
static void test_tf32(void **state) {
  (void)state;
  need_gpu();
  dims d = {256, 512, 64, 16};
  mlp gm, cm;
  build(&gm, device(), RF_FLOAT32, false, d);
  build(&cm, "cpu:0", RF_FLOAT32, false, d);
  rf_tensor *in[5], *fused[NFETCH], *cpu[NFETCH];
  inputs(&gm, in, false);
  run(&gm, options(true, RF_MATMUL_EPILOGUES_GPU, 1, 0), in, 1, fused);
  run(&cm, options(false, RF_MATMUL_EPILOGUES_OFF, 0, 0), in, 1, cpu);
  static const int no_mask[] = {0, 1, 2, 6, 7};
  near(fused, cpu, no_mask, 5, 2e-2, "tf32 fused gpu vs cpu");
  release_all(fused, NFETCH), release_all(cpu, NFETCH), release_all(in, 5);
  rf_graph_free(gm.g), rf_graph_free(cm.g);
}

/* Steps replayed as a CUDA graph give the uncaptured step's bits. */
static void test_gpu_graph_replay(void **state) {
  (void)state;
  need_gpu();
  mlp gm;
  build(&gm, device(), RF_FLOAT32, false, (dims){256, 192, 64, 16});
  rf_tensor *in[5], *once[NFETCH], *replayed[NFETCH];
  inputs(&gm, in, false);
  run(&gm, options(true, RF_MATMUL_EPILOGUES_GPU, 0, 0), in, 1, once);
  run(&gm, options(true, RF_MATMUL_EPILOGUES_GPU, 0, 1), in, 4, replayed);
  for (int i = 0; i < NFETCH; i++)
    if (memcmp(rf_tensor_data(once[i]), rf_tensor_data(replayed[i]),
               rf_tensor_nbytes(once[i])) != 0)
      fail_msg("fetch %d: the replayed step differs from the uncaptured one",
               i);
  release_all(once, NFETCH), release_all(replayed, NFETCH);
  release_all(in, 5);
  rf_graph_free(gm.g);
}

int main(void) {
  rf_set_log_callback(RF_LOG_WARN, on_log, NULL);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_float32),  cmocka_unit_test(test_float16),
      cmocka_unit_test(test_bfloat16), cmocka_unit_test(test_odd_sizes),
      cmocka_unit_test(test_tf32),     cmocka_unit_test(test_gpu_graph_replay),
  };
  int rc = cmocka_run_group_tests(tests, setup, NULL);
  printf("cuBLASLt fallbacks: %d forward, %d bias-gradient\n",
         fallbacks_forward, fallbacks_grad);
  rf_set_log_callback(RF_LOG_WARN, NULL, NULL);
  return rc;
}
