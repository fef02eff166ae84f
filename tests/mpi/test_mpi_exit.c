/* tests/mpi/test_mpi_exit.c - two sessions of a job freed by an exit handler
 * that runs after ringflow's own (registered before the first session, so
 * it runs later: atexit runs handlers in reverse order). By then ringflow's
 * MPI thread has left the job and stopped; freeing the sessions must still
 * return (it waited forever for the stopped thread before session 31).
 * Not cmocka: the check is in the exit handler, which fails the process
 * with _exit(1) when the free does not return within 60 s (SIGALRM). */
#include <signal.h>
#include <unistd.h>

#include "mpi_testutil.h"

static rf_session *sess[2];
static rf_graph *graph;

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_mpi_exit: rf_session_free did not return\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(1);
}

static void late_free(void) {
  signal(SIGALRM, on_alarm);
  alarm(60);
  rf_session_free(sess[0]);
  rf_session_free(sess[1]);
  rf_graph_free(graph);
  alarm(0);
  fprintf(stderr, "task %d: the sessions were freed after ringflow's exit\n",
          T);
}

int main(void) {
  atexit(late_free); /* before ringflow's: it runs after it */
  if (mt_init()) return 1;
  graph = rf_graph_new();
  for (int t = 0; t < NT; t++) {
    char dev[MT_DEVICE_LEN];
    mt_device(t, 0, dev, sizeof dev);
    if (rf_graph_push_device(graph, dev)) return 1;
    rf_placeholder(graph, NULL, RF_FLOAT32, rf_shape_of(1, 4));
    rf_graph_pop_device(graph);
  }
  rf_session_options o;
  rf_session_options_init(&o);
  o.job = RF_JOB_MPI;
  for (int k = 0; k < 2; k++) {
    rf_status *st = rf_session_new(graph, &o, &sess[k]);
    if (st) {
      fprintf(stderr, "rf_session_new: %s\n", rf_status_message(st));
      rf_status_free(st);
      return 1;
    }
    int t = -1, n = -1;
    rf_session_task(sess[k], &t, &n);
    if (t != T || n != NT) return 1;
  }
  return 0; /* the sessions are freed at exit */
}
