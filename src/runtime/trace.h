/* runtime/trace.h - a record of one step: every kernel (send, receive and
 * collective participants included) with its device and start/end times,
 * written as a Chrome trace (JSON; opens in Perfetto and chrome://tracing),
 * one track per device. Recording is thread-safe; a step without a trace
 * pays one NULL check per node. */
#ifndef RF_RUNTIME_TRACE_H
#define RF_RUNTIME_TRACE_H

#include <stdint.h>

#include "graph/graph.h"
#include "device/device.h"

typedef struct rf__trace rf__trace;

rf_status *rf__trace_new(rf__trace **out);
void rf__trace_free(rf__trace *t);
/* Monotonic nanoseconds. */
int64_t rf__trace_now(void);
/* Adds one kernel execution. Out of memory: the event is dropped (a trace
 * never fails a step) and the file says how many were lost. */
void rf__trace_record(rf__trace *t, int device, const rf_node *node,
                      int64_t start_ns, int64_t end_ns);
/* Writes the trace as Chrome JSON; devices name the tracks. */
rf_status *rf__trace_write(const rf__trace *t, const rf__device *devices,
                           int num_devices, const char *path);

#endif
