/* tools/cnn.h - the convolutional network of `ringflow train --model cnn`:
 * its parameters' shapes and initial scale, and one replica's forward pass
 * to logits. mlp.c builds the replicas, gradients, synchronisation and update
 * around it exactly as for the MLP. */
#ifndef RF_TOOLS_CNN_H
#define RF_TOOLS_CNN_H

#include <stdbool.h>

#include "ringflow/ringflow.h"

/* conv 5x5x32 (filter, bias), conv 5x5x64, dense 3136x1024, dense 1024x10:
 * W0, b0, .. W3, b3, as the MLP names its layers. */
#define CNN_NUM_PARAMS 8

/* One batch of images, NHWC: (rows, 28, 28, 1). */
rf_shape cnn_input_shape(int rows);
/* Parameter p's shape: even p a layer's weights, odd p its bias; the
 * convolutions' filters (p 0 and 2) are (kh, kw, in, out), or (out, kh,
 * kw, in) with ohwi (Conv2D's filter_format). */
rf_shape cnn_param_shape(int p, bool ohwi);
/* The fan-in and fan-out of parameter p's layer (Glorot-uniform scale). */
void cnn_fans(int p, int *fan_in, int *fan_out);
/* The logits (rows, 10) of x (cnn_input_shape) under params[0..8) (the
 * filters in cnn_param_shape's layout for ohwi), built in g under the
 * current device scope; failures are recorded in g. dropout > 0: the dense
 * 1024 layer's activations are dropped at that rate where the bool scalar
 * `training` is true (unused when dropout is 0). */
rf_output cnn_logits(rf_graph *g, rf_output x, const rf_output *params,
                     bool ohwi, double dropout, rf_output training);

#endif
