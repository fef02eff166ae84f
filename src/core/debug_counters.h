/* core/debug_counters.h - what rf_debug_control_messages counts. */
#ifndef RF_CORE_DEBUG_COUNTERS_H
#define RF_CORE_DEBUG_COUNTERS_H

/* One control message (READY, GO, ABORT, ...) sent to another process. */
void rf__debug_count_control_message(void);

#endif
