/* core/mem.h - every allocation of the library goes through these, so tests can
 * fail the k-th one on purpose (ringflow/debug.h) and count live blocks. */
#ifndef RF_CORE_MEM_H
#define RF_CORE_MEM_H

#include <stddef.h>

void *rf__malloc(size_t size);
void *rf__calloc(size_t n, size_t size);
/* On failure returns NULL and leaves p untouched. */
void *rf__realloc(void *p, size_t size);
void rf__free(void *p);
/* 64-byte-aligned (or larger power of two) block; free with rf__aligned_free.
 */
void *rf__aligned_alloc(size_t alignment, size_t size);
void rf__aligned_free(void *p);
char *rf__strdup(const char *s);
/* Grows *arr (element size elem) so it holds at least need elements; doubles
 * (up to INT_MAX). Returns 0 on success, -1 on failure (array untouched),
 * also for a negative need (a count that overflowed int). */
int rf__grow(void *arr_ptr, int *cap, int need, size_t elem);

#endif
