/* tools/prefetch.h - builds the next training step's input batch on a helper
 * thread while the current step runs: gathering a batch's rows from the
 * training set (3 MB of scattered reads at batch 1024) otherwise runs on one
 * core between steps while the pool's other core idles. One batch is in
 * flight at a time; the thread only reads the dataset and the indices it is
 * given, which must stay unchanged until the batch is taken. */
#ifndef RF_TOOLS_PREFETCH_H
#define RF_TOOLS_PREFETCH_H

#include <stdbool.h>

#include "ringflow/ringflow.h"

/* Builds the batch of rows idx: count tensors into x and y each, all or
 * none (an error leaves nothing to release). */
typedef rf_status *(*prefetch_fn)(void *arg, const int *idx, rf_tensor **x,
                                  rf_tensor **y);

typedef struct prefetch prefetch;

/* A prefetcher of batches of count x and y tensors from fn(arg, ...); arg is
 * not owned and must outlive it. NULL on failure (no memory or thread). */
prefetch *prefetch_new(prefetch_fn fn, void *arg, int count);
/* Waits for a batch in flight and releases it, stops the thread. NULL: no-op.
 */
void prefetch_free(prefetch *p);
/* Starts building the batch of idx; a batch started before must have been
 * taken. */
void prefetch_start(prefetch *p, const int *idx);
/* When the batch in flight is idx's: waits for it, hands its tensors to x
 * and y (new references) or its error to *st, and returns true. Otherwise
 * returns false and leaves everything unchanged. */
bool prefetch_take(prefetch *p, const int *idx, rf_status **st, rf_tensor **x,
                   rf_tensor **y);

#endif
