/* tests/test_cublas_load.c - a CUDA build opens cuBLAS only when it is
 * first called (src/core/cublas_load.c): a process that runs CPU sessions
 * never maps libcublas; the first call opens it and forwards; a library
 * that cannot be opened makes every call CUBLAS_STATUS_NOT_INITIALIZED and
 * the call's status UNAVAILABLE, naming the file and dlerror's reason. In a
 * build without CUDA only the first holds (and trivially). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#ifdef RF_HAVE_CUDA
#include <cublasLt.h>
#include <cublas_v2.h>

#include "core/cublas_load.h"
#include "core/cuda_check.h"
#endif

/* Whether a library whose path holds `what` is mapped in this process. */
static bool mapped(const char *what) {
  FILE *f = fopen("/proc/self/maps", "r");
  assert_non_null(f);
  char line[4096];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, what);
  fclose(f);
  return found;
}

/* A MatMul on CPU devices through a session: nothing opens cuBLAS. */
static void cpu_sessions_leave_cublas_closed(void **state) {
  (void)state;
  rf_graph *g = rf_graph_new();
  const int64_t dims[2] = {1, 1};
  rf_output a = rf_reshape_to(
      g, NULL, rf_const_scalar(g, NULL, RF_FLOAT32, 2.0), 2, dims);
  rf_output m = rf_matmul(g, NULL, a, a, false, false);
  rf_tensor *out = NULL;
  rf_test_run(g, 2, NULL, 0, &m, 1, &out);
  assert_float_equal(((const float *)rf_tensor_data(out))[0], 4.0f, 0);
  rf_tensor_release(out);
  rf_graph_free(g);
  assert_false(mapped("libcublas"));
}

#ifdef RF_HAVE_CUDA
/* In a child (the parent's libraries stay unopened for the next test): the
 * first call opens both libraries and forwards to them. */
static void first_call_opens_cublas(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int bad = 0;
    bad |= mapped("libcublas") << 0;
    bad |= (rf__cublas_load_error() != NULL) << 1; /* opens them */
    bad |= !mapped("libcublas.so") << 2;
    bad |= !mapped("libcublasLt.so") << 3;
    bad |= (strcmp(cublasGetStatusName(CUBLAS_STATUS_ALLOC_FAILED),
                   "CUBLAS_STATUS_ALLOC_FAILED") != 0)
           << 4;
    _exit(bad);
  }
  int ws = 0;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws));
  assert_int_equal(WEXITSTATUS(ws), 0);
}

static void unopenable_cublas_is_named(void **state) {
  (void)state;
  rf__cublas_load_names("/nonexistent/libcublas.so.13",
                        "/nonexistent/libcublasLt.so.13");
  cublasHandle_t h = NULL;
  for (int i = 0; i < 2; i++) { /* the second call: the same, not retried */
    rf_status *st = RF_CUBLAS_STATUS(cublasCreate(&h));
    assert_non_null(st);
    assert_int_equal(rf_status_code(st), RF_UNAVAILABLE);
    const char *msg = rf_status_message(st);
    assert_non_null(strstr(msg,
                           "cublasCreate(&h) failed: cuBLAS: "
                           "/nonexistent/libcublas.so.13 could not be "
                           "loaded ("));
    assert_non_null(strstr(msg, "No such file or directory"));
    assert_non_null(strstr(msg, "test_cublas_load.c:"));
    rf_status_free(st);
  }
  assert_null(h);
  assert_int_equal(cublasLtMatmulDescDestroy(NULL),
                   CUBLAS_STATUS_NOT_INITIALIZED);
  assert_string_equal(cublasGetStatusName(CUBLAS_STATUS_SUCCESS),
                      "CUBLAS_STATUS_NOT_INITIALIZED");
  assert_false(mapped("libcublas"));
}
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cpu_sessions_leave_cublas_closed),
#ifdef RF_HAVE_CUDA
      cmocka_unit_test(first_call_opens_cublas),
      cmocka_unit_test(unopenable_cublas_is_named),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
