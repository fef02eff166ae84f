/* tests/mpi/test_mpi_threads.c - a freed session leaves no thread of its own
 * behind and nothing that burns CPU (run under mpirun: tests/mpi/mpirun.sh).
 * With the algorithm forced to MPI's blocking calls (rf__mpi_algorithm_force,
 * the same in every process), collectives agreed once run on a thread of
 * their own per name and a job's other blocking calls on the job's data
 * thread (src/comm/mpi/data_thread.c). A first session starts what lives
 * as long as the process (MPI, its own threads, ringflow's engine) and is
 * freed; the threads then (/proc/self/task) are the baseline. A second
 * session runs steps of a reduce and a reduce-scatter (more threads while
 * it lives) and is freed: the process's thread count comes back to the
 * baseline, and over 1 s of sleep the process uses far below a core (a
 * behaviour check with a generous bound, not a timing target). The same
 * with the table's choice (MPI's nonblocking calls at these sizes). */
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "comm/mpi/op.h"
#include "mpi_testutil.h"
#include "ringflow/collectives.h"

static int threads_now(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* The thread count once it settles at `want` (a joined thread may linger
 * in /proc for a moment), or what it is after 2 s. */
static int threads_settled(int want) {
  int n = threads_now();
  for (int i = 0; i < 200 && n != want; i++) {
    usleep(10000);
    n = threads_now();
  }
  return n;
}

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The process's CPU seconds over 1 s of sleep. */
static double idle_cpu_s(void) {
  double c0 = cpu_s();
  struct timespec one = {1, 0};
  nanosleep(&one, NULL);
  return cpu_s() - c0;
}

/* Runs `steps` steps of a reduce ("rd", to the last task) and a
 * reduce-scatter ("rs") of x[t] = t + 1 (float64, NT * 3 elements) in a
 * session of its own, checking the sums; *during: the threads before the
 * session is freed. */
static void run_session(int steps, int *during) {
  enum { PER = 3 };
  const int64_t n = (int64_t)NT * PER;
  rf_graph *g = rf_graph_new();
  rf_output x[64], rs[64], rd;
  assert_true(NT <= 64);
  for (int t = 0; t < NT; t++) {
    char dev[MT_DEVICE_LEN];
    mt_device(t, 0, dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    x[t] = rf_placeholder(g, NULL, RF_FLOAT64, rf_shape_of(1, n));
    rf_graph_pop_device(g);
  }
  char last[MT_DEVICE_LEN];
  mt_device(NT - 1, 0, last, sizeof last);
  assert_ok(rf_graph_push_device(g, last));
  rd = rf_reduce(g, "rd", x, NT, RF_REDUCE_SUM);
  rf_graph_pop_device(g);
  rf_reduce_scatter_n(g, "rs", x, NT, RF_REDUCE_SUM, rs);
  assert_graph_ok(g);
  rf_session *s = mt_session(g, 1, 30000);
  const double sum = (double)NT * (NT + 1) / 2;
  for (int k = 0; k < steps; k++) {
    rf_shape sh = rf_shape_of(1, n);
    rf_tensor *in, *out[2] = {0};
    assert_ok(rf_tensor_new(RF_FLOAT64, &sh, NULL, &in));
    double *p = rf_tensor_mutable_data(in);
    for (int64_t e = 0; e < n; e++) p[e] = T + 1;
    rf_feed feed = {x[T], in};
    rf_output fetch[2] = {rs[T], rd};
    bool root = T == NT - 1;
    assert_ok(rf_session_run(s, &feed, 1, fetch, root ? 2 : 1,
                             root ? NULL : &rd.node, root ? 0 : 1, out));
    assert_int_equal(rf_tensor_num_elements(out[0]), PER);
    for (int e = 0; e < PER; e++)
      assert_true(((const double *)rf_tensor_data(out[0]))[e] == sum);
    if (root)
      for (int64_t e = 0; e < n; e++)
        assert_true(((const double *)rf_tensor_data(out[1]))[e] == sum);
    for (int f = 0; f < 2; f++) rf_tensor_release(out[f]);
    rf_tensor_release(in);
  }
  *during = threads_now();
  rf_session_free(s);
  rf_graph_free(g);
}

static void check_after_free(rf__mpi_algorithm algo, bool adds_threads) {
  rf__mpi_algorithm_force(algo);
  int during;
  run_session(3, &during); /* starts what lives as long as the process */
  int base = threads_settled(-1);
  assert_true(base > 0);
  run_session(6, &during);
  if (adds_threads) assert_true(during > base); /* its threads ran */
  int after = threads_settled(base);
  if (after != base)
    fail_msg(
        "%d threads after the session was freed, %d before it (%d while "
        "it lived)",
        after, base, during);
  double c = idle_cpu_s();
  if (c > 0.3)
    fail_msg("%.3f s of CPU over 1 s of sleep after the session was freed", c);
  rf__mpi_algorithm_force(RF_MPI_AUTO);
}

static void test_blocking_threads_end_with_the_session(void **state) {
  (void)state;
  check_after_free(RF_MPI_BLOCKING, true);
}

static void test_ring_threads_end_with_the_session(void **state) {
  (void)state;
  check_after_free(RF_MPI_RING, true);
}

static void test_nonblocking_leaves_nothing_running(void **state) {
  (void)state;
  check_after_free(RF_MPI_AUTO, false);
}

int main(void) {
  if (mt_init()) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_blocking_threads_end_with_the_session),
      cmocka_unit_test(test_ring_threads_end_with_the_session),
      cmocka_unit_test(test_nonblocking_leaves_nothing_running),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
