/* tests/fault_sweep.h - the allocation-failure sweep the fault injection
 * tests share (ringflow/debug.h): for k = 1, 2, ... run an attempt with the
 * k-th library allocation failing, in one of two modes - persistent (it and
 * every one after it fail) or transient (only it fails) - and check that the
 * attempt ended in success or RESOURCE_EXHAUSTED (or a code the test allows)
 * and leaked nothing. The attempt checks its own results when it succeeds.
 *
 * Run time: k takes every value up to first_n, then every stride-th value,
 * stride chosen so that about max_attempts attempts cover all allocation
 * points of a clean attempt (CI has 2 cores and runs these under ASan and
 * TSan). RF_TEST_FULL_SWEEP=1 makes the stride 1 (every k); RF_TEST_K=n
 * runs only k = n. */
#ifndef RF_TESTS_FAULT_SWEEP_H
#define RF_TESTS_FAULT_SWEEP_H

#include <stdio.h>
#include <stdlib.h>

#include "ringflow/debug.h"
#include "testutil.h"

typedef enum { FS_AFTER, FS_ONCE } fs_mode;

static const char *const fs_mode_names[] = {"persistent", "transient"};

typedef rf_status *(*fs_attempt_fn)(void *arg);

typedef struct fs_plan {
  const char *what;
  fs_attempt_fn attempt;
  void *arg;
  int64_t first_n;      /* every k up to this */
  int64_t max_attempts; /* then a stride that keeps to about this many */
  rf_code also_ok;      /* another code an attempt may end in (RF_OK: none) */
  bool check_leaks;     /* live allocations equal before and after */
  /* Attempts on a session made beforehand: its arrays that keep their
   * capacity (the collective manager's cancelled steps, ...) grow on its
   * first failures, which would read as leaks. A first pass, transient,
   * every k up to first_n, checks codes but not leaks. */
  bool warm_up;
  /* Called clean before each attempt, before live allocations are counted,
   * and again before they are counted after it (NULL: nothing). */
  void (*prepare)(void *arg);
} fs_plan;

typedef struct fs_result {
  int attempts, failures, successes;
} fs_result;

static inline void fs_arm(fs_mode mode, int64_t k) {
  if (mode == FS_AFTER)
    rf_debug_fail_allocation_after(k);
  else
    rf_debug_fail_allocation_once(k);
}

static inline fs_result fs_sweep(const fs_plan *p, fs_mode mode) {
  fs_result r = {0, 0, 0};
  /* the allocations of a clean attempt set the stride */
  if (p->prepare) p->prepare(p->arg);
  int64_t c0 = rf_debug_allocation_count();
  rf_status *st = p->attempt(p->arg);
  if (st && (p->also_ok == RF_OK || rf_status_code(st) != p->also_ok))
    fail_msg("%s: the clean attempt failed: %s", p->what,
             rf_status_message(st));
  rf_status_free(st);
  int64_t total = rf_debug_allocation_count() - c0;
  int64_t stride = 1;
  const char *full = getenv("RF_TEST_FULL_SWEEP");
  if (!(full && *full && *full != '0') && total > p->first_n)
    stride = (total - p->first_n) / p->max_attempts + 1;
  bool verbose = getenv("RF_TEST_VERBOSE") != NULL;
  for (int64_t k = 1; p->warm_up && k <= p->first_n; k++) {
    if (p->prepare) p->prepare(p->arg);
    rf_debug_fail_allocation_once(k);
    st = p->attempt(p->arg);
    rf_debug_fail_allocation_after(0);
    rf_code code = rf_status_code(st);
    if (code != RF_OK && code != RF_RESOURCE_EXHAUSTED && code != p->also_ok)
      fail_msg("%s, warm-up k=%lld: %s", p->what, (long long)k,
               rf_status_message(st));
    rf_status_free(st);
  }
  /* RF_TEST_K=n: only k = n (to debug one failure) */
  const char *only = getenv("RF_TEST_K");
  int64_t k0 = only ? atoll(only) : 1;
  for (int64_t k = k0;; k += k < p->first_n ? 1 : stride) {
    if (p->prepare) p->prepare(p->arg);
    rf_default_allocator_trim();
    int64_t live = rf_debug_live_allocations();
    int64_t count = rf_debug_allocation_count();
    if (verbose)
      fprintf(stderr, "%s %s k=%lld\n", p->what, fs_mode_names[mode],
              (long long)k);
    fs_arm(mode, k);
    st = p->attempt(p->arg);
    rf_debug_fail_allocation_after(0);
    bool reached = rf_debug_allocation_count() - count >= k;
    /* the status is the caller's: freed before counting */
    rf_code code = rf_status_code(st);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st ? rf_status_message(st) : "ok");
    rf_status_free(st);
    /* the same state as when live was counted (variables hold as many
     * tensors) */
    if (p->prepare) p->prepare(p->arg);
    rf_default_allocator_trim();
    int64_t leaked = rf_debug_live_allocations() - live;
    if (p->check_leaks && leaked)
      fail_msg("%s, %s k=%lld: %lld allocations leaked (%s)", p->what,
               fs_mode_names[mode], (long long)k, (long long)leaked, msg);
    r.attempts++;
    if (code != RF_OK && code != RF_RESOURCE_EXHAUSTED &&
        (p->also_ok == RF_OK || code != p->also_ok))
      fail_msg("%s, %s k=%lld: expected RESOURCE_EXHAUSTED, got %s: %s",
               p->what, fs_mode_names[mode], (long long)k, rf_code_name(code),
               msg);
    if (code == RF_RESOURCE_EXHAUSTED)
      r.failures++;
    else if (code == RF_OK)
      r.successes++;
    /* done once the k-th allocation is beyond the attempt */
    if (!reached || only) break;
    if (k > 10000000) fail_msg("%s: no end to the sweep", p->what);
  }
  fprintf(stderr,
          "%s, %s failures: %d attempts (stride %lld after %lld, %lld "
          "allocations): %d RESOURCE_EXHAUSTED, %d succeeded\n",
          p->what, fs_mode_names[mode], r.attempts, (long long)stride,
          (long long)p->first_n, (long long)total, r.failures, r.successes);
  return r;
}

#endif
