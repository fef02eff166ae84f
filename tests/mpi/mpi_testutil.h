/* tests/mpi/mpi_testutil.h - what the tests run under mpirun share: this
 * process's task and the job's size, device names of any task, sessions of
 * the job with a short collective timeout. Every process builds the same
 * whole-job graph (the seed, RF_TEST_SEED, is the same in every process:
 * tests/mpi/mpirun.sh passes it to all), feeds and fetches its own task's
 * nodes. */
#ifndef RF_TESTS_MPI_TESTUTIL_H
#define RF_TESTS_MPI_TESTUTIL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static int T, NT; /* this task, tasks in the job */

/* "/task:t/cpu:d": MT_DEVICE_LEN bytes hold it for any two ints. */
#define MT_DEVICE_LEN 48
static inline void mt_device(int t, int d, char *buf, size_t len) {
  snprintf(buf, len, "/task:%d/cpu:%d", t, d);
}

static inline rf_session *mt_session(const rf_graph *g, int ncpu,
                                     int64_t timeout_ms) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = ncpu;
  o.collective_timeout_ms = timeout_ms;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  int t = -1, n = -1;
  rf_session_task(s, &t, &n);
  assert_int_equal(t, T);
  assert_int_equal(n, NT);
  return s;
}

/* Makes this process's node look crowded to the sessions made from now
 * on (its launcher's count of processes on the node, far above the
 * machine's CPUs: core/cores.h), or puts the count back: such a job takes
 * the algorithm table without shared memory (docs/MULTIPROCESS.md,
 * "Crowded"). Crowded in one process crowds the whole job. */
static inline void mt_crowd(bool on) {
  static char *saved;
  static bool had, set;
  const char *var =
      getenv("MPI_LOCALNRANKS") && !getenv("OMPI_COMM_WORLD_LOCAL_SIZE")
          ? "MPI_LOCALNRANKS"
          : "OMPI_COMM_WORLD_LOCAL_SIZE";
  if (on && !set) {
    const char *v = getenv(var);
    had = v != NULL;
    saved = v ? strdup(v) : NULL;
    setenv(var, "1000000", 1);
    set = true;
  } else if (!on && set) {
    if (had)
      setenv(var, saved, 1);
    else
      unsetenv(var);
    free(saved);
    saved = NULL;
    set = false;
  }
}

/* Learns T and NT; every test program calls it first. */
static inline int mt_init(void) {
  rf_status *st = rf_job_tasks(&T, &NT);
  if (st || NT < 2) {
    fprintf(stderr, "MPI test: %s (tasks: %d); run it under mpirun -np 2+\n",
            st ? rf_status_message(st) : "not a job of several processes", NT);
    rf_status_free(st);
    return 1;
  }
  return 0;
}

#endif
