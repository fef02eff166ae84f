/* tests/mpi/test_mpi_agreed_blocking.c - collectives whose data move by
 * blocking calls (MPI's blocking collectives, ringflow's ring: the "data
 * thread" algorithms of docs/MULTIPROCESS.md, "Which algorithm") agreed
 * once and run many times, under mpirun. Each test runs with the algorithm
 * forced to MPI's blocking calls and to the ring (an internal override,
 * rf__mpi_algorithm_force, the same in every process), and with the
 * table's choice at sizes that take them (a reduce-scatter of 1 MiB):
 *  - after the first step a reduce and a reduce-scatter send no control
 *    message (rf_debug_control_messages), give the float64 reference and
 *    ran with the forced algorithm;
 *  - with the table's choice, a shape changed in every task that moves
 *    the reduce-scatter from MPI's nonblocking call to the ring and back
 *    goes through task 0 once per change and is then kept;
 *  - two reduces of different names reached in opposite orders: task 0
 *    reaches "X" first (its input of "Y" waits for X's result), every
 *    other task "Y" first (its input of "X" comes through a chain of
 *    matrix products): both complete, steady (no message), right;
 *  - one task changes its shape in a late step: every process fails at
 *    once naming the shape, both values and the task; the next steps work
 *    and are steady again;
 *  - one task skips a late step: the others fail within the timeout
 *    naming it; the next steps work. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/mpi/op.h"
#include "mpi_testutil.h"
#include "ringflow/collectives.h"
#include "ringflow/debug.h"

#define assert_contains(msg, sub) \
  if (!strstr((msg), (sub))) fail_msg("'%s' is not in: %s", (sub), (msg))

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Task t's value at element e of job step k: small integers, exact sums. */
static double value(int t, int64_t e, int k, unsigned seed) {
  return (double)((seed + 7u * (unsigned)t + 13u * (unsigned)e +
                   31u * (unsigned)k) %
                  1000u);
}

/* Control messages of a step of `ncoll` collectives through task 0. */
static int64_t round_trip(int ncoll) {
  return T == 0 ? ncoll * (1 + NT) : ncoll;
}

/* ---- a reduce to the last task ("rd") and a reduce-scatter ("rs") of
 * x[t] (float64, (rows, 2), rows unknown), one device a task ---- */

typedef struct rd_graph {
  rf_graph *g;
  rf_output x[64], rs[64], rd;
} rd_graph;

static void build_rd(rd_graph *m) {
  assert_true(NT <= 64);
  m->g = rf_graph_new();
  for (int t = 0; t < NT; t++) {
    char dev[MT_DEVICE_LEN];
    mt_device(t, 0, dev, sizeof dev);
    assert_ok(rf_graph_push_device(m->g, dev));
    m->x[t] = rf_placeholder(m->g, NULL, RF_FLOAT64, rf_shape_of(2, -1, 2));
    rf_graph_pop_device(m->g);
  }
  char last[MT_DEVICE_LEN];
  mt_device(NT - 1, 0, last, sizeof last);
  assert_ok(rf_graph_push_device(m->g, last));
  m->rd = rf_reduce(m->g, "rd", m->x, NT, RF_REDUCE_SUM);
  rf_graph_pop_device(m->g);
  rf_reduce_scatter_n(m->g, "rs", m->x, NT, RF_REDUCE_SUM, m->rs);
  assert_graph_ok(m->g);
}

/* Job step k with `rows` rows (a multiple of NT) fed here; checks both
 * results on success. */
static rf_status *rd_step(rd_graph *m, rf_session *s, int k, int64_t rows) {
  unsigned seed = (unsigned)rf_test_seed();
  rf_shape sh = rf_shape_of(2, rows, 2);
  rf_tensor *in, *out[2] = {0};
  assert_ok(rf_tensor_new(RF_FLOAT64, &sh, NULL, &in));
  const int64_t n = rows * 2;
  double *p = rf_tensor_mutable_data(in);
  for (int64_t e = 0; e < n; e++) p[e] = value(T, e, k, seed);
  rf_feed feed = {m->x[T], in};
  rf_output fetch[2] = {m->rs[T], m->rd};
  bool root = T == NT - 1;
  rf_status *st = rf_session_run(s, &feed, 1, fetch, root ? 2 : 1,
                                 root ? NULL : &m->rd.node, root ? 0 : 1, out);
  if (!st) {
    const double *r = rf_tensor_data(out[0]);
    int64_t share = n / NT;
    assert_int_equal(rf_tensor_num_elements(out[0]), share);
    for (int64_t e = 0; e < share; e++) {
      double want = 0;
      for (int t = 0; t < NT; t++) want += value(t, T * share + e, k, seed);
      assert_true(r[e] == want);
    }
    if (root) {
      const double *y = rf_tensor_data(out[1]);
      for (int64_t e = 0; e < n; e++) {
        double want = 0;
        for (int t = 0; t < NT; t++) want += value(t, e, k, seed);
        assert_true(y[e] == want);
      }
    }
  }
  for (int f = 0; f < 2; f++) rf_tensor_release(out[f]);
  rf_tensor_release(in);
  return st;
}

static int64_t rd_counted(rd_graph *m, rf_session *s, int k, int64_t rows) {
  int64_t before = rf_debug_control_messages();
  assert_ok(rd_step(m, s, k, rows));
  return rf_debug_control_messages() - before;
}

/* The algorithms a test runs with: forced blocking, forced ring, and the
 * table's choice at a size that takes the data thread. The table's choice
 * runs in a crowded job (mt_crowd): an uncrowded one on one machine takes
 * shared memory, which runs as MPI's nonblocking calls run. */
static const rf__mpi_algorithm algos[] = {RF_MPI_BLOCKING, RF_MPI_RING,
                                          RF_MPI_AUTO};

/* rows for algorithm a: small when forced; 1 MiB of float64 (the
 * reduce-scatter's ring, the reduce's MPI_Reduce or ring) for the table. */
static int64_t rows_for(rf__mpi_algorithm a) {
  return a == RF_MPI_AUTO ? 65536 : (int64_t)NT * 3;
}

static void test_steady_state_sends_no_message(void **state) {
  for (size_t i = 0; i < sizeof algos / sizeof *algos; i++) {
    rf__mpi_algorithm_force(algos[i]);
    mt_crowd(algos[i] == RF_MPI_AUTO);
    rd_graph m;
    build_rd(&m);
    rf_session *s = mt_session(m.g, 1, 30000);
    int64_t rows = rows_for(algos[i]);
    assert_int_equal(rd_counted(&m, s, 0, rows), round_trip(2));
    int64_t ran[4];
    for (int a = RF_MPI_NBC; a <= RF_MPI_RING; a++)
      ran[a] = rf__mpi_algorithm_runs((rf__mpi_algorithm)a);
    for (int k = 1; k < 6; k++) assert_int_equal(rd_counted(&m, s, k, rows), 0);
    if (algos[i] != RF_MPI_AUTO) { /* both, every step, by the data thread */
      assert_int_equal(rf__mpi_algorithm_runs(algos[i]) - ran[algos[i]], 2 * 5);
    } else { /* the reduce-scatter's ring at least */
      assert_true(rf__mpi_algorithm_runs(RF_MPI_RING) - ran[RF_MPI_RING] >= 5);
    }
    rf_session_free(s);
    rf_graph_free(m.g);
  }
  mt_crowd(false);
  rf__mpi_algorithm_force(RF_MPI_AUTO);
}

/* The table's choice (a crowded job), a shape changed in every task: a
 * reduce-scatter of 512 KiB (MPI's nonblocking call) grows to 1 MiB (the
 * ring, on the data thread) and back, the reduce stays on the data
 * thread: each change goes through task 0 once and is then kept (the
 * ring's communicator made at that GO). */
static void test_shape_change_across_the_threshold(void **state) {
  rf__mpi_algorithm_force(RF_MPI_AUTO);
  mt_crowd(true);
  rd_graph m;
  build_rd(&m);
  rf_session *s = mt_session(m.g, 1, 30000);
  const int64_t rows[3] = {32768, 65536, 32768}; /* x 2 float64s */
  int k = 0;
  for (int z = 0; z < 3; z++) {
    int64_t ring = rf__mpi_algorithm_runs(RF_MPI_RING);
    assert_int_equal(rd_counted(&m, s, k++, rows[z]), round_trip(2));
    for (int i = 0; i < 3; i++)
      assert_int_equal(rd_counted(&m, s, k++, rows[z]), 0);
    if (rows[z] == 65536) /* the reduce-scatter's ring, every step */
      assert_true(rf__mpi_algorithm_runs(RF_MPI_RING) - ring >= 4);
  }
  rf_session_free(s);
  rf_graph_free(m.g);
  mt_crowd(false);
}

/* ---- two reduces to task 0 reached in opposite orders ---- */

enum { R = 48, CHAIN = 40 };

typedef struct xy_graph {
  rf_graph *g;
  rf_output x[64], y[64], eye[64], X, Y;
} xy_graph;

static void build_xy(xy_graph *m) {
  assert_true(NT <= 64);
  m->g = rf_graph_new();
  rf_output xin[64], yin[64];
  for (int t = 0; t < NT; t++) {
    char dev[MT_DEVICE_LEN];
    mt_device(t, 0, dev, sizeof dev);
    assert_ok(rf_graph_push_device(m->g, dev));
    m->x[t] = rf_placeholder(m->g, NULL, RF_FLOAT64, rf_shape_of(2, R, R));
    m->y[t] = rf_placeholder(m->g, NULL, RF_FLOAT64, rf_shape_of(2, R, R));
    m->eye[t] = rf_placeholder(m->g, NULL, RF_FLOAT64, rf_shape_of(2, R, R));
    xin[t] = m->x[t];
    yin[t] = m->y[t];
    if (t > 0) /* X's input comes late: products with the identity */
      for (int c = 0; c < CHAIN; c++)
        xin[t] = rf_matmul(m->g, NULL, xin[t], m->eye[t], false, false);
    rf_graph_pop_device(m->g);
  }
  char first[MT_DEVICE_LEN];
  mt_device(0, 0, first, sizeof first);
  assert_ok(rf_graph_push_device(m->g, first));
  m->X = rf_reduce(m->g, "X", xin, NT, RF_REDUCE_SUM);
  /* task 0's input of Y waits for X: y + (X - X) */
  yin[0] = rf_add(m->g, NULL, m->y[0], rf_sub(m->g, NULL, m->X, m->X));
  m->Y = rf_reduce(m->g, "Y", yin, NT, RF_REDUCE_SUM);
  rf_graph_pop_device(m->g);
  assert_graph_ok(m->g);
}

static rf_status *xy_step(xy_graph *m, rf_session *s, int k) {
  unsigned seed = (unsigned)rf_test_seed();
  rf_shape sh = rf_shape_of(2, R, R);
  rf_tensor *in[3], *out[2] = {0};
  for (int f = 0; f < 3; f++)
    assert_ok(rf_tensor_new(RF_FLOAT64, &sh, NULL, &in[f]));
  double *px = rf_tensor_mutable_data(in[0]),
         *py = rf_tensor_mutable_data(in[1]),
         *pe = rf_tensor_mutable_data(in[2]);
  for (int64_t e = 0; e < R * R; e++) {
    px[e] = value(T, e, k, seed);
    py[e] = value(T, e + 5, k, seed);
    pe[e] = e / R == e % R;
  }
  rf_feed feeds[3] = {{m->x[T], in[0]}, {m->y[T], in[1]}, {m->eye[T], in[2]}};
  rf_output fetch[2] = {m->X, m->Y};
  rf_node *targets[2] = {m->X.node, m->Y.node};
  rf_status *st = T == 0
                      ? rf_session_run(s, feeds, 2, fetch, 2, NULL, 0, out)
                      : rf_session_run(s, feeds, 3, NULL, 0, targets, 2, NULL);
  if (!st && T == 0) {
    const double *x = rf_tensor_data(out[0]), *y = rf_tensor_data(out[1]);
    for (int64_t e = 0; e < R * R; e++) {
      double wx = 0, wy = 0;
      for (int t = 0; t < NT; t++) {
        wx += value(t, e, k, seed);
        wy += value(t, e + 5, k, seed);
      }
      assert_true(x[e] == wx);
      assert_true(y[e] == wy);
    }
  }
  for (int f = 0; f < 2; f++) rf_tensor_release(out[f]);
  for (int f = 0; f < 3; f++) rf_tensor_release(in[f]);
  return st;
}

static void test_opposite_orders_complete(void **state) {
  for (int i = 0; i < 2; i++) { /* forced: blocking, ring */
    rf__mpi_algorithm_force(algos[i]);
    xy_graph m;
    build_xy(&m);
    /* Blocking calls queued behind each other in opposite orders would
     * wait until this timeout and fail. */
    rf_session *s = mt_session(m.g, 1, 20000);
    assert_ok(xy_step(&m, s, 0)); /* agreed through task 0 */
    int64_t msgs = rf_debug_control_messages();
    for (int k = 1; k < 8; k++) assert_ok(xy_step(&m, s, k));
    assert_int_equal(rf_debug_control_messages() - msgs, 0);
    rf_session_free(s);
    rf_graph_free(m.g);
  }
  rf__mpi_algorithm_force(RF_MPI_AUTO);
}

/* ---- faults ---- */

static void test_late_change_in_one_task_is_named(void **state) {
  for (size_t i = 0; i < sizeof algos / sizeof *algos; i++) {
    rf__mpi_algorithm_force(algos[i]);
    mt_crowd(algos[i] == RF_MPI_AUTO);
    rd_graph m;
    build_rd(&m);
    rf_session *s = mt_session(m.g, 1, 30000);
    int64_t rows = rows_for(algos[i]);
    for (int k = 0; k < 4; k++) assert_ok(rd_step(&m, s, k, rows));
    int who = NT - 1;
    double t0 = now_ms();
    rf_status *st = rd_step(&m, s, 4, T == who ? rows + NT : rows);
    char want[64];
    snprintf(want, sizeof want, ") on /task:%d/cpu:0", who);
    assert_contains(rf_status_message(st), want);
    assert_status(st, RF_INVALID_ARGUMENT, "participants disagree on shape");
    assert_true(now_ms() - t0 < 15000); /* at once, not at the timeout */
    assert_ok(rd_step(&m, s, 5, rows));
    assert_ok(rd_step(&m, s, 6, rows));
    assert_int_equal(rd_counted(&m, s, 7, rows), 0); /* steady again */
    rf_session_free(s);
    rf_graph_free(m.g);
  }
  mt_crowd(false);
  rf__mpi_algorithm_force(RF_MPI_AUTO);
}

static void test_task_skipping_a_late_step_is_named(void **state) {
  const int64_t timeout = 2000;
  for (int i = 0; i < 2; i++) { /* forced: blocking, ring */
    rf__mpi_algorithm_force(algos[i]);
    rd_graph m;
    build_rd(&m);
    rf_session *s = mt_session(m.g, 1, timeout);
    int64_t rows = rows_for(algos[i]);
    for (int k = 0; k < 3; k++) assert_ok(rd_step(&m, s, k, rows));
    int skip = NT - 1;
    if (T == skip) { /* a step of its own, without the collectives */
      rf_tensor *a, *out;
      rf_shape sh = rf_shape_of(2, rows, 2);
      assert_ok(rf_tensor_new(RF_FLOAT64, &sh, NULL, &a));
      memset(rf_tensor_mutable_data(a), 0, rf_tensor_nbytes(a));
      rf_feed feed = {m.x[T], a};
      assert_ok(rf_session_run(s, &feed, 1, &m.x[T], 1, NULL, 0, &out));
      rf_tensor_release(out);
      rf_tensor_release(a);
      struct timespec ts = {2, 500000000}; /* the others give up meanwhile */
      nanosleep(&ts, NULL);
    } else {
      double t0 = now_ms();
      rf_status *st = rd_step(&m, s, 3, rows);
      char want[64];
      snprintf(want, sizeof want, "waiting for task %d (/task:%d/cpu:0)", skip,
               skip);
      assert_status(st, RF_DEADLINE_EXCEEDED, want);
      assert_true(now_ms() - t0 < (double)timeout + 1000);
    }
    assert_ok(rd_step(&m, s, 4, rows)); /* everyone again */
    assert_ok(rd_step(&m, s, 5, rows));
    assert_int_equal(rd_counted(&m, s, 6, rows), 0); /* steady again */
    rf_session_free(s);
    rf_graph_free(m.g);
  }
  rf__mpi_algorithm_force(RF_MPI_AUTO);
}

int main(void) {
  if (mt_init()) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_steady_state_sends_no_message),
      cmocka_unit_test(test_shape_change_across_the_threshold),
      cmocka_unit_test(test_opposite_orders_complete),
      cmocka_unit_test(test_late_change_in_one_task_is_named),
      cmocka_unit_test(test_task_skipping_a_late_step_is_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
