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
/* The tensor is retained. It must be in host memory: one of
 * rf_tensor_new_external_gpu is refused (INVALID_ARGUMENT naming the node). */
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
 * Updates (rf_assign, rf_assign_mul, rf_apply_gradient_descent,
 * rf_apply_adam, rf_apply_adamw, rf_apply_momentum) are each all or nothing:
 * an update op that fails (out of memory, a bad input) leaves every variable
 * it names as it was, and an update's var and slots (m and v; accum) change
 * together. A failed step may have applied some of its update ops and not
 * others. The Adam, AdamW and momentum updates a session groups into one
 * node (rf_session_options.group_optimizer_updates) are all or nothing
 * together: every variable of the group is updated, or none is. */
RF_API rf_output rf_variable(rf_graph *g, const char *name, rf_dtype dtype,
                             rf_shape shape);
RF_API rf_output rf_read_variable(rf_graph *g, const char *name, rf_output var);
RF_API rf_node *rf_assign(rf_graph *g, const char *name, rf_output var,
                          rf_output value);
/* var *= value, elementwise, in place: value has var's float dtype and
 * shape. Output 0 is the variable's new value (what rf_read_variable would
 * read right after). While nothing else holds the variable's value (no
 * snapshot of an earlier read still in use) it is updated in its own
 * buffer, so a step that multiplies a variable keeps it where a CUDA graph
 * of the step (rf_session_options.gpu_graphs) finds it; otherwise, as every
 * update, it writes a copy and swaps it in. Errors: INVALID_ARGUMENT at
 * build time for a dtype or shape other than the Variable's (at run time
 * when var is not straight from one), FAILED_PRECONDITION at run time
 * before the variable's first assign. */
RF_API rf_output rf_assign_mul(rf_graph *g, const char *name, rf_output var,
                               rf_output value);
/* var -= alpha * delta (alpha a scalar). */
RF_API rf_node *rf_apply_gradient_descent(rf_graph *g, const char *name,
                                          rf_output var, rf_output alpha,
                                          rf_output delta);
/* TensorFlow's ApplyAdam: m, v are variables; the rest are scalars except grad,
 * all of var's dtype (as in TensorFlow; so in bfloat16 beta2 0.999 is 1.0
 * and v never moves: keep low-precision parameters' optimizer state in
 * float32).
 *   lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
 *   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
 *   var -= lr_t m / (sqrt(v) + epsilon)
 * On CPU devices (x86) the update treats denormal numbers as zero (FTZ and
 * DAZ, as TensorFlow's CPU kernels; moments decaying into that range made
 * it ~12x slower): a denormal var, m, v or grad element of the type it is
 * computed in (float32 for float16 and bfloat16) reads as 0 and a denormal
 * result is stored as 0, so a denormal var becomes 0 even with lr 0.
 * RF_FLUSH_DENORMALS=0 in the environment keeps IEEE denormals
 * (docs/ARCHITECTURE.md), as GPU devices and rf_apply_momentum always do.
 * rf_apply_adamw likewise. */
RF_API rf_node *rf_apply_adam(rf_graph *g, const char *name, rf_output var,
                              rf_output m, rf_output v, rf_output beta1_power,
                              rf_output beta2_power, rf_output lr,
                              rf_output beta1, rf_output beta2,
                              rf_output epsilon, rf_output grad);
/* AdamW, Adam with decoupled weight decay (Loshchilov & Hutter), exactly as
 * PyTorch's torch.optim.AdamW: m, v are variables; the rest are scalars
 * except grad. With var the value before the step,
 *   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
 *   m_hat = m / (1 - beta1_power);  v_hat = v / (1 - beta2_power)
 *   var -= lr (m_hat / (sqrt(v_hat) + epsilon) + weight_decay var)
 * computed as var (1 - lr weight_decay) - lr / (1 - beta1_power) m /
 * (sqrt(v) / sqrt(1 - beta2_power) + epsilon). epsilon is added to
 * sqrt(v_hat), not to sqrt(v) as in rf_apply_adam, so weight_decay 0 is
 * PyTorch's Adam, which differs from TensorFlow's in epsilon's place.
 * Denormal numbers are zero on CPU devices, as in rf_apply_adam. The
 * scalars are of var's dtype, as rf_apply_adam's: a beta2_power that rounds
 * to 1 (0.999^t in bfloat16 for small t) makes 1 - beta2_power 0, v_hat 0/0
 * and var NaN at that step, whatever lr (keep such state in float32).
 * beta1_power, beta2_power: beta1^t, beta2^t at step t >= 1. INVALID_ARGUMENT
 * at build time for a non-scalar scalar input or a grad whose dtype or shape
 * differs from a variable's, at run time also when two handles are one
 * variable. */
RF_API rf_node *rf_apply_adamw(rf_graph *g, const char *name, rf_output var,
                               rf_output m, rf_output v, rf_output beta1_power,
                               rf_output beta2_power, rf_output lr,
                               rf_output beta1, rf_output beta2,
                               rf_output epsilon, rf_output weight_decay,
                               rf_output grad);
/* TensorFlow's ApplyMomentum (SGD with momentum): accum is a variable; lr
 * and momentum are scalars; grad has var's shape and dtype.
 *   accum = momentum accum + grad
 *   var -= lr accum                                (use_nesterov false)
 *   var -= lr grad + lr momentum accum             (use_nesterov true)
 * Errors as rf_apply_adamw's ("var and accum must be two different
 * variables" at run time). */
RF_API rf_node *rf_apply_momentum(rf_graph *g, const char *name, rf_output var,
                                  rf_output accum, rf_output lr, rf_output grad,
                                  rf_output momentum, bool use_nesterov);

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
 * and channels (a stride and a dilation may both exceed 1 in one axis,
 * which TensorFlow's CPU kernel refuses); padding "SAME" (output
 * ceil(h / stride), zeros around, split with the smaller half before) or
 * "VALID" (no padding; a window larger than a nonzero input is an error;
 * empty inputs, a batch or a spatial size of 0, give empty outputs of the
 * computed shape). A rank other than 4 is INVALID_ARGUMENT ("input must
 * have rank 4 (NHWC)", "filter must have rank 4 (HWIO or OHWI)"). float32 and
 * float64; on GPU devices also float16 and bfloat16 (summed in float32, rounded
 * once), which a CPU device refuses when the step runs (UNIMPLEMENTED "... has
 * dtype float16, which runs on GPU devices only ..."). Invalid attrs or sizes
 * (a stride below 1, another padding, a filter whose in_channels differ from
 * the input's, an output over 2^63 - 1 elements) are INVALID_ARGUMENT naming
 * the node and op, at build time where the shapes are known, else at run
 * time. */
/* -> (n, oh, ow, out_channels). dilations NULL: all 1. */
RF_API rf_output rf_conv2d(rf_graph *g, const char *name, rf_output input,
                           rf_output filter, const int64_t strides[4],
                           const char *padding, const int64_t dilations[4]);
/* The gradient of rf_conv2d with respect to its input: input_sizes is an
 * int32 vector (n, h, w, c) (another dtype: INVALID_ARGUMENT naming the
 * node); out_backprop (n, oh, ow, out_channels). The op itself also takes
 * an int64 vector (attr Tsizes), which rf_gradients gives it (and
 * Conv2DBackpropFilter's filter_sizes, AvgPoolGrad's orig_input_shape)
 * where a dim is past INT32_MAX or the shape is known only at run time. */
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
/* The three above with the filter's layout named (attr filter_format):
 * "HWIO" (NULL: the default), (kh, kw, c, out_channels), TensorFlow's; or
 * "OHWI", (out_channels, kh, kw, c): cuDNN's NHWC filter layout (KRSC) and
 * PyTorch's channels_last weight (its (out, in, kh, kw) weight permuted
 * (0, 2, 3, 1)). filter_sizes and the filter gradient are in the same
 * order, and rf_gradients keeps the format. Results are the same in both
 * layouts up to the summation order of the backend; on GPU devices cuDNN
 * takes an OHWI filter as it is, where an HWIO one is transposed into a
 * scratch copy on every call (and the filter gradient back), one small
 * kernel each; CPU devices read either layout directly. Another string is
 * INVALID_ARGUMENT naming the node and the attr. */
RF_API rf_output rf_conv2d_with_format(rf_graph *g, const char *name,
                                       rf_output input, rf_output filter,
                                       const int64_t strides[4],
                                       const char *padding,
                                       const int64_t dilations[4],
                                       const char *filter_format);
RF_API rf_output rf_conv2d_backprop_input_with_format(
    rf_graph *g, const char *name, rf_output input_sizes, rf_output filter,
    rf_output out_backprop, const int64_t strides[4], const char *padding,
    const int64_t dilations[4], const char *filter_format);
RF_API rf_output rf_conv2d_backprop_filter_with_format(
    rf_graph *g, const char *name, rf_output input, rf_output filter_sizes,
    rf_output out_backprop, const int64_t strides[4], const char *padding,
    const int64_t dilations[4], const char *filter_format);
/* Max / mean over each window -> (n, oh, ow, c). AvgPool divides by the
 * number of input elements in the window (padding not counted); MaxPool's
 * gradient goes to the first maximum of each window (row-major). */
RF_API rf_output rf_max_pool(rf_graph *g, const char *name, rf_output input,
                             const int64_t ksize[4], const int64_t strides[4],
                             const char *padding);
RF_API rf_output rf_avg_pool(rf_graph *g, const char *name, rf_output input,
                             const int64_t ksize[4], const int64_t strides[4],
                             const char *padding);
/* The pools' gradients with respect to their input, as rf_gradients
 * builds them (TensorFlow's MaxPoolGrad and AvgPoolGrad): grad is the
 * gradient of the pool's output (n, oh, ow, c); ksize, strides and padding
 * are the pool's. MaxPoolGrad takes the pool's input and output and gives
 * (n, h, w, c), each window's grad added at its first maximum;
 * AvgPoolGrad takes the input's shape as an int32 vector (n, h, w, c) and
 * spreads each window's grad evenly over its input elements. AvgPoolGrad,
 * Conv2DBackpropInput and Conv2DBackpropFilter have gradients (second order
 * through AvgPool and Conv2D works); MaxPoolGrad has none: rf_gradients
 * through it fails with NOT_FOUND ("No gradient defined for op
 * 'MaxPoolGrad' ..."). */
RF_API rf_output rf_max_pool_grad(rf_graph *g, const char *name,
                                  rf_output orig_input, rf_output orig_output,
                                  rf_output grad, const int64_t ksize[4],
                                  const int64_t strides[4],
                                  const char *padding);
RF_API rf_output rf_avg_pool_grad(rf_graph *g, const char *name,
                                  rf_output orig_input_shape, rf_output grad,
                                  const int64_t ksize[4],
                                  const int64_t strides[4],
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

/* ---- moving elements (Transpose, Concat, Split, Slice, ExpandDims,
 * Squeeze, Pad, Tile) ----
 * Every dtype. Index arguments are attrs fixed when the node is built (not
 * tensors, unlike TensorFlow's perm/begin/paddings inputs), so output shapes
 * are known at build time where the input's are. An axis may be negative
 * (counts from the end). Empty tensors work. A bad argument - an axis out of
 * range, a window outside the input, a result past INT64_MAX elements - is
 * INVALID_ARGUMENT naming the node and op, when the node is built if the
 * shapes are known then, else when it runs. Gradients flow to the float
 * input through each; gradients of those gradients too. */
/* y[i0, .., in-1] = x[ip0, ..] with y's dim k = x's dim perm[k]; perm[0, n)
 * a permutation of 0..rank-1. perm NULL: the dims reversed (x's rank must
 * be known when the node is built). Always copies. */
RF_API rf_output rf_transpose(rf_graph *g, const char *name, rf_output x,
                              const int64_t *perm, int n);
/* values[0, n) (n >= 1, one dtype and rank, equal dims except along axis)
 * joined along axis; rank >= 1. */
RF_API rf_output rf_concat(rf_graph *g, const char *name,
                           const rf_output *values, int n, int64_t axis);
/* x cut along axis into num_split equal pieces (the dim must divide);
 * outputs[0, num_split) receive them. num_split in 1..1048575 (an op has at
 * most 2^20 - 1 outputs from one attr), else INVALID_ARGUMENT. Returns the
 * node, NULL on error (outputs then invalid). */
RF_API rf_node *rf_split(rf_graph *g, const char *name, rf_output x,
                         int num_split, int64_t axis, rf_output *outputs);
/* Same with piece i size_splits[i] wide (each >= 0, one may be -1: what is
 * left); the sizes must add up to x's dim (TensorFlow's SplitV). NULL
 * size_splits: equal pieces. */
RF_API rf_node *rf_split_v(rf_graph *g, const char *name, rf_output x,
                           const int64_t *size_splits, int num_split,
                           int64_t axis, rf_output *outputs);
/* x[begin[k] : begin[k] + size[k]] in each of its n == rank dims; size[k]
 * -1: to the end of dim k. begin >= 0; the window must lie inside x. */
RF_API rf_output rf_slice(rf_graph *g, const char *name, rf_output x,
                          const int64_t *begin, const int64_t *size, int n);
/* TensorFlow's tf.strided_slice without ellipsis and new axes: for each dim
 * k < n, the elements begin[k], begin[k] + strides[k], ... before end[k]
 * (Python's x[begin:end:stride]; dims from n on are taken whole). Negative
 * begin/end count from the end of the dim; then they are clamped to
 * [0, dim] (stride > 0) or [-1, dim - 1] (stride < 0), so an empty range
 * gives a dim of size 0. Bit k of begin_mask (end_mask) ignores begin[k]
 * (end[k]): the range starts (ends) at the dim's first or last element in
 * the stride's direction. Bit k of shrink_axis_mask takes only element
 * begin[k] (from the end when negative; it must lie in the dim, and
 * strides[k] be positive) and drops the dim from the output. strides NULL:
 * all 1. Every dtype; differentiable (the gradient scatters dy into zeros of
 * x's shape: _StridedSliceGrad). INVALID_ARGUMENT at build time (or at run
 * time for dims known only then): n > x's rank, a stride 0, a mask bit at
 * or past n, a shrunk index outside its dim. */
RF_API rf_output rf_strided_slice(rf_graph *g, const char *name, rf_output x,
                                  const int64_t *begin, const int64_t *end,
                                  const int64_t *strides, int n,
                                  int64_t begin_mask, int64_t end_mask,
                                  int64_t shrink_axis_mask);
/* x with a dim of size 1 inserted at axis in [-rank-1, rank] (-1: last).
 * No copy (a view). */
RF_API rf_output rf_expand_dims(rf_graph *g, const char *name, rf_output x,
                                int64_t axis);
/* x without its dims axes[0, n), each of size 1; n == 0: without every dim of
 * size 1. No copy (a view). */
RF_API rf_output rf_squeeze(rf_graph *g, const char *name, rf_output x,
                            const int64_t *axes, int n);
/* x with paddings[2k] elements before and paddings[2k+1] after dim k (each
 * >= 0; n == 2 * rank entries), set to constant_value converted to x's dtype
 * (TensorFlow's PadV2 in CONSTANT mode). */
RF_API rf_output rf_pad(rf_graph *g, const char *name, rf_output x,
                        const int64_t *paddings, int n, double constant_value);
/* x repeated multiples[k] (>= 0) times along dim k; n == rank. */
RF_API rf_output rf_tile(rf_graph *g, const char *name, rf_output x,
                         const int64_t *multiples, int n);

/* ---- picking by index or condition ---- */
/* params[..., indices[j...], ...] along axis (an embedding lookup with axis
 * 0): output shape params[:axis] + indices + params[axis+1:]; indices int32
 * or int64, params any dtype. An index outside [0, params dim) fails the run
 * with INVALID_ARGUMENT on CPU devices; on GPU devices that output slice is
 * zeros (as TensorFlow's GPU kernel does). The gradient w.r.t. float
 * params is dense: dy scattered back onto params' shape, summed where an
 * index repeats (on GPU devices in an unspecified order: float sums may
 * differ in the last bits from run to run); params of other dtypes carry
 * none (rf_gradients leaves their dx invalid). */
RF_API rf_output rf_gather(rf_graph *g, const char *name, rf_output params,
                           rf_output indices, int64_t axis);
/* indices (uint8, int32 or int64) with a new dim of `depth` (>= 0) at axis
 * in [-rank-1, rank] as rf_expand_dims' (-1: last; TensorFlow takes only
 * -1 of the negatives; outside: INVALID_ARGUMENT "axis 3 is out of range
 * for a new axis of a rank-2 input (must be in [-3, 2])"), on_value where the
 * index equals the position and off_value elsewhere (an index outside [0,
 * depth): all off), as `dtype`. No gradient. */
RF_API rf_output rf_one_hot(rf_graph *g, const char *name, rf_output indices,
                            int64_t depth, double on_value, double off_value,
                            int64_t axis, rf_dtype dtype);
/* t where condition (bool) is true, else e; the three broadcast
 * numpy-style (TensorFlow's SelectV2, tf.where with x and y). Gradients
 * flow to t and e, summed down to their shapes. */
RF_API rf_output rf_select(rf_graph *g, const char *name, rf_output condition,
                           rf_output t, rf_output e);

/* ---- batched products ---- */
/* x (..., m, k) times y (..., k, n) -> (batch..., m, n) for the float
 * dtypes, int32 and int64 (as rf_matmul; integer sums wrap around, two's
 * complement); adj_x / adj_y transpose x's / y's last two dims first.
 * Ranks >= 2; the batch dims (all but the last two) broadcast numpy-style
 * (TensorFlow's BatchMatMulV2, tf.matmul on batches). CPU: one OpenBLAS
 * sgemm/dgemm per batch (float16/bfloat16 through float32; integers in
 * plain loops); GPU: cuBLAS, strided-batched when each operand's batch is
 * whole or broadcast as a whole, else one GEMM per batch (integers: a
 * kernel of its own). Gradients flow to float x and y, summed over the
 * broadcast batch dims; integers carry none (rf_gradients leaves their dx
 * invalid). */
RF_API rf_output rf_batch_matmul(rf_graph *g, const char *name, rf_output x,
                                 rf_output y, bool adj_x, bool adj_y);

/* ---- activations ---- */
/* GELU of a float x, as TensorFlow's tf.nn.gelu: approximate false, the
 * exact 0.5 x (1 + erf(x / sqrt(2))); true, the tanh approximation
 * 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). Gradients of first
 * and second order. */
RF_API rf_output rf_gelu(rf_graph *g, const char *name, rf_output x,
                         bool approximate);
/* Softmax along `axis` (negative from the end) of x, whose rank must be
 * known when the node is built: the last axis is rf_softmax itself; another
 * is transposed to the end and back (two copies). `name` names the last
 * node. */
RF_API rf_output rf_softmax_axis(rf_graph *g, const char *name, rf_output x,
                                 int64_t axis);

/* ---- regularization ---- */
/* Dropout of a float x: each element kept with probability 1 - rate (rate
 * in [0, 1)) and scaled by 1 / (1 - rate), else 0. Output 1 of the node is
 * the mask (0 or 1 / (1 - rate)); the output is x * mask, so a dropped NaN
 * or infinity gives NaN (as in TensorFlow and PyTorch); the gradient is
 * dy * mask. The decisions
 * are stateless and reproducible: element i's comes from Philox4x32-10
 * keyed by `seed` (low and high 32 bits) with the counter (i / 4 low and
 * high 32 bits, step bits 0..31, step bits 32..55 | device << 24), word
 * i % 4, kept when its top 24 bits / 2^24 >= rate; step is the step's
 * number in the job for a session that is a task of one, else the
 * session's run number (1 for the first rf_session_run); device is the
 * node's device's index in this process's device list of the session (cpu:k
 * is k, gpu:k is num_cpu_devices + k). So a replica on another device drops
 * other elements, a re-run of the same step the same ones, and the CPU and
 * GPU kernels give the same decisions for the same key. */
RF_API rf_output rf_dropout(rf_graph *g, const char *name, rf_output x,
                            double rate, int64_t seed);

/* ---- normalization ---- */
/* Layer normalization over the last axis of a float x of rank >= 1 (shape
 * [..., C]), as torch.nn.LayerNorm(C): each row r of C elements gives
 * y[r, j] = (x[r, j] - mean_r) / sqrt(var_r + epsilon) * gamma[j] + beta[j],
 * var_r the biased variance (divided by C); gamma and beta have shape [C]
 * and x's dtype; epsilon >= 0 (PyTorch's default is 1e-5; Keras's is 1e-3).
 * Statistics are computed in double and each output rounded once (float16
 * and bfloat16 included). Rows may be 0 (empty batch); C may be 1 (y is
 * then beta). A row whose variance plus epsilon is 0 (equal values with
 * epsilon 0; C == 1 with epsilon 0) has xhat 0: y is beta and dx 0, never
 * NaN. Gradients for x, gamma and beta (dgamma and dbeta summed over
 * the rows in a fixed order, so they are deterministic); no second-order
 * gradient. Errors (INVALID_ARGUMENT): x of rank 0, gamma or beta not [C],
 * epsilon < 0, a non-float dtype. */
RF_API rf_output rf_layer_norm(rf_graph *g, const char *name, rf_output x,
                               rf_output gamma, rf_output beta, double epsilon);

/* Batch normalization over every axis but the last: x is [..., C] of rank
 * >= 2 (NHWC [N, H, W, C] or [N, C]); C, the last axis, is the channel axis.
 * For each channel j, over the R = num_elements / C rows r:
 *   y[r, j] = (x[r, j] - mean[j]) / sqrt(variance[j] + epsilon) * gamma[j]
 *             + beta[j],
 * variance the biased variance (sum of squared deviations / R), as
 * TensorFlow's FusedBatchNorm and Keras's BatchNormalization normalise.
 * gamma, beta, mean and variance are [C] with x's dtype; every float dtype
 * (float16, bfloat16, float32, float64; statistics computed in double, each
 * output rounded once); epsilon >= 0 (Keras's default is 1e-3, PyTorch's
 * 1e-5). Errors (INVALID_ARGUMENT, naming the node and op): x of rank < 2,
 * a parameter not [C] for x's last dim C (at run time, naming the device
 * too, where a shape is only known then), epsilon < 0, a non-float or
 * mixed dtype.
 *
 * Training mode: mean and variance are the batch's statistics, returned as
 * outputs 1 and 2 of the BatchNorm node (*batch_mean and *batch_variance
 * when not NULL; variance biased). An empty batch (R = 0) gives an empty y
 * and NaN statistics. Gradients for x, gamma and beta go through the batch
 * statistics (and gradients that reach batch_mean or batch_variance are
 * included); dgamma and dbeta are summed over the rows in a fixed order, so
 * they are deterministic; no second-order gradient. */
RF_API rf_output rf_batch_norm_training(rf_graph *g, const char *name,
                                        rf_output x, rf_output gamma,
                                        rf_output beta, double epsilon,
                                        rf_output *batch_mean,
                                        rf_output *batch_variance);
/* Inference mode (BatchNormInference): normalise with given statistics,
 * usually the moving averages. Gradients for x, gamma, beta, mean and
 * variance (the statistics taken as inputs, not recomputed); no
 * second-order gradient (RF_NOT_FOUND "No gradient defined for op
 * '_BatchNormInferenceGrad'"). */
RF_API rf_output rf_batch_norm_inference(rf_graph *g, const char *name,
                                         rf_output x, rf_output gamma,
                                         rf_output beta, rf_output mean,
                                         rf_output variance, double epsilon);
/* An assign node (a target: run it with the step) setting the variable
 *   variable = momentum * variable + (1 - momentum) * value,
 * placed on the variable's device; value has the variable's float dtype
 * and shape. momentum in [0, 1] (Keras's default is 0.99; PyTorch's
 * momentum m is 1 - m here); otherwise (or a non-float value, or one whose
 * dtype or known shape is not the variable's) INVALID_ARGUMENT recorded in
 * g, naming the update, nothing added and NULL. */
RF_API rf_node *rf_moving_average_update(rf_graph *g, const char *name,
                                         rf_output variable, rf_output value,
                                         double momentum);

typedef struct rf_batch_norm_result {
  rf_output y;
  /* The statistics y was normalised with: training, the batch mean and
   * biased variance; inference, the values read from the moving
   * variables. */
  rf_output mean, variance;
  /* Training with moving variables: a NoOp target, on moving_mean's
   * device, that runs both moving average updates
   * (rf_moving_average_update with the batch mean and the batch's biased
   * variance); the user runs it with each training step, it does not run
   * by itself. NULL otherwise. */
  rf_node *update;
} rf_batch_norm_result;

/* Batch normalization as a layer, as Keras's BatchNormalization. The moving
 * statistics are variables (rf_variable handles, [C], x's dtype, e.g.
 * assigned zeros and ones before training): moving_mean holds the moving
 * average of the batch means, moving_variance that of the batches' biased
 * variances (Keras's convention; PyTorch and TF's fused kernel store the
 * unbiased variance there instead). training: y =
 * rf_batch_norm_training(...) and out->update updates the moving averages
 * with `momentum`; moving_mean and moving_variance may then both be invalid
 * ({NULL, 0}: no update). Inference: y = rf_batch_norm_inference with the
 * variables' values (both required). On error (as rf_batch_norm_training,
 * or momentum outside [0, 1], or moving variables missing) the graph keeps
 * the error and *out is all invalid/NULL; nodes made before the error
 * stay. */
RF_API void rf_batch_norm(rf_graph *g, const char *name, rf_output x,
                          rf_output gamma, rf_output beta,
                          rf_output moving_mean, rf_output moving_variance,
                          bool training, double momentum, double epsilon,
                          rf_batch_norm_result *out);

/* Synchronized batch norm (training mode) over n replicas, n in 1..1024:
 * xs[i] ([..., C], on device i; a known rank >= 2, one float dtype and rank
 * for all, C alike; the other dims may differ, so uneven batch slices are
 * fine) is normalised with the statistics of the global batch, the
 * concatenation of all xs along the rows, so every replica gets the y (and
 * gradients) single-device batch norm gives for its rows of that batch.
 * Under data parallelism plain rf_batch_norm per replica (per-device
 * statistics) is the default; this is the option. Built from
 * ringflow's collectives (rf_all_reduce_n, so each x needs a device): per
 * device the per-channel sums and row counts, all-reduced to the global
 * mean; then per device the sums of squared deviations from that mean,
 * all-reduced to the global biased variance (two passes, no E[x^2] -
 * mean^2 cancellation); y_i = rf_batch_norm_inference(xs[i], gammas[i],
 * betas[i], mean, variance). Statistics of float16/bfloat16 x are computed
 * in float32. rf_gradients differentiates through the all-reduces: the
 * backward pass all-reduces the gradients of the sums (the gradient
 * statistics dx needs), and the gradient of gammas[i]/betas[i] is replica
 * i's part (pass one gamma output to every replica to get the sum).
 * name (NULL: generated) names the collectives <name>_sum, <name>_count,
 * <name>_sqdev and the normalisation nodes <name>_<i>. moving_means and
 * moving_variances: per-replica variables (both NULL: no update); each
 * outs[i].update updates replica i's with the global statistics. outs[i]:
 * as rf_batch_norm's, on device i. Errors as rf_batch_norm's, plus n out of
 * range, NULL arrays, x's of another dtype or rank (INVALID_ARGUMENT naming
 * the x, its device, dtype and shape), and the collective builders'. */
RF_API void rf_sync_batch_norm_n(rf_graph *g, const char *name, int n,
                                 const rf_output *xs, const rf_output *gammas,
                                 const rf_output *betas,
                                 const rf_output *moving_means,
                                 const rf_output *moving_variances,
                                 double momentum, double epsilon,
                                 rf_batch_norm_result *outs);

#ifdef __cplusplus
}
#endif
#endif
