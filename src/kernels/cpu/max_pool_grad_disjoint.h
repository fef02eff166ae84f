/* kernels/cpu/max_pool_grad_disjoint.h - float32 MaxPoolGrad of one image
 * for windows that do not overlap, in AVX-512 (see the .c for why). */
#ifndef RF_KERNELS_CPU_MAX_POOL_GRAD_DISJOINT_H
#define RF_KERNELS_CPU_MAX_POOL_GRAD_DISJOINT_H

#include <stdbool.h>

#include "ops/conv_geometry.h"

/* Whether rf__max_pool_grad_disjoint takes float32 pools of g's geometry on
 * this CPU: stride >= window in both directions, and AVX-512F. */
bool rf__max_pool_grad_disjoint_fits(const rf__conv_geom *g);

/* dx (one image, h x w x c) = MaxPoolGrad of x (h x w x c) and dy (oh x ow
 * x c), for a geometry rf__max_pool_grad_disjoint_fits: each output's
 * gradient goes to the first maximum of its window in (row, column) order,
 * or its first NaN (the element kernels/cpu/pool.c's loops choose), and
 * every other element of dx is 0. */
void rf__max_pool_grad_disjoint(const rf__conv_geom *g, const float *x,
                                const float *dy, float *dx);

#endif
