/* tests/test_mlp_graph.c - the training graph `ringflow train` builds
 * (tools/mlp.c): the optimizer's constant hyper-parameters are one Const each
 * per replica, shared by every update, so the graph's Consts do not grow
 * with the number of parameters (2 and 3 layers: 4 and 6 parameters), for
 * each optimizer, on 1 and 2 devices. A training step feeds only its batch
 * and learning rate: Adam's bias corrections beta^t live on each device and
 * the step advances them, equal bit for bit to the float32(pow(beta, t))
 * the driver fed before (from step 0, and from the step init_op names, as
 * after --load); and a step leaves every variable of every device in its
 * buffer, the condition runtime/gpu/step_graph.c checks before it keeps a
 * captured step (b128's Assign of a new product failed it). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mlp.h"
#include "runtime/session_internal.h"
#include "testutil.h"

static int count_consts(const rf_graph *g) {
  int n = 0;
  for (int i = 0; i < rf_graph_num_nodes(g); i++)
    n += strcmp(rf_node_op(rf_graph_node(g, i)), "Const") == 0;
  return n;
}

/* Consts of the graph of `layers` layers with optimizer opt on ndev
 * devices. */
static int consts(int layers, int opt, int ndev) {
  mlp_config cfg = {.model = MODEL_MLP,
                    .num_devices = ndev,
                    .num_layers = layers,
                    .sizes = {12, 8, 6, 4},
                    .device_batch = 4,
                    .sync = SYNC_ALLREDUCE,
                    .optimizer = opt,
                    .lr = 0.01,
                    .beta1 = 0.9,
                    .beta2 = 0.999,
                    .epsilon = 1e-7,
                    .weight_decay = 0.01,
                    .momentum = 0.9};
  for (int d = 0; d < ndev; d++)
    snprintf(cfg.devices[d], sizeof cfg.devices[d], "cpu:%d", d);
  mlp_graph m;
  assert_ok(mlp_build(&cfg, &m));
  int n = count_consts(m.g);
  mlp_free(&m);
  return n;
}

static void test_hyper_parameters_are_shared(void **state) {
  const int opts[] = {OPT_ADAM, OPT_ADAMW, OPT_MOMENTUM};
  for (int o = 0; o < 3; o++)
    for (int ndev = 1; ndev <= 2; ndev++) {
      int two = consts(2, opts[o], ndev), three = consts(3, opts[o], ndev);
      if (two != three)
        fail_msg(
            "optimizer %d, %d devices: %d Consts with 2 layers, %d with "
            "3",
            opts[o], ndev, two, three);
    }
}

static rf_tensor *scalar(double v) {
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new_scalar(RF_FLOAT32, v, &t));
  return t;
}

/* Every variable of the session's devices and where its value is. */
typedef struct var_where {
  int n;
  const rf__variable *var[64];
  const rf_tensor *value[64];
  const void *data[64];
} var_where;

static void where_vars(const rf_session *s, var_where *w) {
  w->n = 0;
  for (int i = 0; i < s->num_devices; i++) {
    rf__device *d = &s->devices[i];
    pthread_mutex_lock(&d->vars_mu);
    for (rf__variable *v = d->vars; v; v = v->hh.next) {
      assert_true(w->n < 64);
      pthread_mutex_lock(&v->mu);
      w->var[w->n] = v;
      w->value[w->n] = v->value;
      w->data[w->n++] = v->value ? rf_tensor_data(v->value) : NULL;
      pthread_mutex_unlock(&v->mu);
    }
    pthread_mutex_unlock(&d->vars_mu);
  }
}

static void expect_same_place(const var_where *a, const var_where *b,
                              int step) {
  assert_int_equal(a->n, b->n);
  for (int i = 0; i < a->n; i++)
    if (a->var[i] != b->var[i] || a->value[i] != b->value[i] ||
        a->data[i] != b->data[i])
      fail_msg("step %d gave variable '%s' a new buffer", step,
               a->var[i]->name);
}

/* On ndev CPU devices with optimizer opt: init_op at step `from`, then
 * STEPS training steps that feed only x, y and lr; each step's beta powers
 * on every device must be float32(pow(beta, from + t)), and steps after
 * the first (which may copy a value still shared with init_op's feeds)
 * must leave every variable where it was. */
#define STEPS 5
static void steps_keep_state_in_place(int ndev, int opt, int from) {
  mlp_config cfg = {.model = MODEL_MLP,
                    .num_devices = ndev,
                    .num_layers = 2,
                    .sizes = {12, 8, 4},
                    .device_batch = 4,
                    .sync = SYNC_ALLREDUCE,
                    .optimizer = opt,
                    .lr = 0.01,
                    .beta1 = 0.9,
                    .beta2 = 0.999,
                    .epsilon = 1e-7,
                    .weight_decay = 0.01,
                    .momentum = 0.9};
  for (int d = 0; d < ndev; d++)
    snprintf(cfg.devices[d], sizeof cfg.devices[d], "cpu:%d", d);
  mlp_graph m;
  assert_ok(mlp_build(&cfg, &m));
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = ndev;
  rf_session *s = NULL;
  assert_ok(rf_session_new(m.g, &o, &s));
  rf_tensor *state[2][2 * MLP_MAX_LAYERS];
  assert_ok(mlp_initial_values(&cfg, 3, state[0]));
  assert_ok(mlp_zero_moments(&cfg, state[1]));
  bool adam = opt != OPT_MOMENTUM;
  rf_tensor *power[2];
  assert_ok(mlp_beta_powers(&cfg, from, power));
  rf_feed feeds[2 * (3 * 2 * MLP_MAX_LAYERS + 2)];
  int nf = 0;
  for (int d = 0; d < ndev; d++) {
    for (int k = 0; k <= mlp_num_slots(&cfg); k++)
      for (int p = 0; p < m.num_params; p++)
        feeds[nf++] = (rf_feed){m.rep[d].init[k][p], state[k ? 1 : 0][p]};
    assert_true(adam == (m.rep[d].beta1_power.node != NULL));
    for (int k = 0; k < 2 && adam; k++)
      feeds[nf++] = (rf_feed){m.rep[d].power_init[k], power[k]};
  }
  assert_ok(rf_session_run(s, feeds, nf, NULL, 0, &m.init_op, 1, NULL));
  uint64_t rng = rf_test_rng(11);
  rf_tensor *lr = scalar(0.01);
  var_where before, after;
  for (int t = 1; t <= STEPS; t++) {
    rf_tensor *xy[2 * 2];
    rf_output fetch[2 * 2];
    nf = 0;
    int nfetch = 0;
    for (int d = 0; d < ndev; d++) {
      xy[2 * d] =
          rf_test_random_tensor(&rng, RF_FLOAT32, rf_shape_of(2, 4, 12), -1, 1);
      xy[2 * d + 1] =
          rf_test_random_tensor(&rng, RF_INT32, rf_shape_of(1, 4), 0, 3);
      feeds[nf++] = (rf_feed){m.rep[d].x, xy[2 * d]};
      feeds[nf++] = (rf_feed){m.rep[d].y, xy[2 * d + 1]};
      feeds[nf++] = (rf_feed){m.rep[d].lr, lr};
      if (adam) {
        fetch[nfetch++] = m.rep[d].beta1_power;
        fetch[nfetch++] = m.rep[d].beta2_power;
      }
    }
    rf_tensor *out[2 * 2];
    if (t > 1) where_vars(s, &before);
    assert_ok(rf_session_run(s, feeds, nf, fetch, nfetch, &m.train_op, 1,
                             nfetch ? out : NULL));
    for (int i = 0; i < nfetch; i++) {
      float got = ((const float *)rf_tensor_data(out[i]))[0];
      float want = (float)pow(i % 2 ? 0.999 : 0.9, (double)(from + t));
      if (memcmp(&got, &want, sizeof got))
        fail_msg("step %d (from %d), device %d: beta%d^t %.9g, want %.9g", t,
                 from, i / 2, i % 2 + 1, (double)got, (double)want);
      rf_tensor_release(out[i]);
    }
    if (t > 1) {
      where_vars(s, &after);
      expect_same_place(&before, &after, t);
    }
    for (int i = 0; i < 2 * ndev; i++) rf_tensor_release(xy[i]);
  }
  rf_tensor_release(lr);
  rf_tensor_release(power[0]);
  rf_tensor_release(power[1]);
  for (int k = 0; k < 2; k++)
    for (int p = 0; p < m.num_params; p++) rf_tensor_release(state[k][p]);
  rf_session_free(s);
  mlp_free(&m);
}

static void test_steps_keep_state_in_place(void **state) {
  (void)state;
  const int opts[] = {OPT_ADAM, OPT_ADAMW, OPT_MOMENTUM};
  for (int o = 0; o < 3; o++)
    for (int ndev = 1; ndev <= 2; ndev++) {
      steps_keep_state_in_place(ndev, opts[o], 0);
      steps_keep_state_in_place(ndev, opts[o], 40); /* as after --load */
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hyper_parameters_are_shared),
      cmocka_unit_test(test_steps_keep_state_in_place),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
