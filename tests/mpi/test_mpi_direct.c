/* tests/mpi/test_mpi_direct.c - the direct path (docs/MULTIPROCESS.md,
 * "The direct path") under load, under mpirun: two devices a task, many
 * steps of several small all-reduces and an all-gather (which the threads
 * of the executor run themselves) beside large all-reduces (which the
 * communication thread runs, with libnbc's ring chosen around its
 * MPI_Iallreduce). Every process must issue the same MPI calls, with the
 * same algorithm, in the same order on each communicator: a small
 * all-reduce issued in one process while its communication thread had the
 * ring chosen for a large one took the ring there and the default
 * algorithm elsewhere (MPI_ERR_TRUNCATE, a hang or wrong sums). Every step
 * is checked against integer sums computed here. */
#include <stdlib.h>
#include <string.h>

#include "comm/mpi/op.h"
#include "mpi_testutil.h"
#include "ringflow/collectives.h"

enum {
  NSMALL = 4,  /* small all-reduces ("s0".."s3"), 8 elements */
  NBIG = 2,    /* large all-reduces ("b0", "b1") */
  SMALL = 8,   /* float64 elements */
  BIG = 40000, /* float64 elements: 320 KB, libnbc's ring (>= 256 KiB) */
  STEPS = 400,
  FETCHES = NSMALL + NBIG + 1
};

typedef struct stress_graph {
  rf_graph *g;
  rf_output x[128], y[128]; /* small, big inputs of device i */
  rf_output s[NSMALL][128]; /* the small all-reduces' outputs */
  rf_output b[NBIG][128];   /* the large ones' */
  rf_output ag[128];        /* the all-gather's */
} stress_graph;

static void build(stress_graph *m) {
  assert_true(2 * NT <= 128);
  m->g = rf_graph_new();
  for (int i = 0; i < 2 * NT; i++) {
    char dev[MT_DEVICE_LEN];
    mt_device(i / 2, i % 2, dev, sizeof dev);
    assert_ok(rf_graph_push_device(m->g, dev));
    m->x[i] = rf_placeholder(m->g, NULL, RF_FLOAT64, rf_shape_of(1, SMALL));
    m->y[i] = rf_placeholder(m->g, NULL, RF_FLOAT64, rf_shape_of(1, BIG));
    rf_graph_pop_device(m->g);
  }
  for (int c = 0; c < NSMALL; c++) {
    char name[8];
    snprintf(name, sizeof name, "s%d", c);
    rf_all_reduce_n(m->g, name, m->x, 2 * NT, RF_REDUCE_SUM, m->s[c]);
  }
  for (int c = 0; c < NBIG; c++) {
    char name[8];
    snprintf(name, sizeof name, "b%d", c);
    rf_all_reduce_n(m->g, name, m->y, 2 * NT, RF_REDUCE_SUM, m->b[c]);
  }
  rf_all_gather_n(m->g, "ag", m->x, 2 * NT, m->ag);
  assert_graph_ok(m->g);
}

/* Device i's element e at step k: small integers, exact float64 sums. */
static double value(int i, int64_t e, int k, unsigned seed) {
  return (double)((seed + 7u * (unsigned)i + 13u * (unsigned)e +
                   31u * (unsigned)k) %
                  1000u);
}

static double sum(int64_t e, int k, unsigned seed) {
  double want = 0;
  for (int i = 0; i < 2 * NT; i++) want += value(i, e, k, seed);
  return want;
}

static rf_status *step(stress_graph *m, rf_session *s, int k) {
  unsigned seed = (unsigned)rf_test_seed();
  rf_tensor *in[4], *out[2 * FETCHES] = {0};
  rf_feed feeds[4];
  for (int d = 0; d < 2; d++) {
    int i = 2 * T + d;
    for (int big = 0; big < 2; big++) {
      int64_t n = big ? BIG : SMALL;
      rf_shape sh = rf_shape_of(1, n);
      rf_tensor **t = &in[2 * d + big];
      assert_ok(rf_tensor_new(RF_FLOAT64, &sh, NULL, t));
      double *p = rf_tensor_mutable_data(*t);
      for (int64_t e = 0; e < n; e++) p[e] = value(i, e, k, seed);
      feeds[2 * d + big] = (rf_feed){big ? m->y[i] : m->x[i], *t};
    }
  }
  rf_output fetch[2 * FETCHES];
  int f = 0;
  for (int d = 0; d < 2; d++) {
    int i = 2 * T + d;
    for (int c = 0; c < NSMALL; c++) fetch[f++] = m->s[c][i];
    for (int c = 0; c < NBIG; c++) fetch[f++] = m->b[c][i];
    fetch[f++] = m->ag[i];
  }
  rf_status *st = rf_session_run(s, feeds, 4, fetch, f, NULL, 0, out);
  for (int o = 0; !st && o < f; o++) {
    int c = o % FETCHES;
    const double *y = rf_tensor_data(out[o]);
    if (c < NSMALL + NBIG) {
      int64_t n = c < NSMALL ? SMALL : BIG;
      assert_int_equal(rf_tensor_num_elements(out[o]), n);
      /* every small element, a stride of the large ones */
      for (int64_t e = 0; e < n; e += c < NSMALL ? 1 : 997)
        if (y[e] != sum(e, k, seed))
          fail_msg("step %d, fetch %d, element %lld: %g, want %g", k, o,
                   (long long)e, y[e], sum(e, k, seed));
    } else {
      assert_int_equal(rf_tensor_num_elements(out[o]), SMALL * 2 * NT);
      for (int i = 0; i < 2 * NT; i++)
        for (int64_t e = 0; e < SMALL; e++)
          assert_true(y[i * SMALL + e] == value(i, e, k, seed));
    }
  }
  for (int o = 0; o < f; o++) rf_tensor_release(out[o]);
  for (int t = 0; t < 4; t++) rf_tensor_release(in[t]);
  return st;
}

/* The direct path on: many steps of small collectives beside large ones,
 * fused into buckets as sessions do by default (bucket_bytes < 0) or each
 * on its own (0). */
static void stress(int64_t bucket_bytes, int64_t min_direct) {
  rf__mpi_direct_force(1);
  stress_graph m;
  build(&m);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 2;
  o.collective_timeout_ms = 20000;
  if (bucket_bytes >= 0) o.collective_bucket_bytes = bucket_bytes;
  rf_session *s = NULL;
  assert_ok(rf_session_new(m.g, &o, &s));
  int64_t taken = rf__mpi_direct_taken();
  for (int k = 0; k < STEPS; k++) {
    rf_status *st = step(&m, s, k);
    if (st) fail_msg("task %d, step %d: %s", T, k, rf_status_message(st));
  }
  /* the small ones ran on the direct path (MPI_THREAD_MULTIPLE: mpirun),
   * every step after the first (agreed through task 0) */
  assert_true(rf__mpi_direct_taken() - taken >= min_direct);
  rf_session_free(s);
  rf_graph_free(m.g);
  rf__mpi_direct_force(-1);
}

static void test_direct_beside_large_all_reduces(void **state) {
  stress(-1, STEPS - 1); /* the small all-reduces fused: one a step */
}

static void test_direct_beside_large_all_reduces_unfused(void **state) {
  stress(0, (STEPS - 1) * (NSMALL + 1));
}

int main(void) {
  if (mt_init()) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_direct_beside_large_all_reduces),
      cmocka_unit_test(test_direct_beside_large_all_reduces_unfused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
