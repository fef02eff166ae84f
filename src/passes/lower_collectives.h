/* passes/lower_collectives.h - rewriting and checking collectives after
 * placement (see lower_collectives.c and collective_groups.c). */
#ifndef RF_PASSES_LOWER_COLLECTIVES_H
#define RF_PASSES_LOWER_COLLECTIVES_H

#include "graph/graph.h"
#include "ops/collective_attrs.h"

#define RF_MAX_LOWER_INPUTS 64

/* Replaces every Reduce and Broadcast of g by per-device participants.
 * devices[i] names assigned device i. Errors name the node. */
rf_status *rf__lower_collectives(rf_graph *g, const rf__device_name *devices,
                                 int num_devices);

/* True for nodes that meet others at run time (AllReduce, AllGather,
 * ReduceScatter and the lowered participants). */
bool rf__is_collective_participant(const rf_node *n);

/* keep[id] != 0 marks the nodes a step needs. Marks (with 2) every
 * unmarked participant of each collective that has a marked participant, so
 * no participant waits for a peer the step would not run (tensorflow#19690).
 * *added tells whether anything was newly marked (their inputs then need
 * marking too). */
rf_status *rf__collective_mark_peers(const rf_graph *g, char *keep,
                                     bool *added);

/* The graph's participants grouped by shared_name, for asking how many a
 * collective has (0 for a name no participant has). */
typedef struct rf__collective_groups rf__collective_groups;
rf_status *rf__collective_groups_new(const rf_graph *g,
                                     rf__collective_groups **out);
int rf__collective_group_size(const rf__collective_groups *t,
                              const char *shared_name);
void rf__collective_groups_free(rf__collective_groups *t);

/* Checks every group of participants sharing a shared_name: as many as
 * num_devices, agreeing on the collective, T and reduction, on distinct
 * devices of one type. Errors name the group and nodes. Then sets attrs
 * RF_COLLECTIVE_DEVICES_ATTR and RF_COLLECTIVE_TASK_DEVICES_ATTR on each
 * participant (ops/collective_attrs.h). */
rf_status *rf__validate_collectives(rf_graph *g, const rf__device_name *devices,
                                    int num_devices);

/* Sessions of a job (several processes) compile the whole job's graph, but
 * each process prunes it for its own step: before pruning, compile records
 * on every Broadcast (placed) the devices of all its consumers
 * (RF_BROADCAST_RECEIVERS_ATTR), so that every process lowers it with the
 * same receivers. */
rf_status *rf__record_broadcast_receivers(rf_graph *g,
                                          const rf__device_name *devices,
                                          int num_devices);

/* True when g holds a participant of a collective with participants on
 * other tasks (its RF_COLLECTIVE_TASK_DEVICES_ATTR is below num_devices). */
bool rf__has_cross_task_collectives(const rf_graph *g);

#endif
