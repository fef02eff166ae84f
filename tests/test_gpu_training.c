/* tests/test_gpu_training.c - state and gradients on gpu:0 against the CPU:
 * variables assigned, read and updated by ApplyGradientDescent and ApplyAdam
 * over several steps (every float dtype), a snapshot read before an update in
 * the same step keeping its value (copy-on-write of a device value), an
 * uninitialised variable, AssignMul (the same bits as the CPU's), a Const
 * read by many steps, and the gradients of a small network through
 * rf_gradients (MatMul, BiasAdd, activations, broadcasting arithmetic,
 * Reshape, softmax, cross-entropy, Sum, Mean) matching the CPU's. Skips without
 * a GPU (tests/gpu_compare.h). */
#include "gpu_compare.h"

static rf_session *session(rf_graph *g, int gpu) {
  rf_session_options o = gc_options(gpu);
  rf_session *s = NULL;
  assert_graph_ok(g);
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

static rf_tensor *scalar(rf_dtype dt, double v) {
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new_scalar(dt, v, &t));
  return t;
}

/* ---- variables and optimizers ---- */

enum { SNAPSHOTS = 9 };

typedef struct opt_graph {
  rf_output v, m, a, init, dinit, alpha, delta, sc[6], grad;
  rf_output read_v, read_m, read_a;
  rf_node *assign_v, *assign_m, *assign_a, *gd, *adam, *gd2;
} opt_graph;

static void build_opt(rf_graph *g, rf_dtype dt, rf_shape sh, opt_graph *o) {
  static const char *const names[6] = {"b1p", "b2p", "lr", "b1", "b2", "eps"};
  o->v = rf_variable(g, "v", dt, sh);
  o->m = rf_variable(g, "m", dt, sh);
  o->a = rf_variable(g, "a", dt, sh);
  o->init = rf_placeholder(g, "init", dt, sh);
  o->dinit = rf_placeholder(g, "zeros", dt, sh);
  o->alpha = rf_placeholder(g, "alpha", dt, rf_shape_scalar());
  o->delta = rf_placeholder(g, "delta", dt, sh);
  o->grad = rf_placeholder(g, "grad", dt, sh);
  for (int i = 0; i < 6; i++)
    o->sc[i] = rf_placeholder(g, names[i], dt, rf_shape_scalar());
  o->assign_v = rf_assign(g, "assign_v", o->v, o->init);
  o->assign_m = rf_assign(g, "assign_m", o->m, o->dinit);
  o->assign_a = rf_assign(g, "assign_a", o->a, o->dinit);
  o->read_v = rf_read_variable(g, "read_v", o->v);
  o->read_m = rf_read_variable(g, "read_m", o->m);
  o->read_a = rf_read_variable(g, "read_a", o->a);
  o->gd = rf_apply_gradient_descent(g, "gd", o->v, o->alpha, o->delta);
  o->adam = rf_apply_adam(g, "adam", o->v, o->m, o->a, o->sc[0], o->sc[1],
                          o->sc[2], o->sc[3], o->sc[4], o->sc[5], o->grad);
  /* A second update that must wait for read_v: read_v's snapshot taken in
   * the same step must keep the old value. */
  rf_node *snap = rf_identity(g, "snap", o->read_v).node;
  o->gd2 = rf_apply_gradient_descent(g, "gd2", o->v, o->alpha, o->delta);
  assert_ok(rf_graph_add_control_edge(g, snap, o->gd2));
}

/* Runs the schedule on cpu:0 or on the GPU; out[0, SNAPSHOTS) get the values
 * seen along the way. Inputs come from `seed`, the same for both. */
static void run_opt(int gpu, rf_dtype dt, uint64_t seed, rf_tensor **out) {
  uint64_t rng = seed;
  int64_t dims[2] = {4, 6};
  rf_shape sh = rf_shape_make(2, dims);
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, gpu ? gc_device() : "cpu:0"));
  opt_graph o;
  build_opt(g, dt, sh, &o);
  rf_graph_pop_device(g);
  rf_session *s = session(g, gpu);
  rf_tensor *init = gc_random(&rng, dt, sh, -1, 1), *zeros;
  assert_ok(rf_tensor_new(dt, &sh, NULL, &zeros));
  for (int64_t i = 0; i < 24; i++) rf_tensor_set(zeros, i, 0);
  rf_feed f0[2] = {{o.init, init}, {o.dinit, zeros}};
  rf_node *assigns[3] = {o.assign_v, o.assign_m, o.assign_a};
  assert_ok(rf_session_run(s, f0, 2, NULL, 0, assigns, 3, NULL));
  int k = 0;
  assert_ok(rf_session_run(s, NULL, 0, &o.read_v, 1, NULL, 0, &out[k++]));
  for (int step = 0; step < 2; step++) { /* gradient descent */
    rf_tensor *alpha = scalar(dt, 0.25 + step * 0.5);
    rf_tensor *delta = gc_random(&rng, dt, sh, -1, 1);
    rf_feed f[2] = {{o.alpha, alpha}, {o.delta, delta}};
    assert_ok(rf_session_run(s, f, 2, NULL, 0, &o.gd, 1, NULL));
    assert_ok(rf_session_run(s, NULL, 0, &o.read_v, 1, NULL, 0, &out[k++]));
    rf_tensor_release(alpha);
    rf_tensor_release(delta);
  }
  for (int step = 1; step <= 3; step++) { /* Adam */
    double b1 = 0.9, b2 = 0.999;
    rf_tensor *sc[6] = {scalar(dt, pow(b1, step)),
                        scalar(dt, pow(b2, step)),
                        scalar(dt, 0.01),
                        scalar(dt, b1),
                        scalar(dt, b2),
                        scalar(dt, 1e-3)};
    rf_tensor *grad = gc_random(&rng, dt, sh, -1, 1);
    rf_feed f[7];
    for (int i = 0; i < 6; i++) f[i] = (rf_feed){o.sc[i], sc[i]};
    f[6] = (rf_feed){o.grad, grad};
    assert_ok(rf_session_run(s, f, 7, NULL, 0, &o.adam, 1, NULL));
    for (int i = 0; i < 6; i++) rf_tensor_release(sc[i]);
    rf_tensor_release(grad);
  }
  rf_output reads[3] = {o.read_v, o.read_m, o.read_a};
  assert_ok(rf_session_run(s, NULL, 0, reads, 3, NULL, 0, &out[k]));
  k += 3;
  /* The snapshot of this step is the value before gd2. */
  rf_tensor *alpha = scalar(dt, 0.5), *delta = gc_random(&rng, dt, sh, -1, 1);
  rf_feed f[2] = {{o.alpha, alpha}, {o.delta, delta}};
  rf_output snap = {rf_graph_find_node(g, "snap"), 0};
  assert_ok(rf_session_run(s, f, 2, &snap, 1, &o.gd2, 1, &out[k++]));
  assert_ok(rf_session_run(s, NULL, 0, &o.read_v, 1, NULL, 0, &out[k++]));
  assert_int_equal(k, SNAPSHOTS - 1);
  out[k] = NULL;
  rf_tensor_release(alpha);
  rf_tensor_release(delta);
  rf_tensor_release(init);
  rf_tensor_release(zeros);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_optimizers(void **state) {
  gc_need_gpu();
  for (int d = 0; d < GC_COUNT(gc_floats); d++) {
    rf_dtype dt = gc_floats[d];
    uint64_t seed = gc_rng(20 + (uint64_t)d);
    rf_tensor *cpu[SNAPSHOTS], *gpu[SNAPSHOTS];
    run_opt(0, dt, seed, cpu);
    run_opt(1, dt, seed, gpu);
    /* Snapshot 6 (before gd2) equals snapshot 3 (after Adam). */
    for (int k = 0; cpu[k]; k++) {
      double *w = rf_test_to_doubles(cpu[k]);
      assert_tensor_near(gpu[k], rf_tensor_shape(cpu[k]), w,
                         rf_test_tolerance(dt));
      free(w);
    }
    double *before = rf_test_to_doubles(gpu[3]);
    assert_tensor_near(gpu[6], rf_tensor_shape(gpu[3]), before, 0);
    free(before);
    for (int k = 0; cpu[k]; k++) {
      rf_tensor_release(cpu[k]);
      rf_tensor_release(gpu[k]);
    }
  }
}

static void test_uninitialized(void **state) {
  gc_need_gpu();
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, gc_device()));
  rf_output v = rf_variable(g, "w", RF_FLOAT32, rf_shape_of(1, 3));
  rf_output r = rf_read_variable(g, "r", v);
  rf_graph_pop_device(g);
  rf_session *s = session(g, 1);
  rf_tensor *out = NULL;
  char want[96];
  snprintf(want, sizeof want, "variable 'w' on %s is not initialized",
           gc_device());
  assert_status(rf_session_run(s, NULL, 0, &r, 1, NULL, 0, &out),
                RF_FAILED_PRECONDITION, want);
  assert_null(out);
  rf_session_free(s);
  rf_graph_free(g);
}

/* AssignMul (var *= value in place) on the GPU and on cpu:0: three steps
 * of the same random factors give the same bits (one rounding a step, in
 * float for 16-bit floats), and the output is the variable's new value. */
static void assign_mul_steps(int gpu, rf_dtype dt, rf_tensor **out) {
  uint64_t rng = gc_rng(70 + (uint64_t)dt);
  rf_shape sh = rf_shape_of(1, 4099); /* a partial last block */
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, gpu ? gc_device() : "cpu:0"));
  rf_output v = rf_variable(g, "w", dt, sh);
  rf_output init = rf_placeholder(g, "init", dt, sh);
  rf_node *assign = rf_assign(g, "assign", v, init);
  rf_output by = rf_placeholder(g, "by", dt, sh);
  rf_output product = rf_assign_mul(g, "mul", v, by);
  rf_output read = rf_read_variable(g, "read", v);
  rf_graph_pop_device(g);
  rf_session *s = session(g, gpu);
  rf_tensor *x = gc_random(&rng, dt, sh, -2, 2);
  rf_feed f = {init, x};
  assert_ok(rf_session_run(s, &f, 1, NULL, 0, &assign, 1, NULL));
  rf_tensor_release(x);
  for (int step = 0; step < 3; step++) {
    rf_tensor *b = gc_random(&rng, dt, sh, -1.5, 1.5), *p = NULL, *r = NULL;
    rf_feed fb = {by, b};
    assert_ok(rf_session_run(s, &fb, 1, &product, 1, NULL, 0, &p));
    assert_ok(rf_session_run(s, NULL, 0, &read, 1, NULL, 0, &r));
    assert_int_equal(rf_tensor_nbytes(p), rf_tensor_nbytes(r));
    assert_memory_equal(rf_tensor_data(p), rf_tensor_data(r),
                        rf_tensor_nbytes(r));
    rf_tensor_release(p);
    rf_tensor_release(b);
    if (step < 2)
      rf_tensor_release(r);
    else
      *out = r;
  }
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_assign_mul(void **state) {
  (void)state;
  gc_need_gpu();
  for (int d = 0; d < GC_COUNT(gc_floats); d++) {
    rf_tensor *cpu = NULL, *gpu = NULL;
    assign_mul_steps(0, gc_floats[d], &cpu);
    assign_mul_steps(1, gc_floats[d], &gpu);
    assert_int_equal(rf_tensor_nbytes(cpu), rf_tensor_nbytes(gpu));
    if (memcmp(rf_tensor_data(cpu), rf_tensor_data(gpu), rf_tensor_nbytes(cpu)))
      fail_msg("AssignMul %s: the GPU's values differ from the CPU's",
               rf_dtype_name(gc_floats[d]));
    rf_tensor_release(cpu);
    rf_tensor_release(gpu);
  }
}

/* A Const's device copy is made by the first step and served to later ones
 * (and to concurrent readers within a step). */
static void test_const_reuse(void **state) {
  gc_need_gpu();
  uint64_t rng = gc_rng(30);
  rf_tensor *c = gc_random(&rng, RF_FLOAT32, rf_shape_of(2, 3, 5), -1, 1);
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, gc_device()));
  rf_output k = rf_const(g, "k", c);
  rf_output twice = rf_add(g, "twice", k, k);
  rf_output neg = rf_neg(g, "neg", k);
  rf_graph_pop_device(g);
  rf_session *s = session(g, 1);
  double *v = rf_test_to_doubles(c);
  double dbl[15], ng[15];
  for (int i = 0; i < 15; i++) {
    dbl[i] = (double)((float)v[i] + (float)v[i]);
    ng[i] = -v[i];
  }
  for (int step = 0; step < 3; step++) {
    rf_output f[3] = {k, twice, neg};
    rf_tensor *out[3];
    assert_ok(rf_session_run(s, NULL, 0, f, 3, NULL, 0, out));
    assert_tensor_near(out[0], rf_shape_of(2, 3, 5), v, 0);
    assert_tensor_near(out[1], rf_shape_of(2, 3, 5), dbl, 0);
    assert_tensor_near(out[2], rf_shape_of(2, 3, 5), ng, 0);
    for (int i = 0; i < 3; i++) rf_tensor_release(out[i]);
  }
  free(v);
  rf_tensor_release(c);
  rf_session_free(s);
  rf_graph_free(g);
}

/* ---- gradients ---- */

/* in: x (8,6), w1 (6,5), b1 (5), w2 (5,4), b2 (4), s (5), labels (8).
 * out: the loss, then its gradient w.r.t. the first six inputs. */
static int build_net(rf_graph *g, const rf_output *in, const void *arg,
                     rf_output *out) {
  rf_dtype dt = rf_output_dtype(in[0]);
  rf_output h = rf_tanh(
      g, NULL,
      rf_bias_add(g, NULL, rf_matmul(g, NULL, in[0], in[1], 0, 0), in[2]));
  /* broadcasting (8,5) * (5), minus a scalar, over (1 + sigmoid) */
  rf_output t = rf_sub(g, NULL, rf_mul(g, NULL, h, in[5]),
                       rf_const_scalar(g, NULL, dt, 0.1));
  rf_output den =
      rf_add(g, NULL, rf_const_scalar(g, NULL, dt, 1), rf_sigmoid(g, NULL, h));
  rf_output h2 = rf_relu(g, NULL, rf_div(g, NULL, t, den));
  rf_output logits = rf_bias_add(
      g, NULL, rf_matmul(g, NULL, rf_neg(g, NULL, h2), in[3], 0, 0), in[4]);
  rf_output xent = rf_sparse_softmax_cross_entropy(g, NULL, logits, in[6]);
  rf_output l1 = rf_mean(g, NULL, xent, NULL, -1, false);
  rf_output sm = rf_softmax(g, NULL, logits);
  rf_output l2 = rf_sum(g, NULL, rf_mul(g, NULL, sm, sm), NULL, -1, false);
  int64_t flat = 40, axis = 0;
  rf_output r = rf_reshape_to(g, NULL, h, 1, &flat);
  rf_output l3 =
      rf_sum(g, NULL,
             rf_mean(g, NULL, rf_reshape_to(g, NULL, r, 2, (int64_t[]){8, 5}),
                     &axis, 1, true),
             NULL, -1, false);
  rf_output losses[3] = {l1, l2, l3};
  out[0] = rf_add_n(g, NULL, losses, 3);
  assert_ok(rf_gradients(g, out, 1, in, 6, NULL, out + 1));
  return 7;
}

static void test_gradients(void **state) {
  gc_need_gpu();
  uint64_t rng = gc_rng(31);
  gc_set *s = gc_new();
  static const rf_dtype types[] = {RF_FLOAT32, RF_FLOAT64};
  static const int64_t shapes[6][2] = {{8, 6}, {6, 5}, {5, 0},
                                       {5, 4}, {4, 0}, {5, 0}};
  static const int ranks[6] = {2, 2, 1, 2, 1, 1};
  for (int d = 0; d < 2; d++)
    for (int rep = 0; rep < 3; rep++) {
      rf_tensor *in[7];
      for (int i = 0; i < 6; i++)
        in[i] = gc_random(&rng, types[d], rf_shape_make(ranks[i], shapes[i]),
                          -1, 1);
      in[6] = rf_test_random_tensor(&rng, RF_INT64, rf_shape_of(1, 8), 0, 4);
      char label[64];
      snprintf(label, sizeof label, "network %s #%d", rf_dtype_name(types[d]),
               rep);
      /* Many kernels in a chain: a few float32 roundings apart. */
      gc_add(s, label, build_net, NULL, 0,
             types[d] == RF_FLOAT32 ? 1e-4 : 1e-10, 7, in);
    }
  gc_run(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_optimizers), cmocka_unit_test(test_uninitialized),
      cmocka_unit_test(test_assign_mul), cmocka_unit_test(test_const_reuse),
      cmocka_unit_test(test_gradients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
