/* ringflow/ops.h - one function per op a user writes.
 *
 * Each adds one node to g and returns its (first) output. `name` may be NULL
 * (a unique name is generated). On error - bad arity, dtype, attribute or
 * shape, or an error already recorded in g - nothing is added, the invalid
 * output {NULL, 0} is returned and the graph keeps the first error
 * (rf_graph_status). Binary arithmetic broadcasts numpy-style. Functions
 * returning rf_node* are for ops without outputs (targets); NULL on error. */
#ifndef RINGFLOW_OPS_H
#define RINGFLOW_OPS_H

#include "ringflow/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sources, state, plumbing ---- */
/* The tensor is retained. */
RF_API rf_output rf_const(rf_graph *g, const char *name, rf_tensor *value);
RF_API rf_output rf_const_scalar(rf_graph *g, const char *name, rf_dtype dtype,
                                 double value);
/* A value given at run time through a feed; `shape` may be partly unknown. */
RF_API rf_output rf_placeholder(rf_graph *g, const char *name, rf_dtype dtype,
                                rf_shape shape);
RF_API rf_output rf_identity(rf_graph *g, const char *name, rf_output x);
RF_API rf_node *rf_noop(rf_graph *g, const char *name);

/* A variable: state on its device that lives across the session's steps.
 * Output 0 is a resource handle; read it with rf_read_variable. Reading before
 * the first assign fails with FAILED_PRECONDITION naming the variable.
 * Updates (rf_assign, rf_apply_gradient_descent, rf_apply_adam) are each all
 * or nothing: an update op that fails (out of memory, a bad input) leaves
 * every variable it names as it was, and ApplyAdam's var, m and v change
 * together. A failed step may have applied some of its update ops and not
 * others. */
RF_API rf_output rf_variable(rf_graph *g, const char *name, rf_dtype dtype,
                             rf_shape shape);
RF_API rf_output rf_read_variable(rf_graph *g, const char *name, rf_output var);
RF_API rf_node *rf_assign(rf_graph *g, const char *name, rf_output var,
                          rf_output value);
/* var -= alpha * delta (alpha a scalar). */
RF_API rf_node *rf_apply_gradient_descent(rf_graph *g, const char *name,
                                          rf_output var, rf_output alpha,
                                          rf_output delta);
/* TensorFlow's ApplyAdam: m, v are variables; the rest are scalars except grad.
 *   lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
 *   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
 *   var -= lr_t m / (sqrt(v) + epsilon) */
RF_API rf_node *rf_apply_adam(rf_graph *g, const char *name, rf_output var,
                              rf_output m, rf_output v, rf_output beta1_power,
                              rf_output beta2_power, rf_output lr,
                              rf_output beta1, rf_output beta2,
                              rf_output epsilon, rf_output grad);

/* ---- arithmetic ---- */
RF_API rf_output rf_add(rf_graph *g, const char *name, rf_output a,
                        rf_output b);
RF_API rf_output rf_sub(rf_graph *g, const char *name, rf_output a,
                        rf_output b);
RF_API rf_output rf_mul(rf_graph *g, const char *name, rf_output a,
                        rf_output b);
/* Integer division truncates toward zero; division by zero is an error on
 * CPU devices. On GPU devices it is no error and gives an unspecified value
 * (as in TensorFlow: finding it would cost a device-to-host wait a step). */
RF_API rf_output rf_div(rf_graph *g, const char *name, rf_output a,
                        rf_output b);
RF_API rf_output rf_neg(rf_graph *g, const char *name, rf_output x);
/* Sum of n >= 1 tensors of one dtype and shape. */
RF_API rf_output rf_add_n(rf_graph *g, const char *name, const rf_output *xs,
                          int n);
/* (m,k) x (k,n) -> (m,n), after the optional transposes. */
RF_API rf_output rf_matmul(rf_graph *g, const char *name, rf_output a,
                           rf_output b, bool transpose_a, bool transpose_b);
RF_API rf_output rf_cast(rf_graph *g, const char *name, rf_output x,
                         rf_dtype to);
RF_API rf_output rf_equal(rf_graph *g, const char *name, rf_output a,
                          rf_output b);

/* ---- neural network ---- */
/* x (..., c) + bias (c): any rank >= 1, so NHWC activations (n, h, w, c)
 * get one bias per channel. */
RF_API rf_output rf_bias_add(rf_graph *g, const char *name, rf_output x,
                             rf_output bias);
RF_API rf_output rf_relu(rf_graph *g, const char *name, rf_output x);
RF_API rf_output rf_sigmoid(rf_graph *g, const char *name, rf_output x);
RF_API rf_output rf_tanh(rf_graph *g, const char *name, rf_output x);
/* Softmax over the last axis. */
RF_API rf_output rf_softmax(rf_graph *g, const char *name, rf_output x);
/* logits (b, c) float, labels (b) int32/int64 -> loss (b). Output 1 of the
 * node is the backprop (b, c). A label outside [0, c) is an error at run time
 * on CPU devices; on GPU devices that row's loss and backprop are NaN (as
 * TensorFlow's GPU kernel does). Both outputs are differentiable, so
 * gradients of gradients (a gradient penalty, Hessian-vector products) work
 * through this op, as through every nn op here; TensorFlow refuses the
 * backprop output's gradient. */
RF_API rf_output rf_sparse_softmax_cross_entropy(rf_graph *g, const char *name,
                                                 rf_output logits,
                                                 rf_output labels);

/* ---- convolution and pooling (NHWC, as TensorFlow) ----
 * input (n, h, w, c); filter (kh, kw, c, out_channels); strides, ksize and
 * dilations are 4 ints (batch, height, width, channels) with 1 over batch
 * and channels; padding "SAME" (output ceil(h / stride), zeros around, split
 * with the smaller half before) or "VALID" (no padding; a window larger than
 * a nonzero input is an error). float32 and float64. Invalid attrs or sizes
 * (a stride below 1, another padding, a filter whose in_channels differ from
 * the input's, an output over 2^63 - 1 elements) are INVALID_ARGUMENT naming
 * the node and op, at build time where the shapes are known, else at run
 * time. */
/* -> (n, oh, ow, out_channels). dilations NULL: all 1. */
RF_API rf_output rf_conv2d(rf_graph *g, const char *name, rf_output input,
                           rf_output filter, const int64_t strides[4],
                           const char *padding, const int64_t dilations[4]);
/* The gradient of rf_conv2d with respect to its input: input_sizes is an
 * int32 vector (n, h, w, c); out_backprop (n, oh, ow, out_channels). */
RF_API rf_output rf_conv2d_backprop_input(
    rf_graph *g, const char *name, rf_output input_sizes, rf_output filter,
    rf_output out_backprop, const int64_t strides[4], const char *padding,
    const int64_t dilations[4]);
/* The gradient of rf_conv2d with respect to its filter: filter_sizes is an
 * int32 vector (kh, kw, c, out_channels). */
RF_API rf_output rf_conv2d_backprop_filter(
    rf_graph *g, const char *name, rf_output input, rf_output filter_sizes,
    rf_output out_backprop, const int64_t strides[4], const char *padding,
    const int64_t dilations[4]);
/* Max / mean over each window -> (n, oh, ow, c). AvgPool divides by the
 * number of input elements in the window (padding not counted); MaxPool's
 * gradient goes to the first maximum of each window (row-major). */
RF_API rf_output rf_max_pool(rf_graph *g, const char *name, rf_output input,
                             const int64_t ksize[4], const int64_t strides[4],
                             const char *padding);
RF_API rf_output rf_avg_pool(rf_graph *g, const char *name, rf_output input,
                             const int64_t ksize[4], const int64_t strides[4],
                             const char *padding);

/* ---- reductions and shapes ---- */
/* Reduce over `axes` (negative counts from the end); naxes < 0: all axes. */
RF_API rf_output rf_sum(rf_graph *g, const char *name, rf_output x,
                        const int64_t *axes, int naxes, bool keep_dims);
RF_API rf_output rf_mean(rf_graph *g, const char *name, rf_output x,
                         const int64_t *axes, int naxes, bool keep_dims);
/* Index of the largest element along `axis` (first on ties), as int64. */
RF_API rf_output rf_argmax(rf_graph *g, const char *name, rf_output x,
                           int64_t axis);
/* `shape` is an int32/int64 vector; one entry may be -1. */
RF_API rf_output rf_reshape(rf_graph *g, const char *name, rf_output x,
                            rf_output shape);
/* rf_reshape with a Const shape built from dims (int32 when every dim fits,
 * so on GPU devices the shape stays in host memory by itself). */
RF_API rf_output rf_reshape_to(rf_graph *g, const char *name, rf_output x,
                               int rank, const int64_t *dims);
/* The shape of x as an int32 or int64 vector. */
RF_API rf_output rf_shape_of_op(rf_graph *g, const char *name, rf_output x,
                                rf_dtype out_type);
/* A tensor of shape `dims` (int32/int64 vector) filled with scalar `value`. */
RF_API rf_output rf_fill(rf_graph *g, const char *name, rf_output dims,
                         rf_output value);
RF_API rf_output rf_zeros_like(rf_graph *g, const char *name, rf_output x);
RF_API rf_output rf_ones_like(rf_graph *g, const char *name, rf_output x);

#ifdef __cplusplus
}
#endif
#endif
