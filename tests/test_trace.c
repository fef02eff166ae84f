/* tests/test_trace.c - rf_session_trace_next_run: the next step's kernels
 * (sends, receives and collective participants too) land in a Chrome trace
 * with one track per device; only that step is traced; a bad path is that
 * run's error, and a file cut short is removed. */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ringflow/collectives.h"
#include "testutil.h"

static int count_events(json_t *root, const char *name_prefix, int tid) {
  json_t *ev = json_object_get(root, "traceEvents"), *e;
  size_t i;
  int n = 0;
  json_array_foreach(ev, i, e) {
    const char *ph = json_string_value(json_object_get(e, "ph"));
    const char *name = json_string_value(json_object_get(e, "name"));
    if (!ph || strcmp(ph, "X") != 0 || !name) continue;
    if (strncmp(name, name_prefix, strlen(name_prefix)) != 0) continue;
    if (tid >= 0 && json_integer_value(json_object_get(e, "tid")) != tid)
      continue;
    n++;
  }
  return n;
}

static void test_trace_of_one_step(void **state) {
  rf_graph *g = rf_graph_new();
  rf_output x[2], y[2];
  for (int d = 0; d < 2; d++) {
    rf_graph_push_device(g, d ? "cpu:1" : "cpu:0");
    x[d] = rf_const_scalar(g, d ? "c1" : "c0", RF_FLOAT32, d + 1);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "sum", x, 2, RF_REDUCE_SUM, y);
  rf_graph_push_device(g, "cpu:0");
  rf_output z = rf_add(g, "z", y[1], y[0]); /* y[1] crosses devices */
  rf_graph_pop_device(g);
  rf_session *s = rf_test_cpu_session(g, 2);
  char path[] = "/tmp/rf_trace_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_ok(rf_session_trace_next_run(s, path));
  rf_tensor *out;
  assert_ok(rf_session_run(s, NULL, 0, &z, 1, NULL, 0, &out));
  assert_true(rf_tensor_get(out, 0) == 6.0);
  rf_tensor_release(out);
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  assert_non_null(root);
  assert_int_equal(count_events(root, "sum_0", 0), 1); /* participant, cpu:0 */
  assert_int_equal(count_events(root, "sum_1", 1), 1); /* participant, cpu:1 */
  assert_int_equal(count_events(root, "z", 0), 1);
  assert_true(count_events(root, "", 1) >= 2); /* c1, sum_1, a send */
  json_decref(root);
  /* the next run is not traced: the file stays as it was */
  remove(path);
  assert_ok(rf_session_run(s, NULL, 0, &z, 1, NULL, 0, &out));
  rf_tensor_release(out);
  assert_int_equal(access(path, F_OK), -1);
  /* a path that cannot be written fails that run, and only that run */
  assert_ok(rf_session_trace_next_run(s, "/nonexistent-dir/trace.json"));
  out = NULL;
  assert_status(rf_session_run(s, NULL, 0, &z, 1, NULL, 0, &out), RF_NOT_FOUND,
                "/nonexistent-dir/trace.json");
  assert_null(out);
  /* the code says why (errno): a full disk is RESOURCE_EXHAUSTED, not
   * PERMISSION_DENIED */
  assert_ok(rf_session_trace_next_run(s, "/dev/full"));
  assert_status(rf_session_run(s, NULL, 0, &z, 1, NULL, 0, &out),
                RF_RESOURCE_EXHAUSTED, "/dev/full");
  assert_null(out);
  assert_ok(rf_session_run(s, NULL, 0, &z, 1, NULL, 0, &out));
  rf_tensor_release(out);
  struct stat sb; /* a device is written to, never removed */
  assert_int_equal(stat("/dev/full", &sb), 0);
  assert_true(S_ISCHR(sb.st_mode));
  /* a regular file cut short (here by a file size limit, as by a full disk)
   * is removed, not left half written */
  struct rlimit was, small = {16, 16};
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
  small.rlim_max = was.rlim_max;
  void (*old_xfsz)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_ok(rf_session_trace_next_run(s, path));
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
  rf_status *cut = rf_session_run(s, NULL, 0, &z, 1, NULL, 0, &out);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
  signal(SIGXFSZ, old_xfsz);
  assert_status(cut, RF_RESOURCE_EXHAUSTED, "cannot write the trace to");
  assert_int_equal(access(path, F_OK), -1);
  assert_status(rf_session_trace_next_run(s, NULL), RF_INVALID_ARGUMENT, NULL);
  assert_status(rf_session_trace_next_run(NULL, "x"), RF_INVALID_ARGUMENT,
                NULL);
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trace_of_one_step),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
