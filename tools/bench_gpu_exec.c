/* tools/bench_gpu_exec.c - what the executor costs per GPU node: a chain
 * y_k = Add(y_{k-1}, x) of float32[4] tensors on the first --devices device
 * (x a variable set on the GPU by an init step, y_0 = x), run through a
 * session step that targets y_N (the step waits for the device's stream),
 * against the GPU Add kernel's own
 * compute function called N times in a loop on the same device and stream
 * with one cudaStreamSynchronize at the end: the same launches and the same
 * caching allocator, without the executor. Both chains end at N + 1, which
 * is checked once per length. */
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "bench_gpu.h"
#include "core/cuda_check.h"
#include "kernels/kernel.h"
#include "device/gpu/order.h"
#include "runtime/session_internal.h"
#include "tools.h"

#define MAX_CHAIN 1000

static const int lengths[BG_EXEC_ROWS] = {1, 10, 100, MAX_CHAIN};

typedef struct chain {
  rf_graph *g;
  rf_session *s;
  rf__device *dev; /* the session's device of the chain */
  rf_node *init;
  rf_output ends[BG_EXEC_ROWS]; /* y_N for each length */
  const rf__kernel_def *add;
  const rf_node *add_node; /* y_1: its attrs serve every direct call */
  void *add_state;
  rf_tensor *x; /* the variable's device value (retained) */
  int row;      /* the length being timed */
} chain;

static rf_status *build(chain *c, int gpu) {
  char dev[16];
  snprintf(dev, sizeof dev, "gpu:%d", gpu);
  RF_TOOL_CHECK(rf_graph_push_device(c->g, dev));
  rf_shape four = rf_shape_of(1, (int64_t)4);
  rf_output v = rf_variable(c->g, "v", RF_FLOAT32, four);
  rf_tensor *dims = NULL;
  RF_TOOL_CHECK(rf_tensor_new(RF_INT64, &(rf_shape){1, {1}}, NULL, &dims));
  rf_tensor_set(dims, 0, 4);
  rf_output d = rf_const(c->g, "dims", dims);
  rf_tensor_release(dims);
  rf_output one = rf_const_scalar(c->g, "one", RF_FLOAT32, 1);
  c->init = rf_assign(c->g, "init", v, rf_fill(c->g, "fill", d, one));
  rf_output x = rf_read_variable(c->g, "x", v), y = x;
  for (int k = 1, row = 0; k <= MAX_CHAIN; k++) {
    char name[32];
    snprintf(name, sizeof name, "y%d", k);
    y = rf_add(c->g, name, y, x);
    if (k == 1) c->add_node = y.node;
    if (k == lengths[row]) c->ends[row++] = y;
  }
  rf_graph_pop_device(c->g);
  return rf_graph_status(c->g);
}

static rf_status *setup(chain *c, const bench_gpu_env *env) {
  c->g = rf_graph_new();
  if (!c->g) return rf_status_new(RF_RESOURCE_EXHAUSTED, "bench: no memory");
  RF_TOOL_CHECK(build(c, env->index[0]));
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 1;
  o.num_gpu_devices = env->index[0] + 1;
  o.num_threads = env->threads;
  RF_TOOL_CHECK(rf_session_new(c->g, &o, &c->s));
  c->dev = &c->s->devices[o.num_cpu_devices + env->index[0]];
  RF_TOOL_CHECK(rf_session_run(c->s, NULL, 0, NULL, 0, &c->init, 1, NULL));
  rf__variable *v = NULL;
  rf_shape four = rf_shape_of(1, (int64_t)4);
  RF_TOOL_CHECK(rf__device_variable(c->dev, "v", RF_FLOAT32, &four, &v));
  pthread_mutex_lock(&v->mu);
  c->x = v->value ? rf_tensor_retain(v->value) : NULL;
  pthread_mutex_unlock(&v->mu);
  if (!c->x || !c->x->on_gpu)
    return rf_status_new(RF_INTERNAL, "bench: variable v has no device value");
  c->add = rf__kernel_find("Add", RF_DEVICE_GPU);
  if (!c->add || !c->add->compute)
    return rf_status_new(RF_INTERNAL, "bench: no synchronous GPU Add kernel");
  if (c->add->init) RF_TOOL_CHECK(c->add->init(c->add_node, &c->add_state));
  return NULL;
}

static void teardown(chain *c) {
  if (c->add && c->add->destroy && c->add_state) c->add->destroy(c->add_state);
  rf_tensor_release(c->x);
  rf_session_free(c->s);
  rf_graph_free(c->g);
}

static rf_status *session_step(void *arg) {
  chain *c = arg;
  return rf_session_run(c->s, NULL, 0, NULL, 0, &c->ends[c->row].node, 1, NULL);
}

/* N launches of the Add kernel, then one wait; *last (optional) gets the
 * chain's end. */
static rf_status *direct_chain(chain *c, rf_tensor **last) {
  RF_TOOL_CHECK(c->dev->enter(c->dev));
  rf_tensor *prev = rf_tensor_retain(c->x), *out = NULL;
  rf_tensor *in[2] = {NULL, c->x};
  rf__kernel_ctx ctx = {.node = c->add_node,
                        .state = c->add_state,
                        .num_inputs = 2,
                        .inputs = in,
                        .num_outputs = 1,
                        .outputs = &out,
                        .device = c->dev,
                        .def = c->add};
  rf_status *st = NULL;
  for (int k = 0; k < lengths[c->row] && !st; k++) {
    in[0] = prev;
    out = NULL;
    st = c->add->compute(&ctx);
    if (ctx.stream_taken) { /* as the executor does: device/gpu/order.h */
      rf__gpu_enqueue_end(c->dev->order);
      ctx.stream_taken = false;
    }
    /* released once enqueued, as the executor does: the allocator reuses a
     * block only for later work on the same stream */
    rf_tensor_release(prev);
    prev = out;
  }
  if (!st)
    st = RF_CUDA_STATUS(cudaStreamSynchronize((cudaStream_t)c->dev->stream));
  if (!st && last)
    *last = prev;
  else
    rf_tensor_release(prev);
  return st;
}

static rf_status *direct_step(void *arg) { return direct_chain(arg, NULL); }

static rf_status *check_end(const chain *c, const char *what, float got) {
  float want = (float)(lengths[c->row] + 1);
  if (got == want) return NULL;
  return rf_status_new(RF_INTERNAL,
                       "bench: the %s chain of %d Adds ended at %g, expected "
                       "%g",
                       what, lengths[c->row], got, want);
}

static rf_status *check(chain *c) {
  rf_tensor *y = NULL;
  RF_TOOL_CHECK(
      rf_session_run(c->s, NULL, 0, &c->ends[c->row], 1, NULL, 0, &y));
  float got = (float)rf_tensor_get(y, 3);
  rf_tensor_release(y);
  RF_TOOL_CHECK(check_end(c, "session", got));
  RF_TOOL_CHECK(direct_chain(c, &y));
  got = -1;
  rf_status *st = RF_CUDA_STATUS(cudaMemcpy(
      &got, (const float *)y->data + 3, sizeof got, cudaMemcpyDeviceToHost));
  rf_tensor_release(y);
  RF_TOOL_CHECK(st);
  return check_end(c, "direct", got);
}

rf_status *bench_gpu_executor(const bench_gpu_env *env, double min_time,
                              bench_gpu_exec_row rows[BG_EXEC_ROWS]) {
  chain c = {0};
  rf_status *st = setup(&c, env);
  for (int r = 0; r < BG_EXEC_ROWS && !st; r++) {
    c.row = r;
    rows[r] = (bench_gpu_exec_row){.nodes = lengths[r]};
    st = check(&c);
    static rf_status *(*const fns[])(void *) = {session_step, direct_step};
    double s[2];
    int k[2];
    if (!st) st = bench_gpu_time(fns, 2, &c, min_time, s, k);
    if (!st) {
      rows[r].session_s = s[0], rows[r].direct_s = s[1];
      rows[r].session_iters = k[0], rows[r].direct_iters = k[1];
    }
  }
  teardown(&c);
  return st;
}
