/* TEMPORARY: delete when src/runtime/threadpool.c lands. A serial stand-in:
 * parallel_for runs inline; the rest of the pool is UNIMPLEMENTED. */
#include "core/status.h"
#include "runtime/threadpool.h"

rf_status *rf__threadpool_new(int num_threads, rf__threadpool **out) {
  return rf__error(RF_UNIMPLEMENTED, "thread pool stub (TEMPORARY)");
}

void rf__threadpool_free(rf__threadpool *p) { (void)p; }

int rf__threadpool_size(const rf__threadpool *p) { return 0; }

rf_status *rf__threadpool_schedule(rf__threadpool *p, void (*fn)(void *),
                                   void *arg) {
  return rf__error(RF_UNIMPLEMENTED, "thread pool stub (TEMPORARY)");
}

int rf__threadpool_idle(const rf__threadpool *p) { return 0; }

void rf__threadpool_parallel_for(rf__threadpool *p, int64_t n,
                                 int64_t cost_per_item,
                                 void (*fn)(void *arg, int64_t b, int64_t e),
                                 void *arg) {
  if (n > 0 && fn) fn(arg, 0, n);
}
