/* tests/test_external_tensor.c - tensors over caller-owned memory
 * (rf_tensor_new_external): no copy on the way in or out of a session, the
 * release callback called once when the last reference goes and never on
 * error, the memory never written by the library (a variable assigned it
 * updates a copy), the argument checks and allocation failures; and
 * tensors over GPU memory (rf_tensor_new_external_gpu) where no GPU is
 * needed: their checks, release, no host view, and a CPU device refusing
 * them (tests/test_gpu_external.c feeds them to GPUs). */
#include <stdint.h>
#include <string.h>

#include "ringflow/debug.h"
#include "testutil.h"

typedef struct released {
  int calls;
  void *data;
} released;

static void on_release(void *data, void *arg) {
  released *r = arg;
  r->calls++;
  r->data = data;
}

/* The tensor is the caller's memory; retains keep it, the last release gives
 * it back once. */
static void test_wraps_without_copy(void **state) {
  float buf[6] = {1, 2, 3, 4, 5, 6};
  released r = {0, NULL};
  rf_shape s = rf_shape_of(2, 2, 3);
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new_external(RF_FLOAT32, &s, buf, on_release, &r, &t));
  assert_ptr_equal(rf_tensor_data(t), buf);
  assert_int_equal(rf_tensor_dtype(t), RF_FLOAT32);
  rf_shape got = rf_tensor_shape(t);
  assert_true(rf_shape_equal(&got, &s));
  assert_int_equal(rf_tensor_nbytes(t), sizeof buf);
  assert_true(rf_tensor_get(t, 5) == 6.0);
  rf_tensor_retain(t);
  rf_tensor_release(t);
  assert_int_equal(r.calls, 0);
  rf_tensor_release(t);
  assert_int_equal(r.calls, 1);
  assert_ptr_equal(r.data, buf);

  /* No callback: the memory is simply not the library's. */
  assert_ok(rf_tensor_new_external(RF_FLOAT32, &s, buf, NULL, NULL, &t));
  rf_tensor_release(t);
}

/* Fed to a session and fetched back through Identity and Reshape (a view):
 * the fetched values are the caller's memory, alive until the last of them
 * goes; an Add reads it correctly. */
static void test_feed_and_fetch_share_memory(void **state) {
  double buf[4] = {1.5, -2, 3, 8};
  released r = {0, NULL};
  rf_graph *g = rf_graph_new();
  rf_graph_push_device(g, "cpu:1");
  rf_output x = rf_placeholder(g, "x", RF_FLOAT64, rf_shape_of(1, 4));
  rf_output same = rf_identity(g, "same", x);
  rf_output flat = rf_reshape_to(g, "flat", x, 2, (int64_t[]){2, 2});
  rf_output sum = rf_add(g, "sum", x, x);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  rf_shape s = rf_shape_of(1, 4);
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new_external(RF_FLOAT64, &s, buf, on_release, &r, &t));
  rf_feed feed = {x, t};
  rf_output fetches[3] = {same, flat, sum};
  rf_tensor *out[3] = {NULL, NULL, NULL};
  rf_test_run(g, 2, &feed, 1, fetches, 3, out);
  rf_tensor_release(t);
  assert_ptr_equal(rf_tensor_data(out[0]), buf);
  assert_ptr_equal(rf_tensor_data(out[1]), buf);
  double want[4] = {3, -4, 6, 16};
  assert_tensor_near(out[2], s, want, 0);
  rf_tensor_release(out[2]);
  rf_tensor_release(out[0]);
  assert_int_equal(r.calls, 0); /* the view holds it */
  rf_tensor_release(out[1]);
  assert_int_equal(r.calls, 1);
  rf_graph_free(g);
}

/* A variable assigned caller memory, then updated: the update writes a copy
 * (the variable is the tensor's only holder, so a library buffer would be
 * updated in place), the caller's memory keeps its values, and the memory is
 * given back when the variable lets go of it. */
static void test_variable_update_never_writes_it(void **state) {
  float buf[3] = {10, 20, 30};
  released r = {0, NULL};
  rf_graph *g = rf_graph_new();
  rf_output init = rf_placeholder(g, "init", RF_FLOAT32, rf_shape_of(1, 3));
  rf_output v = rf_variable(g, "v", RF_FLOAT32, rf_shape_of(1, 3));
  rf_node *assign = rf_assign(g, "assign", v, init);
  rf_shape s = rf_shape_of(1, 3);
  rf_tensor *ones = NULL;
  assert_ok(rf_tensor_new_copy(RF_FLOAT32, &s, (float[]){1, 1, 1}, &ones));
  rf_node *step = rf_apply_gradient_descent(
      g, "step", v, rf_const_scalar(g, "lr", RF_FLOAT32, 1.0),
      rf_const(g, "delta", ones));
  rf_tensor_release(ones);
  rf_output read = rf_read_variable(g, "read", v);
  assert_graph_ok(g);
  rf_session *sess;
  assert_ok(rf_session_new(g, NULL, &sess));
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new_external(RF_FLOAT32, &s, buf, on_release, &r, &t));
  rf_feed feed = {init, t};
  assert_ok(rf_session_run(sess, &feed, 1, NULL, 0, &assign, 1, NULL));
  rf_tensor_release(t); /* the variable holds the only reference now */
  assert_int_equal(r.calls, 0);
  assert_ok(rf_session_run(sess, NULL, 0, NULL, 0, &step, 1, NULL));
  assert_true(buf[0] == 10 && buf[1] == 20 && buf[2] == 30);
  assert_int_equal(r.calls, 1); /* replaced by the updated copy */
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(sess, NULL, 0, &read, 1, NULL, 0, &out));
  double want[3] = {9, 19, 29};
  assert_tensor_near(out, s, want, 0);
  rf_tensor_release(out);
  rf_session_free(sess);
  rf_graph_free(g);
}

/* Refused arguments: INVALID_ARGUMENT, *out untouched, no callback. */
static void test_errors(void **state) {
  _Alignas(8) unsigned char bytes[64] = {0};
  released r = {0, NULL};
  rf_shape s = rf_shape_of(1, 4);
  rf_tensor *t = NULL;
  assert_status(
      rf_tensor_new_external(RF_FLOAT32, &s, NULL, on_release, &r, &t),
      RF_INVALID_ARGUMENT, "NULL data");
  assert_status(
      rf_tensor_new_external(RF_FLOAT32, &s, bytes + 2, on_release, &r, &t),
      RF_INVALID_ARGUMENT, "not aligned to the 4 bytes of a float32");
  assert_status(
      rf_tensor_new_external(RF_RESOURCE, &s, bytes, on_release, &r, &t),
      RF_INVALID_ARGUMENT, "resource");
  assert_status(
      rf_tensor_new_external(RF_DTYPE_INVALID, &s, bytes, on_release, &r, &t),
      RF_INVALID_ARGUMENT, "invalid dtype");
  rf_shape unknown = rf_shape_of(1, -1);
  assert_status(
      rf_tensor_new_external(RF_FLOAT32, &unknown, bytes, on_release, &r, &t),
      RF_INVALID_ARGUMENT, "not fully defined");
  assert_status(
      rf_tensor_new_external(RF_FLOAT32, NULL, bytes, on_release, &r, &t),
      RF_INVALID_ARGUMENT, "NULL");
  assert_status(
      rf_tensor_new_external(RF_FLOAT32, &s, bytes, on_release, &r, NULL),
      RF_INVALID_ARGUMENT, "NULL");
  assert_null(t);
  assert_int_equal(r.calls, 0);
  /* Bytes need no alignment; a zero-element tensor wraps any pointer. */
  rf_shape empty = rf_shape_of(2, 0, 3);
  assert_ok(
      rf_tensor_new_external(RF_UINT8, &empty, bytes + 1, on_release, &r, &t));
  assert_int_equal(rf_tensor_nbytes(t), 0);
  rf_tensor_release(t);
  assert_int_equal(r.calls, 1);
}

/* Out of memory for the tensor itself: RESOURCE_EXHAUSTED, nothing leaked,
 * no callback (the caller still owns the memory). */
static void test_allocation_failure(void **state) {
  float buf[4] = {0};
  released r = {0, NULL};
  rf_shape s = rf_shape_of(1, 4);
  int failures = 0;
  for (int k = 1;; k++) {
    int64_t live = rf_debug_live_allocations();
    rf_tensor *t = NULL;
    rf_debug_fail_allocation_after(k);
    rf_status *st =
        rf_tensor_new_external(RF_FLOAT32, &s, buf, on_release, &r, &t);
    rf_debug_fail_allocation_after(0);
    if (!st) {
      rf_tensor_release(t);
      assert_int_equal(rf_debug_live_allocations(), live);
      break;
    }
    assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
    assert_null(t);
    assert_int_equal(r.calls, 0);
    assert_int_equal(rf_debug_live_allocations(), live);
    failures++;
  }
  assert_int_equal(failures, 1); /* the tensor struct; no buffer */
  assert_int_equal(r.calls, 1);
}

/* A device pointer is only recorded: never read on the host, released once,
 * refused by a CPU device's placeholder with a message naming the node. */
static void test_gpu_memory(void **state) {
  _Alignas(8) unsigned char bytes[64] = {0}; /* stands for device memory */
  released r = {0, NULL};
  rf_shape s = rf_shape_of(2, 2, 4);
  rf_tensor *t = NULL;
  assert_status(
      rf_tensor_new_external_gpu(RF_FLOAT32, &s, -1, bytes, on_release, &r, &t),
      RF_INVALID_ARGUMENT, "GPU -1 is not a GPU");
  assert_status(rf_tensor_new_external_gpu(RF_FLOAT32, &s, 1 << 20, bytes,
                                           on_release, &r, &t),
                RF_INVALID_ARGUMENT, "is not a GPU");
  assert_status(
      rf_tensor_new_external_gpu(RF_FLOAT32, &s, 0, NULL, on_release, &r, &t),
      RF_INVALID_ARGUMENT, "rf_tensor_new_external_gpu: NULL data");
  assert_status(rf_tensor_new_external_gpu(RF_FLOAT64, &s, 0, bytes + 4,
                                           on_release, &r, &t),
                RF_INVALID_ARGUMENT, "rf_tensor_new_external_gpu: data 0x");
  assert_null(t);
  assert_int_equal(r.calls, 0);
  assert_ok(
      rf_tensor_new_external_gpu(RF_FLOAT32, &s, 3, bytes, on_release, &r, &t));
  assert_null(rf_tensor_data(t)); /* device memory: no host view */
  assert_null(rf_tensor_mutable_data(t));
  assert_int_equal(rf_tensor_nbytes(t), 32);

  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_shape_of(2, 2, 4));
  rf_output y = rf_identity(g, "y", x);
  assert_graph_ok(g);
  rf_session *sess = NULL;
  assert_ok(rf_session_new(g, NULL, &sess));
  rf_feed feed = {x, t};
  rf_tensor *out = NULL;
  assert_status(rf_session_run(sess, &feed, 1, &y, 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT,
                "fed a float32 device tensor, expected float32 in host memory");
  assert_null(out);
  /* The message names the caller's node, not the step's internal _Arg
   * ("node '_arg/x_0' (_Arg)"), on the first run and a repeated one. */
  for (int i = 0; i < 2; i++)
    assert_status(rf_session_run(sess, &feed, 1, &y, 1, NULL, 0, &out),
                  RF_INVALID_ARGUMENT,
                  "feed for node 'x' (Placeholder) output 0: fed a float32 "
                  "device tensor, expected float32 in host memory");
  assert_null(out);
  rf_session_free(sess);
  rf_graph_free(g);
  assert_int_equal(r.calls, 0);
  rf_tensor_release(t);
  assert_int_equal(r.calls, 1);
  assert_ptr_equal(r.data, bytes);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wraps_without_copy),
      cmocka_unit_test(test_feed_and_fetch_share_memory),
      cmocka_unit_test(test_variable_update_never_writes_it),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_allocation_failure),
      cmocka_unit_test(test_gpu_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
