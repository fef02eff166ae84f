/* ringflow/debug.h - hooks for tests: allocation fault injection (Lua's
 * ltests). Not for production use; cheap when unused (one relaxed atomic load).
 *
 * "Library allocations" are the heap blocks ringflow itself takes (graphs,
 * sessions, tensors, its caching allocator's blocks, statuses, ...), numbered
 * process-wide in the order they are attempted, from every thread and every
 * session together. A failed allocation makes the call that needed it return
 * RESOURCE_EXHAUSTED (or take a documented fallback that needs no memory) and
 * leak nothing. Memory of other libraries (jansson, BLAS, MPI, CUDA) is not
 * counted.
 *
 * Two modes, one at a time: each call below replaces the mode and failure
 * point set before (the last call wins), and counts k from the allocations
 * attempted when it is called. Setting a mode is atomic with respect to
 * allocations in other threads: an allocation sees either the old setting or
 * the new one, never a mix. With several threads allocating, which
 * allocation is the k-th depends on their interleaving; with one thread
 * allocating it is reproducible. */
#ifndef RINGFLOW_DEBUG_H
#define RINGFLOW_DEBUG_H

#include <stdint.h>

#include "ringflow/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Persistent failure: makes the k-th library allocation from now (k >= 1)
 * fail, and every one after it too, until the next call of either function;
 * k <= 0 turns injection off. */
RF_API void rf_debug_fail_allocation_after(int64_t k);
/* Transient failure: makes only the k-th library allocation from now
 * (k >= 1) fail; the ones before and after it succeed. k <= 0 turns injection
 * off. Whether the k-th allocation was reached: rf_debug_allocation_count()
 * has grown by k or more since the call. Sessions stay usable after such a
 * failure (see rf_session_run for what a failed step leaves behind). */
RF_API void rf_debug_fail_allocation_once(int64_t k);
/* Library allocations made since start-up (counts attempts). */
RF_API int64_t rf_debug_allocation_count(void);
/* Library allocations currently live (allocations minus frees). */
RF_API int64_t rf_debug_live_allocations(void);
/* Control messages this process has sent to other processes of an MPI job
 * since start-up (READY, GO, ABORT, PING, ... of docs/MULTIPROCESS.md; not
 * the collectives' data), each counted as it is posted: a collective agreed
 * in an earlier step sends none. A failed rf_session_run returns after its
 * failure was sent to the others; a collective of that step whose check
 * was already under way may still send its READY in the next step of its
 * name. Atomic, any thread; 0 without MPI. */
RF_API int64_t rf_debug_control_messages(void);
/* Times this process has chosen the cuDNN algorithm of a GPU convolution
 * (Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter) since start-up: once
 * per (GPU, op, dtype, input and filter geometry) while any session with a
 * GPU device lives; the choice is cached and forgotten when the last such
 * session is freed (docs/GPU_KERNELS.md). Atomic, any thread; -1 in builds
 * without cuDNN. */
RF_API int64_t rf_debug_conv_algorithm_searches(void);

#ifdef __cplusplus
}
#endif
#endif
