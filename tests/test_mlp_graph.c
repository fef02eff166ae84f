/* tests/test_mlp_graph.c - the training graph `ringflow train` builds
 * (tools/mlp.c): the optimizer's constant hyper-parameters are one Const each
 * per replica, shared by every update, so the graph's Consts do not grow
 * with the number of parameters (2 and 3 layers: 4 and 6 parameters), for
 * each optimizer, on 1 and 2 devices. A training step feeds only its batch
 * (and the learning rate under a schedule): Adam's bias corrections beta^t
 * are variables the step advances on each device, from the value init_op
 * assigns (beta^s to go on from step s), compared with pow() in float64. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mlp.h"
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

static float value(rf_tensor *t) {
  float v = ((const float *)rf_tensor_data(t))[0];
  rf_tensor_release(t);
  return v;
}

/* On ndev CPU devices with optimizer opt and the learning rate fed or not:
 * init_op at step `from`, then STEPS training steps that feed only x and y
 * (and lr when fed); each step's beta powers on every device must be
 * beta^(from + t) up to the float32 products' rounding (t + 1 roundings
 * of 2^-24, and beta's own in float32). */
#define STEPS 5
static void steps_feed_only_the_batch(int ndev, int opt, bool lr_fed,
                                      int from) {
  mlp_config cfg = {.model = MODEL_MLP,
                    .num_devices = ndev,
                    .num_layers = 2,
                    .sizes = {12, 8, 4},
                    .device_batch = 4,
                    .sync = SYNC_ALLREDUCE,
                    .optimizer = opt,
                    .lr = 0.01,
                    .lr_fed = lr_fed,
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
  rf_tensor *power[2] = {scalar(pow(0.9, from)), scalar(pow(0.999, from))};
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
      if (lr_fed) feeds[nf++] = (rf_feed){m.rep[d].lr, lr};
      if (adam) {
        fetch[nfetch++] = m.rep[d].beta1_power;
        fetch[nfetch++] = m.rep[d].beta2_power;
      }
    }
    rf_tensor *out[2 * 2];
    assert_ok(rf_session_run(s, feeds, nf, fetch, nfetch, &m.train_op, 1,
                             nfetch ? out : NULL));
    for (int i = 0; i < nfetch; i++) {
      double want = pow(i % 2 ? 0.999 : 0.9, from + t), got = value(out[i]);
      if (fabs(got - want) > (t + 2) * 0x1p-24 * want)
        fail_msg("step %d (from %d), device %d: beta%d^t %.9g, want %.9g", t,
                 from, i / 2, i % 2 + 1, got, want);
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

static void test_steps_feed_only_the_batch(void **state) {
  const int opts[] = {OPT_ADAM, OPT_ADAMW, OPT_MOMENTUM};
  for (int o = 0; o < 3; o++)
    for (int ndev = 1; ndev <= 2; ndev++) {
      steps_feed_only_the_batch(ndev, opts[o], false, 0);
      steps_feed_only_the_batch(ndev, opts[o], true, 0);
      steps_feed_only_the_batch(ndev, opts[o], false, 40); /* a --load */
    }
}

/* The learning rate is a placeholder under a schedule, else a Const. */
static void test_lr_is_fed_only_under_a_schedule(void **state) {
  mlp_config cfg = {.model = MODEL_MLP,
                    .num_devices = 1,
                    .devices = {"cpu:0"},
                    .num_layers = 1,
                    .sizes = {6, 3},
                    .device_batch = 2,
                    .lr = 0.01,
                    .lr_fed = true,
                    .beta1 = 0.9,
                    .beta2 = 0.999,
                    .epsilon = 1e-7};
  mlp_graph m;
  assert_ok(mlp_build(&cfg, &m));
  assert_string_equal(rf_node_op(m.rep[0].lr.node), "Placeholder");
  mlp_free(&m);
  cfg.lr_fed = false;
  assert_ok(mlp_build(&cfg, &m));
  assert_string_equal(rf_node_op(m.rep[0].lr.node), "Const");
  mlp_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hyper_parameters_are_shared),
      cmocka_unit_test(test_steps_feed_only_the_batch),
      cmocka_unit_test(test_lr_is_fed_only_under_a_schedule),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
