/* tests/test_tf32.c - rf_session_options.allow_tf32: off by default, 0 or 1
 * only (INVALID_ARGUMENT naming the value otherwise). On CPU devices it
 * changes nothing: float32 MatMul and BatchMatMul give the same bits either
 * way, within float tolerance of a float64 reference. On a GPU (skipped
 * without one): off, both products are plain float32 (within float32's
 * bound of the float64 reference); on, they differ from that float32 result
 * and stay within TF32's bound (inputs rounded to 10 mantissa bits:
 * |error| <= 2^-10 * sum_k |a_ik b_kj|, plus float32's share). The same
 * for cuDNN's convolutions (Conv2D and its filter gradient): off within
 * float32's bound; on within TF32's, and at least one of the two differs
 * from float32 (cuDNN's default math may still pick an FMA algorithm for
 * one of them: on an H100 it did for both at 4x12x12x32, session 16, so the
 * sizes are those of a CNN's middle layer). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

enum { M = 96, K = 512, N = 80, BATCH = 3 };

typedef struct products {
  rf_graph *g;
  rf_output a, b, ba,
      bb;           /* placeholders: (M,K) (K,N) (BATCH,M,K) (BATCH,K,N) */
  rf_output out[2]; /* MatMul, BatchMatMul */
  rf_tensor *in[4];
} products;

static void build(products *p, const char *device, uint64_t *rng) {
  p->g = rf_graph_new();
  assert_ok(rf_graph_push_device(p->g, device));
  rf_shape s[4] = {rf_shape_of(2, M, K), rf_shape_of(2, K, N),
                   rf_shape_of(3, BATCH, M, K), rf_shape_of(3, BATCH, K, N)};
  rf_output *ph[4] = {&p->a, &p->b, &p->ba, &p->bb};
  for (int i = 0; i < 4; i++) {
    *ph[i] = rf_placeholder(p->g, NULL, RF_FLOAT32, s[i]);
    p->in[i] = rf_test_random_tensor(rng, RF_FLOAT32, s[i], -1, 1);
  }
  p->out[0] = rf_matmul(p->g, NULL, p->a, p->b, false, false);
  p->out[1] = rf_batch_matmul(p->g, NULL, p->ba, p->bb, false, false);
  rf_graph_pop_device(p->g);
  assert_graph_ok(p->g);
}

static void release(products *p) {
  for (int i = 0; i < 4; i++) rf_tensor_release(p->in[i]);
  rf_graph_free(p->g);
}

/* Runs p in a session of `gpus` GPU devices with allow_tf32 = tf32. */
static void run(const products *p, int gpus, int tf32, rf_tensor **out) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_gpu_devices = gpus;
  o.allow_tf32 = tf32;
  rf_session *s;
  assert_ok(rf_session_new(p->g, &o, &s));
  rf_output in[4] = {p->a, p->b, p->ba, p->bb};
  rf_feed feeds[4];
  for (int i = 0; i < 4; i++) feeds[i] = (rf_feed){in[i], p->in[i]};
  assert_ok(rf_session_run(s, feeds, 4, p->out, 2, NULL, 0, out));
  rf_session_free(s);
}

/* Element (r, c) of product `which` (0: MatMul; 1: BatchMatMul, batch bt)
 * in float64, and the sum of its terms' magnitudes. */
static double reference(const products *p, int which, int bt, int r, int c,
                        double *mag) {
  const float *a = rf_tensor_data(p->in[which ? 2 : 0]),
              *b = rf_tensor_data(p->in[which ? 3 : 1]);
  if (which) {
    a += (size_t)bt * M * K;
    b += (size_t)bt * K * N;
  }
  double sum = 0;
  *mag = 0;
  for (int k = 0; k < K; k++) {
    double t = (double)a[r * K + k] * (double)b[k * N + c];
    sum += t;
    *mag += fabs(t);
  }
  return sum;
}

/* The largest |out - reference| / sum |terms| over both products. */
static double worst_error(const products *p, rf_tensor **out) {
  double worst = 0;
  for (int w = 0; w < 2; w++) {
    const float *o = rf_tensor_data(out[w]);
    for (int bt = 0; bt < (w ? BATCH : 1); bt++)
      for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) {
          double mag, ref = reference(p, w, bt, r, c, &mag);
          double e = fabs(o[((size_t)bt * M + r) * N + c] - ref) / mag;
          if (e > worst) worst = e;
        }
  }
  return worst;
}

static bool same_bits(const rf_tensor *x, const rf_tensor *y) {
  return rf_tensor_nbytes(x) == rf_tensor_nbytes(y) &&
         memcmp(rf_tensor_data(x), rf_tensor_data(y), rf_tensor_nbytes(x)) == 0;
}

/* float32 sums of K terms: at most K * 2^-24 of the magnitudes (much less
 * in practice); TF32's input rounding: 2^-10 more. */
static const double F32_BOUND = K * 0x1p-24, TF32_BOUND = 0x1p-10 + K * 0x1p-24;

static void test_default_off(void **state) {
  (void)state;
  rf_session_options o;
  rf_session_options_init(&o);
  assert_int_equal(o.allow_tf32, 0);
}

static void test_bad_values(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  rf_const_scalar(g, "c", RF_FLOAT32, 1);
  const int bad[] = {2, -1, 32};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    rf_session_options o;
    rf_session_options_init(&o);
    o.allow_tf32 = bad[i];
    rf_session *s = (rf_session *)&o; /* untouched on error */
    char want[64];
    snprintf(want, sizeof want, "allow_tf32 must be 0 or 1, got %d", bad[i]);
    assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT, want);
    assert_ptr_equal(s, (rf_session *)&o);
  }
  rf_graph_free(g);
}

static void test_cpu_unchanged(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(32);
  products p;
  build(&p, "cpu:0", &rng);
  rf_tensor *off[2], *on[2];
  run(&p, 0, 0, off);
  run(&p, 0, 1, on);
  assert_true(same_bits(off[0], on[0]) && same_bits(off[1], on[1]));
  double e = worst_error(&p, off);
  assert_true(e <= F32_BOUND);
  for (int w = 0; w < 2; w++) {
    rf_tensor_release(off[w]);
    rf_tensor_release(on[w]);
  }
  release(&p);
}

static void test_gpu_tf32(void **state) {
  (void)state;
  rf_test_need_gpu();
  uint64_t rng = rf_test_rng(33);
  products p;
  build(&p, "gpu:0", &rng);
  rf_tensor *off[2], *on[2];
  run(&p, 1, 0, off);
  run(&p, 1, 1, on);
  double e_off = worst_error(&p, off), e_on = worst_error(&p, on);
  printf("worst error / sum |terms|: float32 %.3g, TF32 %.3g\n", e_off, e_on);
  assert_true(e_off <= F32_BOUND);
  assert_true(e_on <= TF32_BOUND);
  /* TF32 was used, in both */
  assert_false(same_bits(off[0], on[0]));
  assert_false(same_bits(off[1], on[1]));
  for (int w = 0; w < 2; w++) {
    rf_tensor_release(off[w]);
    rf_tensor_release(on[w]);
  }
  release(&p);
}

/* Conv2D (VALID, stride 1) of x (CN, CH, CW, CC) with f (CK, CK, CC, CO),
 * and its filter gradient for dy (CN, OH, OW, CO). */
enum { CN = 16, CH = 32, CW = 32, CC = 64, CK = 3, CO = 64 };
enum { OH = CH - CK + 1, OW = CW - CK + 1 };

typedef struct convs {
  rf_graph *g;
  rf_output x, f, dy, out[2]; /* Conv2D, Conv2DBackpropFilter */
  rf_tensor *in[3];
} convs;

static void build_convs(convs *p, uint64_t *rng) {
  p->g = rf_graph_new();
  assert_ok(rf_graph_push_device(p->g, "gpu:0"));
  rf_shape s[3] = {rf_shape_of(4, CN, CH, CW, CC),
                   rf_shape_of(4, CK, CK, CC, CO),
                   rf_shape_of(4, CN, OH, OW, CO)};
  rf_output *ph[3] = {&p->x, &p->f, &p->dy};
  for (int i = 0; i < 3; i++) {
    *ph[i] = rf_placeholder(p->g, NULL, RF_FLOAT32, s[i]);
    p->in[i] = rf_test_random_tensor(rng, RF_FLOAT32, s[i], -1, 1);
  }
  const int64_t ones[4] = {1, 1, 1, 1};
  p->out[0] = rf_conv2d(p->g, NULL, p->x, p->f, ones, "VALID", ones);
  int32_t fs[4] = {CK, CK, CC, CO};
  rf_shape v = rf_shape_of(1, 4);
  rf_tensor *t;
  assert_ok(rf_tensor_new_copy(RF_INT32, &v, fs, &t));
  rf_output sizes = rf_const(p->g, NULL, t);
  rf_tensor_release(t);
  p->out[1] = rf_conv2d_backprop_filter(p->g, NULL, p->x, sizes, p->dy, ones,
                                        "VALID", ones);
  rf_graph_pop_device(p->g);
  assert_graph_ok(p->g);
}

static void run_convs(const convs *p, int tf32, rf_tensor **out) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_gpu_devices = 1;
  o.allow_tf32 = tf32;
  rf_session *s;
  assert_ok(rf_session_new(p->g, &o, &s));
  rf_feed feeds[3] = {{p->x, p->in[0]}, {p->f, p->in[1]}, {p->dy, p->in[2]}};
  assert_ok(rf_session_run(s, feeds, 3, p->out, 2, NULL, 0, out));
  rf_session_free(s);
}

/* The largest |out - reference| / sum |terms| of the forward (which 0) or
 * the filter gradient (1). */
static double conv_error(const convs *p, int which, const rf_tensor *out) {
  const float *x = rf_tensor_data(p->in[0]), *f = rf_tensor_data(p->in[1]),
              *dy = rf_tensor_data(p->in[2]), *o = rf_tensor_data(out);
  double worst = 0;
  if (which == 0) {
    for (int n = 0; n < CN; n++)
      for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++)
          for (int co = 0; co < CO; co++) {
            double sum = 0, mag = 0;
            for (int kh = 0; kh < CK; kh++)
              for (int kw = 0; kw < CK; kw++)
                for (int c = 0; c < CC; c++) {
                  double t =
                      (double)x[((n * CH + oh + kh) * CW + ow + kw) * CC + c] *
                      (double)f[((kh * CK + kw) * CC + c) * CO + co];
                  sum += t;
                  mag += fabs(t);
                }
            double e = fabs(o[((n * OH + oh) * OW + ow) * CO + co] - sum) / mag;
            if (e > worst) worst = e;
          }
    return worst;
  }
  for (int kh = 0; kh < CK; kh++)
    for (int kw = 0; kw < CK; kw++)
      for (int c = 0; c < CC; c++)
        for (int co = 0; co < CO; co++) {
          double sum = 0, mag = 0;
          for (int n = 0; n < CN; n++)
            for (int oh = 0; oh < OH; oh++)
              for (int ow = 0; ow < OW; ow++) {
                double t =
                    (double)x[((n * CH + oh + kh) * CW + ow + kw) * CC + c] *
                    (double)dy[((n * OH + oh) * OW + ow) * CO + co];
                sum += t;
                mag += fabs(t);
              }
          double e = fabs(o[((kh * CK + kw) * CC + c) * CO + co] - sum) / mag;
          if (e > worst) worst = e;
        }
  return worst;
}

static void test_gpu_conv_tf32(void **state) {
  (void)state;
  rf_test_need_gpu();
  uint64_t rng = rf_test_rng(34);
  convs p;
  build_convs(&p, &rng);
  rf_tensor *off[2], *on[2];
  run_convs(&p, 0, off);
  run_convs(&p, 1, on);
  /* the longest sum: the filter gradient's CN * OH * OW terms */
  const double f32 = CN * OH * OW * 0x1p-24, tf32 = 0x1p-10 + f32;
  bool differs = false;
  for (int w = 0; w < 2; w++) {
    double e_off = conv_error(&p, w, off[w]), e_on = conv_error(&p, w, on[w]);
    bool d = !same_bits(off[w], on[w]);
    printf(
        "%s: worst error / sum |terms|: float32 %.3g, TF32 allowed %.3g "
        "(%s)\n",
        w ? "filter gradient" : "Conv2D", e_off, e_on,
        d ? "differs" : "the same bits");
    assert_true(e_off <= f32);
    assert_true(e_on <= tf32);
    differs = differs || d;
  }
  assert_true(differs);
  for (int w = 0; w < 2; w++) {
    rf_tensor_release(off[w]);
    rf_tensor_release(on[w]);
  }
  for (int i = 0; i < 3; i++) rf_tensor_release(p.in[i]);
  rf_graph_free(p.g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_default_off),   cmocka_unit_test(test_bad_values),
      cmocka_unit_test(test_cpu_unchanged), cmocka_unit_test(test_gpu_tf32),
      cmocka_unit_test(test_gpu_conv_tf32),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
