/* ops/shape_op_shapes.h - output shapes of the shape ops (Transpose, Concat,
 * Split, Slice, ExpandDims, Squeeze, Pad, Tile and their internal gradient
 * ops), shared by the shape functions (build time, where dims and ranks may
 * be unknown) and the kernels' prepare step (run time, all known), so both
 * refuse alike with the same messages. An unknown input dim gives an unknown
 * output dim; an unknown rank gives an unknown rank unless the attrs fix it.
 * Every result is held to rf__shape_check (element counts past INT64_MAX are
 * INVALID_ARGUMENT). Messages name no node: callers prefix. */
#ifndef RF_OPS_SHAPE_OP_SHAPES_H
#define RF_OPS_SHAPE_OP_SHAPES_H

#include <stdint.h>

#include "ringflow/tensor.h"

/* perm[0, n) a permutation of 0..n-1 (n == rank when known); out[i] =
 * in[perm[i]]. */
rf_status *rf__transpose_shape(const rf_shape *in, const int64_t *perm, int n,
                               rf_shape *out);

/* *axis in [-rank, rank) normalised to [0, rank) for a known rank. */
rf_status *rf__normalize_axis(int64_t *axis, int rank, const char *what);

/* Concatenation of ins[0, n) along axis: equal ranks, equal dims off axis. */
rf_status *rf__concat_shape(const rf_shape *ins, int n, int64_t axis,
                            rf_shape *out);

/* Split of in along axis into num pieces: sizes[0, nsizes) when nsizes > 0
 * (one entry may be -1: the rest), else num equal pieces. outs[num]. */
rf_status *rf__split_shapes(const rf_shape *in, int64_t axis, int num,
                            const int64_t *sizes, int nsizes, rf_shape *outs);

/* in[begin : begin + size] per dim; size -1: to the end of that dim. */
rf_status *rf__slice_shape(const rf_shape *in, const int64_t *begin, int nb,
                           const int64_t *size, int ns, rf_shape *out);

/* A 1 inserted before dim axis; axis in [-rank-1, rank]. */
rf_status *rf__expand_dims_shape(const rf_shape *in, int64_t axis,
                                 rf_shape *out);

/* dims[0, n) removed (each must be 1); n == 0: every dim of size 1. */
rf_status *rf__squeeze_shape(const rf_shape *in, const int64_t *dims, int n,
                             rf_shape *out);

/* paddings[2*i], paddings[2*i+1]: elements before and after dim i (>= 0);
 * n == 2 * rank. */
rf_status *rf__pad_shape(const rf_shape *in, const int64_t *paddings, int n,
                         rf_shape *out);

/* out[i] = in[i] * multiples[i] (>= 0); n == rank. */
rf_status *rf__tile_shape(const rf_shape *in, const int64_t *multiples, int n,
                          rf_shape *out);

/* Tile's gradient: out = like's shape (x's), where dy[i] must be like[i] *
 * multiples[i]; like's unknown dims come from dy where the multiple is not 0.
 */
rf_status *rf__tile_grad_shape(const rf_shape *dy, const rf_shape *like,
                               const int64_t *multiples, int n, rf_shape *out);

/* _SliceTo / _PadTo: the window like.dims at begin[0, n) must lie inside
 * big (n == rank); checks only the dims that are known. */
rf_status *rf__window_check(const rf_shape *big, const rf_shape *like,
                            const int64_t *begin, int n);

#endif
