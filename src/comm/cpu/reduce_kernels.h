/* comm/cpu/reduce_kernels.h - elementwise reduction of n equally sized buffers,
 * in a fixed order (buffer 0, then 1, ...) so every run and every device gets
 * the same bits. float16/bfloat16 accumulate in float and round once. */
#ifndef RF_COMM_CPU_REDUCE_KERNELS_H
#define RF_COMM_CPU_REDUCE_KERNELS_H

#include "comm/collective.h"

/* out[i] = ins[0][i] op ins[1][i] op ... for i in [begin, end); avg divides the
 * sum by n (integers truncate). false when dtype/op is not supported. */
bool rf__cpu_reduce(rf_dtype dtype, rf_reduction op, const void *const *ins,
                    int n, void *out, int64_t begin, int64_t end);
/* True when rf__cpu_reduce supports (dtype, op). */
bool rf__cpu_reduce_supported(rf_dtype dtype, rf_reduction op);

#endif
