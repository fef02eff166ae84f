/* device/device.h - a device of a session: its name, allocator, thread pool
 * and the variables that live on it across steps. A session lists its CPU
 * devices first (cpu:0..), then its GPU devices (gpu:0..). A session that is
 * one task of a job (comm/job.h) lists the other tasks' devices after its
 * own, marked remote: they exist for placement and lowering, and no kernel
 * ever runs on them. */
#ifndef RF_RUNTIME_DEVICE_H
#define RF_RUNTIME_DEVICE_H

#include <pthread.h>

#include "core/hash.h"
#include "core/tensor.h"
#include "graph/device_name.h"
#include "device/threadpool.h"

/* A variable's state. The value is replaced (never written) while other
 * references exist, so readers' snapshots stay immutable; when the variable
 * holds the only reference the update may happen in place. */
typedef struct rf__variable {
  pthread_mutex_t mu;
  char *name; /* the Variable node's name */
  rf_dtype dtype;
  rf_shape shape;
  rf_tensor *value; /* NULL until first assigned */
  UT_hash_handle hh;
} rf__variable;

typedef struct rf__device {
  int index; /* in the session's device list */
  /* name.task is -1 in a session of one process; in a job session every
   * device names its task (its own devices too). */
  rf__device_name name;
  /* Another task's device: only index, name and canonical are set. */
  bool remote;
  char canonical[RF_DEVICE_NAME_MAX];
  /* Output buffers of the device's kernels: host memory for CPU devices, the
   * GPU caching allocator (device memory) for GPU devices; not owned. */
  rf_allocator *allocator;
  rf__threadpool *pool; /* not owned */
  pthread_mutex_t vars_mu;
  rf__variable *vars; /* uthash by name */
  /* While a step is captured as a CUDA graph (rf__step.capturing), every
   * CUDA call that enqueues on `stream` is made under this lock: the
   * executor runs the device's kernels one at a time under it, and the
   * async kernels that enqueue there (_Retval's copy, the CUDA-kernel
   * collectives' waits and kernel, which take it for every participant in
   * device order) take it themselves. cuBLAS and cuBLASLt add their
   * workspaces' memory nodes to a capturing stream by reading its
   * dependencies (cuStreamGetCaptureInfo) and then setting them
   * (cuStreamUpdateCaptureDependencies): a wait or kernel another thread
   * enqueued on the stream in between is dropped from the stream's order,
   * and the graph runs it unordered with what follows (the faults of
   * captured steps on virtual GPUs, docs/PERFORMANCE.md). Never held
   * while waiting for anything but another holder's enqueue. */
  pthread_mutex_t capture_mu;

  /* ---- GPU devices (name.type == RF_DEVICE_GPU; device/gpu/gpu.h) ----
   * Virtual device gpu:N runs on physical GPU N % cudaGetDeviceCount(), so
   * several virtual devices may share one GPU; each has its own stream, cuBLAS
   * handle and allocator cache. Every kernel of a GPU device enqueues its work
   * on `stream` and returns (the executor treats it as done); stream order
   * keeps the device consistent, and the session synchronises the streams of
   * the devices a step used before the step returns. On CPU devices
   * gpu_ordinal is -1, stream, gpu, blas, dnn and order are NULL, enter is NULL
   * and host_allocator is the default allocator. */
  int gpu_ordinal; /* the physical CUDA device (for cudaSetDevice) */
  void *stream;    /* cudaStream_t, created non-blocking; owned by the
                      session's GPU runtime */
  /* cudaEvent_t (no timing) recorded only on `stream`, to make another
   * stream wait for the work queued on this one so far. Any thread may
   * re-record it: a wait captures the event as it stands when enqueued, and
   * a later record only marks a later point of the same stream. */
  void *order_event;
  void *gpu; /* struct rf__gpu_context: the physical GPU's shared state
                (properties; shared by its virtual devices) */
  /* The multiprocessors this device's kernels size their grids for, and
   * that its cuBLAS and cuBLASLt heuristics target: the physical GPU's
   * count divided by the number of the session's virtual devices on it, so
   * that the devices' concurrent kernels share the GPU rather than each
   * filling it (RF_GPU_SM_SHARE=0: the whole GPU for each). 0 on CPU
   * devices. */
  int gpu_sms;
  /* Copies of at most 16 KiB between pinned host memory and this device's
   * GPU run as a kernel (device/gpu/stream.c); RF_GPU_SMALL_COPY=0 when the
   * runtime is made keeps them memcpys (for measuring). */
  bool gpu_small_copies;
  /* Elements per chunk of the multi-tensor update kernel
   * (kernels/cuda/state_kernels.cu): 512, or RF_GPU_UPDATE_CHUNK when the
   * runtime is made (for measuring). */
  int64_t gpu_update_chunk;
  /* cublasHandle_t of this virtual device, bound to `stream` once when the
   * device is made: kernels use it as it is and never call cublasSetStream
   * (one handle per virtual device, so concurrent kernels of different
   * devices never race on a handle's stream). */
  void *blas;
  /* cudnnHandle_t of this virtual device, bound to `stream` as `blas` is;
   * NULL in builds without cuDNN (RF_WITH_CUDNN). */
  void *dnn;
  /* What other streams have waited for of `stream`: device/gpu/order.h.
   * Owned by the session's GPU runtime; NULL on CPU devices. */
  struct rf__gpu_order *order;
  /* Pinned host memory for device-to-host copies (fetches, sends to CPU
   * devices); host tensors made from it are ordinary host tensors. */
  rf_allocator *host_allocator;
  /* Makes the device's GPU current on the calling thread (cudaSetDevice).
   * The executor calls it before every kernel of the device; code issuing
   * CUDA calls for the device on another thread (an asynchronous kernel's
   * callback, a pool task) calls it first. NULL for CPU devices. */
  rf_status *(*enter)(const struct rf__device *d);
  /* float32 matrix products may use TF32 (rf_session_options.allow_tf32);
   * read by the GPU product kernels, false on CPU devices. */
  bool allow_tf32;
} rf__device;

/* The variable `name` of the device, created (uninitialised) on first use with
 * the given dtype and shape. FAILED_PRECONDITION if one exists with another
 * dtype. The variable lives until the device (session) is freed. */
rf_status *rf__device_variable(rf__device *d, const char *name, rf_dtype dtype,
                               const rf_shape *shape, rf__variable **out);

/* Fills *d as device `index` named `name`, with no variables and no GPU
 * state (gpu_ordinal -1; the GPU runtime fills those fields for GPU devices).
 * allocator and pool are borrowed. Returns nothing: it cannot fail. */
void rf__device_init(rf__device *d, int index, const rf__device_name *name,
                     rf_allocator *allocator, rf__threadpool *pool);
/* Frees d's variables (releasing their values); d itself is the caller's. */
void rf__device_destroy(rf__device *d);

/* The index in devices[0..n) of the device named by `name` (parsed), or -1.
 * A name without a task means a device of this process (not remote); a
 * name with task t matches the devices of task t, and in a session of one
 * process (devices without a task) task 0 is this process. */
int rf__device_find(const rf__device *devices, int n,
                    const rf__device_name *name);
/* Describes a device list for messages: "cpu:0", "cpu:0..cpu:3",
 * "cpu:0..cpu:3, gpu:0..gpu:1". */
void rf__device_list_format(const rf__device *devices, int n, char *buf,
                            size_t len);

#endif
