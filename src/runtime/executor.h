/* runtime/executor.h - runs a compiled, partitioned graph: one plan per device
 * (flat arrays of nodes, input slots, out edges and initial pending counts),
 * and per step one frame per device, taken from a cache and reused. Nodes run
 * on whichever thread made them ready; nothing on the per-node path allocates
 * or takes a lock. */
#ifndef RF_RUNTIME_EXECUTOR_H
#define RF_RUNTIME_EXECUTOR_H

#include "graph/graph.h"
#include "device/device.h"
#include "device/step.h"

typedef struct rf__executor rf__executor;

/* Builds the device plans of g, whose nodes all have an assigned device and
 * whose edges never cross devices (partitioned). Looks up each node's kernel
 * for its device's type and calls the kernel's init once per node. g and
 * devices are borrowed and must outlive the executor. Errors name the node,
 * op and device; on error nothing is left behind. */
rf_status *rf__executor_new(const rf_graph *g, rf__device *devices,
                            int num_devices, rf__executor **out);

/* Destroys kernel states and cached frames. No step may be running. */
void rf__executor_free(rf__executor *x);

/* Runs one step on every device and returns when all have stopped: NULL, or
 * the first error (the step's rendezvous was aborted with it so every device
 * stopped promptly). step->rendezvous, feeds and fetches must be set; on
 * return the rendezvous holds nothing of the step. Several steps may run at
 * once from different threads. */
rf_status *rf__executor_run(rf__executor *x, rf__step *step);

/* Nodes in all device plans (for tests and benchmarks). */
int rf__executor_num_nodes(const rf__executor *x);

/* The devices holding nodes of x: i in [0, rf__executor_num_devices(x)). */
int rf__executor_num_devices(const rf__executor *x);
rf__device *rf__executor_device(const rf__executor *x, int i);

#endif
