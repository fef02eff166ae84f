/* ops/linalg_shapes.h - BatchMatMul's output shape, shared by its shape
 * function (dims may be unknown) and its kernels (all known), so both refuse
 * alike with the same messages (no node named: callers prefix). */
#ifndef RF_OPS_LINALG_SHAPES_H
#define RF_OPS_LINALG_SHAPES_H

#include <stdbool.h>

#include "ringflow/tensor.h"

/* x (..., m, k) (or (..., k, m) with adj_x) times y (..., k, n) (or
 * (..., n, k) with adj_y): ranks >= 2, the batch dims (all but the last two)
 * broadcast numpy-style, k equal; out = (batch..., m, n). */
rf_status *rf__batch_matmul_shape(const rf_shape *x, const rf_shape *y,
                                  bool adj_x, bool adj_y, rf_shape *out);

#endif
