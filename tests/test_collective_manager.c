/* tests/test_collective_manager.c - the collective manager and the
 * shared-memory backend, below the graph: participants join directly. Checks
 * every collective, reduction and dtype against float64/integer references for
 * 1..8 devices and element counts 0, 1, odd and large; agreement errors; the
 * timeout naming who arrived; cancellation; late participants. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/collective.h"
#include "core/status.h"
#include "coll_result.h"
#include "testutil.h"

#define MAXDEV 8

/* What a participant's done delivered (tests/coll_result.h). */
typedef rf_test_coll_result result;

static rf__device devs[MAXDEV];

static void setup_devices(void) {
  for (int i = 0; i < MAXDEV; i++) {
    memset(&devs[i], 0, sizeof devs[i]);
    devs[i].index = i;
    devs[i].name.type = RF_DEVICE_CPU;
    devs[i].name.index = i;
    devs[i].name.task = -1;
    snprintf(devs[i].canonical, sizeof devs[i].canonical, "cpu:%d", i);
    devs[i].allocator = rf_default_allocator();
  }
}

static rf__coll_participant part(rf__collective_kind kind, rf_reduction red,
                                 rf_dtype dt, int n, int dev, rf_tensor *in,
                                 rf_shape shape, result *r) {
  rf__coll_participant p = {.kind = kind,
                            .reduction = red,
                            .dtype = dt,
                            .num_devices = n,
                            .device = &devs[dev],
                            .node = "node",
                            .input = in,
                            .shape = shape,
                            .done = rf_test_coll_done,
                            .arg = r};
  return p;
}

static double reduce_ref(rf_reduction red, const double *v, int n,
                         rf_dtype dt) {
  double a = v[0];
  for (int i = 1; i < n; i++) {
    switch (red) {
      case RF_REDUCE_SUM:
      case RF_REDUCE_AVG: a += v[i]; break;
      case RF_REDUCE_PROD: a *= v[i]; break;
      case RF_REDUCE_MIN: a = v[i] < a ? v[i] : a; break;
      case RF_REDUCE_MAX: a = v[i] > a ? v[i] : a; break;
      default: break;
    }
  }
  if (red == RF_REDUCE_AVG) a = rf_dtype_is_integer(dt) ? trunc(a / n) : a / n;
  return a;
}

static const rf_dtype dtypes[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                                  RF_FLOAT64, RF_INT8,     RF_UINT8,
                                  RF_INT32,   RF_INT64};

/* Values that keep integer sums/products in range for every dtype. */
static rf_tensor *inputs_for(uint64_t *rng, rf_dtype dt, rf_shape s,
                             rf_reduction red) {
  double lo = red == RF_REDUCE_PROD ? 1 : 0,
         hi = red == RF_REDUCE_PROD ? 3 : 10;
  if (rf_dtype_is_float(dt) && red != RF_REDUCE_PROD) lo = -4, hi = 4;
  if (rf_dtype_is_float(dt) && red == RF_REDUCE_PROD) lo = 0.5, hi = 1.5;
  return rf_test_random_tensor(rng, dt, s, lo, hi);
}

static void check_reducing(rf__collective_kind kind, rf_reduction red,
                           rf_dtype dt, int n, int64_t count, uint64_t *rng) {
  rf__collective_manager *m;
  assert_ok(rf__collective_manager_new(NULL, &m));
  rf_shape s = rf_shape_of(1, count * (kind == RF_COLL_REDUCE_SCATTER ? n : 1));
  rf_tensor *in[MAXDEV];
  result res[MAXDEV];
  memset(res, 0, sizeof res);
  int root = (int)(rf_test_rand(rng) % (uint64_t)n);
  for (int i = 0; i < n; i++) in[i] = inputs_for(rng, dt, s, red);
  for (int i = 0; i < n; i++) {
    rf__coll_participant p = part(kind, red, dt, n, i, in[i], s, &res[i]);
    p.is_root = i == root;
    assert_ok(rf__collective_join(m, "k", 7, 0, &p));
  }
  int64_t total = rf_shape_num_elements(&s);
  double v[MAXDEV];
  for (int i = 0; i < n; i++) {
    assert_int_equal(atomic_load(&res[i].fired), 1);
    assert_ok(res[i].st);
    bool gets = kind != RF_COLL_REDUCE || i == root;
    if (!gets) {
      assert_null(res[i].out);
      continue;
    }
    int64_t lo = kind == RF_COLL_REDUCE_SCATTER ? i * count : 0;
    int64_t len = kind == RF_COLL_REDUCE_SCATTER ? count : total;
    assert_int_equal(rf_tensor_num_elements(res[i].out), len);
    for (int64_t e = 0; e < len; e++) {
      for (int k = 0; k < n; k++) v[k] = rf_tensor_get(in[k], lo + e);
      double want = reduce_ref(red, v, n, dt);
      double got = rf_tensor_get(res[i].out, e);
      double tol = rf_test_tolerance(dt) * 4 * n;
      if (!rf_dtype_is_float(dt)) {
        /* integer results wrap like the hardware: compare modulo 2^bits */
        rf_tensor *w;
        rf_shape one = rf_shape_of(1, (int64_t)1);
        assert_ok(rf_tensor_new(dt, &one, NULL, &w));
        rf_tensor_set(w, 0, want);
        if (fabs(want) < 1e15 && red != RF_REDUCE_PROD && red != RF_REDUCE_SUM)
          want = rf_tensor_get(w, 0);
        rf_tensor_release(w);
        if (red == RF_REDUCE_SUM || red == RF_REDUCE_PROD) {
          int bits = (int)rf_dtype_size(dt) * 8;
          if (bits < 64) {
            double mod = ldexp(1.0, bits), wm = fmod(want, mod),
                   gm = fmod(got, mod);
            if (wm < 0) wm += mod;
            if (gm < 0) gm += mod;
            want = wm, got = gm;
          }
        }
      }
      if (fabs(got - want) > tol * (1 + fabs(want)))
        fail_msg("%s %s %s n=%d count=%lld rank %d elem %lld: got %g want %g",
                 rf__collective_kind_name(kind), rf__reduction_name(red),
                 rf_dtype_name(dt), n, (long long)count, i, (long long)e, got,
                 want);
    }
  }
  /* all-reduce: every device shares one buffer, so results are identical */
  if (kind == RF_COLL_ALL_REDUCE)
    for (int i = 1; i < n; i++) assert_ptr_equal(res[i].out, res[0].out);
  for (int i = 0; i < n; i++) {
    rf_tensor_release(res[i].out);
    rf_tensor_release(in[i]);
  }
  rf__collective_manager_free(m);
}

static void test_reductions_all_dtypes(void **state) {
  uint64_t rng = rf_test_seed();
  const int64_t counts[] = {0, 1, 7, 40001};
  for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
    for (int red = 0; red < (int)RF__REDUCE_COUNT; red++)
      for (int n = 1; n <= MAXDEV; n += (n < 3 ? 1 : 5 - (n == 3)))
        for (size_t c = 0; c < 4; c++) {
          if (counts[c] > 100 && (d % 3 || n != 4))
            continue; /* keep it quick */
          check_reducing(RF_COLL_ALL_REDUCE, (rf_reduction)red, dtypes[d], n,
                         counts[c], &rng);
          check_reducing(RF_COLL_REDUCE, (rf_reduction)red, dtypes[d], n,
                         counts[c], &rng);
          check_reducing(RF_COLL_REDUCE_SCATTER, (rf_reduction)red, dtypes[d],
                         n, counts[c], &rng);
        }
}

static void test_broadcast_and_all_gather(void **state) {
  uint64_t rng = rf_test_seed() + 1;
  for (int n = 1; n <= MAXDEV; n++) {
    rf__collective_manager *m;
    assert_ok(rf__collective_manager_new(NULL, &m));
    rf_shape s = rf_shape_of(2, (int64_t)3, (int64_t)(n + 2));
    int root = (int)(rf_test_rand(&rng) % (uint64_t)n);
    rf_tensor *src = rf_test_random_tensor(&rng, RF_FLOAT32, s, -1, 1);
    rf_tensor *gin[MAXDEV];
    result b[MAXDEV], g[MAXDEV];
    memset(b, 0, sizeof b);
    memset(g, 0, sizeof g);
    for (int i = 0; i < n; i++) {
      rf_shape want =
          rf_shape_of(2, (int64_t)3, (int64_t)-1); /* partly known */
      rf__coll_participant p =
          part(RF_COLL_BROADCAST, RF_REDUCE_SUM, RF_FLOAT32, n, i,
               i == root ? src : NULL, i == root ? s : want, &b[i]);
      p.is_root = i == root;
      assert_ok(rf__collective_join(m, "bc", 1, 0, &p));
      gin[i] = rf_test_random_tensor(&rng, RF_INT64, s, -100, 100);
      rf__coll_participant q = part(RF_COLL_ALL_GATHER, RF_REDUCE_SUM, RF_INT64,
                                    n, i, gin[i], s, &g[i]);
      assert_ok(rf__collective_join(m, "ag", 1, 0, &q));
    }
    for (int i = 0; i < n; i++) {
      assert_ok(b[i].st);
      assert_ok(g[i].st);
      if (i == root)
        assert_null(b[i].out);
      else
        assert_ptr_equal(b[i].out, src); /* zero copy */
      assert_int_equal(rf_tensor_shape(g[i].out).dims[0], 3 * n);
      for (int k = 0; k < n; k++)
        for (int64_t e = 0; e < rf_tensor_num_elements(gin[k]); e++)
          assert_true(
              rf_tensor_get(g[i].out, k * rf_tensor_num_elements(gin[k]) + e) ==
              rf_tensor_get(gin[k], e));
    }
    for (int i = 0; i < n; i++) {
      rf_tensor_release(b[i].out);
      rf_tensor_release(g[i].out);
      rf_tensor_release(gin[i]);
    }
    rf_tensor_release(src);
    rf__collective_manager_free(m);
  }
}

/* Each field that can differ is named in every participant's error. */
static void test_disagreement_names_field(void **state) {
  struct {
    const char *field;
    int which; /* 0 dtype, 1 shape, 2 reduction, 3 kind, 4 same device */
  } cases[] = {{"dtype", 0},
               {"shape", 1},
               {"reduction", 2},
               {"the collective", 3},
               {"joined twice", 4}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    rf__collective_manager *m;
    assert_ok(rf__collective_manager_new(NULL, &m));
    rf_shape s = rf_shape_of(1, (int64_t)4), s2 = rf_shape_of(1, (int64_t)5);
    rf_tensor *a, *b;
    assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, &a));
    int w = cases[c].which;
    rf_dtype dt2 = w == 0 ? RF_FLOAT64 : RF_FLOAT32;
    assert_ok(rf_tensor_new(dt2, w == 1 ? &s2 : &s, NULL, &b));
    result r[2];
    memset(r, 0, sizeof r);
    rf__coll_participant p0 =
        part(RF_COLL_ALL_REDUCE, RF_REDUCE_SUM, RF_FLOAT32, 2, 0, a, s, &r[0]);
    rf__coll_participant p1 =
        part(w == 3 ? RF_COLL_REDUCE_SCATTER : RF_COLL_ALL_REDUCE,
             w == 2 ? RF_REDUCE_MAX : RF_REDUCE_SUM, dt2, 2, w == 4 ? 0 : 1, b,
             w == 1 ? s2 : s, &r[1]);
    assert_ok(rf__collective_join(m, "mix", 3, 0, &p0));
    assert_ok(rf__collective_join(m, "mix", 3, 0, &p1));
    for (int i = 0; i < 2; i++) {
      assert_int_equal(atomic_load(&r[i].fired), 1);
      assert_null(r[i].out);
      assert_status(r[i].st, RF_INVALID_ARGUMENT, cases[c].field);
    }
    rf_tensor_release(a);
    rf_tensor_release(b);
    rf__collective_manager_free(m);
  }
}

static void test_num_devices_mismatch_fails_at_once(void **state) {
  rf__collective_manager *m;
  assert_ok(rf__collective_manager_new(NULL, &m));
  rf_shape s = rf_shape_of(1, (int64_t)2);
  rf_tensor *a;
  assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, &a));
  result r[3];
  memset(r, 0, sizeof r);
  rf__coll_participant p0 =
      part(RF_COLL_ALL_REDUCE, RF_REDUCE_SUM, RF_FLOAT32, 3, 0, a, s, &r[0]);
  rf__coll_participant p1 =
      part(RF_COLL_ALL_REDUCE, RF_REDUCE_SUM, RF_FLOAT32, 2, 1, a, s, &r[1]);
  rf__coll_participant p2 =
      part(RF_COLL_ALL_REDUCE, RF_REDUCE_SUM, RF_FLOAT32, 3, 2, a, s, &r[2]);
  assert_ok(rf__collective_join(m, "nd", 1, 0, &p0));
  assert_ok(rf__collective_join(m, "nd", 1, 0, &p1));
  assert_status(r[0].st, RF_INVALID_ARGUMENT, "num_devices");
  assert_status(r[1].st, RF_INVALID_ARGUMENT, "num_devices");
  /* a late participant of the failed group fails at once, with the cause */
  assert_ok(rf__collective_join(m, "nd", 1, 0, &p2));
  assert_int_equal(atomic_load(&r[2].fired), 1);
  assert_status(r[2].st, RF_INVALID_ARGUMENT, "num_devices");
  rf__collective_end_step(m, 1);
  rf_tensor_release(a);
  rf__collective_manager_free(m);
}

static void test_timeout_names_arrived_devices(void **state) {
  rf__collective_manager *m;
  assert_ok(rf__collective_manager_new(NULL, &m));
  rf_shape s = rf_shape_of(1, (int64_t)2);
  rf_tensor *a;
  assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, &a));
  result r[3];
  memset(r, 0, sizeof r);
  for (int i = 0; i < 2; i++) {
    rf__coll_participant p = part(RF_COLL_ALL_REDUCE, RF_REDUCE_SUM, RF_FLOAT32,
                                  3, i * 2, a, s, &r[i]);
    p.group_devices = "cpu:0,cpu:1,cpu:2";
    assert_ok(rf__collective_join(m, "slow", 9, 50, &p));
  }
  for (int spin = 0; spin < 400 && atomic_load(&r[1].fired) == 0; spin++) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  for (int i = 0; i < 2; i++) {
    assert_int_equal(atomic_load(&r[i].fired), 1);
    assert_non_null(r[i].st);
    assert_non_null(strstr(rf_status_message(r[i].st), "cpu:0"));
    assert_non_null(strstr(rf_status_message(r[i].st), "cpu:2"));
    assert_non_null(strstr(rf_status_message(r[i].st), "after 50 ms"));
    assert_status(r[i].st, RF_DEADLINE_EXCEEDED,
                  "waiting for cpu:1 (1 of 3 participants)");
  }
  /* the straggler fails immediately rather than waiting another timeout */
  rf__coll_participant late =
      part(RF_COLL_ALL_REDUCE, RF_REDUCE_SUM, RF_FLOAT32, 3, 1, a, s, &r[2]);
  assert_ok(rf__collective_join(m, "slow", 9, 50, &late));
  assert_int_equal(atomic_load(&r[2].fired), 1);
  assert_status(r[2].st, RF_DEADLINE_EXCEEDED, "timed out");
  rf__collective_end_step(m, 9);
  rf_tensor_release(a);
  rf__collective_manager_free(m);
}

/* The watchdog sleeps until the earliest deadline it knows (or, idle, for
 * the last timeout used); a participant with an earlier deadline must still
 * wake it: a 50 ms timeout fires within ~50 ms, not after the 60 s one. */
static void test_earlier_deadline_wakes_watchdog(void **state) {
  rf__collective_manager *m;
  assert_ok(rf__collective_manager_new(NULL, &m));
  rf_shape s = rf_shape_of(1, (int64_t)2);
  rf_tensor *a;
  assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, &a));
  result r[3];
  memset(r, 0, sizeof r);
  /* a completed group with a 60 s timeout, then one pending with it */
  rf__coll_participant done1 =
      part(RF_COLL_ALL_REDUCE, RF_REDUCE_SUM, RF_FLOAT32, 1, 0, a, s, &r[0]);
  assert_ok(rf__collective_join(m, "one", 1, 60000, &done1));
  assert_int_equal(atomic_load(&r[0].fired), 1);
  assert_null(r[0].st);
  rf_tensor_release(r[0].out);
  struct timespec settle = {0, 20000000}; /* let the watchdog go to sleep */
  nanosleep(&settle, NULL);
  rf__coll_participant slow =
      part(RF_COLL_ALL_REDUCE, RF_REDUCE_SUM, RF_FLOAT32, 2, 0, a, s, &r[1]);
  assert_ok(rf__collective_join(m, "long", 2, 60000, &slow));
  rf__coll_participant fast =
      part(RF_COLL_ALL_REDUCE, RF_REDUCE_SUM, RF_FLOAT32, 2, 1, a, s, &r[2]);
  assert_ok(rf__collective_join(m, "short", 3, 50, &fast));
  for (int spin = 0; spin < 400 && atomic_load(&r[2].fired) == 0; spin++) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(atomic_load(&r[2].fired), 1);
  assert_status(r[2].st, RF_DEADLINE_EXCEEDED, "'short'");
  assert_int_equal(atomic_load(&r[1].fired), 0); /* its 60 s are not over */
  rf__collective_manager_free(m);
  assert_int_equal(atomic_load(&r[1].fired), 1);
  assert_status(r[1].st, RF_CANCELLED, NULL);
  rf_tensor_release(a);
}

static void test_cancel_releases_pending(void **state) {
  rf__collective_manager *m;
  assert_ok(rf__collective_manager_new(NULL, &m));
  rf_shape s = rf_shape_of(1, (int64_t)2);
  rf_tensor *a;
  assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, &a));
  result r[3];
  memset(r, 0, sizeof r);
  rf__coll_participant p =
      part(RF_COLL_ALL_REDUCE, RF_REDUCE_SUM, RF_FLOAT32, 2, 0, a, s, &r[0]);
  assert_ok(rf__collective_join(m, "c", 4, 0, &p));
  /* another step's participant with the same name is not touched */
  rf__coll_participant other =
      part(RF_COLL_ALL_REDUCE, RF_REDUCE_SUM, RF_FLOAT32, 2, 0, a, s, &r[2]);
  assert_ok(rf__collective_join(m, "c", 5, 0, &other));
  rf_status *why = rf_status_new(RF_ABORTED, "node 'x' failed on cpu:1");
  rf__collective_cancel_step(m, 4, why);
  rf_status_free(why);
  assert_int_equal(atomic_load(&r[0].fired), 1);
  assert_status(r[0].st, RF_ABORTED, "node 'x' failed");
  assert_int_equal(atomic_load(&r[2].fired), 0);
  rf__coll_participant p1 =
      part(RF_COLL_ALL_REDUCE, RF_REDUCE_SUM, RF_FLOAT32, 2, 1, a, s, &r[1]);
  assert_ok(rf__collective_join(m, "c", 4, 0, &p1)); /* after cancel: at once */
  assert_status(r[1].st, RF_ABORTED, "node 'x' failed");
  rf__collective_end_step(m, 4);
  rf__collective_manager_free(m); /* fails step 5's pending participant */
  assert_int_equal(atomic_load(&r[2].fired), 1);
  assert_status(r[2].st, RF_CANCELLED, "closing");
  rf_tensor_release(a);
}

/* Concurrent steps with one shared name never mix: each step sums its own
 * inputs, joined from 4 threads at once. */
typedef struct thread_arg {
  rf__collective_manager *m;
  int dev;
  rf_tensor *in[16];
  result res[16];
} thread_arg;

static void *join_steps(void *arg) {
  thread_arg *t = arg;
  for (int step = 0; step < 16; step++) {
    rf_shape s = rf_tensor_shape(t->in[step]);
    rf__coll_participant p = part(RF_COLL_ALL_REDUCE, RF_REDUCE_SUM, RF_INT64,
                                  4, t->dev, t->in[step], s, &t->res[step]);
    rf_status *st = rf__collective_join(t->m, "shared", step, 10000, &p);
    if (st) abort();
  }
  return NULL;
}

static void test_concurrent_steps_do_not_mix(void **state) {
  rf__collective_manager *m;
  assert_ok(rf__collective_manager_new(NULL, &m));
  thread_arg ta[4];
  pthread_t th[4];
  memset(ta, 0, sizeof ta);
  rf_shape s = rf_shape_of(1, (int64_t)5);
  for (int d = 0; d < 4; d++) {
    ta[d].m = m;
    ta[d].dev = d;
    for (int step = 0; step < 16; step++) {
      assert_ok(rf_tensor_new(RF_INT64, &s, NULL, &ta[d].in[step]));
      for (int e = 0; e < 5; e++)
        rf_tensor_set(ta[d].in[step], e, step * 100 + d);
    }
  }
  for (int d = 0; d < 4; d++) pthread_create(&th[d], NULL, join_steps, &ta[d]);
  for (int d = 0; d < 4; d++) pthread_join(th[d], NULL);
  for (int d = 0; d < 4; d++)
    for (int step = 0; step < 16; step++) {
      result *r = &ta[d].res[step];
      assert_int_equal(atomic_load(&r->fired), 1);
      assert_ok(r->st);
      assert_true(rf_tensor_get(r->out, 4) == step * 400 + 6);
      rf_tensor_release(r->out);
      rf_tensor_release(ta[d].in[step]);
    }
  rf__collective_manager_free(m);
}

int main(void) {
  setup_devices();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reductions_all_dtypes),
      cmocka_unit_test(test_broadcast_and_all_gather),
      cmocka_unit_test(test_disagreement_names_field),
      cmocka_unit_test(test_num_devices_mismatch_fails_at_once),
      cmocka_unit_test(test_timeout_names_arrived_devices),
      cmocka_unit_test(test_earlier_deadline_wakes_watchdog),
      cmocka_unit_test(test_cancel_releases_pending),
      cmocka_unit_test(test_concurrent_steps_do_not_mix),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
