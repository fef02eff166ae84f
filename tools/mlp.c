/* tools/mlp.c - builds the training graph described in mlp.h. Everything of a
 * replica is built under its device's scope; only collectives cross devices
 * (the gradients', and the layer inputs' of gathered_gradient). The
 * optimizer's hyper-parameters are per-device constants; the learning rate
 * is fed each step by the driver, and Adam's bias corrections (beta^t) are
 * per-device variables that every training step advances itself. */
#include "mlp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnn.h"
#include "ringflow/collectives.h"

static rf_output scalar(rf_graph *g, double v) {
  return rf_const_scalar(g, NULL, RF_FLOAT32, v);
}

typedef struct vars {
  rf_output var[2 * MLP_MAX_LAYERS], m[2 * MLP_MAX_LAYERS],
      v[2 * MLP_MAX_LAYERS];
  rf_output rows[2 * MLP_MAX_LAYERS]; /* sharded: this device's rows of var */
  /* layer l: its input (device_batch, sizes[l]) and the product with its
   * weights (device_batch, sizes[l + 1]), for gathered weight gradients */
  rf_output in[MLP_MAX_LAYERS], z[MLP_MAX_LAYERS];
} vars;

/* Every per-parameter array is sized for the MLP's largest. */
_Static_assert(CNN_NUM_PARAMS <= 2 * MLP_MAX_LAYERS, "CNN parameters");

int mlp_num_slots(const mlp_config *c) {
  return c->optimizer == OPT_MOMENTUM ? 1 : 2;
}

int mlp_num_params(const mlp_config *c) {
  return c->model == MODEL_CNN ? CNN_NUM_PARAMS : 2 * c->num_layers;
}

static rf_shape param_shape(const mlp_config *c, int p) {
  if (c->model == MODEL_CNN) return cnn_param_shape(p, c->ohwi);
  int layer = p / 2;
  if (p % 2 == 0) return rf_shape_of(2, c->sizes[layer], c->sizes[layer + 1]);
  return rf_shape_of(1, c->sizes[layer + 1]);
}

/* Whether parameter p's optimizer state is split across the devices: with
 * --sync sharded, when its rows divide evenly among them. */
static bool sharded(const mlp_config *c, int p) {
  return c->sync == SYNC_SHARDED && c->num_devices > 1 &&
         param_shape(c, p).dims[0] % c->num_devices == 0;
}

/* Up to this many rows per device, a sharded weight's gradient is computed
 * from the whole batch on each device (gathered_gradient) instead of per
 * device and reduce-scattered. */
#define GATHER_MAX_ROWS 16

/* Whether sharded weight p's gradient rows are computed by gathered_gradient:
 * small per-device batches on the CPU devices of one process ("cpu:N"; a
 * job's are "/task:T/cpu:N"), where a device's own gradient of a 784 x 512
 * weight from 16 rows costs more to write and reduce than to compute.
 * Measured (`ringflow train --bench`, 4 devices, --sync sharded, gathered
 * against per-device gradients, interleaved, medians of 4-6 runs under
 * chrt -f 1): 37.6k against 34.8k samples/s at batch 64; at 128 38.2k
 * against 40.8k and at 256 46.4k against 58.9k, where the padded inputs
 * cost more (their selection products grow with the square of the rows). */
static bool gathered(const mlp_config *c, int p) {
  if (c->model != MODEL_MLP || p % 2 || !sharded(c, p) ||
      c->device_batch > GATHER_MAX_ROWS)
    return false;
  for (int d = 0; d < c->num_devices; d++)
    if (strncmp(c->devices[d], "cpu:", 4) != 0) return false;
  return true;
}

/* The shape of one device's optimizer state for parameter p. */
static rf_shape state_shape(const mlp_config *c, int p) {
  rf_shape s = param_shape(c, p);
  if (sharded(c, p)) s.dims[0] /= c->num_devices;
  return s;
}

static rf_shape input_shape(const mlp_config *c, int rows) {
  return c->model == MODEL_CNN ? cnn_input_shape(rows)
                               : rf_shape_of(2, rows, c->sizes[0]);
}

/* Replica d's batch: fed, or (data_rows) gathered on its device from its
 * own copy of the data set by the fed row indices, so that a step moves
 * only the indices to the device. loads[0..1] get the data's assigns. */
static void build_inputs(const mlp_config *c, rf_graph *g, int d,
                         mlp_replica *r, rf_node **loads) {
  rf_shape ys = rf_shape_of(1, c->device_batch);
  if (c->data_rows == 0) {
    r->x = rf_placeholder(g, NULL, RF_FLOAT32, input_shape(c, c->device_batch));
    r->y = rf_placeholder(g, NULL, RF_INT32, ys);
    return;
  }
  rf_shape shapes[2] = {rf_shape_of(2, c->data_rows, c->sizes[0]),
                        rf_shape_of(1, c->data_rows)};
  rf_dtype dtypes[2] = {RF_FLOAT32, RF_INT32};
  rf_output rows[2];
  r->idx = rf_placeholder(g, NULL, RF_INT32, ys);
  for (int k = 0; k < 2; k++) {
    char name[64];
    snprintf(name, sizeof name, "data_%s_dev%d", k ? "labels" : "images", d);
    rf_output var = rf_variable(g, name, dtypes[k], shapes[k]);
    r->data_init[k] = rf_placeholder(g, NULL, dtypes[k], shapes[k]);
    loads[k] = rf_assign(g, NULL, var, r->data_init[k]);
    rows[k] = rf_gather(g, NULL, rf_read_variable(g, NULL, var), r->idx, 0);
  }
  rf_shape xs = input_shape(c, c->device_batch);
  r->x = c->model == MODEL_CNN
             ? rf_reshape_to(g, NULL, rows[0], xs.rank, xs.dims)
             : rows[0];
  r->y = rows[1];
}

/* Adam's bias corrections beta1^t, beta2^t on replica d's device: float64
 * variables (assigned beta^step by init_op) that each training step
 * multiplies by beta in place, then read as float32 by the updates.
 * AssignMul keeps a variable's buffer, so the step stays capturable as one
 * CUDA graph (an Assign of a new product would give the variable a new
 * buffer each step, which a replay cannot follow). The float64 products
 * rounded to float32 are float32(pow(beta, t)), which the driver fed before,
 * for every t up to 2 million with beta 0.9 and 0.999 (checked on this
 * machine; pow's and the products' errors stay far below float32's). */
static void build_powers(const mlp_config *c, rf_graph *g, int d,
                         mlp_replica *r, rf_node **inits, int *ninit) {
  rf_output *power[2] = {&r->beta1_power, &r->beta2_power};
  const double beta[2] = {c->beta1, c->beta2};
  for (int k = 0; k < 2; k++) {
    char name[64];
    snprintf(name, sizeof name, "beta%d_power_dev%d", k + 1, d);
    rf_output var = rf_variable(g, name, RF_FLOAT64, rf_shape_scalar());
    r->power_init[k] = rf_placeholder(g, NULL, RF_FLOAT64, rf_shape_scalar());
    inits[(*ninit)++] = rf_assign(g, NULL, var, r->power_init[k]);
    rf_output by = rf_const_scalar(g, NULL, RF_FLOAT64, beta[k]);
    *power[k] = rf_cast(g, NULL, rf_assign_mul(g, NULL, var, by), RF_FLOAT32);
  }
}

/* One replica's variables, forward pass, loss and accuracy. Sharded
 * parameters' rows, m and v are initialised by build_sharded. */
static void build_forward(const mlp_config *c, rf_graph *g, int d, vars *vs,
                          mlp_replica *r, rf_node **inits, int *ninit,
                          rf_node **loads) {
  char name[64];
  int nslots = mlp_num_slots(c);
  build_inputs(c, g, d, r, loads);
  for (int p = 0; p < mlp_num_params(c); p++) {
    rf_shape s = param_shape(c, p), ss = state_shape(c, p);
    snprintf(name, sizeof name, "%s%d_dev%d", p % 2 ? "b" : "W", p / 2, d);
    vs->var[p] = rf_variable(g, name, RF_FLOAT32, s);
    static const char *const slot1[] = {[OPT_ADAM] = "adam_m",
                                        [OPT_ADAMW] = "adamw_m",
                                        [OPT_MOMENTUM] = "momentum_accum"};
    snprintf(name, sizeof name, "%s%d_dev%d", slot1[c->optimizer], p, d);
    vs->m[p] = rf_variable(g, name, RF_FLOAT32, ss);
    if (nslots == 2) {
      snprintf(name, sizeof name, "%s%d_dev%d",
               c->optimizer == OPT_ADAMW ? "adamw_v" : "adam_v", p, d);
      vs->v[p] = rf_variable(g, name, RF_FLOAT32, ss);
    }
    for (int k = 0; k <= nslots; k++)
      r->init[k][p] = rf_placeholder(g, NULL, RF_FLOAT32, s);
    inits[(*ninit)++] = rf_assign(g, NULL, vs->var[p], r->init[0][p]);
    r->params[p] = rf_read_variable(g, NULL, vs->var[p]);
    if (sharded(c, p)) {
      snprintf(name, sizeof name, "%s%d_rows_dev%d", p % 2 ? "b" : "W", p / 2,
               d);
      vs->rows[p] = rf_variable(g, name, RF_FLOAT32, ss);
      continue;
    }
    inits[(*ninit)++] = rf_assign(g, NULL, vs->m[p], r->init[1][p]);
    r->moments[0][p] = rf_read_variable(g, NULL, vs->m[p]);
    if (nslots == 2) {
      inits[(*ninit)++] = rf_assign(g, NULL, vs->v[p], r->init[2][p]);
      r->moments[1][p] = rf_read_variable(g, NULL, vs->v[p]);
    }
  }
  rf_output h = r->x;
  r->training = (rf_output){NULL, 0};
  if (c->model == MODEL_CNN && c->dropout > 0)
    r->training = rf_placeholder(g, NULL, RF_BOOL, rf_shape_scalar());
  if (c->model == MODEL_CNN)
    h = cnn_logits(g, h, r->params, c->ohwi, c->dropout, r->training);
  for (int l = 0; c->model == MODEL_MLP && l < c->num_layers; l++) {
    vs->in[l] = h;
    vs->z[l] = rf_matmul(g, NULL, h, r->params[2 * l], false, false);
    h = rf_bias_add(g, NULL, vs->z[l], r->params[2 * l + 1]);
    if (l + 1 < c->num_layers) h = rf_relu(g, NULL, h);
  }
  rf_output xent = rf_sparse_softmax_cross_entropy(g, NULL, h, r->y);
  r->loss = rf_mean(g, NULL, xent, NULL, -1, false);
  rf_output pred = rf_argmax(g, NULL, h, 1);
  rf_output right = rf_equal(g, NULL, pred, rf_cast(g, NULL, r->y, RF_INT64));
  r->correct = rf_cast(g, NULL, right, RF_INT32);
  r->lr = rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_scalar());
  if (c->optimizer == OPT_MOMENTUM) {
    r->hyper[0] = scalar(g, c->momentum);
  } else {
    r->hyper[0] = scalar(g, c->beta1);
    r->hyper[1] = scalar(g, c->beta2);
    r->hyper[2] = scalar(g, c->epsilon);
    if (c->optimizer == OPT_ADAMW) r->hyper[3] = scalar(g, c->weight_decay);
    build_powers(c, g, d, r, inits, ninit);
  }
}

/* The optimizer's update of var (slots m, v) by grad on replica r's device
 * (--optimizer; v unused by momentum), with the replica's hyper-parameter
 * Consts. */
static rf_node *apply_update(const mlp_config *c, rf_graph *g,
                             const mlp_replica *r, rf_output var, rf_output m,
                             rf_output v, rf_output grad) {
  const rf_output *h = r->hyper;
  switch (c->optimizer) {
    case OPT_MOMENTUM:
      return rf_apply_momentum(g, NULL, var, m, r->lr, grad, h[0], false);
    case OPT_ADAMW:
      return rf_apply_adamw(g, NULL, var, m, v, r->beta1_power, r->beta2_power,
                            r->lr, h[0], h[1], h[2], h[3], grad);
    default:
      return rf_apply_adam(g, NULL, var, m, v, r->beta1_power, r->beta2_power,
                           r->lr, h[0], h[1], h[2], grad);
  }
}

/* Averages the replicas' gradients of parameter p into avg[d] (on device d). */
static void sync_gradients(const mlp_config *c, rf_graph *g, int p,
                           rf_output grads[][2 * MLP_MAX_LAYERS],
                           rf_output *avg) {
  rf_output per_dev[MLP_MAX_DEVICES];
  for (int d = 0; d < c->num_devices; d++) per_dev[d] = grads[d][p];
  char name[64];
  snprintf(name, sizeof name, "grad_sync_%d", p);
  if (c->sync != SYNC_REDUCE_BROADCAST) { /* sharded: only what cannot be */
    rf_all_reduce_n(g, name, per_dev, c->num_devices, RF_REDUCE_AVG, avg);
    return;
  }
  /* The reference's pair: sum on device 0, broadcast back, scale locally. */
  rf_graph_push_device(g, c->devices[0]);
  rf_output sum = rf_reduce(g, name, per_dev, c->num_devices, RF_REDUCE_SUM);
  rf_output b = rf_broadcast(g, NULL, sum);
  rf_graph_pop_device(g);
  for (int d = 0; d < c->num_devices; d++) {
    rf_graph_push_device(g, c->devices[d]);
    avg[d] = rf_mul(g, NULL, b, scalar(g, 1.0 / c->num_devices));
    rf_graph_pop_device(g);
  }
}

/* The (rows, n * rows) matrix with ones at (i, d * rows + i): x^T times it
 * puts x^T (k, rows) into columns [d * rows, (d + 1) * rows) of a zero
 * (k, n * rows) matrix, exactly (one nonzero term per element). NULL makes
 * rf_const record the failure in g. */
static rf_output selection(rf_graph *g, int rows, int n, int d) {
  rf_shape s = rf_shape_of(2, rows, n * rows);
  rf_tensor *t = NULL;
  rf_status *st = rf_tensor_new(RF_FLOAT32, &s, NULL, &t);
  rf_status_free(st);
  if (t) {
    float *e = rf_tensor_mutable_data(t);
    memset(e, 0, rf_tensor_nbytes(t));
    for (int i = 0; i < rows; i++) e[(size_t)i * n * rows + d * rows + i] = 1;
  }
  rf_output out = rf_const(g, NULL, t);
  rf_tensor_release(t);
  return out;
}

/* Device d's rows of the averaged gradient of weight p (layer l), computed
 * from the whole global batch (gathered). With x_d (rows, k) device d's
 * input to the layer and dz_d (rows, n) the loss gradient of its product,
 * the average is (1/N) sum_d x_d^T dz_d = (1/N) X^T DZ over the N devices'
 * stacked rows. DZ is all-gathered; device d's rows of X^T / N come from a
 * reduce-scatter (average) of each x_d^T placed in its columns of a zero
 * (k, N rows) matrix (selection). So each device writes its rows of the
 * gradient once, from one product with a sum over the whole batch, where the
 * default writes N whole gradients and reduces them (at 16 rows per device
 * that traffic cost more than the products). */
static void gathered_gradient(const mlp_config *c, rf_graph *g, int p,
                              rf_output grads[][2 * MLP_MAX_LAYERS],
                              const vars *vs, rf_output *out) {
  int nd = c->num_devices, rows = c->device_batch, l = p / 2;
  rf_output in[MLP_MAX_DEVICES], xt[MLP_MAX_DEVICES], dz[MLP_MAX_DEVICES];
  char name[64];
  for (int d = 0; d < nd; d++) {
    /* DZ's rows come in rank order, which is device order (collectives.h),
     * not replica order (--devices cpu:1,0): x_d^T goes to the columns of
     * its device's rank. gathered(): every device is "cpu:N". */
    int rank = 0, index = atoi(c->devices[d] + 4);
    for (int e = 0; e < nd; e++) rank += atoi(c->devices[e] + 4) < index;
    rf_graph_push_device(g, c->devices[d]);
    in[d] = rf_matmul(g, NULL, vs[d].in[l], selection(g, rows, nd, rank), true,
                      false);
    rf_graph_pop_device(g);
  }
  snprintf(name, sizeof name, "input_scatter_%d", p);
  rf_reduce_scatter_n(g, name, in, nd, RF_REDUCE_AVG, xt);
  for (int d = 0; d < nd; d++) in[d] = grads[d][p];
  snprintf(name, sizeof name, "grad_gather_%d", p);
  rf_all_gather_n(g, name, in, nd, dz);
  for (int d = 0; d < nd; d++) {
    rf_graph_push_device(g, c->devices[d]);
    out[d] = rf_matmul(g, NULL, xt[d], dz[d], false, false);
    rf_graph_pop_device(g);
  }
}

/* --sync sharded, parameter p (ZeRO stage 1): the gradients are
 * reduce-scattered (averaged), each device runs the optimizer on its rows of
 * the parameter with its rows of the slots, and the updated rows are
 * all-gathered into every replica's parameter. One update in all instead of
 * one per
 * device, whose memory traffic dominates small batches on shared cores; the
 * arithmetic per element is the same as --sync allreduce's (the same bits),
 * except that a gathered weight's gradient sums over the whole batch in
 * another order (float tolerance). Each row is updated once and gathered,
 * so replicas stay bit-identical. */
static void build_sharded(const mlp_config *c, rf_graph *g, int p,
                          rf_output grads[][2 * MLP_MAX_LAYERS], vars *vs,
                          mlp_graph *m, rf_node **updates, int *nupd,
                          rf_node **inits, int *ninit) {
  int nd = c->num_devices, nslots = mlp_num_slots(c);
  rf_output in[MLP_MAX_DEVICES], out[MLP_MAX_DEVICES];
  char name[64];
  /* Rows and slots start as rows of the fed full values: the max of
   * identical inputs is exact. */
  for (int k = 0; k <= nslots; k++) {
    for (int d = 0; d < nd; d++) in[d] = m->rep[d].init[k][p];
    snprintf(name, sizeof name, "init_rows_%d_%d", k, p);
    rf_reduce_scatter_n(g, name, in, nd, RF_REDUCE_MAX, out);
    for (int d = 0; d < nd; d++) {
      rf_output var = k == 0 ? vs[d].rows[p] : k == 1 ? vs[d].m[p] : vs[d].v[p];
      rf_graph_push_device(g, c->devices[d]);
      inits[(*ninit)++] = rf_assign(g, NULL, var, out[d]);
      rf_graph_pop_device(g);
    }
  }
  if (gathered(c, p)) {
    gathered_gradient(c, g, p, grads, vs, out);
  } else {
    for (int d = 0; d < nd; d++) in[d] = grads[d][p];
    snprintf(name, sizeof name, "grad_sync_%d", p);
    rf_reduce_scatter_n(g, name, in, nd, RF_REDUCE_AVG, out);
  }
  for (int d = 0; d < nd; d++) {
    mlp_replica *r = &m->rep[d];
    rf_graph_push_device(g, c->devices[d]);
    rf_node *up =
        apply_update(c, g, r, vs[d].rows[p], vs[d].m[p], vs[d].v[p], out[d]);
    in[d] = rf_read_variable(g, NULL, vs[d].rows[p]);
    if (up && in[d].node) rf_graph_add_control_edge(g, up, in[d].node);
    rf_graph_pop_device(g);
  }
  snprintf(name, sizeof name, "param_gather_%d", p);
  rf_all_gather_n(g, name, in, nd, out);
  for (int d = 0; d < nd; d++) {
    rf_graph_push_device(g, c->devices[d]);
    updates[(*nupd)++] = rf_assign(g, NULL, vs[d].var[p], out[d]);
    rf_graph_pop_device(g);
  }
  /* Whole slots for checkpoints: fetch them from every replica at once. */
  for (int k = 0; k < nslots; k++) {
    for (int d = 0; d < nd; d++) {
      rf_graph_push_device(g, c->devices[d]);
      in[d] = rf_read_variable(g, NULL, k == 0 ? vs[d].m[p] : vs[d].v[p]);
      rf_graph_pop_device(g);
    }
    snprintf(name, sizeof name, "moment_gather_%d_%d", k, p);
    rf_all_gather_n(g, name, in, nd, out);
    for (int d = 0; d < nd; d++) m->rep[d].moments[k][p] = out[d];
  }
}

/* Keeps the all-reduce whose participants are out[0, n) in float32 whatever
 * the session's collective_comm_dtype (--comm-dtype narrows gradients only). */
static rf_status *full_precision(rf_graph *g, const rf_output *out, int n) {
  rf_status *st = rf_graph_status(g); /* after an error out is unset */
  for (int d = 0; d < n && !st; d++)
    st = rf_all_reduce_set_comm_dtype(out[d].node, RF_FLOAT32);
  return st;
}

/* What processes of a job exchange besides gradients (mlp.h); pruned away
 * unless fetched. */
static rf_status *build_job_collectives(const mlp_config *c, rf_graph *g,
                                        mlp_graph *m) {
  int nd = c->num_devices;
  rf_output in[MLP_MAX_DEVICES], out[MLP_MAX_DEVICES];
  for (int d = 0; d < nd; d++) in[d] = m->rep[d].loss;
  rf_status *st;
  rf_all_reduce_n(g, "job_loss", in, nd, RF_REDUCE_AVG, out);
  if ((st = full_precision(g, out, nd))) return st;
  for (int d = 0; d < nd; d++) {
    m->rep[d].loss_avg = out[d];
    rf_graph_push_device(g, c->devices[d]);
    in[d] = m->rep[d].stats_in =
        rf_placeholder(g, NULL, RF_FLOAT64, rf_shape_of(1, 4));
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "job_stats_sum", in, nd, RF_REDUCE_SUM, out);
  for (int d = 0; d < nd; d++) m->rep[d].stats_sum = out[d];
  rf_all_reduce_n(g, "job_stats_max", in, nd, RF_REDUCE_MAX, out);
  for (int d = 0; d < nd; d++) m->rep[d].stats_max = out[d];
  for (int p = 0; p < m->num_params; p++) {
    char name[32];
    for (int d = 0; d < nd; d++) in[d] = m->rep[d].params[p];
    snprintf(name, sizeof name, "job_pmax_%d", p);
    rf_all_reduce_n(g, name, in, nd, RF_REDUCE_MAX, out);
    if ((st = full_precision(g, out, nd))) return st;
    for (int d = 0; d < nd; d++) m->rep[d].pmax[p] = out[d];
    snprintf(name, sizeof name, "job_pmin_%d", p);
    rf_all_reduce_n(g, name, in, nd, RF_REDUCE_MIN, out);
    if ((st = full_precision(g, out, nd))) return st;
    for (int d = 0; d < nd; d++) m->rep[d].pmin[p] = out[d];
  }
  return rf_graph_status(g);
}

rf_status *mlp_build(const mlp_config *c, mlp_graph *m) {
  if (c->num_devices < 1 || c->num_devices > MLP_MAX_DEVICES ||
      (c->model == MODEL_MLP &&
       (c->num_layers < 1 || c->num_layers > MLP_MAX_LAYERS)))
    return rf_status_new(RF_INVALID_ARGUMENT, "bad model configuration");
  memset(m, 0, sizeof *m);
  rf_graph *g = rf_graph_new();
  if (!g) return rf_status_new(RF_RESOURCE_EXHAUSTED, "out of memory");
  m->num_params = mlp_num_params(c);
  static vars vs[MLP_MAX_DEVICES]; /* large; built once per run */
  static rf_output grads[MLP_MAX_DEVICES][2 * MLP_MAX_LAYERS];
  /* 4 per param, 2 per device (Adam's beta powers) */
  rf_node *inits[MLP_MAX_DEVICES * (8 * MLP_MAX_LAYERS + 2)];
  rf_node *loads[MLP_MAX_DEVICES * 2] = {0}; /* with data_rows */
  int ninit = 0;
  rf_status *st = NULL;
  for (int d = 0; d < c->num_devices && !st; d++) {
    st = rf_graph_push_device(g, c->devices[d]);
    if (st) break;
    build_forward(c, g, d, &vs[d], &m->rep[d], inits, &ninit, &loads[2 * d]);
    st = rf_graph_status(g);
    /* gathered weights: the gradient of their product instead */
    rf_output xs[2 * MLP_MAX_LAYERS];
    for (int p = 0; p < m->num_params; p++)
      xs[p] = gathered(c, p) ? vs[d].z[p / 2] : m->rep[d].params[p];
    if (!st)
      st = rf_gradients(g, &m->rep[d].loss, 1, xs, m->num_params, NULL,
                        grads[d]);
    rf_graph_pop_device(g);
  }
  rf_node *updates[MLP_MAX_DEVICES * 2 * MLP_MAX_LAYERS];
  int nupd = 0;
  for (int p = 0; p < m->num_params && !st; p++) {
    if (sharded(c, p)) {
      build_sharded(c, g, p, grads, vs, m, updates, &nupd, inits, &ninit);
      st = rf_graph_status(g);
      continue;
    }
    rf_output avg[MLP_MAX_DEVICES];
    sync_gradients(c, g, p, grads, avg);
    for (int d = 0; d < c->num_devices; d++) {
      rf_graph_push_device(g, c->devices[d]);
      updates[nupd++] = apply_update(c, g, &m->rep[d], vs[d].var[p], vs[d].m[p],
                                     vs[d].v[p], avg[d]);
      rf_graph_pop_device(g);
    }
    st = rf_graph_status(g);
  }
  if (!st) st = build_job_collectives(c, g, m);
  if (!st) {
    m->train_op = rf_noop(g, "train");
    m->init_op = rf_noop(g, "init");
    for (int i = 0; i < nupd && !st; i++)
      st = rf_graph_add_control_edge(g, updates[i], m->train_op);
    for (int i = 0; i < ninit && !st; i++)
      st = rf_graph_add_control_edge(g, inits[i], m->init_op);
    if (c->data_rows > 0) m->data_op = rf_noop(g, "load_data");
    for (int i = 0; c->data_rows > 0 && i < 2 * c->num_devices && !st; i++)
      st = rf_graph_add_control_edge(g, loads[i], m->data_op);
    if (!st) st = rf_graph_status(g);
  }
  if (st) {
    rf_graph_free(g);
    memset(m, 0, sizeof *m);
    return st;
  }
  m->g = g;
  return NULL;
}

void mlp_free(mlp_graph *m) {
  rf_graph_free(m->g);
  m->g = NULL;
}

/* splitmix64: a small, good, seedable generator. */
static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

rf_status *mlp_initial_values(const mlp_config *c, uint64_t seed,
                              rf_tensor **init) {
  uint64_t s = seed;
  for (int p = 0; p < mlp_num_params(c); p++) {
    rf_shape shape = param_shape(c, p);
    rf_status *st = rf_tensor_new(RF_FLOAT32, &shape, NULL, &init[p]);
    if (st) {
      while (p-- > 0) rf_tensor_release(init[p]);
      return st;
    }
    float *w = rf_tensor_mutable_data(init[p]);
    int64_t n = rf_tensor_num_elements(init[p]);
    int fan_in = c->sizes[p / 2], fan_out = c->sizes[p / 2 + 1];
    if (c->model == MODEL_CNN) cnn_fans(p, &fan_in, &fan_out);
    double limit = sqrt(6.0 / (fan_in + fan_out));
    for (int64_t i = 0; i < n; i++) {
      double u = (double)(next_u64(&s) >> 11) * (1.0 / 9007199254740992.0);
      w[i] = p % 2 ? 0.0f : (float)((2 * u - 1) * limit);
    }
  }
  return NULL;
}

rf_status *mlp_zero_moments(const mlp_config *c, rf_tensor **out) {
  for (int p = 0; p < mlp_num_params(c); p++) {
    rf_shape shape = param_shape(c, p);
    rf_status *st = rf_tensor_new(RF_FLOAT32, &shape, NULL, &out[p]);
    if (st) {
      while (p-- > 0) rf_tensor_release(out[p]);
      return st;
    }
    memset(rf_tensor_mutable_data(out[p]), 0, rf_tensor_nbytes(out[p]));
  }
  return NULL;
}

rf_status *mlp_beta_powers(const mlp_config *c, int64_t step, rf_tensor **out) {
  rf_status *st =
      rf_tensor_new_scalar(RF_FLOAT64, pow(c->beta1, (double)step), &out[0]);
  if (st) return st;
  st = rf_tensor_new_scalar(RF_FLOAT64, pow(c->beta2, (double)step), &out[1]);
  if (st) rf_tensor_release(out[0]);
  return st;
}

void mlp_state_name(const mlp_config *c, int kind, int p, char *buf,
                    size_t len) {
  static const char *const prefix[] = {"", "m_", "v_"};
  const char *pre =
      c->optimizer == OPT_MOMENTUM && kind == 1 ? "accum_" : prefix[kind];
  snprintf(buf, len, "%s%s%d", pre, p % 2 ? "b" : "W", p / 2);
}
