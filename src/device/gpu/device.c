/* device/gpu/device.c - a session's GPU devices: one context per physical
 * GPU used (properties, the caches living on it) and, per virtual device
 * gpu:i (on physical GPU i % count), a non-blocking stream, a cuBLAS handle
 * bound to it (and a cuDNN handle, in builds with cuDNN) and a caching
 * allocator. Everything is made before the session
 * runs anything and freed after its last step, so no lock guards it. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#ifdef RF_HAVE_CUDNN
#include <cudnn.h>
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_check.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/status.h"
#include "device/gpu/gpu.h"
#include "device/gpu/order.h"

struct rf__gpu_runtime {
  rf__device *devices; /* borrowed: the session's GPU devices */
  int num_devices;
  rf__gpu_context *contexts; /* [num_contexts], one per physical GPU used */
  int num_contexts;
  rf__gpu_cache **caches; /* [num_devices] */
  /* Per virtual device, what was made (so a partial runtime frees). */
  cudaStream_t *streams;
  cublasHandle_t *handles;
  void **dnn;           /* cudnnHandle_t, builds with cuDNN */
  cudaEvent_t *events;  /* the devices' order_event */
  rf__gpu_order *order; /* the devices' order */
  void **workspaces;    /* cuBLAS workspaces (rf__gpu_blas_workspaces) */
};

/* GPU runtimes alive in the process, and what to call when none is left. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static int live_runtimes;
static void (*idle_hook)(void);

void rf__gpu_set_idle_hook(void (*fn)(void)) {
  pthread_mutex_lock(&live_mu);
  idle_hook = fn;
  pthread_mutex_unlock(&live_mu);
}

rf_status *rf__gpu_count(int *out) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return rf__error(RF_FAILED_PRECONDITION,
                     "no GPU: cudaGetDeviceCount returned %s (%s)",
                     cudaGetErrorName(e), cudaGetErrorString(e));
  }
  if (n <= 0)
    return rf__error(RF_FAILED_PRECONDITION,
                     "no GPU: cudaGetDeviceCount returned 0");
  *out = n;
  return NULL;
}

int rf__gpu_current(void) {
  int d = -1;
  if (cudaGetDevice(&d) == cudaSuccess) return d;
  (void)cudaGetLastError();
  return -1;
}

void rf__gpu_make_current(int ordinal) {
  if (ordinal >= 0 && cudaSetDevice(ordinal) != cudaSuccess)
    (void)cudaGetLastError();
}

rf_status *rf__gpu_enter(const rf__device *d) {
  int cur = -1;
  RF_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != d->gpu_ordinal) RF_CUDA_CHECK(cudaSetDevice(d->gpu_ordinal));
  return NULL;
}

rf_status *rf__gpu_sync(const rf__device *d) {
  rf_status *st = rf__gpu_enter(d);
  if (!st) st = RF_CUDA_STATUS(cudaStreamSynchronize((cudaStream_t)d->stream));
  if (!st) return NULL;
  return rf__status_prefix(st, "%s (physical GPU %d)", d->canonical,
                           d->gpu_ordinal);
}

/* Reads the physical GPU's properties into ctx. */
static rf_status *context_init(rf__gpu_context *ctx, int ordinal) {
  struct cudaDeviceProp prop;
  ctx->ordinal = ordinal;
  RF_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  snprintf(ctx->name, sizeof ctx->name, "%s", prop.name);
  ctx->cc_major = prop.major;
  ctx->cc_minor = prop.minor;
  ctx->multiprocessors = prop.multiProcessorCount;
  ctx->total_memory = prop.totalGlobalMem;
  return NULL;
}

/* Lets every pair of the physical GPUs used read each other's memory where
 * the hardware can (peer copies then go over NVLink/PCIe directly, else
 * cudaMemcpyPeerAsync stages through the host). Already enabled is fine. */
static rf_status *enable_peer_access(rf__gpu_runtime *r) {
  for (int i = 0; i < r->num_contexts; i++) {
    int a = r->contexts[i].ordinal;
    RF_CUDA_CHECK(cudaSetDevice(a));
    for (int j = 0; j < r->num_contexts; j++) {
      int b = r->contexts[j].ordinal, can = 0;
      if (a == b) continue;
      RF_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) continue;
      cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
        continue;
      }
      RF_CUDA_CHECK(e);
    }
  }
  return NULL;
}

/* The GPU runtime's measuring knobs, read from the environment when it is
 * made (docs/ARCHITECTURE.md): a knob set to a value it does not take fails
 * the session, naming it, rather than being ignored. */
typedef struct knobs {
  bool sm_share, small_copies;
  int64_t update_chunk;
} knobs;

/* A switch: unset or "1" on, "0" off. */
static rf_status *switch_env(const char *name, bool *on) {
  const char *env = getenv(name);
  *on = !env || strcmp(env, "1") == 0;
  if (env && !*on && strcmp(env, "0") != 0)
    return rf__invalid("environment variable %s='%s': expected 0 or 1", name,
                       env);
  return NULL;
}

static rf_status *read_knobs(knobs *k) {
  RF_CHECK(switch_env("RF_GPU_SM_SHARE", &k->sm_share));
  RF_CHECK(switch_env("RF_GPU_SMALL_COPY", &k->small_copies));
  k->update_chunk = 512;
  const char *env = getenv("RF_GPU_UPDATE_CHUNK");
  if (env) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(env, &end, 10);
    if (!*env || *end || errno || v < 256 || v > (1 << 20) || v % 256)
      return rf__invalid(
          "environment variable RF_GPU_UPDATE_CHUNK='%s': expected a "
          "multiple of 256 from 256 to 1048576",
          env);
    k->update_chunk = v;
  }
  return NULL;
}

/* The multiprocessors each of `sharing` virtual devices on ctx plans for
 * (rf__device.gpu_sms): an equal part of the GPU, or all of it where
 * RF_GPU_SM_SHARE=0. */
static int sm_share(const rf__gpu_context *ctx, int sharing, bool share) {
  int sms = ctx->multiprocessors > 0 ? ctx->multiprocessors : 32;
  if (!share || sharing <= 1) return sms;
  return sms / sharing > 0 ? sms / sharing : 1;
}

/* Stream, handle and cache of virtual device i. */
static rf_status *make_device(rf__gpu_runtime *r, int i, const knobs *k) {
  rf__device *d = &r->devices[i];
  int p = i % r->num_contexts;
  rf__gpu_context *ctx = &r->contexts[p];
  int sharing = (r->num_devices - p + r->num_contexts - 1) / r->num_contexts;
  RF_CUDA_CHECK(cudaSetDevice(ctx->ordinal));
  RF_CUDA_CHECK(
      cudaStreamCreateWithFlags(&r->streams[i], cudaStreamNonBlocking));
  RF_CUDA_CHECK(
      cudaEventCreateWithFlags(&r->events[i], cudaEventDisableTiming));
  RF_CUBLAS_CHECK(cublasCreate(&r->handles[i]));
  RF_CUBLAS_CHECK(cublasSetStream(r->handles[i], r->streams[i]));
  d->gpu_sms = sm_share(ctx, sharing, k->sm_share);
  d->gpu_small_copies = k->small_copies;
  d->gpu_update_chunk = k->update_chunk;
  /* cuBLAS's heuristics then pick kernels that leave room for the other
   * devices' concurrent ones (0: the whole GPU, cuBLAS's default). A hint:
   * a cuBLAS that refuses it keeps its default rather than failing the
   * session. */
  if (d->gpu_sms < ctx->multiprocessors &&
      cublasSetSmCountTarget(r->handles[i], d->gpu_sms) !=
          CUBLAS_STATUS_SUCCESS)
    RF__LOG(RF_LOG_INFO,
            "gpu: %s: cublasSetSmCountTarget(%d) refused; cuBLAS sizes "
            "its products for the whole GPU",
            d->canonical, d->gpu_sms);
#ifdef RF_HAVE_CUDNN
  cudnnHandle_t dnn = NULL;
  cudnnStatus_t ds = cudnnCreate(&dnn);
  if (ds == CUDNN_STATUS_SUCCESS) {
    r->dnn[i] = dnn;
    ds = cudnnSetStream(dnn, r->streams[i]);
  }
  if (ds != CUDNN_STATUS_SUCCESS)
    return rf__error(RF_INTERNAL,
                     "cudnnCreate/cudnnSetStream failed: %s (cuDNN 9's "
                     "libraries must be on the library path)",
                     cudnnGetErrorString(ds));
  d->dnn = r->dnn[i];
#endif
  RF_CHECK(rf__gpu_cache_new(ctx, r->streams[i], &r->caches[i]));
  ctx->caches[ctx->num_caches++] = r->caches[i];
  d->gpu_ordinal = ctx->ordinal;
  d->stream = r->streams[i];
  d->order_event = r->events[i];
  d->gpu = ctx;
  d->blas = r->handles[i];
  d->order = &r->order[i];
  d->allocator = rf__gpu_cache_allocator(r->caches[i]);
  d->host_allocator = rf__gpu_pinned_allocator();
  d->enter = rf__gpu_enter;
  return NULL;
}

static rf_status *make_all(rf__gpu_runtime *r, int count) {
  knobs k;
  RF_CHECK(read_knobs(&k));
  r->num_contexts = r->num_devices < count ? r->num_devices : count;
  r->contexts = rf__calloc((size_t)r->num_contexts, sizeof(rf__gpu_context));
  r->caches = rf__calloc((size_t)r->num_devices, sizeof(rf__gpu_cache *));
  r->streams = rf__calloc((size_t)r->num_devices, sizeof(cudaStream_t));
  r->handles = rf__calloc((size_t)r->num_devices, sizeof(cublasHandle_t));
  r->events = rf__calloc((size_t)r->num_devices, sizeof(cudaEvent_t));
  r->dnn = rf__calloc((size_t)r->num_devices, sizeof(void *));
  r->order = rf__calloc((size_t)r->num_devices, sizeof(rf__gpu_order));
  if (!r->contexts || !r->caches || !r->streams || !r->handles || !r->events ||
      !r->dnn || !r->order)
    return rf__oom();
  for (int p = 0; p < r->num_contexts; p++) {
    rf__gpu_context *ctx = &r->contexts[p];
    int per = (r->num_devices - p + r->num_contexts - 1) / r->num_contexts;
    ctx->caches = rf__calloc((size_t)per, sizeof(rf__gpu_cache *));
    RF_CHECK_ALLOC(ctx->caches);
    RF_CHECK(context_init(ctx, p));
  }
  RF_CHECK(enable_peer_access(r));
  for (int i = 0; i < r->num_devices; i++) {
    rf_status *st = make_device(r, i, &k);
    if (st)
      return rf__status_prefix(st, "%s (physical GPU %d)",
                               r->devices[i].canonical, i % r->num_contexts);
  }
  for (int p = 0; p < r->num_contexts; p++) {
    const rf__gpu_context *ctx = &r->contexts[p];
    if (ctx->num_caches > 1)
      RF__LOG(RF_LOG_INFO,
              "gpu: %d virtual devices on physical GPU %d (%.100s, %d "
              "multiprocessors), each sizing its kernels for %d",
              ctx->num_caches, ctx->ordinal, ctx->name, ctx->multiprocessors,
              r->devices[p].gpu_sms);
  }
  return NULL;
}

rf_status *rf__gpu_runtime_new(rf__device *devices, int n,
                               rf__gpu_runtime **out) {
  int count;
  RF_CHECK(rf__gpu_count(&count));
  rf__gpu_runtime *r = rf__calloc(1, sizeof *r);
  RF_CHECK_ALLOC(r);
  r->devices = devices;
  r->num_devices = n;
  pthread_mutex_lock(&live_mu); /* counted before any kernel can run */
  live_runtimes++;
  pthread_mutex_unlock(&live_mu);
  int prev = rf__gpu_current();
  rf_status *st = make_all(r, count);
  if (st) rf__gpu_runtime_free(r);
  rf__gpu_make_current(prev);
  if (st) return st;
  *out = r;
  return NULL;
}

/* Puts device d back to "no GPU state" (it keeps its name and variables). */
static void clear_device(rf__device *d) {
  d->gpu_ordinal = -1;
  d->stream = d->order_event = d->gpu = d->blas = d->dnn = NULL;
  d->order = NULL;
  d->allocator = rf_default_allocator();
  d->host_allocator = rf_default_allocator();
  d->enter = NULL;
  d->gpu_sms = 0;
  d->gpu_small_copies = false;
  d->gpu_update_chunk = 0;
}

void rf__gpu_runtime_free(rf__gpu_runtime *r) {
  if (!r) return;
  int prev = rf__gpu_current();
  for (int i = 0; i < r->num_devices; i++) {
    rf__device *d = &r->devices[i];
    if (r->contexts)
      (void)cudaSetDevice(r->contexts[i % r->num_contexts].ordinal);
    if (r->streams && r->streams[i]) (void)cudaStreamSynchronize(r->streams[i]);
    if (r->handles && r->handles[i]) (void)cublasDestroy(r->handles[i]);
    if (r->workspaces && r->workspaces[i]) (void)cudaFree(r->workspaces[i]);
#ifdef RF_HAVE_CUDNN
    if (r->dnn && r->dnn[i]) (void)cudnnDestroy((cudnnHandle_t)r->dnn[i]);
#endif
    if (r->events && r->events[i]) (void)cudaEventDestroy(r->events[i]);
    if (r->streams && r->streams[i]) (void)cudaStreamDestroy(r->streams[i]);
    if (r->caches) rf__gpu_cache_free(r->caches[i]);
    clear_device(d);
  }
  (void)cudaGetLastError();
  rf__gpu_make_current(prev);
  for (int p = 0; r->contexts && p < r->num_contexts; p++)
    rf__free(r->contexts[p].caches);
  rf__free(r->contexts);
  rf__free(r->caches);
  rf__free(r->streams);
  rf__free(r->handles);
  rf__free(r->dnn);
  rf__free(r->events);
  rf__free(r->order);
  rf__free(r->workspaces);
  rf__free(r);
  pthread_mutex_lock(&live_mu);
  if (--live_runtimes == 0 && idle_hook) idle_hook();
  pthread_mutex_unlock(&live_mu);
}

rf_status *rf__gpu_blas_workspaces(rf__gpu_runtime *r, size_t bytes) {
  if (!r->workspaces) {
    r->workspaces = rf__calloc((size_t)r->num_devices, sizeof(void *));
    RF_CHECK_ALLOC(r->workspaces);
  }
  int prev = rf__gpu_current();
  rf_status *st = NULL;
  for (int i = 0; i < r->num_devices && !st; i++) {
    if (r->workspaces[i]) continue;
    st =
        RF_CUDA_STATUS(cudaSetDevice(r->contexts[i % r->num_contexts].ordinal));
    if (!st) st = RF_CUDA_STATUS(cudaMalloc(&r->workspaces[i], bytes));
    if (!st) {
      cublasStatus_t b =
          cublasSetWorkspace(r->handles[i], r->workspaces[i], bytes);
      if (b != CUBLAS_STATUS_SUCCESS)
        st = rf__cublas_status(b, "cublasSetWorkspace", __FILE__, __LINE__);
    }
    if (st)
      st = rf__status_prefix(st, "%s: a cuBLAS workspace of %zu bytes",
                             r->devices[i].canonical, bytes);
  }
  rf__gpu_make_current(prev);
  return st;
}
