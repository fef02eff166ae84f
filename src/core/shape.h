/* core/shape.h - the one overflow-checked helper for dim arithmetic, and
 * the one test of whether two partly known shapes can be the same. Every
 * product of dims in the library (shape functions, loaders, kernels' prepare
 * steps, collectives) goes through it, so a hostile shape is an
 * INVALID_ARGUMENT, never a signed overflow or a wrapped dim.
 *
 * A valid shape has rank RF_UNKNOWN_RANK or 0..RF_MAX_RANK, each dim >= 0 or
 * RF_UNKNOWN_DIM, and known nonzero dims whose product is at most INT64_MAX.
 * Zeros are left out of that product on purpose: then every element count,
 * stride and partial product of a tensor of the shape fits in int64, in
 * whatever order a kernel multiplies. */
#ifndef RF_CORE_SHAPE_H
#define RF_CORE_SHAPE_H

#include <stdbool.h>
#include <stdint.h>

#include "ringflow/dtype.h"
#include "ringflow/status.h"

/* *out = a * b for dims a, b >= 0; false (out untouched) past INT64_MAX. */
bool rf__dim_mul(int64_t a, int64_t b, int64_t *out);

/* NULL when s is valid (above); else INVALID_ARGUMENT saying what is wrong
 * ("shape (4611686018427387904, 4): element count overflows int64"). The
 * caller prefixes the node, attr or argument. */
rf_status *rf__shape_check(const rf_shape *s);

/* Whether a and b can be one shape: equal ranks and dims where both are
 * known. */
bool rf__shape_compatible(const rf_shape *a, const rf_shape *b);

/* NULL when a and b are compatible (above); else INVALID_ARGUMENT "<an> <a>
 * and <bn> <b> differ" ("dy (2, 3) and x (2, 4) differ"). */
rf_status *rf__shape_agree(const char *an, const rf_shape *a, const char *bn,
                           const rf_shape *b);

#endif
