/* tests/test_job.c - task names in a session of one process (no mpirun):
 * "/task:0/..." is this process, any other task is a clear error at compile
 * time, the session and rf_job_tasks say task 0 of 1, RF_JOB_SINGLE keeps a
 * task-naming graph local, bad job options are refused, and without MPI
 * RF_JOB_MPI says why it cannot be. (tests/mpi/ runs sessions of several
 * processes under mpirun.) */
#include <string.h>

#include "ringflow/collectives.h"
#include "testutil.h"

static void test_task_zero_is_this_process(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x[2], y[2];
  for (int d = 0; d < 2; d++) {
    assert_ok(rf_graph_push_device(g, d ? "/task:0/cpu:1" : "/task:0/cpu:0"));
    x[d] = rf_const_scalar(g, NULL, RF_FLOAT32, d + 1);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "ar", x, 2, RF_REDUCE_SUM, y);
  rf_session *s = rf_test_cpu_session(g, 2);
  int t = -1, n = -1;
  rf_session_task(s, &t, &n);
  assert_int_equal(t, 0);
  assert_int_equal(n, 1);
  rf_tensor *out[2];
  assert_ok(rf_session_run(s, NULL, 0, y, 2, NULL, 0, out));
  for (int d = 0; d < 2; d++) {
    assert_true(rf_tensor_get(out[d], 0) == 3);
    rf_tensor_release(out[d]);
  }
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_other_task_is_an_error(void **state) {
  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "/task:1/cpu:0"));
  rf_const_scalar(g, "x", RF_FLOAT32, 1);
  rf_graph_pop_device(g);
  for (int job = RF_JOB_AUTO; job <= RF_JOB_SINGLE; job++) {
    rf_session_options o;
    rf_session_options_init(&o);
    o.job = job;
    rf_session *s = NULL;
    /* known before any run: refused by rf_session_new */
    rf_status *st = rf_session_new(g, &o, &s);
    assert_null(s);
    assert_non_null(st);
    assert_non_null(strstr(rf_status_message(st), "node 'x'"));
    assert_status(st, RF_INVALID_ARGUMENT, "is one process (task 0 of 1)");
  }
  rf_graph *lowered = NULL;
  assert_status(rf_graph_lower(g, NULL, &lowered), RF_INVALID_ARGUMENT,
                "/task:1/cpu:0");
  assert_null(lowered);
  rf_graph_free(g);
}

static void test_job_tasks_outside_mpirun(void **state) {
  int t = -1, n = -1;
  assert_ok(rf_job_tasks(&t, &n));
  assert_int_equal(t, 0);
  assert_int_equal(n, 1);
  assert_ok(rf_job_tasks(NULL, NULL));
  rf_session_task(NULL, &t, &n);
  assert_int_equal(n, 1);
}

static void test_bad_job_option(void **state) {
  rf_graph *g = rf_graph_new();
  rf_session_options o;
  rf_session_options_init(&o);
  o.job = 7;
  rf_session *s = NULL;
  assert_status(rf_session_new(g, &o, &s), RF_INVALID_ARGUMENT,
                "job must be RF_JOB_AUTO, RF_JOB_SINGLE or RF_JOB_MPI");
  assert_null(s);
#ifndef RF_HAVE_MPI
  o.job = RF_JOB_MPI;
  assert_status(rf_session_new(g, &o, &s), RF_FAILED_PRECONDITION,
                "built without");
  assert_null(s);
#endif
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_task_zero_is_this_process),
      cmocka_unit_test(test_other_task_is_an_error),
      cmocka_unit_test(test_job_tasks_outside_mpirun),
      cmocka_unit_test(test_bad_job_option),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
