/* ringflow/debug.h - hooks for tests: allocation fault injection (Lua's
 * ltests). Not for production use; cheap when unused (one relaxed atomic load).
 */
#ifndef RINGFLOW_DEBUG_H
#define RINGFLOW_DEBUG_H

#include <stdint.h>

#include "ringflow/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Makes the k-th library allocation from now (k >= 1) fail, and every one after
 * it too until reset; k <= 0 turns injection off. Process-wide. */
RF_API void rf_debug_fail_allocation_after(int64_t k);
/* Library allocations made since start-up (counts attempts). */
RF_API int64_t rf_debug_allocation_count(void);
/* Library allocations currently live (allocations minus frees). */
RF_API int64_t rf_debug_live_allocations(void);

#ifdef __cplusplus
}
#endif
#endif
