/* ops/math_grad.c - gradient functions of the math ops, built from the public
 * op functions (errors are recorded in the graph, which the gradient builder
 * checks). For a broadcasting op the gradient of each input is summed back
 * down to that input's shape with _SumToShapeOf, skipped when the shapes are
 * statically known to be equal. */
#include "ops/math_ops.h"
#include "ringflow/ops.h"

static rf_output forward_input(const rf__grad_ctx *c, int k) {
  return rf__input(c->op, k);
}

/* grad (shaped like the forward output) reduced to the shape of input x. */
static rf_output sum_to(rf__grad_ctx *c, rf_output grad, rf_output x) {
  rf_shape xs = rf_output_shape(x);
  rf_shape ys = c->op->out_shapes[0];
  if (rf_shape_is_fully_defined(&xs) && rf_shape_equal(&xs, &ys)) return grad;
  return rf__sum_to_shape_of(c->g, NULL, grad, x);
}

rf_status *rf__add_grad(rf__grad_ctx *c) {
  rf_output dy = c->dy[0];
  if (!dy.node) return NULL;
  c->dx[0] = sum_to(c, dy, forward_input(c, 0));
  c->dx[1] = sum_to(c, dy, forward_input(c, 1));
  return NULL;
}

rf_status *rf__sub_grad(rf__grad_ctx *c) {
  rf_output dy = c->dy[0];
  if (!dy.node) return NULL;
  c->dx[0] = sum_to(c, dy, forward_input(c, 0));
  /* Negate after reducing: the reduced tensor is never larger. */
  c->dx[1] = rf_neg(c->g, NULL, sum_to(c, dy, forward_input(c, 1)));
  return NULL;
}

rf_status *rf__mul_grad(rf__grad_ctx *c) {
  rf_output dy = c->dy[0];
  if (!dy.node) return NULL;
  rf_output x = forward_input(c, 0), y = forward_input(c, 1);
  c->dx[0] = sum_to(c, rf_mul(c->g, NULL, dy, y), x);
  c->dx[1] = sum_to(c, rf_mul(c->g, NULL, x, dy), y);
  return NULL;
}

/* z = x / y: dz/dx = 1 / y, dz/dy = -x / y^2 (computed as (-x / y) / y, as
 * TensorFlow does, to keep y^2 from overflowing). */
rf_status *rf__div_grad(rf__grad_ctx *c) {
  rf_output dy = c->dy[0];
  if (!dy.node) return NULL;
  rf_graph *g = c->g;
  rf_output x = forward_input(c, 0), y = forward_input(c, 1);
  c->dx[0] = sum_to(c, rf_div(g, NULL, dy, y), x);
  rf_output q = rf_div(g, NULL, rf_div(g, NULL, rf_neg(g, NULL, x), y), y);
  c->dx[1] = sum_to(c, rf_mul(g, NULL, dy, q), y);
  return NULL;
}

rf_status *rf__neg_grad(rf__grad_ctx *c) {
  if (c->dy[0].node) c->dx[0] = rf_neg(c->g, NULL, c->dy[0]);
  return NULL;
}

rf_status *rf__add_n_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  for (int i = 0; i < c->op->num_inputs; i++) c->dx[i] = c->dy[0];
  return NULL;
}

/* With op(M) = M or M^T as the flags say, C = op(A) op(B) gives
 *   ta=0 tb=0: dA = dC B^T       dB = A^T dC
 *   ta=1 tb=0: dA = B dC^T       dB = A dC
 *   ta=0 tb=1: dA = dC B         dB = dC^T A
 *   ta=1 tb=1: dA = B^T dC^T     dB = dC^T A^T */
rf_status *rf__matmul_grad(rf__grad_ctx *c) {
  rf_output dy = c->dy[0];
  if (!dy.node) return NULL;
  bool ta = false, tb = false;
  RF_CHECK(rf__attrs_get_bool(&c->op->attrs, "transpose_a", &ta));
  RF_CHECK(rf__attrs_get_bool(&c->op->attrs, "transpose_b", &tb));
  rf_graph *g = c->g;
  rf_output a = forward_input(c, 0), b = forward_input(c, 1);
  if (!ta && !tb) {
    c->dx[0] = rf_matmul(g, NULL, dy, b, false, true);
    c->dx[1] = rf_matmul(g, NULL, a, dy, true, false);
  } else if (ta && !tb) {
    c->dx[0] = rf_matmul(g, NULL, b, dy, false, true);
    c->dx[1] = rf_matmul(g, NULL, a, dy, false, false);
  } else if (!ta && tb) {
    c->dx[0] = rf_matmul(g, NULL, dy, b, false, false);
    c->dx[1] = rf_matmul(g, NULL, dy, a, true, false);
  } else {
    c->dx[0] = rf_matmul(g, NULL, b, dy, true, true);
    c->dx[1] = rf_matmul(g, NULL, dy, a, true, true);
  }
  return NULL;
}

/* Only float -> float casts pass a gradient; through an integer or bool the
 * derivative is zero almost everywhere, so none flows. */
rf_status *rf__cast_grad(rf__grad_ctx *c) {
  rf_dtype src = RF_DTYPE_INVALID, dst = RF_DTYPE_INVALID;
  RF_CHECK(rf__attrs_get_type(&c->op->attrs, "SrcT", &src));
  RF_CHECK(rf__attrs_get_type(&c->op->attrs, "DstT", &dst));
  if (!c->dy[0].node || !rf_dtype_is_float(src) || !rf_dtype_is_float(dst))
    return NULL;
  c->dx[0] = rf_cast(c->g, NULL, c->dy[0], src);
  return NULL;
}

/* A sum over broadcast dimensions and a broadcast are each other's
 * gradients; `like` only lends its shape. */
rf_status *rf__sum_to_shape_of_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  c->dx[0] =
      rf__broadcast_to_shape_of(c->g, NULL, c->dy[0], forward_input(c, 0));
  return NULL;
}

rf_status *rf__broadcast_to_shape_of_grad(rf__grad_ctx *c) {
  if (!c->dy[0].node) return NULL;
  c->dx[0] = rf__sum_to_shape_of(c->g, NULL, c->dy[0], forward_input(c, 0));
  return NULL;
}
