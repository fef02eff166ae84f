/* tests/mpi/test_mpi_idle.c - the communication thread does not spin while
 * nothing can move (run under mpirun: tests/mpi/mpirun.sh). Every task runs
 * the same steps of a 16 MiB all-reduce, back to back (its data in flight
 * nearly all the time); three times task 0 stops task 1 (SIGSTOP: it is on
 * this host) a moment into a step, so task 0's collective can neither
 * finish nor be agreed, and measures its own CPU time for 1 s before it
 * lets task 1 go on (SIGCONT). The communication thread may spin for a
 * moment after the last progress, then must sleep: the process stays far
 * below a core (it spun at a full core before). A behaviour check with a
 * generous bound, not a timing target. Every step then completes with the
 * right sums in every process. */
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "mpi_testutil.h"
#include "ringflow/collectives.h"

#define STOPS 3
#define STEPS_BETWEEN 4 /* steps before each stop */
#define ELEMS (2 << 20) /* float64: 16 MiB */

static atomic_int steps_done, stopper_done;
static pid_t peer; /* task 1's pid (task 0) */
static double cpu_s[STOPS];

static double clock_s(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *stopper(void *arg) {
  (void)arg;
  for (int k = 0; k < STOPS; k++) {
    while (atomic_load(&steps_done) < (k + 1) * STEPS_BETWEEN) usleep(1000);
    usleep(3000); /* into the next step */
    kill(peer, SIGSTOP);
    double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    struct timespec one = {1, 0};
    nanosleep(&one, NULL);
    cpu_s[k] = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    kill(peer, SIGCONT);
  }
  atomic_store(&stopper_done, 1);
  return NULL;
}

static rf_tensor *filled(int64_t n, double v) {
  rf_shape s = rf_shape_of(1, n);
  rf_tensor *t;
  assert_ok(rf_tensor_new(RF_FLOAT64, &s, NULL, &t));
  double *d = rf_tensor_mutable_data(t);
  for (int64_t i = 0; i < n; i++) d[i] = v;
  return t;
}

/* Runs the all-reduce on `in`; returns the sum (a new reference). */
static rf_tensor *step(rf_session *s, rf_output x, rf_output y, rf_tensor *in) {
  rf_tensor *out;
  rf_feed f = {x, in};
  assert_ok(rf_session_run(s, &f, 1, &y, 1, NULL, 0, &out));
  return out;
}

static void test_no_spin_while_a_task_is_stopped(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x[64], y[64];
  for (int t = 0; t < NT; t++) {
    char dev[MT_DEVICE_LEN];
    mt_device(t, 0, dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    x[t] = rf_placeholder(g, NULL, RF_FLOAT64, rf_shape_of(1, -1));
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "ar", x, NT, RF_REDUCE_SUM, y);
  assert_graph_ok(g);
  rf_session *s = mt_session(g, 1, 60000);
  /* task 1's pid, summed with zeros */
  rf_tensor *in = filled(1, T == 1 ? (double)getpid() : 0);
  rf_tensor *out = step(s, x[T], y[T], in);
  peer = (pid_t)((const double *)rf_tensor_data(out))[0];
  rf_tensor_release(out);
  rf_tensor_release(in);
  pthread_t th;
  if (T == 0) assert_int_equal(pthread_create(&th, NULL, stopper, NULL), 0);
  /* Every task runs as many steps (task 0 says when to stop: broadcast as
   * the sum of a flag). */
  in = filled(ELEMS, T + 1.0);
  for (int i = 0;; i++) {
    double more = T == 0 ? !atomic_load(&stopper_done) : 0;
    ((double *)rf_tensor_mutable_data(in))[0] = T + 1.0 + more;
    out = step(s, x[T], y[T], in);
    const double *o = rf_tensor_data(out);
    bool again = o[0] > NT * (NT + 1) / 2.0;
    if (!again || i == 0)
      for (int64_t k = 1; k < ELEMS; k++)
        assert_true(o[k] == NT * (NT + 1) / 2.0);
    rf_tensor_release(out);
    atomic_fetch_add(&steps_done, 1);
    if (!again) break;
  }
  rf_tensor_release(in);
  if (T == 0) {
    pthread_join(th, NULL);
    for (int k = 0; k < STOPS; k++) {
      print_message("task 0: %.3f s of CPU in 1 s while task 1 was stopped\n",
                    cpu_s[k]);
      assert_true(cpu_s[k] >= 0 && cpu_s[k] < 0.25);
    }
  }
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  if (mt_init()) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_spin_while_a_task_is_stopped),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
