/* ops/conv_geometry.h - the sliding-window geometry of Conv2D, MaxPool,
 * AvgPool and their gradient ops (NHWC), read from the node's attrs
 * (strides, padding, dilations, ksize, data_format as TensorFlow defines
 * them; filter_format, the convolution filter's layout). Shape functions and
 * kernels share it, so build time and run time reject the same attrs and sizes
 * with the same message. All sizes int64; every product is overflow-checked. */
#ifndef RF_OPS_CONV_GEOMETRY_H
#define RF_OPS_CONV_GEOMETRY_H

#include <stdbool.h>
#include <stdint.h>

#include "graph/attrs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The attrs of one node, checked: strides, dilations and ksize are 4 ints
 * (batch, height, width, channels) with 1 at batch and channels. */
typedef struct rf__window_attrs {
  int64_t sh, sw; /* strides >= 1 */
  int64_t dh, dw; /* dilations >= 1 (pools: 1) */
  int64_t kh, kw; /* window (pools: ksize >= 1; conv: from the filter) */
  bool same;      /* padding SAME, else VALID */
  bool ohwi;      /* conv: filter_format OHWI, else HWIO */
} rf__window_attrs;

/* Where each of a filter's dims lies in its 4 (filter_format): HWIO
 * (kh, kw, c, oc), TensorFlow's layout and the default; OHWI (oc, kh, kw,
 * c), cuDNN's NHWC filter layout (KRSC) and PyTorch's channels_last. */
typedef struct rf__filter_axes {
  int kh, kw, c, oc;
} rf__filter_axes;

rf__filter_axes rf__filter_axes_of(bool ohwi);

/* The whole geometry: input (n, h, w, c), filter (kh, kw, c, oc) (pools:
 * oc = c), output (n, oh, ow, oc); pt, pl: padding before (top, left);
 * ohwi: 1 when the filter is stored (oc, kh, kw, c), 0 for HWIO (an int64
 * so the struct has no padding bytes: it is compared and hashed whole). */
typedef struct rf__conv_geom {
  int64_t n, h, w, c;
  int64_t kh, kw, oc;
  int64_t oh, ow;
  int64_t sh, sw, dh, dw, pt, pl;
  int64_t ohwi;
} rf__conv_geom;

/* g's filter dims in its layout's order. */
void rf__filter_dims(const rf__conv_geom *g, int64_t out[4]);

/* Reads the attrs; `pool`: ksize is read and dilations and filter_format
 * are not. INVALID_ARGUMENT naming the attr for a list of the wrong length,
 * a stride, dilation or window below 1 or one over the batch or channel
 * axis, a data_format other than NHWC, or a filter_format other than HWIO
 * and OHWI. */
rf_status *rf__window_attrs_read(const rf__attrs *a, bool pool,
                                 rf__window_attrs *out);

/* The output size of one spatial axis of size `in` (RF_UNKNOWN_DIM: gives
 * RF_UNKNOWN_DIM), window k, stride s, dilation d, and the padding before it.
 * SAME: out = ceil(in / s); VALID: out = (in - (k - 1) d - 1) / s + 1, 0 when
 * in is 0. INVALID_ARGUMENT when the dilated window overflows or, with VALID,
 * is larger than a nonzero input. */
rf_status *rf__window_dim(int64_t in, int64_t k, int64_t s, int64_t d,
                          bool same, int64_t *out, int64_t *pad_before);

/* The geometry for input dims in[4] (NHWC, all known), window kh x kw over
 * a filter of oc output channels. INVALID_ARGUMENT as rf__window_dim, or when
 * the output's element count overflows. */
rf_status *rf__conv_geom_make(const rf__window_attrs *wa, const int64_t in[4],
                              int64_t oc, rf__conv_geom *g);

#ifdef __cplusplus
}
#endif

#endif
