/* tools/cnn.c - the network of cnn.h: conv 5x5x32 SAME + bias + relu, max
 * pool 2x2, conv 5x5x64 SAME + bias + relu, max pool 2x2, flatten, dense
 * 1024 + relu + dropout while training, dense 10 (the TensorFlow tutorial's
 * network for MNIST). */
#include "cnn.h"

#define SIDE 28     /* input images are SIDE x SIDE x 1 */
#define KERNEL 5    /* both convolutions' window */
#define C1 32       /* first convolution's channels */
#define C2 64       /* second's */
#define HIDDEN 1024 /* dense layer's units */
#define CLASSES 10
#define FLAT ((SIDE / 4) * (SIDE / 4) * C2) /* after two 2x2 pools: 3136 */

rf_shape cnn_input_shape(int rows) {
  return rf_shape_of(4, rows, SIDE, SIDE, 1);
}

/* A KERNEL x KERNEL filter from in to out channels in its layout. */
static rf_shape filter_shape(int64_t in, int64_t out, bool ohwi) {
  return ohwi ? rf_shape_of(4, out, (int64_t)KERNEL, (int64_t)KERNEL, in)
              : rf_shape_of(4, (int64_t)KERNEL, (int64_t)KERNEL, in, out);
}

rf_shape cnn_param_shape(int p, bool ohwi) {
  switch (p) {
    case 0: return filter_shape(1, C1, ohwi);
    case 1: return rf_shape_of(1, C1);
    case 2: return filter_shape(C1, C2, ohwi);
    case 3: return rf_shape_of(1, C2);
    case 4: return rf_shape_of(2, FLAT, HIDDEN);
    case 5: return rf_shape_of(1, HIDDEN);
    case 6: return rf_shape_of(2, HIDDEN, CLASSES);
    default: return rf_shape_of(1, CLASSES);
  }
}

void cnn_fans(int p, int *fan_in, int *fan_out) {
  static const int in[] = {KERNEL * KERNEL * 1, KERNEL * KERNEL * C1, FLAT,
                           HIDDEN};
  static const int out[] = {KERNEL * KERNEL * C1, KERNEL * KERNEL * C2, HIDDEN,
                            CLASSES};
  *fan_in = in[p / 2];
  *fan_out = out[p / 2];
}

/* conv SAME + bias + relu, then a 2x2 max pool of stride 2. */
static rf_output conv_block(rf_graph *g, rf_output x, rf_output w, rf_output b,
                            bool ohwi) {
  static const int64_t one[4] = {1, 1, 1, 1}, two[4] = {1, 2, 2, 1};
  rf_output h = rf_conv2d_with_format(g, NULL, x, w, one, "SAME", NULL,
                                      ohwi ? "OHWI" : "HWIO");
  h = rf_relu(g, NULL, rf_bias_add(g, NULL, h, b));
  return rf_max_pool(g, NULL, h, two, two, "SAME");
}

rf_output cnn_logits(rf_graph *g, rf_output x, const rf_output *params,
                     bool ohwi, double dropout, rf_output training) {
  rf_output h = conv_block(g, x, params[0], params[1], ohwi);
  h = conv_block(g, h, params[2], params[3], ohwi);
  const int64_t flat[2] = {-1, FLAT};
  h = rf_reshape_to(g, NULL, h, 2, flat);
  h = rf_matmul(g, NULL, h, params[4], false, false);
  h = rf_relu(g, NULL, rf_bias_add(g, NULL, h, params[5]));
  /* One graph trains and evaluates: `training` picks the dropped-out
   * activations or the plain ones (whose gradient is then zero). */
  if (dropout > 0)
    h = rf_select(g, NULL, training, rf_dropout(g, NULL, h, dropout, 17), h);
  h = rf_matmul(g, NULL, h, params[6], false, false);
  return rf_bias_add(g, NULL, h, params[7]);
}
