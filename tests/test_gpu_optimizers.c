/* tests/test_gpu_optimizers.c - ApplyMomentum (plain and Nesterov) and
 * ApplyAdamW on gpu:0 against the CPU kernels: three steps on the same
 * random data, every float dtype, var and slots compared after the steps; and
 * the run-time errors (one variable twice, an uninitialised slot) on the GPU.
 * Skips without a GPU (tests/gpu_compare.h). */
#include "gpu_compare.h"

enum { MOMENTUM, NESTEROV, ADAMW, NUM_KINDS };

static rf_tensor *scalar(rf_dtype dt, double v) {
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new_scalar(dt, v, &t));
  return t;
}

/* Runs three steps of `kind` on cpu:0 or the GPU from `seed`; out[0..2]
 * get var, then the slots (accum; m, v), NULL after the last. */
static void run_steps(int gpu, int kind, rf_dtype dt, uint64_t seed,
                      rf_tensor **out) {
  uint64_t rng = seed;
  rf_shape sh = rf_shape_of(2, 33, 65); /* odd: a partial last block */
  int nv = kind == ADAMW ? 3 : 2;
  static const char *const names[3] = {"var", "s1", "s2"};
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, gpu ? gc_device() : "cpu:0"));
  rf_output vars[3], inits[3], reads[3], sc[7];
  rf_node *assigns[3];
  for (int k = 0; k < nv; k++) {
    vars[k] = rf_variable(g, names[k], dt, sh);
    inits[k] = rf_placeholder(g, NULL, dt, sh);
    assigns[k] = rf_assign(g, NULL, vars[k], inits[k]);
    reads[k] = rf_read_variable(g, NULL, vars[k]);
  }
  for (int i = 0; i < 7; i++)
    sc[i] = rf_placeholder(g, NULL, dt, rf_shape_scalar());
  rf_output grad = rf_placeholder(g, "grad", dt, sh);
  rf_node *up =
      kind == ADAMW
          ? rf_apply_adamw(g, "up", vars[0], vars[1], vars[2], sc[0], sc[1],
                           sc[2], sc[3], sc[4], sc[5], sc[6], grad)
          : rf_apply_momentum(g, "up", vars[0], vars[1], sc[0], grad, sc[1],
                              kind == NESTEROV);
  rf_graph_pop_device(g);
  rf_session_options o = gc_options(gpu);
  rf_session *s = NULL;
  assert_graph_ok(g);
  assert_ok(rf_session_new(g, &o, &s));
  rf_feed f[8];
  rf_tensor *init[3];
  for (int k = 0; k < nv; k++) {
    /* v starts >= 0, as a second moment does */
    init[k] = gc_random(&rng, dt, sh, kind == ADAMW && k == 2 ? 0 : -1, 1);
    f[k] = (rf_feed){inits[k], init[k]};
  }
  assert_ok(rf_session_run(s, f, nv, NULL, 0, assigns, nv, NULL));
  for (int k = 0; k < nv; k++) rf_tensor_release(init[k]);
  for (int step = 1; step <= 3; step++) {
    double b1 = 0.9, b2 = 0.999;
    double adamw[7] = {pow(b1, step), pow(b2, step), 0.01, b1, b2,
                       1e-3,          0.1 * step};
    double momentum[2] = {0.05 * step, 0.9};
    int ns = kind == ADAMW ? 7 : 2;
    rf_tensor *sv[7];
    for (int i = 0; i < ns; i++) {
      sv[i] = scalar(dt, kind == ADAMW ? adamw[i] : momentum[i]);
      f[i] = (rf_feed){sc[i], sv[i]};
    }
    rf_tensor *gv = gc_random(&rng, dt, sh, -1, 1);
    f[ns] = (rf_feed){grad, gv};
    assert_ok(rf_session_run(s, f, ns + 1, NULL, 0, &up, 1, NULL));
    for (int i = 0; i < ns; i++) rf_tensor_release(sv[i]);
    rf_tensor_release(gv);
  }
  assert_ok(rf_session_run(s, NULL, 0, reads, nv, NULL, 0, out));
  out[nv] = NULL;
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_gpu_matches_cpu(void **state) {
  (void)state;
  gc_need_gpu();
  for (int kind = 0; kind < NUM_KINDS; kind++)
    for (int d = 0; d < GC_COUNT(gc_floats); d++) {
      rf_dtype dt = gc_floats[d];
      uint64_t seed = gc_rng(40 + 10 * (uint64_t)kind + (uint64_t)d);
      rf_tensor *cpu[4], *gpu[4];
      run_steps(0, kind, dt, seed, cpu);
      run_steps(1, kind, dt, seed, gpu);
      for (int k = 0; cpu[k]; k++) {
        double *w = rf_test_to_doubles(cpu[k]);
        assert_tensor_near(gpu[k], rf_tensor_shape(cpu[k]), w,
                           rf_test_tolerance(dt));
        free(w);
        rf_tensor_release(cpu[k]);
        rf_tensor_release(gpu[k]);
      }
    }
}

static void test_gpu_errors(void **state) {
  (void)state;
  gc_need_gpu();
  rf_shape sh = rf_shape_of(1, 4);
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, gc_device()));
  rf_output x = rf_variable(g, "x", RF_FLOAT32, sh);
  rf_output never = rf_variable(g, "never", RF_FLOAT32, sh);
  rf_output init = rf_placeholder(g, "init", RF_FLOAT32, sh);
  rf_node *assign = rf_assign(g, "assign", x, init);
  rf_output one = rf_const_scalar(g, "one", RF_FLOAT32, 0.5);
  rf_output grad = rf_placeholder(g, "grad", RF_FLOAT32, sh);
  rf_node *twice = rf_apply_momentum(g, "twice", x, x, one, grad, one, false);
  rf_node *uninit =
      rf_apply_adamw(g, "uninit", x, never, rf_variable(g, "v", RF_FLOAT32, sh),
                     one, one, one, one, one, one, one, grad);
  rf_graph_pop_device(g);
  rf_session_options o = gc_options(1);
  rf_session *s = NULL;
  assert_graph_ok(g);
  assert_ok(rf_session_new(g, &o, &s));
  uint64_t rng = gc_rng(90);
  rf_tensor *xv = gc_random(&rng, RF_FLOAT32, sh, -1, 1);
  rf_feed f = {init, xv};
  assert_ok(rf_session_run(s, &f, 1, NULL, 0, &assign, 1, NULL));
  f = (rf_feed){grad, xv};
  assert_status(rf_session_run(s, &f, 1, NULL, 0, &twice, 1, NULL),
                RF_INVALID_ARGUMENT,
                "var and accum must be two different variables");
  char want[96];
  snprintf(want, sizeof want, "variable 'never' on %s is not initialized",
           gc_device());
  assert_status(rf_session_run(s, &f, 1, NULL, 0, &uninit, 1, NULL),
                RF_FAILED_PRECONDITION, want);
  rf_tensor_release(xv);
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gpu_matches_cpu),
      cmocka_unit_test(test_gpu_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
