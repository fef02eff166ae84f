/* ops/math_ops.h - internals of the math op family shared between its files:
 * the gradient functions (math_grad.c) referenced by the registrations
 * (math_ops.c), and the internal gradient helper ops _SumToShapeOf and
 * _BroadcastToShapeOf. */
#ifndef RF_OPS_MATH_OPS_H
#define RF_OPS_MATH_OPS_H

#include "ops/op_registry.h"

/* _SumToShapeOf(x, like): x summed over its broadcast dimensions down to the
 * run-time shape of `like` (like's shape must broadcast to x's). The gradient
 * of a broadcasting binary op w.r.t. an input is this applied to the output
 * gradient. Records errors in g like the public op functions. */
rf_output rf__sum_to_shape_of(rf_graph *g, const char *name, rf_output x,
                              rf_output like);

/* _BroadcastToShapeOf(x, like): x broadcast (numpy rules) to the run-time
 * shape of `like`; the gradient of _SumToShapeOf and vice versa. */
rf_output rf__broadcast_to_shape_of(rf_graph *g, const char *name, rf_output x,
                                    rf_output like);

rf_status *rf__add_grad(rf__grad_ctx *c);
rf_status *rf__sub_grad(rf__grad_ctx *c);
rf_status *rf__mul_grad(rf__grad_ctx *c);
rf_status *rf__div_grad(rf__grad_ctx *c);
rf_status *rf__neg_grad(rf__grad_ctx *c);
rf_status *rf__add_n_grad(rf__grad_ctx *c);
rf_status *rf__matmul_grad(rf__grad_ctx *c);
rf_status *rf__cast_grad(rf__grad_ctx *c);
rf_status *rf__sum_to_shape_of_grad(rf__grad_ctx *c);
rf_status *rf__broadcast_to_shape_of_grad(rf__grad_ctx *c);

#endif
