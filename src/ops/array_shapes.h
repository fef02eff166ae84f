/* ops/array_shapes.h - shape arithmetic shared by the array ops' shape
 * functions (build time) and their CPU kernels (run time), so both apply the
 * same checks with the same messages. Messages name no node: callers prefix. */
#ifndef RF_OPS_ARRAY_SHAPES_H
#define RF_OPS_ARRAY_SHAPES_H

#include <stddef.h>
#include <stdint.h>

#include "ringflow/tensor.h"

/* Reads an int32/int64 vector of at most RF_MAX_RANK entries (a Reshape shape,
 * a Fill dims) into dims[0..*rank). `what` names the argument in messages.
 * INVALID_ARGUMENT for another dtype, rank or length. */
rf_status *rf__dims_from_tensor(const rf_tensor *t, const char *what,
                                int64_t *dims, int *rank);

/* Reshape's output: dims may hold one -1, which takes what is left of num_in
 * elements. num_in < 0 (unknown): the -1 entry stays unknown and no size check
 * happens. INVALID_ARGUMENT when sizes cannot match. */
rf_status *rf__reshape_output_shape(int64_t num_in, const int64_t *dims,
                                    int rank, rf_shape *out);

/* Fill's output: every dim must be >= 0. */
rf_status *rf__fill_output_shape(const int64_t *dims, int rank, rf_shape *out);

/* "[2, -1, 3]" into buf (always NUL-terminated). */
void rf__format_dims(const int64_t *dims, int rank, char *buf, size_t len);

#endif
