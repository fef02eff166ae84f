/* device/threadpool.h - a fixed pool of worker threads with one FIFO queue.
 * Tasks never block waiting for other tasks (parallel_for's caller runs the
 * chunks nobody has claimed), so any number of devices share a few threads. */
#ifndef RF_RUNTIME_THREADPOOL_H
#define RF_RUNTIME_THREADPOOL_H

#include <stdint.h>

#include "ringflow/status.h"

typedef struct rf__threadpool rf__threadpool;

/* num_threads 0: rf__cores_for_this_process() (core/cores.h). */
rf_status *rf__threadpool_new(int num_threads, rf__threadpool **out);
/* Runs every queued task, then joins the threads. */
void rf__threadpool_free(rf__threadpool *p);
int rf__threadpool_size(const rf__threadpool *p);
/* Queues fn(arg). RESOURCE_EXHAUSTED if the queue cannot grow (fn not run). */
rf_status *rf__threadpool_schedule(rf__threadpool *p, void (*fn)(void *),
                                   void *arg);
/* How long an idle worker spins (yielding its core) before it sleeps;
 * default 50 us. For tests. */
void rf__threadpool_set_spin_ns(rf__threadpool *p, int64_t ns);
/* Sleeping workers signalled for work so far. For tests. */
int64_t rf__threadpool_wakeups(rf__threadpool *p);
/* Workers currently waiting for work (a hint). */
int rf__threadpool_idle(const rf__threadpool *p);
/* See rf__kernel_parallel_for. p may be NULL: runs inline. */
void rf__threadpool_parallel_for(rf__threadpool *p, int64_t n,
                                 int64_t cost_per_item,
                                 void (*fn)(void *arg, int64_t b, int64_t e),
                                 void *arg);

#endif
