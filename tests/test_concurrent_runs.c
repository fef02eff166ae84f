/* tests/test_concurrent_runs.c - several threads running one session at once:
 * each gets its own results (steps never mix, even over cross-device
 * rendezvous), new signatures compile concurrently into one cache entry each,
 * and failing runs in some threads leave the others' results intact. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "runtime/session_internal.h"
#include "runtime_test_ops.h"

#define THREADS 4
#define RUNS 40

typedef struct shared {
  rf_session *s;
  rf_output x, y, z, bad;
  int n; /* elements of x */
} shared;

typedef struct worker {
  shared *sh;
  int id;
  uint64_t rng;
  int ok, wrong, errors;
} worker;

/* y = x + 12 (a chain over 4 devices); z = y + x (diamond). */
static void build(shared *sh, rf_graph *g) {
  char buf[16];
  sh->x = rt_placeholder_node(g, "x", NULL, rf_shape_of(1, (int64_t)-1));
  rf_output y = sh->x;
  for (int i = 0; i < 12; i++) {
    snprintf(buf, sizeof buf, "cpu:%d", i % 4);
    y = rt_unary_node(g, "TestAddOne", NULL, buf, y);
  }
  sh->y = y;
  sh->z = rt_add_node(g, "z", "cpu:2", y, sh->x);
  rf_output slow = rt_unary_node(g, "TestSleep", "slow", "cpu:3", sh->x);
  sh->bad = rt_fail_node(g, "bad", "cpu:1", slow, "intentional");
}

static void *worker_main(void *arg) {
  worker *w = arg;
  shared *sh = w->sh;
  for (int r = 0; r < RUNS; r++) {
    int n = 1 + (int)(rf_test_rand(&w->rng) % 16);
    rf_tensor *xv = rf_test_random_tensor(&w->rng, RF_FLOAT64,
                                          rf_shape_of(1, (int64_t)n), -50, 50);
    rf_feed f = {sh->x, xv};
    /* Mix signatures: thread parity picks the fetch list; every 7th run of
     * thread 3 also fetches the failing node. */
    bool fail = w->id == 3 && r % 7 == 0;
    rf_output fetch[2] = {w->id % 2 ? sh->z : sh->y, sh->bad};
    rf_tensor *out[2] = {NULL, NULL};
    rf_status *st =
        rf_session_run(sh->s, &f, 1, fetch, fail ? 2 : 1, NULL, 0, out);
    if (fail) {
      bool good = rf_status_code(st) == RF_INTERNAL &&
                  strstr(rf_status_message(st),
                         "node 'bad' (TestFail) on "
                         "cpu:1: intentional");
      w->errors += good;
      w->wrong += !good;
      rf_status_free(st);
    } else if (st) {
      w->wrong++;
      rf_status_free(st);
    } else {
      bool good = rf_tensor_num_elements(out[0]) == n;
      for (int i = 0; good && i < n; i++) {
        double x = rf_tensor_get(xv, i), y = x;
        for (int k = 0; k < 12; k++) y += 1;
        double want = w->id % 2 ? y + x : y;
        good = rf_tensor_get(out[0], i) == want;
      }
      w->ok += good;
      w->wrong += !good;
      rf_tensor_release(out[0]);
    }
    rf_tensor_release(xv);
  }
  return NULL;
}

static void run_workers(shared *sh, worker *w) {
  pthread_t th[THREADS];
  uint64_t seed = rf_test_seed();
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){sh, i, seed + (uint64_t)i * 7919, 0, 0, 0};
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
}

static void test_threads_get_their_own_results(void **state) {
  rt_register();
  for (int threads = 1; threads <= 3; threads += 2) {
    rf_graph *g = rf_graph_new();
    shared sh = {0};
    build(&sh, g);
    sh.s = rt_session(g, 4, threads);
    worker w[THREADS];
    run_workers(&sh, w);
    int errors = 0;
    for (int i = 0; i < THREADS; i++) {
      assert_int_equal(w[i].wrong, 0);
      errors += w[i].errors;
      assert_int_equal(w[i].ok + w[i].errors, RUNS);
    }
    assert_int_equal(errors, (RUNS + 6) / 7);
    /* Three signatures: fetch y, fetch z, fetch y + bad. Each compiled once
     * however many threads raced to compile it. */
    assert_int_equal(HASH_COUNT(sh.s->cache), 3);
    assert_int_equal(rf__rendezvous_pending(sh.s->rendezvous), 0);
    rf_session_free(sh.s);
    rf_graph_free(g);
  }
}

/* Many distinct signatures compiled at once from several threads. */
typedef struct compiler {
  rf_session *s;
  rf_output *outs;
  int first, count;
  int wrong;
} compiler;

static void *compile_main(void *arg) {
  compiler *c = arg;
  for (int rep = 0; rep < 3; rep++) {
    for (int i = c->first; i < c->first + c->count; i++) {
      rf_tensor *out = NULL;
      rf_status *st =
          rf_session_run(c->s, NULL, 0, &c->outs[i], 1, NULL, 0, &out);
      if (st || rf_tensor_get(out, 0) != i + 1) c->wrong++;
      rf_status_free(st);
      rf_tensor_release(out);
    }
  }
  return NULL;
}

static void test_concurrent_compiles(void **state) {
  rt_register();
  enum { K = 24 };
  rf_graph *g = rf_graph_new();
  rf_output outs[K];
  rf_output y = rt_const_node(g, "c", NULL, 0, rf_shape_scalar());
  for (int i = 0; i < K; i++) {
    char dev[16];
    snprintf(dev, sizeof dev, "cpu:%d", i % 3);
    y = outs[i] = rt_unary_node(g, "TestAddOne", NULL, dev, y);
  }
  rf_session *s = rt_session(g, 3, 2);
  pthread_t th[THREADS];
  compiler c[THREADS];
  for (int i = 0; i < THREADS; i++) {
    /* Overlapping ranges: several threads race on the same signatures. */
    c[i] = (compiler){s, outs, (i * K / THREADS) / 2, K / 2, 0};
    pthread_create(&th[i], NULL, compile_main, &c[i]);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(c[i].wrong, 0);
  }
  /* Ranges [0,12) [3,15) [6,18) [9,21): 21 signatures, one entry each. */
  assert_int_equal(HASH_COUNT(s->cache), 21);
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_get_their_own_results),
      cmocka_unit_test(test_concurrent_compiles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
