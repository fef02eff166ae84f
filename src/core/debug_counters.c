/* core/debug_counters.c - counters that tests read through
 * include/ringflow/debug.h: the control messages of collectives across
 * processes (comm/mpi/protocol.c counts each one it sends) and the cuDNN
 * algorithm choices of GPU convolutions (kernels/cuda/conv_dnn.cu). */
#include <stdatomic.h>

#include "core/debug_counters.h"
#include "ringflow/debug.h"

static atomic_llong control_messages;
static atomic_llong conv_searches;

void rf__debug_count_control_message(void) {
  atomic_fetch_add_explicit(&control_messages, 1, memory_order_relaxed);
}

int64_t rf_debug_control_messages(void) {
  return atomic_load_explicit(&control_messages, memory_order_relaxed);
}

void rf__debug_count_conv_search(void) {
  atomic_fetch_add_explicit(&conv_searches, 1, memory_order_relaxed);
}

int64_t rf_debug_conv_algorithm_searches(void) {
#ifdef RF_HAVE_CUDNN
  return atomic_load_explicit(&conv_searches, memory_order_relaxed);
#else
  return -1; /* no cuDNN in this build: GPU convolutions never search */
#endif
}
