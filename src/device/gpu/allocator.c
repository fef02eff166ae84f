/* device/gpu/allocator.c - caching allocators over cudaMalloc (one per
 * virtual GPU device) and cudaHostAlloc (pinned host memory, one per
 * process). Blocks are cached by size class; the free lists live outside the
 * blocks (device memory is not host-readable), and each class's list has room
 * for every block of the class ever made, so freeing never allocates. A block
 * freed to a device cache is only reused by that device's stream, whose order
 * puts the reuse after every earlier reader. While a step is captured as a
 * CUDA graph, the blocks freed meanwhile are the graph's: they leave the free
 * lists at the end of the capture and come back only when the graph goes
 * (runtime/gpu/step_graph.c), so nothing else is ever handed memory a replay
 * writes. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <string.h>

#include "core/cuda_check.h"
#include "core/mem.h"
#include "core/status.h"
#include "device/gpu/gpu.h"

#define MIN_CLASS_BYTES 256 /* cudaMalloc's alignment */
#define MIN_CLASS_LG 8
#define NUM_CLASSES 160

typedef struct bucket {
  void **blocks; /* the free ones: blocks[0..n) */
  int n, cap;
  int64_t live; /* blocks of this class that exist (free + in use) */
  /* While capturing: blocks[held..n) were freed during the capture (a
   * capture's allocations take those first, as the stack's top) */
  int held;
} bucket;

struct rf__gpu_cache {
  pthread_mutex_t mu;
  int ordinal;          /* -1: pinned host memory */
  rf__gpu_context *ctx; /* NULL for the pinned cache */
  void *stream;         /* the device's stream (NULL for pinned) */
  bucket classes[NUM_CLASSES];
  rf__gpu_alloc_stats stats;
  rf_allocator iface;
  int64_t capture_trims; /* stats.trims when the capture began */
};

struct rf__gpu_held {
  rf__gpu_cache *cache;
  int n;
  struct held_block {
    void *ptr;
    int cls;
    size_t rounded;
  } blocks[];
};

/* Class index and rounded size: 256, 320, 384, 448, 512, 640, ... */
static int size_class(size_t size, size_t *rounded) {
  if (size <= MIN_CLASS_BYTES) {
    *rounded = MIN_CLASS_BYTES;
    return 0;
  }
  int lg =
      63 - __builtin_clzll((unsigned long long)(size - 1)); /* 2^lg < size */
  size_t base = (size_t)1 << lg, step = base / 4;
  size_t k = (size - base + step - 1) / step; /* 1..4 */
  *rounded = base + k * step;
  int cls = (lg - MIN_CLASS_LG) * 4 + (int)k;
  return cls < NUM_CLASSES ? cls : -1;
}

/* The bytes of class cls's blocks (size_class's inverse). */
static size_t class_bytes(int cls) {
  if (cls == 0) return MIN_CLASS_BYTES;
  size_t base = (size_t)1 << (MIN_CLASS_LG + (cls - 1) / 4);
  return base + (size_t)((cls - 1) % 4 + 1) * (base / 4);
}

/* ---- raw blocks ---- */

static void *raw_alloc(rf__gpu_cache *c, size_t bytes) {
  void *p = NULL;
  cudaError_t e;
  if (c->ordinal < 0) {
    e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  } else {
    int cur = -1;
    e = cudaGetDevice(&cur);
    if (e == cudaSuccess && cur != c->ordinal) e = cudaSetDevice(c->ordinal);
    if (e == cudaSuccess) e = cudaMalloc(&p, bytes);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* not sticky: clear it for later checks */
    return NULL;
  }
  return p;
}

/* Frees every cached block of c; c->mu held. Waits for the GPU first: a
 * cached block may still be read by work queued before it was freed. */
static void trim_locked(rf__gpu_cache *c) {
  bool any = false;
  for (int i = 0; i < NUM_CLASSES && !any; i++) any = c->classes[i].n > 0;
  if (!any) return;
  if (c->ordinal >= 0) {
    int prev = -1;
    (void)cudaGetDevice(&prev);
    (void)cudaSetDevice(c->ordinal);
    (void)cudaDeviceSynchronize();
    for (int i = 0; i < NUM_CLASSES; i++) {
      bucket *b = &c->classes[i];
      for (int k = 0; k < b->n; k++) (void)cudaFree(b->blocks[k]);
    }
    if (prev >= 0 && prev != c->ordinal) (void)cudaSetDevice(prev);
  } else {
    for (int i = 0; i < NUM_CLASSES; i++) {
      bucket *b = &c->classes[i];
      for (int k = 0; k < b->n; k++) (void)cudaFreeHost(b->blocks[k]);
    }
  }
  (void)cudaGetLastError();
  for (int i = 0; i < NUM_CLASSES; i++) {
    bucket *b = &c->classes[i];
    b->live -= b->n;
    b->n = 0;
    b->held = 0;
    if (b->live == 0) { /* nothing of this class left: drop the list too */
      rf__free(b->blocks);
      b->blocks = NULL;
      b->cap = 0;
    }
  }
  c->stats.cached = 0;
  c->stats.trims++;
}

void rf__gpu_cache_trim(rf__gpu_cache *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  trim_locked(c);
  pthread_mutex_unlock(&c->mu);
}

/* After a failed allocation: empties every cache sharing c's memory. */
static void trim_shared(rf__gpu_cache *c) {
  if (!c->ctx) {
    rf__gpu_cache_trim(c);
    return;
  }
  for (int i = 0; i < c->ctx->num_caches; i++)
    rf__gpu_cache_trim(c->ctx->caches[i]);
}

/* ---- the rf_allocator functions ---- */

static void *cache_alloc(void *state, size_t size, size_t alignment) {
  rf__gpu_cache *c = state;
  size_t rounded;
  int cls = size_class(size, &rounded);
  if (cls < 0 || alignment > MIN_CLASS_BYTES) return NULL;
  bucket *b = &c->classes[cls];
  pthread_mutex_lock(&c->mu);
  void *p = NULL;
  if (b->n > 0) {
    p = b->blocks[--b->n];
    if (b->held > b->n) b->held = b->n; /* a block from before the capture */
    c->stats.cached -= rounded;
  } else if (b->live == b->cap &&
             rf__grow(&b->blocks, &b->cap, b->cap + 1, sizeof(void *))) {
    pthread_mutex_unlock(&c->mu); /* no room to cache it later: refuse */
    return NULL;
  } else {
    b->live++; /* reserved; undone below if the block cannot be made */
  }
  c->stats.in_use += rounded;
  c->stats.allocs++;
  if (c->stats.in_use > c->stats.peak_in_use)
    c->stats.peak_in_use = c->stats.in_use;
  pthread_mutex_unlock(&c->mu);
  if (p) return p;
  p = raw_alloc(c, rounded);
  if (!p) {
    trim_shared(c);
    p = raw_alloc(c, rounded);
  }
  pthread_mutex_lock(&c->mu);
  if (p) {
    c->stats.fresh++;
  } else {
    b->live--;
    c->stats.in_use -= rounded;
    c->stats.allocs--;
  }
  pthread_mutex_unlock(&c->mu);
  return p;
}

static void cache_free(void *state, void *ptr, size_t size) {
  rf__gpu_cache *c = state;
  if (!ptr) return;
  size_t rounded;
  int cls = size_class(size, &rounded);
  bucket *b = &c->classes[cls];
  pthread_mutex_lock(&c->mu);
  b->blocks[b->n++] = ptr; /* cap >= live > n: room was made at alloc */
  c->stats.cached += rounded;
  c->stats.in_use -= rounded;
  pthread_mutex_unlock(&c->mu);
}

/* ---- device caches ---- */

rf_status *rf__gpu_cache_new(rf__gpu_context *ctx, void *stream,
                             rf__gpu_cache **out) {
  rf__gpu_cache *c = rf__calloc(1, sizeof *c);
  RF_CHECK_ALLOC(c);
  pthread_mutex_init(&c->mu, NULL);
  c->ordinal = ctx->ordinal;
  c->ctx = ctx;
  c->stream = stream;
  c->iface = (rf_allocator){cache_alloc, cache_free, c};
  *out = c;
  return NULL;
}

void rf__gpu_cache_free(rf__gpu_cache *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  trim_locked(c);
  size_t in_use = c->stats.in_use;
  pthread_mutex_unlock(&c->mu);
  if (in_use) return; /* see the header: leaked, never freed under a tensor */
  for (int i = 0; i < NUM_CLASSES; i++) rf__free(c->classes[i].blocks);
  pthread_mutex_destroy(&c->mu);
  rf__free(c);
}

rf_allocator *rf__gpu_cache_allocator(rf__gpu_cache *c) { return &c->iface; }

rf__gpu_cache *rf__gpu_device_cache(const rf__device *d) {
  if (d && d->allocator && d->allocator->alloc == cache_alloc)
    return d->allocator->state;
  return NULL;
}

/* ---- capture (step graphs) ---- */

void rf__gpu_cache_capture_begin(rf__gpu_cache *c) {
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < NUM_CLASSES; i++) c->classes[i].held = c->classes[i].n;
  c->capture_trims = c->stats.trims;
  pthread_mutex_unlock(&c->mu);
}

rf_status *rf__gpu_cache_capture_end(rf__gpu_cache *c, bool keep,
                                     rf__gpu_held **out, bool *trimmed) {
  *out = NULL;
  pthread_mutex_lock(&c->mu);
  rf_status *st = NULL;
  *trimmed = c->stats.trims != c->capture_trims;
  if (keep && *trimmed)
    st = rf__error(RF_RESOURCE_EXHAUSTED,
                   "device memory ran short during the capture (the cache "
                   "was emptied)");
  int n = 0;
  for (int i = 0; i < NUM_CLASSES; i++)
    n += c->classes[i].n - c->classes[i].held;
  rf__gpu_held *h = NULL;
  if (keep && !st) {
    h = rf__malloc(sizeof *h + sizeof(struct held_block) * (size_t)n);
    if (!h) st = rf__oom();
  }
  if (h) {
    h->cache = c;
    h->n = 0;
    for (int i = 0; i < NUM_CLASSES; i++) {
      bucket *b = &c->classes[i];
      for (int k = b->held; k < b->n; k++) {
        size_t r = class_bytes(i);
        h->blocks[h->n++] = (struct held_block){b->blocks[k], i, r};
        c->stats.cached -= r;
        c->stats.in_use += r;
      }
      b->n = b->held;
    }
    *out = h;
  }
  pthread_mutex_unlock(&c->mu);
  return st;
}

void rf__gpu_held_release(rf__gpu_held *h) {
  if (!h) return;
  rf__gpu_cache *c = h->cache;
  pthread_mutex_lock(&c->mu);
  for (int k = 0; k < h->n; k++) {
    bucket *b = &c->classes[h->blocks[k].cls];
    b->blocks[b->n++] = h->blocks[k].ptr; /* cap >= live > n */
    c->stats.cached += h->blocks[k].rounded;
    c->stats.in_use -= h->blocks[k].rounded;
  }
  pthread_mutex_unlock(&c->mu);
  rf__free(h);
}

bool rf__gpu_held_has(const rf__gpu_held *h, const void *ptr) {
  for (int k = 0; h && k < h->n; k++)
    if (h->blocks[k].ptr == ptr) return true;
  return false;
}

size_t rf__gpu_held_bytes(const rf__gpu_held *h) {
  size_t bytes = 0;
  for (int k = 0; h && k < h->n; k++) bytes += h->blocks[k].rounded;
  return bytes;
}

void rf__gpu_cache_stats(rf__gpu_cache *c, rf__gpu_alloc_stats *out) {
  pthread_mutex_lock(&c->mu);
  *out = c->stats;
  pthread_mutex_unlock(&c->mu);
}

void rf__gpu_device_stats(const rf__device *d, rf__gpu_alloc_stats *out) {
  memset(out, 0, sizeof *out);
  if (d && d->allocator && d->allocator->alloc == cache_alloc)
    rf__gpu_cache_stats(d->allocator->state, out);
}

int rf__gpu_tensor_ordinal(const rf_tensor *t) {
  if (t && t->on_gpu && t->gpu >= 0) return t->gpu; /* external memory */
  if (!t || !t->on_gpu || !t->allocator || t->allocator->alloc != cache_alloc)
    return -1;
  const rf__gpu_cache *c = t->allocator->state;
  return c->ordinal;
}

/* ---- pinned host memory ---- */

static rf__gpu_cache pinned = {.mu = PTHREAD_MUTEX_INITIALIZER,
                               .ordinal = -1,
                               .iface = {cache_alloc, cache_free, &pinned}};

rf_allocator *rf__gpu_pinned_allocator(void) { return &pinned.iface; }

void rf__gpu_pinned_stats(rf__gpu_alloc_stats *out) {
  rf__gpu_cache_stats(&pinned, out);
}

void rf__gpu_pinned_trim(void) { rf__gpu_cache_trim(&pinned); }
