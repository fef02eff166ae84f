/* tests/test_rendezvous.c - cross-device handoff by (key, step): both orders,
 * steps kept apart, abort failing waiters and later calls, per-step cleanup,
 * duplicate keys, long keys, many threads, allocation failures. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "core/tensor.h"
#include "ringflow/debug.h"
#include "device/rendezvous.h"

typedef struct got {
  atomic_int calls;
  rf_status *st;
  rf_tensor *value;
} got;

static void on_recv(void *arg, rf_status *st, rf_tensor *value) {
  got *g = arg;
  assert_true((st == NULL) != (value == NULL));
  g->st = st;
  g->value = value;
  atomic_fetch_add(&g->calls, 1);
}

static rf_tensor *scalar(double v) {
  rf_tensor *t;
  assert_ok(rf_tensor_new_scalar(RF_FLOAT64, v, &t));
  return t;
}

static int refs(rf_tensor *t) { return atomic_load(&t->refs); }

static void test_send_then_recv(void **state) {
  rf__rendezvous *r;
  assert_ok(rf__rendezvous_new(&r));
  rf_tensor *t = scalar(3.5);
  assert_ok(rf__rendezvous_send(r, 7, "a:0;cpu:1", t));
  assert_int_equal(refs(t), 2); /* retained while stored */
  assert_int_equal(rf__rendezvous_pending(r), 1);
  got g = {0};
  rf__rendezvous_recv(r, 7, "a:0;cpu:1", on_recv, &g);
  assert_int_equal(atomic_load(&g.calls), 1); /* at once: it was there */
  assert_ptr_equal(g.value, t);
  assert_int_equal(rf__rendezvous_pending(r), 0);
  rf_tensor_release(g.value);
  assert_int_equal(refs(t), 1);
  rf_tensor_release(t);
  rf__rendezvous_end_step(r, 7);
  rf__rendezvous_free(r);
}

static void test_recv_then_send(void **state) {
  rf__rendezvous *r;
  assert_ok(rf__rendezvous_new(&r));
  got g = {0};
  rf__rendezvous_recv(r, 1, "k", on_recv, &g);
  assert_int_equal(atomic_load(&g.calls), 0); /* waits, does not block */
  rf_tensor *t = scalar(-1);
  assert_ok(rf__rendezvous_send(r, 1, "k", t));
  assert_int_equal(atomic_load(&g.calls), 1);
  assert_ptr_equal(g.value, t);
  assert_true(rf_tensor_get(g.value, 0) == -1.0);
  rf_tensor_release(g.value);
  rf_tensor_release(t);
  rf__rendezvous_end_step(r, 1);
  assert_int_equal(rf__rendezvous_pending(r), 0);
  rf__rendezvous_free(r);
}

static void test_steps_and_keys_are_separate(void **state) {
  rf__rendezvous *r;
  assert_ok(rf__rendezvous_new(&r));
  rf_tensor *t[4];
  for (int i = 0; i < 4; i++) t[i] = scalar(i);
  /* (step 1, "x"), (step 2, "x"), (step 1, "y"), (step 2, "y") */
  assert_ok(rf__rendezvous_send(r, 1, "x", t[0]));
  assert_ok(rf__rendezvous_send(r, 2, "x", t[1]));
  assert_ok(rf__rendezvous_send(r, 1, "y", t[2]));
  assert_ok(rf__rendezvous_send(r, 2, "y", t[3]));
  got g[4] = {0};
  rf__rendezvous_recv(r, 2, "y", on_recv, &g[3]);
  rf__rendezvous_recv(r, 1, "x", on_recv, &g[0]);
  rf__rendezvous_recv(r, 2, "x", on_recv, &g[1]);
  rf__rendezvous_recv(r, 1, "y", on_recv, &g[2]);
  for (int i = 0; i < 4; i++) {
    assert_ptr_equal(g[i].value, t[i]);
    rf_tensor_release(g[i].value);
    rf_tensor_release(t[i]);
  }
  rf__rendezvous_end_step(r, 1);
  rf__rendezvous_end_step(r, 2);
  rf__rendezvous_free(r);
}

static void test_abort_fails_waiters_and_later_calls(void **state) {
  rf__rendezvous *r;
  assert_ok(rf__rendezvous_new(&r));
  got w[3] = {0}, other = {0};
  rf__rendezvous_recv(r, 5, "a", on_recv, &w[0]);
  rf__rendezvous_recv(r, 5, "b", on_recv, &w[1]);
  rf__rendezvous_recv(r, 6, "a", on_recv, &other); /* another step */
  rf_tensor *t = scalar(1);
  assert_ok(rf__rendezvous_send(r, 5, "stored", t));
  rf_status *why =
      rf_status_new(RF_INTERNAL, "node 'f' (TestFail) on cpu:2: boom");
  rf__rendezvous_abort(r, 5, why);
  rf_status_free(why);
  assert_int_equal(refs(t), 1); /* the stored value was dropped */
  for (int i = 0; i < 2; i++) {
    assert_int_equal(atomic_load(&w[i].calls), 1);
    assert_status(w[i].st, RF_INTERNAL, "node 'f' (TestFail) on cpu:2: boom");
  }
  assert_int_equal(atomic_load(&other.calls), 0);
  /* A second abort does not replace the first status. */
  why = rf_status_new(RF_CANCELLED, "second");
  rf__rendezvous_abort(r, 5, why);
  rf_status_free(why);
  assert_status(rf__rendezvous_send(r, 5, "a", t), RF_INTERNAL, "boom");
  assert_int_equal(refs(t), 1); /* a refused send does not retain */
  rf__rendezvous_recv(r, 5, "c", on_recv, &w[2]);
  assert_int_equal(atomic_load(&w[2].calls), 1);
  assert_status(w[2].st, RF_INTERNAL, "boom");
  /* Step 6 is untouched. */
  assert_ok(rf__rendezvous_send(r, 6, "a", t));
  assert_ptr_equal(other.value, t);
  rf_tensor_release(other.value);
  rf__rendezvous_end_step(r, 5);
  rf__rendezvous_end_step(r, 6);
  assert_int_equal(rf__rendezvous_pending(r), 0);
  rf_tensor_release(t);
  rf__rendezvous_free(r);
}

static void test_abort_before_anything(void **state) {
  rf__rendezvous *r;
  assert_ok(rf__rendezvous_new(&r));
  rf_status *why = rf_status_new(RF_CANCELLED, "cancelled early");
  rf__rendezvous_abort(r, 9, why);
  rf_status_free(why);
  got g = {0};
  rf__rendezvous_recv(r, 9, "k", on_recv, &g);
  assert_status(g.st, RF_CANCELLED, "cancelled early");
  rf__rendezvous_end_step(r, 9);
  rf__rendezvous_free(r);
}

static void test_duplicates_are_internal_errors(void **state) {
  rf__rendezvous *r;
  assert_ok(rf__rendezvous_new(&r));
  rf_tensor *t = scalar(2);
  assert_ok(rf__rendezvous_send(r, 1, "dup", t));
  assert_status(rf__rendezvous_send(r, 1, "dup", t), RF_INTERNAL,
                "key 'dup' was sent twice in step 1");
  assert_int_equal(refs(t), 2);
  got a = {0}, b = {0}, c = {0};
  rf__rendezvous_recv(r, 1, "w", on_recv, &a);
  rf__rendezvous_recv(r, 1, "w", on_recv, &b);
  assert_int_equal(atomic_load(&a.calls), 0);
  assert_status(b.st, RF_INTERNAL, "key 'w' was received twice in step 1");
  rf__rendezvous_recv(r, 1, "dup", on_recv, &c);
  assert_ptr_equal(c.value, t);
  rf_tensor_release(c.value);
  /* Ending the step fails the remaining waiter with CANCELLED. */
  rf__rendezvous_end_step(r, 1);
  assert_status(a.st, RF_CANCELLED, "step 1 ended");
  assert_int_equal(rf__rendezvous_pending(r), 0);
  rf_tensor_release(t);
  rf__rendezvous_free(r);
}

static void test_end_step_releases_values(void **state) {
  int64_t live = rf_debug_live_allocations();
  rf__rendezvous *r;
  assert_ok(rf__rendezvous_new(&r));
  rf_tensor *t = scalar(4);
  char key[300];
  memset(key, 'k', sizeof key - 1); /* longer than the inline key buffer */
  key[sizeof key - 1] = '\0';
  for (int step = 0; step < 50; step++) {
    assert_ok(rf__rendezvous_send(r, step, key, t));
    assert_ok(rf__rendezvous_send(r, step, "short", t));
  }
  assert_int_equal(rf__rendezvous_pending(r), 100);
  assert_int_equal(refs(t), 101);
  for (int step = 0; step < 50; step++) rf__rendezvous_end_step(r, step);
  assert_int_equal(rf__rendezvous_pending(r), 0);
  assert_int_equal(refs(t), 1);
  /* The long key still matches exactly. */
  got g = {0};
  rf__rendezvous_recv(r, 99, key, on_recv, &g);
  key[10] = 'x';
  assert_ok(rf__rendezvous_send(r, 99, key, t));
  assert_int_equal(atomic_load(&g.calls), 0);
  key[10] = 'k';
  assert_ok(rf__rendezvous_send(r, 99, key, t));
  assert_ptr_equal(g.value, t);
  rf_tensor_release(g.value);
  rf__rendezvous_free(r); /* drops step 99's leftover value */
  rf_tensor_release(t);
  assert_int_equal(rf_debug_live_allocations(), live);
}

/* Many threads: thread i sends keys of its own and receives the keys of
 * thread (i + 1) % N, over many steps, in both orders. */
#define NTHREADS 4
#define NSTEPS 200
#define NKEYS 8

typedef struct worker {
  rf__rendezvous *r;
  int id;
  atomic_int received;
  atomic_int wrong;
} worker;

static void on_recv_check(void *arg, rf_status *st, rf_tensor *value) {
  worker *w = arg;
  if (st || !value) {
    atomic_fetch_add(&w->wrong, 1);
    rf_status_free(st);
    return;
  }
  atomic_fetch_add(&w->received, 1);
  rf_tensor_release(value);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  int from = (w->id + 1) % NTHREADS;
  for (int step = 0; step < NSTEPS; step++) {
    for (int k = 0; k < NKEYS; k++) {
      char key[64];
      rf_tensor *t = NULL;
      rf_tensor_new_scalar(RF_INT64, w->id * 1000 + k, &t);
      snprintf(key, sizeof key, "t%d:%d", w->id, k);
      rf_status *st = rf__rendezvous_send(w->r, step, key, t);
      if (st) {
        atomic_fetch_add(&w->wrong, 1);
        rf_status_free(st);
      }
      rf_tensor_release(t);
      snprintf(key, sizeof key, "t%d:%d", from, k);
      rf__rendezvous_recv(w->r, step, key, on_recv_check, w);
    }
  }
  return NULL;
}

static void test_many_threads(void **state) {
  rf__rendezvous *r;
  assert_ok(rf__rendezvous_new(&r));
  worker w[NTHREADS];
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    w[i] = (worker){r, i, 0, 0};
    pthread_create(&th[i], NULL, worker_main, &w[i]);
  }
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < NTHREADS; i++) {
    assert_int_equal(atomic_load(&w[i].wrong), 0);
    assert_int_equal(atomic_load(&w[i].received), NSTEPS * NKEYS);
  }
  assert_int_equal(rf__rendezvous_pending(r), 0);
  for (int step = 0; step < NSTEPS; step++) rf__rendezvous_end_step(r, step);
  rf__rendezvous_free(r);
}

static void test_out_of_memory(void **state) {
  int64_t live = rf_debug_live_allocations();
  rf_tensor *t = scalar(1);
  for (int k = 1; k < 20; k++) {
    rf__rendezvous *r = NULL;
    rf_debug_fail_allocation_after(k);
    rf_status *st = rf__rendezvous_new(&r);
    if (st) {
      rf_debug_fail_allocation_after(0);
      assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
      continue;
    }
    got g = {0};
    st = rf__rendezvous_send(r, 1, "a", t);
    rf__rendezvous_recv(r, 1, "b", on_recv, &g);
    rf_debug_fail_allocation_after(0);
    if (st) {
      assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
      assert_int_equal(refs(t), 1);
    }
    int failed_early = atomic_load(&g.calls);
    if (failed_early) assert_status(g.st, RF_RESOURCE_EXHAUSTED, NULL);
    rf__rendezvous_end_step(r, 1);
    assert_int_equal(atomic_load(&g.calls), 1);
    if (!failed_early) assert_status(g.st, RF_CANCELLED, NULL);
    rf__rendezvous_free(r);
    assert_int_equal(refs(t), 1);
  }
  rf_tensor_release(t);
  assert_int_equal(rf_debug_live_allocations(), live);
}

int main(void) {
  rf_test_seed();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_send_then_recv),
      cmocka_unit_test(test_recv_then_send),
      cmocka_unit_test(test_steps_and_keys_are_separate),
      cmocka_unit_test(test_abort_fails_waiters_and_later_calls),
      cmocka_unit_test(test_abort_before_anything),
      cmocka_unit_test(test_duplicates_are_internal_errors),
      cmocka_unit_test(test_end_step_releases_values),
      cmocka_unit_test(test_many_threads),
      cmocka_unit_test(test_out_of_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
