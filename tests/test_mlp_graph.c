/* tests/test_mlp_graph.c - the training graph `ringflow train` builds
 * (tools/mlp.c): the optimizer's constant hyper-parameters are one Const each
 * per replica, shared by every update, so the graph's Consts do not grow
 * with the number of parameters (2 and 3 layers: 4 and 6 parameters), for
 * each optimizer, on 1 and 2 devices. */
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hyper_parameters_are_shared),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
