/* examples/allreduce_grad.c - the README's example, complete: two replicas of
 * y = relu(x W) on two virtual CPU devices, their weight gradients summed by a
 * differentiable all-reduce. Prints the synced gradient and checks that both
 * devices hold the same bits. Build: cc allreduce_grad.c $(pkg-config --cflags
 * --libs ringflow). */
#include <stdio.h>
#include <string.h>

#include <ringflow/collectives.h>
#include <ringflow/ringflow.h>

static int check(rf_status *st) {
  if (!st) return 0;
  fprintf(stderr, "error: %s\n", rf_status_message(st));
  rf_status_free(st);
  return 1;
}

int main(void) {
  rf_graph *g = rf_graph_new();
  rf_output x[2], w[2], loss[2], grads[2], synced[2];
  for (int d = 0; d < 2; d++) {
    rf_graph_push_device(g, d ? "cpu:1" : "cpu:0");
    x[d] = rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_of(2, 8, 3));
    w[d] = rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_of(2, 3, 2));
    rf_output y =
        rf_relu(g, NULL, rf_matmul(g, NULL, x[d], w[d], false, false));
    loss[d] = rf_sum(g, NULL, y, NULL, -1, false);
    rf_graph_pop_device(g);
    if (check(rf_gradients(g, &loss[d], 1, &w[d], 1, NULL, &grads[d])))
      return 1;
  }
  rf_all_reduce_n(g, "grad_sum", grads, 2, RF_REDUCE_SUM, synced);
  if (check(rf_graph_status(g))) return 1;

  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 2;
  rf_session *s;
  if (check(rf_session_new(g, &o, &s))) return 1;

  /* x[d] = d + 1 everywhere, w = 1: every relu is active, so the gradient of
   * sum(relu(x W)) w.r.t. W is x^T 1 = 8 (d + 1) per element; summed over the
   * two devices: 8 + 16 = 24. */
  rf_shape xs = rf_shape_of(2, 8, 3), ws = rf_shape_of(2, 3, 2);
  rf_tensor *xv[2], *wv;
  rf_feed feeds[4];
  if (check(rf_tensor_new(RF_FLOAT32, &ws, NULL, &wv))) return 1;
  for (int i = 0; i < 6; i++) rf_tensor_set(wv, i, 1.0);
  for (int d = 0; d < 2; d++) {
    if (check(rf_tensor_new(RF_FLOAT32, &xs, NULL, &xv[d]))) return 1;
    for (int i = 0; i < 24; i++) rf_tensor_set(xv[d], i, d + 1);
    feeds[2 * d] = (rf_feed){x[d], xv[d]};
    feeds[2 * d + 1] = (rf_feed){w[d], wv};
  }
  rf_tensor *out[2];
  if (check(rf_session_run(s, feeds, 4, synced, 2, NULL, 0, out))) return 1;
  int ok = memcmp(rf_tensor_data(out[0]), rf_tensor_data(out[1]),
                  rf_tensor_nbytes(out[0])) == 0;
  for (int i = 0; i < 6; i++) ok &= rf_tensor_get(out[0], i) == 24.0;
  printf("synced dL/dW[0][0] = %g on cpu:0 and %g on cpu:1: %s\n",
         rf_tensor_get(out[0], 0), rf_tensor_get(out[1], 0),
         ok ? "identical, as expected" : "WRONG");
  for (int d = 0; d < 2; d++) {
    rf_tensor_release(out[d]);
    rf_tensor_release(xv[d]);
  }
  rf_tensor_release(wv);
  rf_session_free(s);
  rf_graph_free(g);
  return ok ? 0 : 1;
}
