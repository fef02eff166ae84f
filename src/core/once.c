/* core/once.c - see once.h. The flag is read with acquire order, so a caller
 * that sees it set also sees every table the functions filled. */
#include "core/once.h"

#include "core/status.h"

rf_status *rf__once_run(rf__once *o, const rf__init_fn *fns, size_t n) {
  if (!atomic_load_explicit(&o->done, memory_order_acquire)) {
    pthread_mutex_lock(&o->mu);
    if (!atomic_load_explicit(&o->done, memory_order_relaxed)) {
      for (size_t i = 0; i < n && !o->status; i++) o->status = fns[i]();
      atomic_store_explicit(&o->done, true, memory_order_release);
    }
    pthread_mutex_unlock(&o->mu);
  }
  if (!o->status) return NULL;
  /* Hand out a copy: the caller frees what it gets. */
  return rf__status_copy(o->status);
}
