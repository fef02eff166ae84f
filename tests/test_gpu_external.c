/* tests/test_gpu_external.c - the caller's GPU memory fed to GPU devices
 * (rf_tensor_new_external_gpu): read after the work queued before the
 * legacy default stream (a copy still in flight there when the run starts),
 * through kernels, a crossing to a CPU device and a variable whose update
 * never writes it; released once. Skips ("GPU tests skipped: <reason>")
 * without a GPU or a CUDA build. tests/test_external_tensor.c checks what
 * needs no GPU. */
#include <string.h>

#include "testutil.h"
#ifdef RF_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#ifdef RF_HAVE_CUDA
typedef struct released {
  int calls;
  void *data;
} released;

static void on_release(void *data, void *arg) {
  released *r = arg;
  r->calls++;
  r->data = data;
}

#define N (1 << 20) /* floats: a copy long enough to be in flight */

static void test_fed_device_memory(void **state) {
  (void)state;
  rf_test_need_gpu();
  float *dev = NULL, *pinned = NULL;
  assert_int_equal(cudaMalloc((void **)&dev, N * sizeof(float)), cudaSuccess);
  assert_int_equal(cudaMallocHost((void **)&pinned, N * sizeof(float)),
                   cudaSuccess);
  for (int i = 0; i < N; i++) pinned[i] = (float)(i % 1000) - 500.0f;
  assert_int_equal(cudaMemset(dev, 0, N * sizeof(float)), cudaSuccess);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);

  rf_graph *g = rf_graph_new();
  assert_ok(rf_graph_push_device(g, "gpu:0"));
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(1, N));
  rf_output y = rf_mul(g, "y", x, rf_const_scalar(g, NULL, RF_FLOAT32, 2.0));
  rf_output v = rf_variable(g, "v", RF_FLOAT32, rf_shape_of(1, N));
  rf_node *init = rf_assign(g, "init", v, x);
  /* v -= x: zero, from the variable's copy of x */
  rf_node *step = rf_apply_gradient_descent(
      g, "step", v, rf_const_scalar(g, NULL, RF_FLOAT32, 1.0), x);
  rf_output read = rf_read_variable(g, "read", v);
  rf_graph_pop_device(g);
  assert_ok(rf_graph_push_device(g, "cpu:0"));
  rf_output same = rf_identity(g, "same", x);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_gpu_devices = 1;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));

  released r = {0, NULL};
  rf_tensor *t = NULL;
  rf_shape shape = rf_shape_of(1, N);
  assert_ok(rf_tensor_new_external_gpu(RF_FLOAT32, &shape, 0, dev, on_release,
                                       &r, &t));
  /* The values arrive on the legacy default stream, still in flight when
   * the run starts: the run must wait for them. */
  assert_int_equal(cudaMemcpyAsync(dev, pinned, N * sizeof(float),
                                   cudaMemcpyHostToDevice, 0),
                   cudaSuccess);
  rf_feed feed = {x, t};
  rf_output fetches[2] = {y, same};
  rf_tensor *out[2] = {NULL, NULL};
  assert_ok(rf_session_run(s, &feed, 1, fetches, 2, &init, 1, out));
  const float *py = rf_tensor_data(out[0]), *ps = rf_tensor_data(out[1]);
  for (int i = 0; i < N; i++) {
    if (py[i] != 2 * pinned[i] || ps[i] != pinned[i])
      fail_msg("element %d: %g and %g for %g", i, py[i], ps[i], pinned[i]);
  }
  rf_tensor_release(out[0]);
  rf_tensor_release(out[1]);

  /* The variable took a copy: its update leaves the caller's memory. */
  assert_ok(rf_session_run(s, &feed, 1, NULL, 0, &step, 1, NULL));
  assert_ok(rf_session_run(s, NULL, 0, &read, 1, NULL, 0, out));
  const float *pv = rf_tensor_data(out[0]);
  assert_true(pinned[7] != 0 && pv[7] == 0);
  rf_tensor_release(out[0]);
  float back[8];
  assert_int_equal(cudaMemcpy(back, dev, sizeof back, cudaMemcpyDeviceToHost),
                   cudaSuccess);
  assert_memory_equal(back, pinned, sizeof back);

  assert_int_equal(r.calls, 0);
  rf_tensor_release(t);
  rf_session_free(s);
  assert_int_equal(r.calls, 1);
  assert_ptr_equal(r.data, dev);
  rf_graph_free(g);
  cudaFree(dev);
  cudaFreeHost(pinned);
}
#else
static void test_fed_device_memory(void **state) {
  (void)state;
  rf_test_need_gpu(); /* skips: built without CUDA */
}
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fed_device_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
