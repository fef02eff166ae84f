/* tests/coll_result.h - a participant's done callback for tests that drive
 * the collective manager directly: it records the status and output it was
 * given and counts its calls (exactly one is the contract). */
#ifndef RF_TESTS_COLL_RESULT_H
#define RF_TESTS_COLL_RESULT_H

#include <stdatomic.h>

#include "ringflow/ringflow.h"

typedef struct rf_test_coll_result {
  atomic_int fired;
  rf_status *st;
  rf_tensor *out;
} rf_test_coll_result;

static inline void rf_test_coll_done(void *arg, rf_status *st, rf_tensor *out) {
  rf_test_coll_result *r = arg;
  r->st = st;
  r->out = out;
  atomic_fetch_add(&r->fired, 1);
}

#endif
