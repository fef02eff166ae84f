/* core/mem.c - allocation wrappers with fault injection. Each allocation
 * takes its number with one relaxed fetch-add and compares it with the
 * failure point (one relaxed load); allocations and frees also keep a live
 * count (one relaxed fetch-add each). No lock, no branch taken unless a test
 * asked for failures, so it stays on in release builds. */
#include "core/mem.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ringflow/debug.h"

static _Atomic int64_t alloc_count;
static _Atomic int64_t live_count;
/* The failure setting in one word, so that an allocation sees one setting
 * whole: (first failing allocation number << 1) | only_that_one; 0: off. */
static _Atomic int64_t fail_spec;

static void set_failure(int64_t k, int once) {
  if (k > INT64_MAX / 4) k = INT64_MAX / 4; /* never reached; no overflow */
  int64_t first = k > 0 ? atomic_load(&alloc_count) + k : 0;
  atomic_store(&fail_spec, first > 0 ? first * 2 + once : 0);
}

void rf_debug_fail_allocation_after(int64_t k) { set_failure(k, 0); }
void rf_debug_fail_allocation_once(int64_t k) { set_failure(k, 1); }

int64_t rf_debug_allocation_count(void) { return atomic_load(&alloc_count); }
int64_t rf_debug_live_allocations(void) { return atomic_load(&live_count); }

static int should_fail(void) {
  int64_t n =
      atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed) + 1;
  int64_t spec = atomic_load_explicit(&fail_spec, memory_order_relaxed);
  if (!spec) return 0;
  int64_t first = spec >> 1;
  return (spec & 1) ? n == first : n >= first;
}

static void *counted(void *p) {
  if (p) atomic_fetch_add_explicit(&live_count, 1, memory_order_relaxed);
  return p;
}

void *rf__malloc(size_t size) {
  if (should_fail()) return NULL;
  return counted(malloc(size ? size : 1));
}

void *rf__calloc(size_t n, size_t size) {
  if (should_fail()) return NULL;
  return counted(calloc(n ? n : 1, size ? size : 1));
}

void *rf__realloc(void *p, size_t size) {
  if (!p) return rf__malloc(size);
  if (should_fail()) return NULL;
  return realloc(p, size ? size : 1);
}

void rf__free(void *p) {
  if (!p) return;
  atomic_fetch_sub_explicit(&live_count, 1, memory_order_relaxed);
  free(p);
}

void *rf__aligned_alloc(size_t alignment, size_t size) {
  if (should_fail()) return NULL;
  void *p = NULL;
  if (posix_memalign(&p, alignment, size ? size : alignment) != 0) return NULL;
  return counted(p);
}

void rf__aligned_free(void *p) { rf__free(p); }

char *rf__strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = rf__malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

int rf__grow(void *arr_ptr, int *cap, int need, size_t elem) {
  if (need <= *cap) return 0;
  if (need < 0) return -1; /* a count that overflowed int */
  int ncap = *cap ? *cap : 4;
  /* Doubling past INT_MAX / 2 would overflow (and, wrapped to 0, spin
   * forever): stop at need. */
  while (ncap < need) ncap = ncap > INT_MAX / 2 ? need : ncap * 2;
  if ((size_t)ncap > SIZE_MAX / (elem ? elem : 1)) return -1;
  void **arr = arr_ptr;
  void *p = rf__realloc(*arr, (size_t)ncap * elem);
  if (!p) return -1;
  *arr = p;
  *cap = ncap;
  return 0;
}
