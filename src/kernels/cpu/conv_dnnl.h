/* kernels/cpu/conv_dnnl.h - float32 Conv2D and its two gradients through
 * oneDNN's direct (jit / brgemm) kernels, for kernels/cpu/conv.c. The
 * activations stay NHWC (oneDNN's direct kernels read and write nhwc); only
 * the filter goes through oneDNN's blocked layout, reordered on each call
 * (a few KiB to a few hundred KiB). Images are split into one block per
 * pool thread and each block runs single-threaded oneDNN (no OpenMP team
 * beside the pool); the filter gradient's blocks are added in block order,
 * so results depend only on the shapes and the pool size. A stride-1 input
 * gradient with 16 or more input channels runs as the forward convolution
 * of dy with the flipped filter (conv_dnnl.c, flipped_geom). Built when
 * oneDNN is found (RF_HAVE_DNNL); RF_CPU_CONV=im2col turns it off. */
#ifndef RF_KERNELS_CPU_CONV_DNNL_H
#define RF_KERNELS_CPU_CONV_DNNL_H

#include <stdbool.h>

#include "kernels/kernel.h"
#include "ops/conv_geometry.h"

typedef enum rf__conv_dnnl_kind {
  RF_CONV_DNNL_FORWARD,     /* out = conv(x, w) */
  RF_CONV_DNNL_INPUT_GRAD,  /* out = dx from (w, dy) */
  RF_CONV_DNNL_FILTER_GRAD, /* out = dw from (x, dy) */
} rf__conv_dnnl_kind;

/* Runs `kind` for g on float32 buffers (NHWC, filter HWIO or OHWI, g->ohwi; the
 * ones the kind does not read may be NULL) into out. *done false: oneDNN is not
 * built in, turned off, or has no implementation for g; the caller uses
 * im2col. An error only for memory. */
rf_status *rf__conv_dnnl_run(rf__kernel_ctx *ctx, rf__conv_dnnl_kind kind,
                             const rf__conv_geom *g, const float *x,
                             const float *w, const float *dy, float *out,
                             bool *done);

#endif
