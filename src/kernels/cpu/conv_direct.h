/* kernels/cpu/conv_direct.h - float32 Conv2D and Conv2DBackpropFilter of a
 * one-channel input (a CNN's first layer) as direct AVX-512 loops, for
 * kernels/cpu/conv.c: oneDNN's NHWC kernels vectorise over input channels,
 * which such a layer has one of. Stride 1, no dilation, any padding,
 * output channels a multiple of 16, and (filter gradient) a window 3 or 5
 * wide; everything else goes to oneDNN or im2col. The forward splits the
 * images into up to four blocks a pool thread, the filter gradient into one
 * a thread, whose sums it adds in block order: results depend only on the
 * shapes and the pool size.
 * RF_CPU_CONV (onednn or im2col) turns it off. */
#ifndef RF_KERNELS_CPU_CONV_DIRECT_H
#define RF_KERNELS_CPU_CONV_DIRECT_H

#include <stdbool.h>

#include "kernels/cpu/conv_dnnl.h"
#include "kernels/kernel.h"
#include "ops/conv_geometry.h"

/* Whether rf__conv_direct_run takes `kind` for g on this CPU. */
bool rf__conv_direct_fits(rf__conv_dnnl_kind kind, const rf__conv_geom *g);

/* Runs `kind` (one that rf__conv_direct_fits) for g on float32 NHWC buffers
 * (filter HWIO or OHWI, g->ohwi) into out. An error only for memory. */
rf_status *rf__conv_direct_run(rf__kernel_ctx *ctx, rf__conv_dnnl_kind kind,
                               const rf__conv_geom *g, const float *x,
                               const float *w, const float *dy, float *out);

#endif
