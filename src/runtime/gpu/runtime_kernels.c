/* runtime/gpu/runtime_kernels.c - GPU kernels of the runtime ops. They move
 * values between host and device memory on the device's stream:
 *   _Arg     copies the fed tensor to the device (stream-ordered): host
 *            memory, or the caller's device memory (after the legacy
 *            default stream's work: rf_tensor_new_external_gpu).
 *   _Retval  copies the value to pinned host memory; done after the copy
 *            (at once while the step is captured as a CUDA graph: the
 *            session reads the buffer after each launch).
 *   _Send    to a CPU device: copies to pinned host memory, then sends it; to
 *            a GPU device: sends the device tensor once the stream has
 *            produced it. Either way a device value is sent only after
 *            everything queued on the stream before it has run; a host-memory
 *            value (a control edge's token, a shape) is complete when its
 *            kernel returns, and goes at once.
 *   _Recv    copies what arrives into its own device buffer (host to device,
 *            or device to device / peer), releasing the source only after the
 *            copy ran; with host_memory=true it hands over host memory.
 *   _Token   the empty host tensor of a crossing control edge.
 * A rendezvous value is always complete when sent, so receivers never wait
 * for the sender's stream. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/mem.h"
#include "kernels/cpu/runtime_kernels.h"
#include "kernels/kernel.h"
#include "device/gpu/gpu.h"
#include "device/rendezvous.h"
#include "device/step.h"
#include "runtime/families.h"

/* Wraps a status without the node's name (CUDA, rendezvous) into one naming
 * node, op and device. */
static rf_status *named(rf__kernel_ctx *ctx, rf_status *st) {
  if (!st) return NULL;
  return rf__kernel_error_at(ctx, st);
}

/* One stream-ordered operation of an async kernel: completes (fn) on a pool
 * thread once the stream has run it. `keep` is released then. */
typedef struct pending {
  rf__gpu_notify n; /* first: the completion gets it back */
  rf__kernel_ctx *ctx;
  rf_tensor *keep;   /* source buffer kept alive until the copy ran */
  rf_tensor *result; /* what the operation produced (owned until used) */
} pending;

/* Queues `fn` behind the stream's work; on error frees everything - after
 * waiting for the stream, as a copy already queued may still use the
 * buffers. */
static void finish_after_stream(rf__kernel_ctx *ctx, rf_tensor *keep,
                                rf_tensor *result, rf__gpu_notify_fn fn) {
  pending *p = rf__malloc(sizeof *p);
  rf_status *st = p ? NULL : rf__oom();
  if (p) {
    *p = (pending){.ctx = ctx, .keep = keep, .result = result};
    st = rf__gpu_notify_when_done(ctx->device, &p->n, fn);
  }
  if (!st) return;
  rf_status_free(rf__gpu_sync(ctx->device));
  rf__free(p);
  rf_tensor_release(keep);
  rf_tensor_release(result);
  ctx->done(ctx, named(ctx, st));
}

/* ---- _Arg (synchronous: stream order covers its consumers) ---- */

static rf_status *arg_compute(rf__kernel_ctx *ctx) {
  rf_tensor *v;
  RF_CHECK(rf__arg_fed(ctx, true, &v));
  /* Device memory fed by the caller (rf_tensor_new_external_gpu) may still
   * be written by its producer's work ordered before the legacy stream. */
  if (v->on_gpu)
    RF_CHECK(named(ctx, rf__gpu_wait_legacy_stream(ctx->device,
                                                   rf__gpu_tensor_ordinal(v))));
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, v->dtype, &v->shape, &out));
  /* The fed tensor is borrowed until the run returns, and the run waits for
   * the stream before it returns: the copy may read it until then. */
  return named(ctx, rf__gpu_copy(ctx->device, out, v));
}

/* ---- _Retval ---- */

static void retval_copied(rf__gpu_notify *n, rf_status *st) {
  pending *p = (pending *)n;
  rf__kernel_ctx *ctx = p->ctx;
  if (st) {
    rf_tensor_release(p->result);
  } else {
    ctx->step->fetches[(intptr_t)ctx->state] = p->result;
  }
  rf__free(p);
  ctx->done(ctx, named(ctx, st));
}

static void retval_compute_async(rf__kernel_ctx *ctx, rf__done_fn done) {
  ctx->done = done;
  rf_status *st = rf__need_step(ctx);
  int64_t i = (intptr_t)ctx->state;
  if (!st && (i >= ctx->step->num_fetches || ctx->step->fetches[i]))
    st = rf__kernel_error(ctx, RF_INTERNAL,
                          "fetch index %lld is out of range or already "
                          "filled (the step fetches %d)",
                          (long long)i, ctx->step->num_fetches);
  if (st) {
    done(ctx, st);
    return;
  }
  rf_tensor *in = ctx->inputs[0];
  if (!in->on_gpu) {          /* a host-memory output: nothing to copy */
    if (ctx->step->capturing) /* a replay would hand back this same value */
      atomic_store(&ctx->step->not_replayable,
                   "a fetched value is made on the host");
    ctx->step->fetches[i] = rf_tensor_retain(in);
    done(ctx, NULL);
    return;
  }
  rf_tensor *host = NULL;
  /* An async kernel runs outside the executor's capture_mu: while a step
   * is captured, take it for the copy (device/device.h says why). */
  rf__device *d = ctx->device;
  bool capturing = ctx->step->capturing;
  if (capturing) pthread_mutex_lock(&d->capture_mu);
  st = rf__gpu_new_host(d, in, &host);
  if (!st) st = rf__gpu_copy(d, host, in);
  if (capturing) pthread_mutex_unlock(&d->capture_mu);
  if (st) {
    rf_tensor_release(host);
    done(ctx, named(ctx, st));
    return;
  }
  if (ctx->step->capturing) { /* the copy is recorded; each launch makes it */
    ctx->step->fetches[i] = host;
    done(ctx, NULL);
    return;
  }
  /* The input stays alive (the executor holds it) until done. */
  finish_after_stream(ctx, NULL, host, retval_copied);
}

/* ---- _Send ---- */

typedef struct send_state {
  const char *key; /* owned by the node's attrs */
  /* The receiver wants host memory: it is on a CPU device, or it feeds
   * host-memory inputs of a GPU kernel. The copy then happens here, on the
   * stream that produced the value. */
  bool to_host;
} send_state;

/* The key ends with "[/host];<receiving device>" (passes/partition.c). */
static rf_status *send_init(const rf_node *node, void **state) {
  const char *key;
  RF_CHECK(rf__attrs_get_string(&node->attrs, "key", &key));
  const char *semi = strrchr(key, ';');
  rf__device_name dst;
  rf_status *st = semi ? rf__device_name_parse(semi + 1, &dst)
                       : rf__internal("no ';<device>' at its end");
  if (st) return rf__status_prefix(st, "_Send key '%s': receiving device", key);
  send_state *s = rf__malloc(sizeof *s);
  RF_CHECK_ALLOC(s);
  s->key = key;
  s->to_host = dst.type != RF_DEVICE_GPU ||
               (semi - key >= 5 && strncmp(semi - 5, "/host", 5) == 0);
  *state = s;
  return NULL;
}

static void free_state(void *state) { rf__free(state); }

static void send_ready(rf__gpu_notify *n, rf_status *st) {
  pending *p = (pending *)n;
  rf__kernel_ctx *ctx = p->ctx;
  const send_state *s = ctx->state;
  if (!st)
    st = rf__rendezvous_send(ctx->step->rendezvous, ctx->step->id, s->key,
                             p->result);
  rf_tensor_release(p->result); /* the rendezvous holds its own reference */
  rf__free(p);
  ctx->done(ctx, named(ctx, st));
}

static void send_compute_async(rf__kernel_ctx *ctx, rf__done_fn done) {
  ctx->done = done;
  rf_status *st = rf__need_step(ctx);
  if (st) {
    done(ctx, st);
    return;
  }
  const send_state *s = ctx->state;
  rf_tensor *in = ctx->inputs[0], *value = NULL;
  if (!in->on_gpu) { /* nothing on the stream to wait for */
    st = rf__rendezvous_send(ctx->step->rendezvous, ctx->step->id, s->key, in);
    done(ctx, named(ctx, st));
    return;
  }
  if (s->to_host) {
    st = rf__gpu_new_host(ctx->device, in, &value);
    if (!st) st = rf__gpu_copy(ctx->device, value, in);
  } else {
    value = rf_tensor_retain(in);
  }
  if (st) {
    rf_tensor_release(value);
    done(ctx, named(ctx, st));
    return;
  }
  finish_after_stream(ctx, NULL, value, send_ready);
}

/* ---- _Recv ---- */

typedef struct recv_state {
  const char *key;
  bool host_memory; /* feeds a host-memory input: hand over host memory */
} recv_state;

static rf_status *recv_init(const rf_node *node, void **state) {
  const char *key;
  bool host = false;
  RF_CHECK(rf__attrs_get_string(&node->attrs, "key", &key));
  if (rf__attrs_find(&node->attrs, "host_memory"))
    RF_CHECK(rf__attrs_get_bool(&node->attrs, "host_memory", &host));
  recv_state *s = rf__malloc(sizeof *s);
  RF_CHECK_ALLOC(s);
  s->key = key;
  s->host_memory = host;
  *state = s;
  return NULL;
}

static void recv_copied(rf__gpu_notify *n, rf_status *st) {
  pending *p = (pending *)n;
  rf__kernel_ctx *ctx = p->ctx;
  rf_tensor_release(p->keep);
  if (st)
    rf_tensor_release(p->result);
  else
    ctx->outputs[0] = p->result;
  rf__free(p);
  ctx->done(ctx, named(ctx, st));
}

/* Puts `value` (owned) where the consumers want it. */
static void recv_place(rf__kernel_ctx *ctx, rf_tensor *value) {
  const recv_state *s = ctx->state;
  bool want_device = !s->host_memory;
  /* Host memory is handed over as it is. A device tensor from another
   * device is always copied: its buffer belongs to the sender's cache and
   * may only be reused in the sender's stream order. */
  if (!want_device && !value->on_gpu) {
    ctx->outputs[0] = value;
    ctx->done(ctx, NULL);
    return;
  }
  rf_tensor *out = NULL;
  rf_status *st = ctx->device->enter(ctx->device);
  if (!st)
    st = want_device ? rf__gpu_new_device(ctx->device, value, &out)
                     : rf__gpu_new_host(ctx->device, value, &out);
  if (!st && value->nbytes == 0) { /* nothing to copy, nothing to wait for */
    rf_tensor_release(value);
    ctx->outputs[0] = out;
    ctx->done(ctx, NULL);
    return;
  }
  if (!st) st = rf__gpu_copy(ctx->device, out, value);
  if (st) {
    rf_tensor_release(value);
    rf_tensor_release(out);
    ctx->done(ctx, named(ctx, st));
    return;
  }
  finish_after_stream(ctx, value, out, recv_copied);
}

static void recv_arrived(void *arg, rf_status *st, rf_tensor *value) {
  rf__kernel_ctx *ctx = arg;
  if (st) {
    ctx->done(ctx, st);
    return;
  }
  if (value->dtype != ctx->node->out_dtypes[0]) {
    rf_dtype got = value->dtype;
    rf_tensor_release(value);
    ctx->done(ctx, rf__kernel_error(ctx, RF_INTERNAL,
                                    "received a %s tensor, expected %s",
                                    rf_dtype_name(got),
                                    rf_dtype_name(ctx->node->out_dtypes[0])));
    return;
  }
  recv_place(ctx, value);
}

static void recv_compute_async(rf__kernel_ctx *ctx, rf__done_fn done) {
  ctx->done = done;
  rf_status *st = rf__need_step(ctx);
  if (st) {
    done(ctx, st);
    return;
  }
  const recv_state *s = ctx->state;
  rf__rendezvous_recv(ctx->step->rendezvous, ctx->step->id, s->key,
                      recv_arrived, ctx);
}

/* ---- _Token: the CPU kernel's functions (an empty host tensor) ---- */

static const rf__kernel_def gpu_runtime_kernels[] = {
    {.op = "_Arg",
     .device_type = RF_DEVICE_GPU,
     .init = rf__index_init,
     .compute = arg_compute},
    {.op = "_Retval",
     .device_type = RF_DEVICE_GPU,
     .cost = RF_COST_CHEAP, /* starts stream work, or host work alone */
     .init = rf__index_init,
     .compute_async = retval_compute_async},
    {.op = "_Send",
     .device_type = RF_DEVICE_GPU,
     .cost = RF_COST_CHEAP, /* starts stream work, or host work alone */
     .init = send_init,
     .destroy = free_state,
     .compute_async = send_compute_async},
    {.op = "_Recv",
     .device_type = RF_DEVICE_GPU,
     .cost = RF_COST_CHEAP, /* starts stream work, or host work alone */
     .init = recv_init,
     .destroy = free_state,
     .compute_async = recv_compute_async},
    {.op = "_Token",
     .device_type = RF_DEVICE_GPU,
     .cost = RF_COST_CHEAP,
     .init = rf__token_init,
     .destroy = rf__token_destroy,
     .compute = rf__token_compute,
     .host_memory_outputs = 1u},
};

rf_status *rf__register_gpu_runtime_kernels(void) {
  for (size_t i = 0;
       i < sizeof gpu_runtime_kernels / sizeof gpu_runtime_kernels[0]; i++)
    RF_CHECK(rf__kernel_register(&gpu_runtime_kernels[i]));
  return NULL;
}
