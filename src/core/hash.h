/* core/hash.h - uthash, configured for the library: allocations go through
 * rf__malloc (so fault injection reaches them) and running out of memory is not
 * fatal. A function that adds to a hash declares `int rf__hash_oom = 0;` first
 * and checks it after HASH_ADD*: when set, the element was not added. */
#ifndef RF_CORE_HASH_H
#define RF_CORE_HASH_H

#include "core/mem.h"

#define HASH_NONFATAL_OOM 1
#define uthash_malloc(sz) rf__malloc(sz)
#define uthash_free(ptr, sz) rf__free(ptr)
#define uthash_nonfatal_oom(elt) (rf__hash_oom = 1)
#include <uthash.h>

#endif
