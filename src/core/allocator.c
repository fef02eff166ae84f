/* core/allocator.c - the default host allocator: 64-byte-aligned blocks cached
 * by size class and handed out again, because first touch of fresh memory costs
 * ~10-15 us per 4 KiB page on our machines. Size classes are 4 per power of two
 * (at most 25% slack); blocks of 2 MiB and more are huge-page aligned. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "core/mem.h"
#include "ringflow/tensor.h"

#define MIN_CLASS_BYTES 64
#define NUM_CLASSES 160
#define HUGE_BYTES ((size_t)2 << 20)

typedef struct free_block {
  struct free_block *next;
} free_block;

typedef struct caching_allocator {
  pthread_mutex_t mu;
  free_block *free[NUM_CLASSES];
  size_t cached, in_use;
} caching_allocator;

static caching_allocator the_cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Class index and rounded size for a request: 64, 80, 96, 112, 128, 160, ... */
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
  int cls = (lg - 6) * 4 + (int)k;
  return cls < NUM_CLASSES ? cls : -1;
}

static void *fresh_block(size_t rounded) {
  size_t align = rounded >= HUGE_BYTES ? HUGE_BYTES : RF_TENSOR_ALIGNMENT;
  void *p = rf__aligned_alloc(align, rounded);
#ifdef MADV_HUGEPAGE
  if (p && rounded >= HUGE_BYTES) madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return p;
}

static void trim_locked(caching_allocator *c) {
  for (int i = 0; i < NUM_CLASSES; i++) {
    while (c->free[i]) {
      free_block *b = c->free[i];
      c->free[i] = b->next;
      rf__aligned_free(b);
    }
  }
  c->cached = 0;
}

static void *cache_alloc(void *state, size_t size, size_t alignment) {
  caching_allocator *c = state;
  size_t rounded;
  int cls = size_class(size, &rounded);
  if (cls < 0) return NULL; /* absurd size */
  /* A stricter alignment (a power of two) than the cache's blocks have: a
   * fresh block, of the class's size too, since free caches every block by
   * its size class and hands it out again as that many bytes. */
  if (alignment > RF_TENSOR_ALIGNMENT) {
    if (alignment & (alignment - 1)) return NULL;
    /* A cached block of the class that is aligned enough: every block such
     * a request took is one when it comes back. Without this each request
     * took fresh memory and its free grew the cache without bound. */
    pthread_mutex_lock(&c->mu);
    for (free_block **pp = &c->free[cls]; *pp; pp = &(*pp)->next) {
      free_block *b = *pp;
      if ((uintptr_t)b & (alignment - 1)) continue;
      *pp = b->next;
      c->cached -= rounded;
      c->in_use += rounded;
      pthread_mutex_unlock(&c->mu);
      return b;
    }
    pthread_mutex_unlock(&c->mu);
    void *p = rf__aligned_alloc(
        alignment > HUGE_BYTES || rounded < HUGE_BYTES ? alignment : HUGE_BYTES,
        rounded);
    if (p) {
      pthread_mutex_lock(&c->mu);
      c->in_use += rounded;
      pthread_mutex_unlock(&c->mu);
    }
    return p;
  }
  pthread_mutex_lock(&c->mu);
  free_block *b = c->free[cls];
  if (b) {
    c->free[cls] = b->next;
    c->cached -= rounded;
  }
  c->in_use += rounded;
  pthread_mutex_unlock(&c->mu);
  if (b) return b;
  void *p = fresh_block(rounded);
  if (!p) { /* give the cache back to the system and try once more */
    pthread_mutex_lock(&c->mu);
    trim_locked(c);
    pthread_mutex_unlock(&c->mu);
    p = fresh_block(rounded);
  }
  if (!p) {
    pthread_mutex_lock(&c->mu);
    c->in_use -= rounded;
    pthread_mutex_unlock(&c->mu);
  }
  return p;
}

static void cache_free(void *state, void *ptr, size_t size) {
  caching_allocator *c = state;
  if (!ptr) return;
  size_t rounded;
  int cls = size_class(size, &rounded);
  free_block *b = ptr;
  pthread_mutex_lock(&c->mu);
  b->next = c->free[cls];
  c->free[cls] = b;
  c->cached += rounded;
  c->in_use -= rounded;
  pthread_mutex_unlock(&c->mu);
}

static rf_allocator default_allocator = {cache_alloc, cache_free, &the_cache};

rf_allocator *rf_default_allocator(void) { return &default_allocator; }

void rf_default_allocator_stats(size_t *cached, size_t *in_use) {
  pthread_mutex_lock(&the_cache.mu);
  if (cached) *cached = the_cache.cached;
  if (in_use) *in_use = the_cache.in_use;
  pthread_mutex_unlock(&the_cache.mu);
}

void rf_default_allocator_trim(void) {
  pthread_mutex_lock(&the_cache.mu);
  trim_locked(&the_cache);
  pthread_mutex_unlock(&the_cache.mu);
}
