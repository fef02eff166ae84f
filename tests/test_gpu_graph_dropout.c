/* tests/test_gpu_graph_dropout.c - a step with Dropout on gpu:0 is captured
 * as a CUDA graph (rf_session_options.gpu_graphs) and each replay draws its
 * own step's mask: over several steps of fresh inputs the outputs and masks
 * of a session with graphs are bit-identical to those of a session without,
 * to the CPU kernel's on cpu:k for the same device index k, and to the
 * documented key (kernels/philox.h), so no two steps share a mask. Skips
 * without a GPU. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kernels/philox.h"
#include "ringflow/log.h"
#include "testutil.h"

enum { STEPS = 6, SEED = 4242 };
static const double kRate = 0.3;

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int captured, not_captured;

static void on_log(rf_log_level level, const char *msg, void *user) {
  (void)level;
  (void)user;
  pthread_mutex_lock(&log_mu);
  if (strstr(msg, "gpu graphs: captured the step")) captured++;
  if (strstr(msg, "is not captured")) not_captured++;
  pthread_mutex_unlock(&log_mu);
}

static uint64_t next_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* y, mask = Dropout(x * 3) on `dev`, x of n floats. */
static rf_graph *build(const char *dev, int64_t n, rf_output *x,
                       rf_output fetch[2]) {
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, dev));
  *x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, n));
  rf_output three = rf_const_scalar(g, "three", RF_FLOAT32, 3.0);
  rf_output y = rf_dropout(g, "drop", rf_mul(g, "x3", *x, three), kRate, SEED);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  fetch[0] = y;
  fetch[1] = (rf_output){y.node, 1};
  return g;
}

/* Runs STEPS steps of the inputs xs; got[step][0..1]: y and the mask. */
static void run(rf_session *s, rf_output x, const rf_output fetch[2],
                rf_tensor *const *xs, rf_tensor *got[STEPS][2]) {
  for (int k = 0; k < STEPS; k++) {
    rf_feed f = {x, xs[k]};
    assert_ok(rf_session_run(s, &f, 1, fetch, 2, NULL, 0, got[k]));
  }
}

static void test_replayed_dropout_masks(void **state) {
  (void)state;
  rf_test_need_gpu();
  const int64_t n = 70001; /* many blocks, a ragged end */
  uint64_t rng = 31337;
  rf_tensor *xs[STEPS];
  for (int k = 0; k < STEPS; k++) {
    rf_shape sh = rf_shape_of(1, n);
    assert_ok(rf_tensor_new(RF_FLOAT32, &sh, NULL, &xs[k]));
    float *p = rf_tensor_mutable_data(xs[k]);
    for (int64_t i = 0; i < n; i++)
      p[i] = (float)(int)(next_rand(&rng) % 2001) / 16.0f - 62.5f;
  }
  rf_tensor *got[3][STEPS][2]; /* graphs on, off, CPU */
  int index = 0;
  for (int mode = 0; mode < 3; mode++) {
    rf_session_options o;
    rf_session_options_init(&o);
    o.num_threads = 2;
    char dev[32] = "gpu:0";
    if (mode < 2) {
      o.num_gpu_devices = 1;
      o.gpu_graphs = mode == 0;
      index = o.num_cpu_devices; /* gpu:0 follows the CPU devices */
    } else {                     /* cpu:index: the same key as gpu:0 had */
      o.num_cpu_devices = index + 1;
      snprintf(dev, sizeof dev, "cpu:%d", index);
    }
    rf_output x, fetch[2];
    rf_graph *g = build(dev, n, &x, fetch);
    rf_session *s = NULL;
    assert_ok(rf_session_new(g, &o, &s));
    captured = not_captured = 0;
    if (mode == 0) assert_ok(rf_set_log_callback(RF_LOG_INFO, on_log, NULL));
    run(s, x, fetch, xs, got[mode]);
    if (mode == 0) {
      assert_ok(rf_set_log_callback(RF_LOG_INFO, NULL, NULL));
      assert_int_equal(not_captured, 0);
      assert_int_equal(captured, 1); /* step 2; steps 3.. replay it */
    }
    rf_session_free(s);
    rf_graph_free(g);
  }
  for (int k = 0; k < STEPS; k++) {
    for (int o = 0; o < 2; o++) /* the same kernel: bit-identical */
      if (memcmp(rf_tensor_data(got[0][k][o]), rf_tensor_data(got[1][k][o]),
                 (size_t)n * sizeof(float)))
        fail_msg("step %d: %s with graphs differs from without", k + 1,
                 o ? "the mask" : "y");
    const float *m = rf_tensor_data(got[0][k][1]);
    const float *y = rf_tensor_data(got[0][k][0]);
    const float *cm = rf_tensor_data(got[2][k][1]);
    const float *cy = rf_tensor_data(got[2][k][0]);
    const float *x = rf_tensor_data(xs[k]);
    for (int64_t i = 0; i < n; i++) {
      bool keep = rf__dropout_keep(SEED, k + 1, index, i, kRate);
      double want = keep ? 3.0 * x[i] / (1 - kRate) : 0;
      if ((m[i] != 0) != keep || (cm[i] != 0) != keep ||
          fabs(m[i] - cm[i]) > 1e-6 * fabs(cm[i]) ||
          fabs(y[i] - want) > 1e-5 * (1 + fabs(want)) ||
          fabs(cy[i] - want) > 1e-5 * (1 + fabs(want)))
        fail_msg(
            "step %d element %lld: mask %g (CPU %g), y %g (CPU %g), "
            "the key says keep %d, y %g",
            k + 1, (long long)i, m[i], cm[i], y[i], cy[i], keep, want);
    }
  }
  for (int mode = 0; mode < 3; mode++)
    for (int k = 0; k < STEPS; k++) {
      rf_tensor_release(got[mode][k][0]);
      rf_tensor_release(got[mode][k][1]);
    }
  for (int k = 0; k < STEPS; k++) rf_tensor_release(xs[k]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replayed_dropout_masks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
