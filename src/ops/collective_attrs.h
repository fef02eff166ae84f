/* ops/collective_attrs.h - the names the collective ops share with the layers
 * that run them: the reductions (the public rf_reduction, ringflow/
 * collectives.h, as "reduction" attr strings) and the internal attrs that
 * lowering sets on participants for the kernels (attrs starting with '_' are
 * not saved). Plain data: kernels, passes and comm all read it. */
#ifndef RF_OPS_COLLECTIVE_ATTRS_H
#define RF_OPS_COLLECTIVE_ATTRS_H

#include "ringflow/collectives.h"

/* Every reduction with its attr string, in enum order. */
#define RF_REDUCTION_LIST(X) \
  X(RF_REDUCE_SUM, "sum")    \
  X(RF_REDUCE_PROD, "prod")  \
  X(RF_REDUCE_MIN, "min")    \
  X(RF_REDUCE_MAX, "max")    \
  X(RF_REDUCE_AVG, "avg")

/* How many reductions there are; also "no such reduction". */
#define RF__REDUCE_COUNT ((rf_reduction)(RF_REDUCE_AVG + 1))

/* "sum", "prod", ...; "invalid" out of range. */
const char *rf__reduction_name(rf_reduction r);
/* RF__REDUCE_COUNT when the name is unknown (or NULL). */
rf_reduction rf__reduction_from_name(const char *name);

/* On each participant after the group checks (passes/collective_groups.c):
 * its group's devices, comma-separated in device order (task, type, index). */
#define RF_COLLECTIVE_DEVICES_ATTR "_devices"
/* Set with it: how many of the group's participants are on the node's task
 * (all of them in a session of one process). */
#define RF_COLLECTIVE_TASK_DEVICES_ATTR "_task_devices"
/* Set with them on a reduce's or broadcast's participants: 1 + the root's
 * position in _devices. The processes of a job compare it (their graphs
 * must put the root on one device), which _devices alone does not show. */
#define RF_COLLECTIVE_ROOT_ATTR "_root"
/* On every placed Broadcast of a job's graph, before pruning: the devices of
 * all its consumers, so that every process lowers it with the same
 * receivers. */
#define RF_BROADCAST_RECEIVERS_ATTR "_receivers"

#endif
