/* device/gpu/gpu.h - the GPU runtime of a session (CUDA builds only):
 * virtual GPU devices over physical ones, their caching allocators, pinned
 * host memory, copies between host and device memory, and completion of
 * stream work on the thread pool. Invariants: a device block is only reused
 * by work on the stream of the virtual device whose cache holds it (which is
 * what makes releasing a tensor right after enqueueing its last reader safe);
 * completion is reported through pool tasks (and no CUDA callback ever calls
 * CUDA or runs library code beyond scheduling one). */
#ifndef RF_RUNTIME_GPU_GPU_H
#define RF_RUNTIME_GPU_GPU_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"
#include "device/device.h"
#include "device/threadpool.h"

/* ---- devices (device/gpu/device.c) ---- */

/* One physical GPU used by a session, shared by its virtual devices
 * (rf__device.gpu points here). */
typedef struct rf__gpu_context {
  int ordinal; /* CUDA device */
  char name[256];
  int cc_major, cc_minor, multiprocessors;
  size_t total_memory;
  /* The caches of the virtual devices on this GPU: a failed cudaMalloc trims
   * them all (they share the GPU's memory). Fixed once the session is made. */
  struct rf__gpu_cache **caches;
  int num_caches;
} rf__gpu_context;

typedef struct rf__gpu_runtime rf__gpu_runtime;

/* The number of physical GPUs in *out (>= 1). FAILED_PRECONDITION "no GPU:
 * cudaGetDeviceCount returned ..." when there is none (or no driver). */
rf_status *rf__gpu_count(int *out);

/* Makes devices[0..n) (already rf__device_init'ed as gpu:0..gpu:n-1) GPU
 * devices: virtual gpu:i on physical GPU i % count, each with its own
 * non-blocking stream, cuBLAS handle bound to that stream and caching
 * allocator; peer access is enabled between the physical GPUs used where
 * the hardware allows. On error the devices' GPU fields are left empty and
 * nothing is kept. */
rf_status *rf__gpu_runtime_new(rf__device *devices, int n,
                               rf__gpu_runtime **out);
/* Waits for every stream, then destroys streams, handles and caches. The
 * devices' variables and every device tensor must be gone (a cache with
 * blocks still in use is leaked rather than freed under them). NULL is
 * ignored. */
void rf__gpu_runtime_free(rf__gpu_runtime *r);

/* Gives every device's cuBLAS handle a workspace of `bytes` of its own
 * (cudaMalloc; cublasSetWorkspace), freed with the runtime, instead of
 * cuBLAS's default pool: captured products then record no memory nodes
 * (cuBLAS allocates with cudaMallocAsync while a stream is captured). For
 * RF_GPU_GRAPH_DEBUG=workspace (runtime/step_graph.h). Devices that have
 * one keep it. */
rf_status *rf__gpu_blas_workspaces(rf__gpu_runtime *r, size_t bytes);
/* cuBLAS's recommended workspace on Hopper (32 MiB; 4 MiB elsewhere). */
#define RF_GPU_BLAS_WORKSPACE_BYTES ((size_t)32 << 20)

/* Process-wide state that kernels keep for GPUs (the cuDNN algorithm cache
 * of kernels/cuda/conv_dnn.cu) is dropped by `fn`, called when the last
 * GPU runtime of the process has been freed: no GPU kernel can run then,
 * and a later session starts afresh. fn must not make or free a runtime.
 * Setting it again replaces it. */
void rf__gpu_set_idle_hook(void (*fn)(void));

/* The calling thread's current CUDA device (-1 when unknown), and setting it
 * back (ignored for -1): the session's entry points leave the caller's
 * current device as they found it. */
int rf__gpu_current(void);
void rf__gpu_make_current(int ordinal);

/* rf__device.enter for GPU devices: cudaSetDevice when another GPU is current
 * on the calling thread. */
rf_status *rf__gpu_enter(const rf__device *d);
/* Waits until everything enqueued on d's stream has run; an error (a kernel
 * fault, reported asynchronously) names the device. */
rf_status *rf__gpu_sync(const rf__device *d);

/* ---- stream order (device/gpu/order.c; order.h says why) ---- */

/* Makes the streams of waiters[0..n) wait for everything enqueued on d's
 * stream so far (one record of d's order_event), leaving out d's own stream
 * and any waiter that has waited for all of it already and d's stream has
 * begun no enqueue since. Any thread; it enters d itself. */
rf_status *rf__gpu_order_after(const rf__device *d,
                               const rf__device *const *waiters, int n);

/* ---- allocators (device/gpu/allocator.c) ---- */

/* A caching allocator over cudaMalloc for one virtual device, or (the one
 * process-wide instance) over cudaHostAlloc for pinned host memory. Size
 * classes as the host allocator's (4 per power of two, at least 256 bytes);
 * freed blocks wait in their class for the next request of that class. When
 * the CUDA allocation fails, every cache of the same GPU is trimmed (after
 * the GPU has finished its queued work) and the allocation retried once. */
typedef struct rf__gpu_cache rf__gpu_cache;

typedef struct rf__gpu_alloc_stats {
  size_t in_use;      /* bytes handed out (rounded to size classes) */
  size_t cached;      /* bytes free in the cache */
  size_t peak_in_use; /* the most in_use has been */
  int64_t allocs;     /* requests served */
  int64_t fresh;      /* of which needed a new cudaMalloc/cudaHostAlloc */
  int64_t trims;      /* times the cache was emptied */
} rf__gpu_alloc_stats;

/* A cache for device memory of physical GPU `ctx->ordinal`, whose blocks are
 * used by work on `stream`. */
rf_status *rf__gpu_cache_new(rf__gpu_context *ctx, void *stream,
                             rf__gpu_cache **out);
/* Frees the cached blocks and the cache; leaks the cache instead if blocks
 * are still in use (a tensor outliving its session would otherwise free into
 * freed memory). NULL is ignored. */
void rf__gpu_cache_free(rf__gpu_cache *c);
/* The cache as an rf_allocator (owned by the cache). */
rf_allocator *rf__gpu_cache_allocator(rf__gpu_cache *c);
void rf__gpu_cache_stats(rf__gpu_cache *c, rf__gpu_alloc_stats *out);
/* Frees every cached block of c (waiting for the GPU first). */
void rf__gpu_cache_trim(rf__gpu_cache *c);

/* ---- blocks a CUDA graph of a step holds (runtime/gpu/step_graph.c) ----
 * Between capture_begin and capture_end, the blocks freed to c (the step's
 * temporaries) are set aside: with keep, capture_end takes them out of the
 * free lists into *out (counted in use) until rf__gpu_held_release puts
 * them back, so no other tensor is given memory a replay writes; without
 * keep (a failed capture) they stay free. *trimmed: the cache was emptied
 * meanwhile (a failed cudaMalloc), so blocks the capture recorded may be
 * gone: the graph must not run. RESOURCE_EXHAUSTED (and nothing held) then,
 * or when *out cannot be had. */
typedef struct rf__gpu_held rf__gpu_held;
/* d's device cache (NULL for a CPU device). */
rf__gpu_cache *rf__gpu_device_cache(const rf__device *d);
void rf__gpu_cache_capture_begin(rf__gpu_cache *c);
rf_status *rf__gpu_cache_capture_end(rf__gpu_cache *c, bool keep,
                                     rf__gpu_held **out, bool *trimmed);
/* NULL is ignored. Only once the graph's replays have run, or in the
 * stream order of the cache's device after them. */
void rf__gpu_held_release(rf__gpu_held *h);
size_t rf__gpu_held_bytes(const rf__gpu_held *h);
/* Whether h holds the block at ptr. */
bool rf__gpu_held_has(const rf__gpu_held *h, const void *ptr);

/* Pinned host memory (process-wide: fetched tensors may outlive sessions).
 * Its tensors are ordinary host tensors (on_gpu 0). */
rf_allocator *rf__gpu_pinned_allocator(void);
void rf__gpu_pinned_stats(rf__gpu_alloc_stats *out);
void rf__gpu_pinned_trim(void);

/* The stats of GPU device d's allocator (zeros for a CPU device). */
void rf__gpu_device_stats(const rf__device *d, rf__gpu_alloc_stats *out);

/* The physical GPU holding device tensor t (on_gpu): its cache's, or the one
 * given to rf_tensor_new_external_gpu; -1 for host memory. */
int rf__gpu_tensor_ordinal(const rf_tensor *t);

/* ---- copies (device/gpu/stream.c) ---- */

/* Enqueues on d's stream a copy of src's bytes into dst (same byte size):
 * host to device, device to host, or device to device (a peer copy when the
 * two are on different physical GPUs). Up to 16 KiB between pinned host
 * memory and d's GPU it is a one-block kernel (rf__gpu_small_copy_launch),
 * cheaper than a memcpy node in a captured step. The copy reads src and writes
 * dst when the stream gets there: both must live until then (see
 * rf__gpu_notify). The caller has entered d. Errors name d and the direction.
 */
rf_status *rf__gpu_copy(const rf__device *d, rf_tensor *dst,
                        const rf_tensor *src);
/* small_copy.cu: copies `bytes` (at most a few KiB) from src to dst with a
 * one-block kernel on `stream` (the current device's); one side is pinned
 * host memory. Returns the launch's cudaError_t. */
int rf__gpu_small_copy_launch(void *dst, const void *src, size_t bytes,
                              void *stream);

/* Makes d's stream wait (on the GPU, not the host) for the work queued so
 * far on the legacy default stream of physical GPU `gpu`: what a producer
 * of external device memory fed to d may still be writing there
 * (rf_tensor_new_external_gpu). The caller has entered d, and is left so. */
rf_status *rf__gpu_wait_legacy_stream(const rf__device *d, int gpu);

/* A new tensor like src (dtype, shape) in d's device memory (on_gpu), or, for
 * rf__gpu_new_host, in pinned host memory. */
rf_status *rf__gpu_new_device(const rf__device *d, const rf_tensor *like,
                              rf_tensor **out);
rf_status *rf__gpu_new_host(const rf__device *d, const rf_tensor *like,
                            rf_tensor **out);

/* ---- completion (device/gpu/completion.c) ---- */

/* Completion of stream work: embed one in the record of an operation. */
typedef struct rf__gpu_notify rf__gpu_notify;
typedef void (*rf__gpu_notify_fn)(rf__gpu_notify *n, rf_status *st);
struct rf__gpu_notify {
  rf__gpu_notify_fn fn;
  rf__threadpool *pool;
  const rf__device *device;
  int error; /* the cudaError_t the completion saw */
  /* the completion thread's: the event behind the work, when it was queued,
   * the next pending entry */
  void *event;
  int64_t queued_ns;
  struct rf__gpu_notify *next;
};

/* Calls fn(n, st) on a pool thread once everything enqueued on d's stream so
 * far has run; st (owned by fn) is NULL, or INTERNAL naming d when the stream
 * failed (a device fault: fn still runs, so nothing waits forever). An event
 * recorded on the stream is polled by one process-wide completion thread,
 * which only schedules the task (a CUDA stream callback when that thread
 * cannot start). n must stay valid until fn runs. On error fn is never
 * called. */
rf_status *rf__gpu_notify_when_done(const rf__device *d, rf__gpu_notify *n,
                                    rf__gpu_notify_fn fn);

/* ---- fences (device/gpu/fence.c) ---- */

/* One event per device of a list, recorded on each device's stream: a mark
 * behind everything enqueued there so far. For steps that return before
 * their GPU work has run (rf_session_options.gpu_sync_on_finish off). */
typedef struct rf__gpu_fence rf__gpu_fence;

/* A fence for devices[0..n) (the array is borrowed and must outlive it),
 * its events made on each device's GPU; nothing recorded yet. The calling
 * thread's current device is left as it was. */
rf_status *rf__gpu_fence_new(rf__device *const *devices, int n,
                             rf__gpu_fence **out);
/* (Re-)records the marks on every device's stream (the caller's current
 * device may change). */
rf_status *rf__gpu_fence_record(rf__gpu_fence *f);
/* Whether every stream has passed its mark, without waiting; true also when
 * a stream failed (*st: the error naming the device; else NULL). */
bool rf__gpu_fence_passed(const rf__gpu_fence *f, rf_status **st);
/* Waits until every stream has passed its mark; the first error. */
rf_status *rf__gpu_fence_wait(const rf__gpu_fence *f);
/* NULL is ignored. */
void rf__gpu_fence_free(rf__gpu_fence *f);

#endif
