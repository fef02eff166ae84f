/* core/once.h - runs a list of registration functions once per process and
 * remembers the first failure (the op, kernel and pass tables are filled this
 * way, then read without locks). */
#ifndef RF_CORE_ONCE_H
#define RF_CORE_ONCE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "ringflow/status.h"

typedef rf_status *(*rf__init_fn)(void);

typedef struct rf__once {
  pthread_mutex_t mu;
  atomic_bool done;
  rf_status *status; /* the first failure, kept for the process's life */
} rf__once;

#define RF_ONCE_INIT \
  { PTHREAD_MUTEX_INITIALIZER, false, NULL }

/* Calls fns[0..n) in order, stopping at the first error, on the first call
 * only; every call (any thread, concurrently) returns NULL or a new copy of
 * that error, which the caller frees. */
rf_status *rf__once_run(rf__once *o, const rf__init_fn *fns, size_t n);

#endif
