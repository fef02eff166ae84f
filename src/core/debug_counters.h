/* core/debug_counters.h - what rf_debug_control_messages and
 * rf_debug_conv_algorithm_searches count. */
#ifndef RF_CORE_DEBUG_COUNTERS_H
#define RF_CORE_DEBUG_COUNTERS_H

/* One control message (READY, GO, ABORT, ...) sent to another process. */
void rf__debug_count_control_message(void);

/* One choice of a GPU convolution's cuDNN algorithm (a search, or cuDNN's
 * heuristics under graph capture) for a (GPU, op, dtype, geometry) not in
 * the algorithm cache. */
void rf__debug_count_conv_search(void);

#endif
