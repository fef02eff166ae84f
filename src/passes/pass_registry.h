/* passes/pass_registry.h - graph rewrite passes run while a session compiles a
 * (feeds, fetches, targets) signature, in TensorFlow's REGISTER_OPTIMIZATION
 * style. Passes register at start-up (rf__register_passes, called by
 * rf__registry_init in runtime/registry_init.c) and run in (phase, priority,
 * name) order:
 *
 *   prune -> PRE_PLACEMENT -> placement -> POST_PLACEMENT -> partition
 *         -> POST_PARTITION -> per-device executor plans
 *
 * A pass may add, remove and rewire nodes of ctx->graph. From POST_PLACEMENT on
 * every node it adds must get an assigned_device; from POST_PARTITION on no
 * data or control edge may cross devices (add _Send/_Recv pairs instead). */
#ifndef RF_PASSES_PASS_REGISTRY_H
#define RF_PASSES_PASS_REGISTRY_H

#include "graph/graph.h"
#include "device/device.h"

typedef enum rf__pass_phase {
  RF_PASS_PRE_PLACEMENT,
  RF_PASS_POST_PLACEMENT,
  RF_PASS_POST_PARTITION,
  RF_PASS_PHASE_COUNT
} rf__pass_phase;

typedef struct rf__pass_ctx {
  rf_graph *graph;           /* being compiled; the pass may edit it */
  const rf__device *devices; /* the session's; not owned */
  int num_devices;
  int default_device; /* index into devices */
  /* This process's task in its job (comm/job.h); num_tasks 0 or 1: one
   * process. In a job, devices lists the other tasks' devices (remote) after
   * this process's. */
  int task, num_tasks;
  long compile; /* this process's compile number, for log messages */
  /* rf_session_options.collective_bucket_bytes (RF_BUCKET_BYTES_AUTO: by
   * the devices' kind) and collective_comm_dtype
   * (passes/bucket_collectives.h); a context left zero fuses and narrows
   * nothing. */
  int64_t bucket_bytes;
  bool narrow_comm;    /* comm_dtype is not float32 */
  rf_dtype comm_dtype; /* when narrow_comm */
  /* rf_session_options.group_optimizer_updates (passes/group_updates.c). */
  bool group_updates;
  /* rf_session_options.matmul_epilogues (passes/fuse_epilogues.c). */
  int matmul_epilogues;
  /* rf_session_options.conv_epilogues (passes/fuse_epilogues.c). */
  int conv_epilogues;
} rf__pass_ctx;

/* Returns NULL or an error naming the node it concerns (compile fails). */
typedef rf_status *(*rf__pass_fn)(rf__pass_ctx *ctx);

/* Adds a pass. INVALID_ARGUMENT for a bad phase, NULL fn or empty name;
 * ALREADY_EXISTS for a second pass of one name. Not thread-safe against
 * rf__passes_run: register at start-up only. */
rf_status *rf__pass_register(rf__pass_phase phase, int priority,
                             const char *name, rf__pass_fn fn);

/* Runs the passes of `phase` in (priority, name) order, stopping at the first
 * error, which is returned prefixed with "pass '<name>'". */
rf_status *rf__passes_run(rf__pass_phase phase, rf__pass_ctx *ctx);

/* POST_PLACEMENT: optimizer updates of one kind, dtype, device and scalars
 * with no path between them become one _MultiApply* node (when
 * ctx->group_updates). */
rf_status *rf__group_updates(rf__pass_ctx *ctx);

/* POST_PLACEMENT: MatMul with its BiasAdd (and Relu), and a weight
 * gradient's MatMul with its _BiasAddGrad, become one _FusedMatMul* node
 * on the devices ctx->matmul_epilogues names; Conv2D with its BiasAdd and
 * Relu one _FusedConv2DBiasRelu on those ctx->conv_epilogues names
 * (rf_session_options). */
rf_status *rf__fuse_epilogues(rf__pass_ctx *ctx);
/* POST_PLACEMENT: SparseSoftmaxCrossEntropyWithLogits with the
 * _SparseXentGrad that alone reads its backprop become one
 * _SparseXentWithGrad node (passes/fuse_xent_grad.c). */
rf_status *rf__fuse_xent_grad(rf__pass_ctx *ctx);
/* INVALID_ARGUMENT unless matmul is an RF_MATMUL_EPILOGUES_* value and conv
 * an RF_CONV_EPILOGUES_* one (rf_session_new and rf_graph_lower check the
 * options with it before compiling). */
rf_status *rf__epilogue_options_check(int matmul, int conv);

/* Registers the library's passes (passes/passes.c; the composition root,
 * runtime/registry_init.c, calls it once). */
rf_status *rf__register_passes(void);

/* Number of registered passes of a phase (for tests). */
int rf__passes_count(rf__pass_phase phase);

/* ---- the fixed compile stages (passes/prune.c, placement.c, partition.c) ----
 */

/* Removes every node from which no fetch (_Retval) or target node can be
 * reached through data and control edges. keep[id] != 0 marks the roots
 * (fetches and targets) by node id; keep has g->num_ids entries. */
rf_status *rf__prune(rf_graph *g, const char *keep);

/* Sets assigned_device of every node (see placement.c for the rules).
 * INVALID_ARGUMENT naming the node for a device the session lacks or a
 * cycle. */
rf_status *rf__place(rf__pass_ctx *ctx);

/* Checks that every node's requested device is one of ctx's (rule 1 of
 * placement, for the whole graph at once: rf_session_new refuses a graph that
 * names a device the session lacks rather than its first run). The same
 * INVALID_ARGUMENT as rf__place, naming the node, op and device. */
rf_status *rf__check_requested_devices(const rf__pass_ctx *ctx);

/* Splits every edge crossing devices with _Send/_Recv pairs. Afterwards each
 * edge joins two nodes of one device. An edge into a host-memory input of a
 * GPU kernel (rf__kernel_def.host_memory_inputs) gets its own pair whose
 * _Recv has host_memory = true. */
rf_status *rf__partition(rf__pass_ctx *ctx);

/* In a job session (ctx->num_tasks > 1): removes the nodes of other tasks
 * after the POST_PLACEMENT passes ran on the whole job's graph, so the plan
 * holds this task's nodes only. Control edges between tasks are dropped;
 * a data edge between tasks, and a feed (_Arg) or fetch (_Retval) on another
 * task, is INVALID_ARGUMENT naming the nodes. A target on another task
 * means this task's part of it. Nothing to do for one process. */
rf_status *rf__split_tasks(rf__pass_ctx *ctx);

/* In a job session, before pruning: places the whole graph and records on
 * every Broadcast its consumers' devices (passes/lower_collectives.h), so
 * that every process lowers it alike. */
rf_status *rf__record_job_broadcasts(rf__pass_ctx *ctx);

/* TensorFlow's "host memory for small int32 tensors": after the
 * POST_PLACEMENT passes, moves to cpu:0 every node on a GPU device whose
 * outputs are all int32 and whose data consumers all take them in host
 * memory (a host-memory input of a GPU kernel, or any CPU kernel), at least
 * one being a GPU kernel's host-memory input - a Const shape, an _Arg fed
 * with a shape - unless its GPU kernel already outputs host memory (Shape),
 * it has no CPU kernel, or it is stateful or a collective participant. */
rf_status *rf__place_host_memory(rf__pass_ctx *ctx);

/* After partition: every host-memory input of a GPU kernel must come from
 * host memory (a host-memory output, or a host_memory _Recv).
 * INVALID_ARGUMENT naming both nodes otherwise. */
rf_status *rf__check_host_memory(rf__pass_ctx *ctx);

/* Nodes of g in a topological order (Kahn's algorithm over data and control
 * edges): *order gets rf__malloc'ed node pointers, *n their count.
 * INVALID_ARGUMENT naming a node on a cycle when there is one. */
rf_status *rf__topological_order(const rf_graph *g, rf_node ***order, int *n);

#endif
