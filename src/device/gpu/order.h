/* device/gpu/order.h - what one GPU stream has already waited for on
 * another, so that a cross-stream wait can be left out when it would add
 * nothing.
 *
 * A collective of virtual GPUs sharing one physical GPU runs one kernel on
 * the leader's stream: the leader waits for every participant's stream (its
 * input is ready), and every participant's stream then waits for the leader
 * (comm/cuda/backend.c). In a loop of pipelined steps a participant whose
 * input needs no kernel (a variable read) has enqueued nothing since it
 * waited for the leader, so the leader's next wait for it is redundant: it
 * would only make the GPU resolve two event hops per participant between
 * back-to-back kernels (about 1 us per 40-80 us all-reduce of 32 MiB).
 *
 * To know that, every enqueue on a device's stream is bracketed by
 * rf__gpu_enqueue_begin and rf__gpu_enqueue_end: kernels by the executor
 * (around a kernel that took its stream: rf__gpu_kernel_stream), copies by
 * rf__gpu_copy, collectives by their backends. A cross-stream wait
 * (rf__gpu_order_after) notes which stream waited for which count. A wait
 * is not an enqueue: instead it forgets what others saw of the waiting
 * stream, since that stream now also depends on the one it waited for.
 *
 * Both counters only grow and begun >= ended: begun == ended means no
 * enqueue is under way. The executor ends a kernel's enqueue before it
 * releases the kernel's buffers (a block released to the device's cache may
 * be handed to a collective's output next), and a kernel's scratch released
 * inside it is covered by begun moving first. */
#ifndef RF_RUNTIME_GPU_ORDER_H
#define RF_RUNTIME_GPU_ORDER_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct rf__gpu_order {
  atomic_uint_least64_t begun, ended; /* enqueues on the stream */
  /* Under the process-wide order lock (order.c): the device whose stream
   * last waited for every enqueue on this one up to count seen_at (begun
   * and ended were both seen_at then); NULL when none did since. */
  const struct rf__gpu_order *seen_by;
  uint64_t seen_at;
  /* Cross-stream waits this stream made, and those left out (tests). */
  atomic_int_least64_t waits, waits_skipped;
} rf__gpu_order;

/* Brackets enqueueing work on the stream of the device owning o (NULL: a CPU
 * device, ignored). begin goes before the first CUDA call that enqueues,
 * end after the last one returned, whether it succeeded or not. */
static inline void rf__gpu_enqueue_begin(rf__gpu_order *o) {
  if (o) atomic_fetch_add(&o->begun, 1);
}
static inline void rf__gpu_enqueue_end(rf__gpu_order *o) {
  if (o) atomic_fetch_add(&o->ended, 1);
}

#endif
