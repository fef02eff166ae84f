/* tests/test_fuse_conv_epilogues.c - convolution epilogues
 * (rf_session_options.conv_epilogues, passes/fuse_epilogues.c): a conv
 * block (Conv2D -> BiasAdd -> Relu -> 2x2 MaxPool, a squared-sum loss) and
 * its gradients, built through the public API, on fresh random data of
 * random geometry. With RF_CONV_EPILOGUES_ALL on a CPU device the lowered
 * graph holds one _FusedConv2DBiasRelu (no BiasAdd or Relu left) and one
 * _MaxPoolGradRelu (no MaxPoolGrad or _ReluGrad left), the run
 * gives the unfused run's results bit for bit (float32, float64) and its
 * activations match a float64 reference; RF_CONV_EPILOGUES_GPU (on a CPU
 * device), OFF and the default fuse nothing. A convolution read elsewhere,
 * or a sum read by more than the ReLU, is left unfused (the pool's gradient
 * and the ReLU's still fuse); a pool gradient read elsewhere is left
 * unfused; a bad option value
 * is INVALID_ARGUMENT; a bias of the wrong length fed at run time fails
 * naming the fused node. The GPU kernel's fallback where cuDNN refuses the
 * fused call (output 0 already allocated, a warning through the log sink,
 * then the unfused kernels) runs here on a CPU device, and the fused
 * kernels fail under allocation faults without leaking, as does lowering
 * with the pass on (or it fuses both ops all the same). The GPU path is
 * tests/test_gpu_fuse_conv.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "fault_sweep.h"
#include "kernels/conv_prepare.h"
#include "kernels/fused_conv.h"
#include "ringflow/debug.h"
#include "testutil.h"

static uint64_t rng;

static int setup(void **state) {
  (void)state;
  rng = rf_test_seed();
  return 0;
}

enum { NFETCH = 5 }; /* loss, relu, dx, df, db */

typedef struct block {
  rf_graph *g;
  rf_dtype dt;
  int64_t n, h, w, c, k, oc, s;
  const char *padding;
  rf_output x, f, b, loss;
  rf_output fetch[NFETCH];
  rf_tensor *in[3]; /* x, f, b */
} block;

static int64_t pick(int64_t lo, int64_t hi) {
  return lo + (int64_t)(rf_test_rand(&rng) % (uint64_t)(hi - lo + 1));
}

/* extra: 1 also reads the convolution with a Sigmoid; 2 its sum.
 * unknown_bias: b's length unknown until fed. */
static void build(block *m, rf_dtype dt, int extra, bool unknown_bias) {
  memset(m, 0, sizeof *m);
  m->g = rf_graph_new();
  m->dt = dt;
  m->n = pick(1, 3), m->h = pick(4, 9), m->w = pick(4, 9), m->c = pick(1, 4);
  m->k = pick(1, 4), m->oc = pick(1, 6), m->s = pick(1, 2);
  m->padding = pick(0, 1) ? "SAME" : "VALID";
  rf_graph *g = m->g;
  rf_shape xs = rf_shape_of(4, m->n, m->h, m->w, m->c);
  rf_shape fs = rf_shape_of(4, m->k, m->k, m->c, m->oc);
  m->x = rf_placeholder(g, "x", dt, xs);
  m->f = rf_placeholder(g, "f", dt, fs);
  m->b = rf_placeholder(g, "b", dt,
                        rf_shape_of(1, unknown_bias ? (int64_t)-1 : m->oc));
  const int64_t st[4] = {1, m->s, m->s, 1}, two[4] = {1, 2, 2, 1};
  rf_output y = rf_conv2d(g, "conv", m->x, m->f, st, m->padding, NULL);
  rf_output z = rf_bias_add(g, "bias", y, m->b);
  rf_output r = rf_relu(g, "relu", z);
  rf_output p = rf_max_pool(g, "pool", r, two, two, "SAME");
  m->loss = rf_sum(g, "loss", rf_mul(g, NULL, p, p), NULL, -1, false);
  rf_output side = {NULL, 0};
  if (extra == 1) side = rf_sigmoid(g, "side", y);
  if (extra == 2) side = rf_sigmoid(g, "side", z);
  if (side.node)
    m->loss = rf_add(g, NULL, m->loss, rf_sum(g, NULL, side, NULL, -1, false));
  assert_graph_ok(g);
  rf_output xs3[3] = {m->x, m->f, m->b}, dxs[3];
  assert_ok(rf_gradients(g, &m->loss, 1, xs3, 3, NULL, dxs));
  rf_output f[NFETCH] = {m->loss, r, dxs[0], dxs[1], dxs[2]};
  memcpy(m->fetch, f, sizeof f);
  m->in[0] = rf_test_random_tensor(&rng, dt, xs, -1, 1);
  m->in[1] = rf_test_random_tensor(&rng, dt, fs, -1, 1);
  m->in[2] = rf_test_random_tensor(&rng, dt, rf_shape_of(1, m->oc), -1, 1);
}

static void free_block(block *m) {
  for (int i = 0; i < 3; i++) rf_tensor_release(m->in[i]);
  rf_graph_free(m->g);
}

static void options(rf_session_options *o, int mode) {
  rf_session_options_init(o);
  o->conv_epilogues = mode;
}

static rf_status *try_run(block *m, int mode, rf_tensor **out) {
  rf_session_options o;
  options(&o, mode);
  rf_session *s = NULL;
  rf_status *st = rf_session_new(m->g, &o, &s);
  if (st) return st;
  rf_feed feeds[3] = {{m->x, m->in[0]}, {m->f, m->in[1]}, {m->b, m->in[2]}};
  st = rf_session_run(s, feeds, 3, m->fetch, NFETCH, NULL, 0, out);
  rf_session_free(s);
  return st;
}

static void run(block *m, int mode, rf_tensor **out) {
  assert_ok(try_run(m, mode, out));
}

/* Nodes of `op` after lowering under `mode`. */
static int count(const block *m, int mode, const char *op) {
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

/* relu(conv(x, f) + b) in float64 (TensorFlow's SAME/VALID windows),
 * against the fetched activations. */
static void check_activations(const block *m, rf_tensor *relu, double tol) {
  int64_t oh, ow, ph, pw;
  if (strcmp(m->padding, "SAME") == 0) {
    oh = (m->h + m->s - 1) / m->s, ow = (m->w + m->s - 1) / m->s;
    int64_t th = (oh - 1) * m->s + m->k - m->h;
    int64_t tw = (ow - 1) * m->s + m->k - m->w;
    ph = th > 0 ? th / 2 : 0, pw = tw > 0 ? tw / 2 : 0;
  } else {
    oh = (m->h - m->k) / m->s + 1, ow = (m->w - m->k) / m->s + 1;
    ph = pw = 0;
  }
  double *x = rf_test_to_doubles(m->in[0]), *f = rf_test_to_doubles(m->in[1]);
  double *b = rf_test_to_doubles(m->in[2]);
  double *y = calloc((size_t)(m->n * oh * ow * m->oc), sizeof *y);
  for (int64_t n = 0; n < m->n; n++)
    for (int64_t i = 0; i < oh; i++)
      for (int64_t j = 0; j < ow; j++)
        for (int64_t o = 0; o < m->oc; o++) {
          double s = b[o];
          for (int64_t a = 0; a < m->k; a++)
            for (int64_t q = 0; q < m->k; q++) {
              int64_t ih = i * m->s - ph + a, iw = j * m->s - pw + q;
              if (ih < 0 || ih >= m->h || iw < 0 || iw >= m->w) continue;
              for (int64_t c = 0; c < m->c; c++)
                s += x[((n * m->h + ih) * m->w + iw) * m->c + c] *
                     f[((a * m->k + q) * m->c + c) * m->oc + o];
            }
          y[((n * oh + i) * ow + j) * m->oc + o] = s > 0 ? s : 0;
        }
  assert_tensor_near(relu, rf_shape_of(4, m->n, oh, ow, m->oc), y, tol);
  free(x), free(f), free(b), free(y);
}

static void check_block(rf_dtype dt) {
  for (int rep = 0; rep < 4; rep++) {
    block m;
    build(&m, dt, 0, false);
    int all = RF_CONV_EPILOGUES_ALL;
    assert_int_equal(count(&m, all, "_FusedConv2DBiasRelu"), 1);
    assert_int_equal(count(&m, all, "BiasAdd"), 0);
    assert_int_equal(count(&m, all, "Relu"), 0);
    assert_int_equal(count(&m, all, "Conv2D"), 0);
    assert_int_equal(count(&m, all, "_MaxPoolGradRelu"), 1);
    assert_int_equal(count(&m, all, "MaxPoolGrad"), 0);
    assert_int_equal(count(&m, all, "_ReluGrad"), 0);
    assert_int_equal(count(&m, RF_CONV_EPILOGUES_GPU, "_MaxPoolGradRelu"), 0);
    assert_int_equal(count(&m, RF_CONV_EPILOGUES_OFF, "_MaxPoolGradRelu"), 0);
    /* GPU devices only (none here), and off: nothing. */
    assert_int_equal(count(&m, RF_CONV_EPILOGUES_GPU, "_FusedConv2DBiasRelu"),
                     0);
    assert_int_equal(count(&m, RF_CONV_EPILOGUES_OFF, "_FusedConv2DBiasRelu"),
                     0);
    rf_session_options d;
    rf_session_options_init(&d);
    /* The default fuses on GPU devices: nothing on these CPU devices. */
    assert_int_equal(d.conv_epilogues, RF_CONV_EPILOGUES_GPU);
    assert_int_equal(count(&m, d.conv_epilogues, "_FusedConv2DBiasRelu"), 0);
    assert_int_equal(count(&m, d.conv_epilogues, "_MaxPoolGradRelu"), 0);
    rf_tensor *fused[NFETCH] = {0}, *plain[NFETCH] = {0};
    run(&m, all, fused);
    run(&m, RF_CONV_EPILOGUES_OFF, plain);
    assert_same_bits(fused, plain);
    check_activations(&m, fused[1], dt == RF_FLOAT64 ? 1e-12 : 1e-5);
    release_all(fused), release_all(plain);
    free_block(&m);
  }
}

static void test_block_float32(void **state) {
  (void)state;
  check_block(RF_FLOAT32);
}

static void test_block_float64(void **state) {
  (void)state;
  check_block(RF_FLOAT64);
}

/* The convolution read by a Sigmoid too: nothing fused. Its sum read by a
 * Sigmoid: nothing fused either (a Conv2D fuses only with its ReLU).
 * Values as unfused. */
static void test_other_readers(void **state) {
  (void)state;
  for (int extra = 1; extra <= 2; extra++) {
    block m;
    build(&m, RF_FLOAT32, extra, false);
    int all = RF_CONV_EPILOGUES_ALL;
    assert_int_equal(count(&m, all, "_FusedConv2DBiasRelu"), 0);
    assert_int_equal(count(&m, all, "BiasAdd"), 1);
    assert_int_equal(count(&m, all, "Relu"), 1);
    assert_int_equal(count(&m, all, "_MaxPoolGradRelu"), 1);
    assert_int_equal(count(&m, all, "_ReluGrad"), 0);
    rf_tensor *fused[NFETCH] = {0}, *plain[NFETCH] = {0};
    run(&m, all, fused);
    run(&m, RF_CONV_EPILOGUES_OFF, plain);
    assert_same_bits(fused, plain);
    release_all(fused), release_all(plain);
    free_block(&m);
  }
}

/* The pool's gradient fetched too (a second reader): it stays a
 * MaxPoolGrad with its _ReluGrad; the convolution still fuses. */
static void test_pool_grad_read_elsewhere(void **state) {
  (void)state;
  block m;
  build(&m, RF_FLOAT32, 0, false);
  rf_node *rg = NULL;
  for (int i = 0; i < rf_graph_num_nodes(m.g) && !rg; i++)
    if (strcmp(rf_node_op(rf_graph_node(m.g, i)), "_ReluGrad") == 0)
      rg = rf_graph_node(m.g, i);
  assert_non_null(rg);
  rf_output pg = rf_node_input(rg, 0);
  rf_output both = rf_add(m.g, NULL, pg, (rf_output){rg, 0});
  assert_graph_ok(m.g);
  m.fetch[1] = both;
  int all = RF_CONV_EPILOGUES_ALL;
  assert_int_equal(count(&m, all, "_MaxPoolGradRelu"), 0);
  assert_int_equal(count(&m, all, "MaxPoolGrad"), 1);
  assert_int_equal(count(&m, all, "_FusedConv2DBiasRelu"), 1);
  rf_tensor *fused[NFETCH] = {0}, *plain[NFETCH] = {0};
  run(&m, all, fused);
  run(&m, RF_CONV_EPILOGUES_OFF, plain);
  assert_same_bits(fused, plain);
  release_all(fused), release_all(plain);
  free_block(&m);
}

static void test_bad_option(void **state) {
  (void)state;
  block m;
  build(&m, RF_FLOAT32, 0, false);
  rf_session_options o;
  options(&o, 3);
  rf_graph *low = NULL;
  assert_status(rf_graph_lower(m.g, &o, &low), RF_INVALID_ARGUMENT,
                "conv_epilogues must be");
  assert_null(low);
  rf_tensor *out[NFETCH] = {0};
  assert_status(try_run(&m, -1, out), RF_INVALID_ARGUMENT,
                "conv_epilogues must be");
  assert_null(out[0]);
  free_block(&m);
}

/* b's length is unknown until fed: a wrong one fails in the fused node with
 * BiasAdd's message, and the session runs again afterwards. */
static void test_bias_mismatch_names_fused_node(void **state) {
  (void)state;
  block m;
  build(&m, RF_FLOAT32, 0, true);
  int all = RF_CONV_EPILOGUES_ALL;
  assert_int_equal(count(&m, all, "_FusedConv2DBiasRelu"), 1);
  rf_tensor *good = m.in[2];
  m.in[2] =
      rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(1, m.oc + 1), -1, 1);
  rf_tensor *out[NFETCH] = {0};
  rf_status *st = try_run(&m, all, out);
  assert_non_null(st);
  assert_int_equal(rf_status_code(st), RF_INVALID_ARGUMENT);
  assert_non_null(strstr(rf_status_message(st), "_FusedConv2DBiasRelu"));
  rf_status_free(st);
  assert_null(out[0]);
  rf_tensor_release(m.in[2]);
  m.in[2] = good;
  rf_tensor *fused[NFETCH] = {0}, *plain[NFETCH] = {0};
  run(&m, all, fused);
  run(&m, RF_CONV_EPILOGUES_OFF, plain);
  assert_same_bits(fused, plain);
  release_all(fused), release_all(plain);
  free_block(&m);
}

/* ---- the fused kernels' fallback and error paths ---- */

/* The node of `op` in the graph lowered under RF_CONV_EPILOGUES_ALL; *low
 * owns it. */
static rf_node *lowered_node(const block *m, const char *op, rf_graph **low) {
  rf_session_options o;
  options(&o, RF_CONV_EPILOGUES_ALL);
  assert_ok(rf_graph_lower(m->g, &o, low));
  for (int i = 0; i < rf_graph_num_nodes(*low); i++)
    if (strcmp(rf_node_op(rf_graph_node(*low, i)), op) == 0)
      return rf_graph_node(*low, i);
  fail_msg("no %s in the lowered graph", op);
  return NULL;
}

static char last_warning[1024];
static int warnings;

static void on_warning(rf_log_level level, const char *msg, void *user) {
  (void)user;
  if (level != RF_LOG_WARN) return;
  snprintf(last_warning, sizeof last_warning, "%s", msg);
  warnings++;
}

/* One fallback as conv.cu's _FusedConv2DBiasRelu takes it where cuDNN says
 * NOT_SUPPORTED: output 0 allocated for the fused call, the warning, then
 * the unfused kernels, which put their result in output 0's place. */
static void fall_back(rf__kernel_ctx *ctx, rf_tensor **out) {
  rf__conv_geom geo;
  assert_ok(rf__conv2d_prepare(ctx, &geo));
  rf_shape s = rf_shape_of(4, geo.n, geo.oh, geo.ow, geo.oc);
  assert_ok(rf__kernel_alloc_output(ctx, 0, RF_FLOAT32, &s, out));
  rf__kernel_log_unfused(ctx, "Conv2D, BiasAdd, Relu",
                         "cuDNN does not take the bias and ReLU");
  assert_ok(rf__fused_conv_bias_relu_unfused(ctx));
}

/* The fallback gives relu(conv + b) (float64 reference), says so once a
 * call through the log sink naming the node, op, device, reason and the
 * unfused kernels, and leaks nothing (the output allocated for the fused
 * call is released when the unfused one takes its place). */
static void test_fallback_after_fused_call_refused(void **state) {
  (void)state;
  block m;
  build(&m, RF_FLOAT32, 0, false);
  rf_graph *low = NULL;
  rf_node *node = lowered_node(&m, "_FusedConv2DBiasRelu", &low);
  rf__device dev;
  memset(&dev, 0, sizeof dev);
  strcpy(dev.canonical, "gpu:7");
  dev.allocator = rf_default_allocator();
  rf_tensor *out = NULL;
  rf__kernel_ctx ctx = {.node = node,
                        .num_inputs = 3,
                        .inputs = m.in,
                        .num_outputs = 1,
                        .outputs = &out,
                        .device = &dev};
  fall_back(&ctx, &out); /* first: oneDNN's cached primitives stay */
  rf_tensor_release(out);
  out = NULL;
  rf_default_allocator_trim();
  int64_t live = rf_debug_live_allocations();
  warnings = 0;
  assert_ok(rf_set_log_callback(RF_LOG_WARN, on_warning, NULL));
  fall_back(&ctx, &out);
  assert_ok(rf_set_log_callback(RF_LOG_WARN, NULL, NULL));
  assert_int_equal(warnings, 1);
  char want[512];
  snprintf(want, sizeof want,
           "node '%s' (_FusedConv2DBiasRelu) on gpu:7: cuDNN does not take "
           "the bias and ReLU; it runs the unfused kernels (Conv2D, BiasAdd, "
           "Relu) at this shape",
           rf_node_name(node));
  assert_string_equal(last_warning, want);
  check_activations(&m, out, 1e-5);
  rf_tensor_release(out);
  rf_default_allocator_trim();
  assert_int_equal(rf_debug_live_allocations(), live);
  rf_graph_free(low);
  free_block(&m);
}

/* Both fused kernels under allocation faults: RESOURCE_EXHAUSTED, no
 * output and no leak at every failure point (the nested kernels'
 * intermediates are released). */
static void test_fused_kernels_under_faults(void **state) {
  (void)state;
  for (int d = 0; d < 2; d++) {
    rf_dtype dt = d ? RF_FLOAT64 : RF_FLOAT32;
    block m;
    build(&m, dt, 0, false);
    rf_graph *low = NULL;
    rf_node *conv = lowered_node(&m, "_FusedConv2DBiasRelu", &low);
    rf_test_kernel_under_faults(conv, m.in);
    rf_graph_free(low);
    rf_node *pool = lowered_node(&m, "_MaxPoolGradRelu", &low);
    rf_tensor *in[3]; /* orig_input, orig_output, grad */
    for (int i = 0; i < 3; i++)
      in[i] = rf_test_random_tensor(
          &rng, dt, rf_output_shape(rf_node_input(pool, i)), -1, 1);
    rf_test_kernel_under_faults(pool, in);
    for (int i = 0; i < 3; i++) rf_tensor_release(in[i]);
    rf_graph_free(low);
    free_block(&m);
  }
}

/* Lowering under RF_CONV_EPILOGUES_ALL: the graph with both fused ops. */
static rf_status *lower_attempt(void *arg) {
  const block *m = arg;
  rf_session_options o;
  options(&o, RF_CONV_EPILOGUES_ALL);
  rf_graph *low = NULL;
  rf_status *st = rf_graph_lower(m->g, &o, &low);
  if (st) {
    assert_null(low);
    return st;
  }
  int conv = 0, pool = 0, left = 0;
  for (int i = 0; i < rf_graph_num_nodes(low); i++) {
    const char *op = rf_node_op(rf_graph_node(low, i));
    conv += strcmp(op, "_FusedConv2DBiasRelu") == 0;
    pool += strcmp(op, "_MaxPoolGradRelu") == 0;
    left += strcmp(op, "Relu") == 0 || strcmp(op, "_ReluGrad") == 0;
  }
  rf_graph_free(low);
  if (conv != 1 || pool != 1 || left != 0)
    fail_msg(
        "lowered with %d _FusedConv2DBiasRelu, %d _MaxPoolGradRelu and "
        "%d Relu or _ReluGrad",
        conv, pool, left);
  return NULL;
}

/* Every allocation of lowering with the pass on fails once, and from then
 * on: RESOURCE_EXHAUSTED without a leak, or the fused graph. */
static void test_lowering_under_faults(void **state) {
  (void)state;
  block m;
  build(&m, RF_FLOAT32, 0, false);
  fs_plan p = {.what = "lowering with conv epilogues",
               .attempt = lower_attempt,
               .arg = &m,
               .first_n = 100000,
               .max_attempts = 1,
               .check_leaks = true};
  fs_result after = fs_sweep(&p, FS_AFTER), once = fs_sweep(&p, FS_ONCE);
  assert_true(after.failures > 0 && once.failures > 0);
  free_block(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_block_float32),
      cmocka_unit_test(test_block_float64),
      cmocka_unit_test(test_other_readers),
      cmocka_unit_test(test_pool_grad_read_elsewhere),
      cmocka_unit_test(test_bad_option),
      cmocka_unit_test(test_bias_mismatch_names_fused_node),
      cmocka_unit_test(test_fallback_after_fused_call_refused),
      cmocka_unit_test(test_fused_kernels_under_faults),
      cmocka_unit_test(test_lowering_under_faults),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
