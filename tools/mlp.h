/* tools/mlp.h - the data-parallel training graph of `ringflow train`: one
 * replica of the model (an MLP, or cnn.h's network) per device, its gradient
 * graph from rf_gradients, the gradients averaged through collectives
 * (all-reduce, or the reference's reduce + broadcast), and the same optimizer
 * update (Adam, AdamW or momentum) applied on every device, so the replicas'
 * parameters stay bit-identical. */
#ifndef RF_TOOLS_MLP_H
#define RF_TOOLS_MLP_H

#include "ringflow/ringflow.h"

#define MLP_MAX_DEVICES 64
#define MLP_MAX_LAYERS 8

/* SYNC_SHARDED: reduce-scatter, Adam on each device's rows, all-gather
 * (mlp.c: build_sharded); at most 16 rows per device on CPU devices, each
 * device computes its rows of a weight's gradient from the whole batch
 * instead (mlp.c: gathered_gradient). */
typedef enum sync_mode {
  SYNC_ALLREDUCE,
  SYNC_REDUCE_BROADCAST,
  SYNC_SHARDED
} sync_mode;

/* The update every device applies (`ringflow train --optimizer`): Adam and
 * AdamW keep two slots per parameter (m, v), momentum one (accum). */
typedef enum optimizer_kind {
  OPT_ADAM,
  OPT_ADAMW,
  OPT_MOMENTUM
} optimizer_kind;

/* The network each replica computes (`ringflow train --model`). */
typedef enum model_kind { MODEL_MLP, MODEL_CNN } model_kind;

typedef struct mlp_config {
  model_kind model; /* MODEL_CNN ignores num_layers and sizes */
  double dropout;   /* MODEL_CNN: the dense layer's dropout rate (0: none) */
  bool ohwi;        /* MODEL_CNN: filters OHWI (Conv2D's filter_format) */
  int num_devices;
  char devices[MLP_MAX_DEVICES][32]; /* canonical names, e.g. "cpu:2" */
  int num_layers;                    /* sizes[0] inputs .. sizes[n] classes */
  int sizes[MLP_MAX_LAYERS + 1];
  int device_batch; /* rows per device per step */
  /* > 0: every replica keeps its own copy of the data set, this many rows
   * (data_init), and gathers its batch from it by fed row indices (idx);
   * 0: its batch is fed (x and y are placeholders). */
  int data_rows;
  sync_mode sync;
  double lr, beta1, beta2, epsilon; /* lr: the schedule's starting value */
  optimizer_kind optimizer;
  double weight_decay; /* AdamW's */
  double momentum;     /* momentum's */
} mlp_config;

/* Per device: the feeds and fetches of one replica. */
typedef struct mlp_replica {
  /* the inputs, (device_batch, sizes[0]) for the MLP and
   * cnn_input_shape(device_batch) for the CNN, and the labels (int32):
   * placeholders, or with data_rows the rows idx of the replica's data */
  rf_output x, y;
  /* with data_rows: the batch's row indices (int32, device_batch), and
   * placeholders for the data set's images (data_rows, sizes[0]) float32
   * and labels (data_rows) int32, assigned by data_op */
  rf_output idx, data_init[2];
  /* a float32 scalar placeholder fed every step: the scheduled learning
   * rate */
  rf_output lr;
  /* Adam's bias corrections beta1^t, beta2^t (no node for momentum): kept
   * on the device, as TensorFlow's Adam does, in float64 variables that
   * every training step multiplies by beta1 and beta2 in place
   * (rf_assign_mul); these outputs are the products as float32, which the
   * step's updates read, so a step feeds nothing for them. power_init:
   * float64 scalar placeholders init_op assigns them from (beta^step, 1 at
   * step 0; mlp_beta_powers makes them). */
  rf_output beta1_power, beta2_power, power_init[2];
  /* the optimizer's constant hyper-parameters, one Const each per replica
   * (shared by every update of its device): beta1, beta2, epsilon, weight
   * decay for Adam and AdamW; momentum in [0] for momentum */
  rf_output hyper[4];
  /* with cfg.dropout > 0: a bool scalar placeholder, true in training steps
   * and false when evaluating (else no node) */
  rf_output training;
  rf_output loss;    /* mean loss of the replica's rows */
  rf_output correct; /* per row: 1 when predicted right (int32) */
  rf_output params[2 * MLP_MAX_LAYERS]; /* reads: W0, b0, W1, b1, ... */
  /* reads of the optimizer's slots: m and v, or momentum's accum */
  rf_output moments[2][2 * MLP_MAX_LAYERS];
  /* placeholders for the initial values of params and the slots */
  rf_output init[3][2 * MLP_MAX_LAYERS];
  /* Across processes (a process fetches only its own replicas): the mean
   * loss of every replica; a float64 (4) placeholder summed and maxed over
   * every replica (train_job.c: test counts and parameter hashes); every
   * replica's elementwise max and min of each parameter. */
  rf_output loss_avg, stats_in, stats_sum, stats_max;
  rf_output pmax[2 * MLP_MAX_LAYERS], pmin[2 * MLP_MAX_LAYERS];
} mlp_replica;

typedef struct mlp_graph {
  rf_graph *g;
  int num_params;
  mlp_replica rep[MLP_MAX_DEVICES];
  rf_node *train_op; /* runs every replica's update */
  rf_node *init_op;  /* assigns params, m, v and Adam's beta powers */
  rf_node *data_op;  /* with data_rows: assigns the replicas' data sets */
} mlp_graph;

/* Builds the graph; on error everything built is freed. */
rf_status *mlp_build(const mlp_config *cfg, mlp_graph *out);
void mlp_free(mlp_graph *m);

/* The number of parameters (weights and biases) of cfg's model. */
int mlp_num_params(const mlp_config *cfg);

/* Glorot-uniform weights and zero biases from seed: the same values for any
 * device count. init[i] receives new tensors (num_params of them). */
rf_status *mlp_initial_values(const mlp_config *cfg, uint64_t seed,
                              rf_tensor **init);
/* The optimizer's slots per parameter: 2 (m, v) or 1 (accum). */
int mlp_num_slots(const mlp_config *cfg);
/* Zero tensors shaped like each parameter (the slots' initial values). */
rf_status *mlp_zero_moments(const mlp_config *cfg, rf_tensor **out);
/* power_init's values to go on from step `step`: out[0], out[1] receive
 * new float64 scalars beta1^step, beta2^step (pow, as the driver fed the
 * powers before they lived on the devices). */
rf_status *mlp_beta_powers(const mlp_config *cfg, int64_t step,
                           rf_tensor **out);
/* The checkpoint name of param p of kind k (0 param, then the slots: 1 m,
 * 2 v, or 1 accum): "W0", "m_b1", "accum_W2". */
void mlp_state_name(const mlp_config *cfg, int kind, int p, char *buf,
                    size_t len);

#endif
