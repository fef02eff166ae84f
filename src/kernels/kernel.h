/* kernels/kernel.h - the kernel table and what a kernel sees when it runs.
 *
 * A kernel is registered per (op, device type) as a const table of functions
 * (REGISTER_KERNEL_BUILDER's role). Synchronous kernels return a status;
 * asynchronous ones (receives, collectives) return at once and call `done`
 * later from any thread, and must never block the calling thread. Kernels
 * allocate outputs through the context so the device's allocator is used, and
 * never write to their inputs. */
#ifndef RF_KERNELS_KERNEL_H
#define RF_KERNELS_KERNEL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/tensor.h"
#include "graph/graph.h"

struct rf__device; /* device/device.h */
struct rf__step;   /* device/step.h */

typedef struct rf__kernel_ctx rf__kernel_ctx;

/* Completion of an asynchronous kernel: st NULL on success (consumed). */
typedef void (*rf__done_fn)(rf__kernel_ctx *ctx, rf_status *st);

struct rf__kernel_ctx {
  const rf_node *node; /* attrs: node->attrs; not owned */
  void *state;         /* from the kernel's init, per node per session */
  int num_inputs;
  rf_tensor *const *inputs; /* borrowed for the call */
  int num_outputs;
  rf_tensor **outputs; /* the kernel stores one new reference per output */
  struct rf__device *device;
  struct rf__step *step;
  void *executor_private; /* the executor's; kernels leave it alone */
  int64_t trace_start;    /* the executor's: when an async kernel started */
  /* For compute_async: the `done` it was passed, also stored here so that a
   * callback which only gets ctx back (a rendezvous, a collective) finds it. */
  rf__done_fn done;
  /* The kernel being run (its host_memory_* bits); NULL outside the
   * executor. */
  const struct rf__kernel_def *def;
  /* Set by rf__gpu_kernel_stream (below): the kernel enqueued
   * work on its GPU stream, and the executor ends that enqueue when it
   * returns (device/gpu/order.h). */
  bool stream_taken;
  /* Set by the executor for a node one of whose outputs has a place
   * reserved in a bucket of fused all-reduces (runtime/executor_homes.c):
   * a new reference to a tensor of `dtype` and `shape` in that place, to
   * use as output i, or NULL to allocate as usual. rf__kernel_alloc_output
   * asks it, so a producer writes straight into the bucket. */
  rf_tensor *(*output_home)(struct rf__kernel_ctx *ctx, int i, rf_dtype dtype,
                            const rf_shape *shape);
};

#ifdef RF_HAVE_CUDA
/* The stream of ctx's GPU device, for a kernel to enqueue work on (as a
 * cudaStream_t; the device's cuBLAS handle is bound to it). Kernels reach
 * their stream only through it: the first call counts an enqueue begun on
 * the device (device/gpu/order.h), which the executor ends when the kernel
 * returns (an asynchronous kernel: when it reports done).
 * kernels/cuda/kernel_stream.c. */
void *rf__gpu_kernel_stream(rf__kernel_ctx *ctx);
#endif

/* What running a kernel costs the thread that runs it, for the executor's
 * scheduling (TensorFlow's OpKernel::IsExpensive). A cheap node runs inline
 * on the thread that made it ready: handing it to another thread (a futex
 * wake-up and a context switch, ~5-20 us here) would cost more than running
 * it. Expensive nodes may go to idle pool workers when several are ready. */
typedef enum rf__kernel_cost {
  RF_COST_EXPENSIVE = 0, /* the default: real work, or unknown */
  RF_COST_CHEAP,         /* constant work: forwards a reference, reads a
                            variable, starts an asynchronous kernel */
  RF_COST_PER_ELEMENT,   /* a few operations per input element: cheap when
                            the inputs hold at most RF_CHEAP_MAX_ELEMENTS */
} rf__kernel_cost;

/* Input elements (all inputs together) up to which an RF_COST_PER_ELEMENT
 * kernel runs inline: ~2-10 us of work, about what a hand-off costs. */
#define RF_CHEAP_MAX_ELEMENTS 16384

typedef struct rf__kernel_def {
  const char *op;
  rf__device_type device_type;
  /* Optional: reads attrs once per node (at compile time). */
  rf_status *(*init)(const rf_node *node, void **state);
  void (*destroy)(void *state); /* optional */
  /* Exactly one of these two. */
  rf_status *(*compute)(rf__kernel_ctx *ctx);
  void (*compute_async)(rf__kernel_ctx *ctx, rf__done_fn done);
  /* GPU kernels: bit k set = input/output k is in host memory (a shape, a
   * count), not device memory. Partition hands such an input over from other
   * devices without a device copy (a _Recv with host_memory=true), placement
   * puts small int32 producers of such inputs on cpu:0, and
   * rf__kernel_alloc_output makes such outputs host tensors. Ignored on CPU
   * devices (everything is host memory there). Inputs and outputs past 31
   * are device memory (every reader checks the index): a variadic op's
   * host-memory arguments come first. */
  uint32_t host_memory_inputs;
  uint32_t host_memory_outputs;
  /* Optional: RF_COST_EXPENSIVE unless set. Asynchronous kernels should be
   * RF_COST_CHEAP: they only start their work. */
  rf__kernel_cost cost;
} rf__kernel_def;

/* Rows of a kernel table from a family's list of kernels X(op, compute,
 * host_memory_inputs, host_memory_outputs, cost) (RF_NN_KERNELS, ...): the
 * CPU and GPU files of a family build their tables from the one list, each
 * defining the compute functions it names, so both devices register the
 * same ops with the same host-memory arguments. The cost is the CPU
 * kernel's; a GPU row is RF_COST_CHEAP only where the CPU's is (forwarding,
 * a view, a variable read: host work alone), else RF_COST_EXPENSIVE: inlining
 * those saved one pool hand-off per GPU device in a step (a 4-device step of
 * ReadVariables took ~7 us more per device on an H200); which launching
 * kernels pay to inline has not been measured. */
#define RF__KERNEL_ROW(type, op_, fn, in, out, cost_) \
  {.op = op_,                                         \
   .device_type = type,                               \
   .compute = fn,                                     \
   .host_memory_inputs = in,                          \
   .host_memory_outputs = out,                        \
   .cost = cost_},
#define RF__CPU_KERNEL(op_, fn, in, out, cost) \
  RF__KERNEL_ROW(RF_DEVICE_CPU, op_, fn, in, out, cost)
#define RF__GPU_KERNEL(op_, fn, in, out, cost)    \
  RF__KERNEL_ROW(RF_DEVICE_GPU, op_, fn, in, out, \
                 (cost) == RF_COST_CHEAP ? RF_COST_CHEAP : RF_COST_EXPENSIVE)

/* Adds a kernel. ALREADY_EXISTS for a second kernel of the same (op, type). */
rf_status *rf__kernel_register(const rf__kernel_def *def);
/* Adds defs[0, n) in order; stops at the first error. */
rf_status *rf__kernel_register_all(const rf__kernel_def *defs, size_t n);
/* The kernel for (op, type), or NULL. */
const rf__kernel_def *rf__kernel_find(const char *op, rf__device_type type);

/* Allocates output i with the device's allocator and stores it in
 * ctx->outputs[i]; *out (optional) gets the same pointer, writable. On a GPU
 * device the tensor is in device memory (on_gpu), unless the kernel declares
 * output i host memory (host_memory_outputs): then it is a host tensor.
 * Where the executor reserved a place for the output (ctx->output_home),
 * the tensor is a view of that place instead: same dtype, shape and memory
 * kind, so the kernel cannot tell. */
rf_status *rf__kernel_alloc_output(rf__kernel_ctx *ctx, int i, rf_dtype dtype,
                                   const rf_shape *shape, rf_tensor **out);
/* Output i as a host tensor from the default allocator, whatever the device
 * (a GPU kernel's handle or shape output); like rf__kernel_alloc_output
 * otherwise. */
rf_status *rf__kernel_alloc_host_output(rf__kernel_ctx *ctx, int i,
                                        rf_dtype dtype, const rf_shape *shape,
                                        rf_tensor **out);
/* Releases every output made so far and sets it NULL: a kernel that fails
 * part-way leaves nothing half-written behind. */
void rf__kernel_drop_outputs(rf__kernel_ctx *ctx);
/* Passes input j through as output i (a new reference; no copy). */
void rf__kernel_forward_input(rf__kernel_ctx *ctx, int j, int i);
/* An error naming the node, its op and device: "node 'x' (MatMul) on cpu:1: ".
 */
rf_status *rf__kernel_error(const rf__kernel_ctx *ctx, rf_code code,
                            const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* st (consumed) with the node, op and device in front of its whole message,
 * for errors of context-free helpers (attrs, shapes, CUDA, the rendezvous);
 * NULL stays NULL and the shared out-of-memory status passes through. */
rf_status *rf__kernel_error_at(const rf__kernel_ctx *ctx, rf_status *st);

/* Runs fn over [0, n) split into chunks on the device's thread pool, the
 * caller taking part; returns when all chunks are done. cost_per_item is a
 * rough cycle count per item, so small loops run inline. Safe to call from a
 * pool thread (never deadlocks: the caller runs unclaimed chunks itself). */
void rf__kernel_parallel_for(rf__kernel_ctx *ctx, int64_t n,
                             int64_t cost_per_item,
                             void (*fn)(void *arg, int64_t begin, int64_t end),
                             void *arg);

/* Runs the synchronous kernel of `op` on ctx's device (the CPU where ctx
 * has none, as in rf__kernel_run_single) as a step of ctx's kernel (a fused
 * op falling back to the ops it fuses): the nested kernel
 * sees ctx's node and device, takes inputs[0, num_inputs) and makes one
 * output. out_index >= 0: that output becomes ctx's output out_index (in
 * the place the executor reserved for it, if any); else the caller owns
 * *out. *out (optional) gets the tensor. Errors are the nested kernel's;
 * INTERNAL when the device has no synchronous kernel of op.
 * kernels/kernel_nested.c. */
rf_status *rf__kernel_run_nested(rf__kernel_ctx *ctx, const char *op,
                                 rf_tensor *const *inputs, int num_inputs,
                                 int out_index, rf_tensor **out);

/* Says through the log sink (warning) that ctx's fused node runs its
 * unfused kernels (named in `unfused`, e.g. "Conv2D, BiasAdd, Relu"), and
 * why: a GPU kernel's fallback, called once per shape, not per step.
 * kernels/kernel_nested.c. */
void rf__kernel_log_unfused(const rf__kernel_ctx *ctx, const char *unfused,
                            const char *why);

/* Says "node 'N' (OP) on DEVICE: <what>" through the log sink at INFO: a
 * choice a kernel made once per shape (a GPU convolution's layout and
 * algorithm), for C++ kernels, which cannot use core/log.h's macros.
 * kernels/kernel_nested.c. */
void rf__kernel_log_info(const rf__kernel_ctx *ctx, const char *what);

/* Runs one node's kernel on its own, synchronously, on a scratch CPU device
 * (no step, no variables). For tests and constant folding: inputs borrowed,
 * outputs[] receive new references. The kernel table must be filled
 * (rf__registry_init, runtime/families.h). */
rf_status *rf__kernel_run_single(const rf_node *node, rf_tensor *const *inputs,
                                 rf_tensor **outputs);

#endif
