/* core/debug_counters.c - counters that tests read through
 * include/ringflow/debug.h: the control messages of collectives across
 * processes (comm/mpi/protocol.c counts each one it sends). */
#include <stdatomic.h>

#include "core/debug_counters.h"
#include "ringflow/debug.h"

static atomic_llong control_messages;

void rf__debug_count_control_message(void) {
  atomic_fetch_add_explicit(&control_messages, 1, memory_order_relaxed);
}

int64_t rf_debug_control_messages(void) {
  return atomic_load_explicit(&control_messages, memory_order_relaxed);
}
