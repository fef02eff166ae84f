/* kernels/cpu/runtime_kernels.c - CPU kernels of the runtime ops. _Arg and
 * _Retval move references between the step and the graph; _Send/_Recv go
 * through the step's rendezvous, and _Recv is asynchronous (never blocks a
 * thread while the value is on its way). Keys and indices are read once, at
 * compile time, into the kernel state. */
#include <stdint.h>

#include "kernels/cpu/runtime_kernels.h"
#include "kernels/kernel.h"
#include "kernels/kernel_families.h"
#include "device/rendezvous.h"
#include "device/step.h"

/* The runtime ops only make sense inside a session step (not, e.g., in
 * rf__kernel_run_single). */
rf_status *rf__need_step(rf__kernel_ctx *ctx) {
  if (ctx->step) return NULL;
  return rf__kernel_error(ctx, RF_FAILED_PRECONDITION,
                          "this op runs only inside a session step");
}

/* ---- _Arg, _Retval: state is the index ---- */

rf_status *rf__index_init(const rf_node *node, void **state) {
  int64_t index;
  RF_CHECK(rf__attrs_get_int(&node->attrs, "index", &index));
  *state = (void *)(intptr_t)index;
  return NULL;
}

rf_status *rf__arg_fed(rf__kernel_ctx *ctx, bool device_memory_ok,
                       rf_tensor **value) {
  RF_CHECK(rf__need_step(ctx));
  int64_t i = (intptr_t)ctx->state;
  rf_tensor *v = i < ctx->step->num_feeds ? ctx->step->feeds[i] : NULL;
  if (!v)
    return rf__kernel_error(ctx, RF_INTERNAL,
                            "no value was fed for _Arg "
                            "index %lld (the step has %d feeds)",
                            (long long)i, ctx->step->num_feeds);
  if (v->dtype != ctx->node->out_dtypes[0] || (v->on_gpu && !device_memory_ok))
    return rf__kernel_error(ctx, RF_INVALID_ARGUMENT,
                            "fed a %s%s tensor, expected %s%s",
                            rf_dtype_name(v->dtype), v->on_gpu ? " device" : "",
                            rf_dtype_name(ctx->node->out_dtypes[0]),
                            v->on_gpu ? " in host memory" : "");
  *value = v;
  return NULL;
}

static rf_status *arg_compute(rf__kernel_ctx *ctx) {
  rf_tensor *v;
  RF_CHECK(rf__arg_fed(ctx, false, &v));
  ctx->outputs[0] = rf_tensor_retain(v);
  return NULL;
}

static rf_status *retval_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(rf__need_step(ctx));
  int64_t i = (intptr_t)ctx->state;
  if (i >= ctx->step->num_fetches || ctx->step->fetches[i])
    return rf__kernel_error(ctx, RF_INTERNAL,
                            "fetch index %lld is out of "
                            "range or already filled (the step fetches %d)",
                            (long long)i, ctx->step->num_fetches);
  ctx->step->fetches[i] = rf_tensor_retain(ctx->inputs[0]);
  return NULL;
}

/* ---- _Send, _Recv: state is the key, owned by the node's attrs ---- */

static rf_status *key_init(const rf_node *node, void **state) {
  const char *key;
  RF_CHECK(rf__attrs_get_string(&node->attrs, "key", &key));
  *state = (void *)key;
  return NULL;
}

static rf_status *send_compute(rf__kernel_ctx *ctx) {
  RF_CHECK(rf__need_step(ctx));
  rf_status *st = rf__rendezvous_send(ctx->step->rendezvous, ctx->step->id,
                                      ctx->state, ctx->inputs[0]);
  if (!st) return NULL;
  return rf__kernel_error_at(ctx, st);
}

static void recv_done(void *arg, rf_status *st, rf_tensor *value) {
  rf__kernel_ctx *ctx = arg;
  if (!st && value->on_gpu) { /* a GPU _Send copies to the host first */
    st = rf__kernel_error(ctx, RF_INTERNAL,
                          "received device memory on a CPU device");
    rf_tensor_release(value);
    value = NULL;
  }
  if (!st && value->dtype != ctx->node->out_dtypes[0]) {
    st = rf__kernel_error(ctx, RF_INTERNAL,
                          "received a %s tensor, expected "
                          "%s",
                          rf_dtype_name(value->dtype),
                          rf_dtype_name(ctx->node->out_dtypes[0]));
    rf_tensor_release(value);
    value = NULL;
  }
  ctx->outputs[0] = value;
  ctx->done(ctx, st);
}

static void recv_compute_async(rf__kernel_ctx *ctx, rf__done_fn done) {
  ctx->done = done;
  rf_status *st = rf__need_step(ctx);
  if (st) {
    done(ctx, st);
    return;
  }
  rf__rendezvous_recv(ctx->step->rendezvous, ctx->step->id, ctx->state,
                      recv_done, ctx);
}

/* ---- _Token: state is one empty tensor, shared by every step ---- */

rf_status *rf__token_init(const rf_node *node, void **state) {
  rf_shape empty = rf_shape_of(1, (int64_t)0);
  rf_tensor *t;
  RF_CHECK(rf_tensor_new(RF_FLOAT32, &empty, NULL, &t));
  *state = t;
  return NULL;
}

void rf__token_destroy(void *state) { rf_tensor_release(state); }

rf_status *rf__token_compute(rf__kernel_ctx *ctx) {
  ctx->outputs[0] = rf_tensor_retain(ctx->state);
  return NULL;
}

static const rf__kernel_def runtime_kernels[] = {
    {.op = "_Arg",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .init = rf__index_init,
     .compute = arg_compute},
    {.op = "_Retval",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .init = rf__index_init,
     .compute = retval_compute},
    {.op = "_Send",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .init = key_init,
     .compute = send_compute},
    {.op = "_Recv",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .init = key_init,
     .compute_async = recv_compute_async},
    {.op = "_Token",
     .device_type = RF_DEVICE_CPU,
     .cost = RF_COST_CHEAP,
     .init = rf__token_init,
     .destroy = rf__token_destroy,
     .compute = rf__token_compute},
};

rf_status *rf__register_cpu_runtime_kernels(void) {
  return rf__kernel_register_all(
      runtime_kernels, sizeof runtime_kernels / sizeof runtime_kernels[0]);
}
