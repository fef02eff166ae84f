/* kernels/cpu/collective_kernels.c - the participant kernels of every
 * collective, for CPU and (CUDA builds) GPU devices alike, and the stubs for
 * Reduce and Broadcast that must have been lowered away. Participants are
 * asynchronous: they join the session's collective manager and return at once,
 * so no executor thread ever waits for another device (8 devices on 2 cores
 * cannot deadlock). */
#include <string.h>

#include "comm/collective.h"
#include "kernels/kernel.h"
#include "kernels/kernel_families.h"
#include "ops/array_shapes.h"
#include "ops/op_registry.h"
#include "ops/collective_attrs.h"
#include "device/step.h"

typedef struct coll_state {
  rf__collective_kind kind;
  rf_reduction reduction;
  rf_dtype dtype;
  int num_devices;
  bool is_root;
  bool shape_input; /* _BroadcastRecv: input 0 is the shape, on the host */
  char *shared_name;
  char *group_devices; /* from compile's annotation; NULL if absent */
  int task_devices;    /* of the group, on this node's task (0: unknown) */
  int root_at;         /* 1 + the root's position in group_devices; 0 */
} coll_state;

static void destroy_state(void *state);

static rf_status *init_state(const rf_node *n, rf__collective_kind kind,
                             bool is_root, bool shape_input, void **out) {
  coll_state *s = rf__calloc(1, sizeof *s);
  RF_CHECK_ALLOC(s);
  s->kind = kind;
  s->is_root = is_root;
  s->shape_input = shape_input;
  int64_t nd = 0;
  const char *red = "sum", *shared = NULL;
  rf_status *st = rf__attrs_get_type(&n->attrs, "T", &s->dtype);
  if (!st) st = rf__attrs_get_int(&n->attrs, "num_devices", &nd);
  if (!st) st = rf__attrs_get_string(&n->attrs, "shared_name", &shared);
  if (!st && rf__attrs_find(&n->attrs, "reduction"))
    st = rf__attrs_get_string(&n->attrs, "reduction", &red);
  const char *devices = NULL;
  if (!st && rf__attrs_find(&n->attrs, RF_COLLECTIVE_DEVICES_ATTR))
    st = rf__attrs_get_string(&n->attrs, RF_COLLECTIVE_DEVICES_ATTR, &devices);
  int64_t same = 0;
  if (!st && rf__attrs_find(&n->attrs, RF_COLLECTIVE_TASK_DEVICES_ATTR))
    st = rf__attrs_get_int(&n->attrs, RF_COLLECTIVE_TASK_DEVICES_ATTR, &same);
  s->task_devices = (int)same;
  int64_t root_at = 0;
  if (!st && rf__attrs_find(&n->attrs, RF_COLLECTIVE_ROOT_ATTR))
    st = rf__attrs_get_int(&n->attrs, RF_COLLECTIVE_ROOT_ATTR, &root_at);
  s->root_at = (int)root_at;
  if (!st) {
    s->num_devices = (int)nd;
    s->reduction = rf__reduction_from_name(red);
    s->shared_name = rf__strdup(shared);
    s->group_devices = devices ? rf__strdup(devices) : NULL;
    if (!s->shared_name || (devices && !s->group_devices)) st = rf__oom();
  }
  if (st) {
    destroy_state(s);
    return st;
  }
  *out = s;
  return NULL;
}

static void destroy_state(void *state) {
  coll_state *s = state;
  if (!s) return;
  rf__free(s->shared_name);
  rf__free(s->group_devices);
  rf__free(s);
}

#define INIT(fn, kind, root, shape_input)               \
  static rf_status *fn(const rf_node *n, void **out) {  \
    return init_state(n, kind, root, shape_input, out); \
  }
INIT(init_all_reduce, RF_COLL_ALL_REDUCE, false, false)
INIT(init_all_gather, RF_COLL_ALL_GATHER, false, false)
INIT(init_reduce_scatter, RF_COLL_REDUCE_SCATTER, false, false)
INIT(init_reduce_send, RF_COLL_REDUCE, false, false)
INIT(init_reduce_recv, RF_COLL_REDUCE, true, false)
INIT(init_broadcast_send, RF_COLL_BROADCAST, true, false)
INIT(init_broadcast_recv, RF_COLL_BROADCAST, false, true)

/* arg is the participant's ctx; ctx->done the executor's callback. */
static void on_done(void *arg, rf_status *st, rf_tensor *out) {
  rf__kernel_ctx *ctx = arg;
  rf__done_fn done = ctx->done;
  if (!st && ctx->num_outputs > 0) {
    if (out)
      ctx->outputs[0] = out;
    else
      st = rf__kernel_error(ctx, RF_INTERNAL, "collective gave no result");
  } else {
    rf_tensor_release(out);
  }
  if (st) {
    const char *dev = ctx->device ? ctx->device->canonical : "?";
    st = rf__status_prefix(st, "node '%s' (%s) on %s", ctx->node->name,
                           ctx->node->op->name, dev);
  }
  done(ctx, st);
}

/* The shape a _BroadcastRecv expects, from its int32 or int64 host input. */
static rf_status *shape_from_input(rf__kernel_ctx *ctx, rf_shape *out) {
  int64_t dims[RF_MAX_RANK];
  int rank;
  rf_status *st =
      rf__dims_from_tensor(ctx->inputs[0], "the shape input", dims, &rank);
  if (st) return rf__kernel_error_at(ctx, st);
  /* -1: a dim the sender decides (a receiver in another process, whose
   * lowering could not ask the sender's Shape). */
  for (int i = 0; i < rank; i++)
    if (dims[i] < RF_UNKNOWN_DIM)
      return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                              "the shape input holds a negative dim %lld",
                              (long long)dims[i]);
  *out = rf_shape_make(rank, dims);
  return NULL;
}

static void participate(rf__kernel_ctx *ctx, rf__done_fn done) {
  coll_state *s = ctx->state;
  rf__step *step = ctx->step;
  if (!step || !step->collectives || !ctx->device) {
    done(ctx, rf__kernel_error(ctx, RF_FAILED_PRECONDITION,
                               "collectives run only inside a session step"));
    return;
  }
  rf__coll_participant p = {.kind = s->kind,
                            .reduction = s->reduction,
                            .dtype = s->dtype,
                            .num_devices = s->num_devices,
                            .is_root = s->is_root,
                            .device = ctx->device,
                            .node = ctx->node->name,
                            .group_devices = s->group_devices,
                            .root_at = s->root_at,
                            .task_devices = s->task_devices,
                            .step = step};
  if (s->shape_input) {
    rf_status *st = shape_from_input(ctx, &p.shape);
    if (st) {
      done(ctx, st);
      return;
    }
  } else {
    p.input = ctx->inputs[0];
    p.shape = rf_tensor_shape(p.input);
  }
  ctx->done = done; /* on_done finds it there: no allocation per join */
  p.done = on_done;
  p.arg = ctx;
  rf_status *st =
      rf__collective_join(step->collectives, s->shared_name, step->id,
                          step->collective_timeout_ms, &p);
  if (st) done(ctx, st); /* refused: our callback will not fire */
}

static rf_status *must_be_lowered(rf__kernel_ctx *ctx) {
  return rf__kernel_error(ctx, RF_UNIMPLEMENTED,
                          "This op should be replaced during graph "
                          "optimization.");
}

/* The same kernels serve CPU and GPU devices: a participant only joins the
 * manager, and the backend of the device type moves the data (on GPUs: on
 * the participants' streams, the output in the device's memory). The shape
 * input of _BroadcastRecv is host memory. */
#define PARTICIPANT(OP, INIT_FN, HOST_IN, TYPE)                               \
  {                                                                           \
    .op = OP, .device_type = TYPE, .init = INIT_FN, .destroy = destroy_state, \
    .compute_async = participate, .host_memory_inputs = HOST_IN,              \
    .cost = RF_COST_CHEAP                                                     \
  }
#define KERNELS(TYPE)                                                        \
  {                                                                          \
    PARTICIPANT("AllReduce", init_all_reduce, 0, TYPE),                      \
        PARTICIPANT("AllGather", init_all_gather, 0, TYPE),                  \
        PARTICIPANT("ReduceScatter", init_reduce_scatter, 0, TYPE),          \
        PARTICIPANT("_ReduceSend", init_reduce_send, 0, TYPE),               \
        PARTICIPANT("_ReduceRecv", init_reduce_recv, 0, TYPE),               \
        PARTICIPANT("_BroadcastSend", init_broadcast_send, 0, TYPE),         \
        PARTICIPANT("_BroadcastRecv", init_broadcast_recv, 1u, TYPE),        \
        {.op = "Reduce", .device_type = TYPE, .compute = must_be_lowered}, { \
      .op = "Broadcast", .device_type = TYPE, .compute = must_be_lowered     \
    }                                                                        \
  }

static const rf__kernel_def cpu_kernels[] = KERNELS(RF_DEVICE_CPU);

rf_status *rf__register_cpu_collective_kernels(void) {
  return rf__kernel_register_all(cpu_kernels,
                                 sizeof cpu_kernels / sizeof *cpu_kernels);
}

#ifdef RF_HAVE_CUDA
static const rf__kernel_def gpu_kernels[] = KERNELS(RF_DEVICE_GPU);

rf_status *rf__register_gpu_collective_kernels(void) {
  return rf__kernel_register_all(gpu_kernels,
                                 sizeof gpu_kernels / sizeof *gpu_kernels);
}
#endif
