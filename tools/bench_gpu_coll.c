/* tools/bench_gpu_coll.c - one collective at one size on the GPU devices,
 * called two ways on the same input buffers: a session step (Variable ->
 * ReadVariable -> K independent collectives of those inputs on every device,
 * targets only, so no value leaves the GPUs) and K raw backend calls on the
 * devices' own streams (the CUDA-kernel backend's launch entry, or NCCL),
 * then one wait. The inputs are the variables' device buffers, which the raw
 * call reads through the session's internals; only the raw call's outputs
 * are its own (shared by its K calls). Rank i's input holds i + 1 in every
 * element, so every expected output is exact in float32. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gpu.h"
#include "comm/cuda/coll_kernels.h"
#include "comm/gpu/gpu_coll.h"
#include "core/cuda_check.h"
#include "ringflow/collectives.h"
#include "device/gpu/gpu.h"
#include "device/gpu/order.h"
#include "runtime/session_internal.h"
#include "tools.h"

#define FETCH_LIMIT ((int64_t)256 << 20) /* bytes a check fetches at most */

struct bench_gpu_coll {
  const bench_gpu_env *env;
  bench_coll c;
  int n, nin;                  /* ranks; ranks with an input */
  int64_t in_count, out_count; /* float32 elements per rank */
  rf_graph *g;
  rf_status *graph_err; /* the first failed push of a device */
  rf_session *s;
  rf_node *inits[BG_MAX_DEV];
  int k; /* collectives per step */
  rf_node *targets[BG_MAX_OUT];
  rf_node *reads[BG_MAX_DEV]; /* the base step's targets */
  rf_output fetches[BG_MAX_OUT];
  int fetch_rank[BG_MAX_OUT];
  int ntargets, nfetches;
  rf__device *dev[BG_MAX_DEV]; /* rank i's device of the session */
  const void *in[BG_MAX_DEV];  /* the variables' device buffers */
  void *out[BG_MAX_DEV];       /* the raw call's outputs; NULL: none */
  rf__cuda_coll_args args;     /* the raw call (CUDA path) */
  bool raw_events; /* the raw call with the backend's cross-stream waits */
};

/* Whether rank r receives an output (the GPU backends' rule; the root of
 * both reduce and broadcast is rank 0 here). */
static bool has_output(bench_coll c, int r) {
  if (c == BC_REDUCE) return r == 0;
  if (c == BC_BROADCAST) return r != 0;
  return true;
}

/* Pushes rank i's device as b->g's device (keeping the first error). */
static void push_gpu(bench_gpu_coll *b, int i) {
  char dev[16];
  snprintf(dev, sizeof dev, "gpu:%d", b->env->index[i]);
  rf_status *st = rf_graph_push_device(b->g, dev);
  if (st && !b->graph_err)
    b->graph_err = st;
  else
    rf_status_free(st);
}

/* Rank i: a variable filled with i + 1 by an init node, and its read. */
static rf_output input_of(bench_gpu_coll *b, int i) {
  char name[32];
  push_gpu(b, i);
  rf_shape shape = rf_shape_of(1, b->in_count);
  snprintf(name, sizeof name, "v%d", i);
  rf_output v = rf_variable(b->g, name, RF_FLOAT32, shape);
  rf_tensor *dims = NULL;
  rf_shape one = rf_shape_of(1, (int64_t)1);
  rf_output fill = {0};
  if (!rf_tensor_new(RF_INT64, &one, NULL, &dims)) {
    rf_tensor_set(dims, 0, (double)b->in_count);
    snprintf(name, sizeof name, "dims%d", i);
    rf_output d = rf_const(b->g, name, dims);
    rf_tensor_release(dims);
    snprintf(name, sizeof name, "value%d", i);
    rf_output val = rf_const_scalar(b->g, name, RF_FLOAT32, i + 1);
    snprintf(name, sizeof name, "fill%d", i);
    fill = rf_fill(b->g, name, d, val);
  }
  snprintf(name, sizeof name, "init%d", i);
  b->inits[i] = rf_assign(b->g, name, v, fill);
  snprintf(name, sizeof name, "x%d", i);
  rf_output x = rf_read_variable(b->g, name, v);
  rf_graph_pop_device(b->g);
  b->reads[i] = x.node;
  return x;
}

/* y consumed on device i by an Identity (the target). */
static void consume_on(bench_gpu_coll *b, int i, rf_output y) {
  char name[32];
  snprintf(name, sizeof name, "y%d", i);
  push_gpu(b, i);
  rf_output o = rf_identity(b->g, name, y);
  rf_graph_pop_device(b->g);
  b->targets[b->ntargets++] = o.node;
  b->fetch_rank[b->nfetches] = i;
  b->fetches[b->nfetches++] = o;
}

/* The graph's first error, or NULL. */
static rf_status *built(bench_gpu_coll *b) {
  rf_status *st = b->graph_err;
  b->graph_err = NULL;
  if (st) return st;
  return rf_graph_status(b->g);
}

/* Collective number j (named collJ) of the inputs xs. */
static rf_status *add_collective(bench_gpu_coll *b, const rf_output *xs,
                                 int j) {
  rf_output ys[BG_MAX_DEV];
  int n = b->n;
  char name[32];
  snprintf(name, sizeof name, "coll%d", j);
  switch (b->c) {
    case BC_ALL_REDUCE:
      rf_all_reduce_n(b->g, name, xs, n, RF_REDUCE_SUM, ys);
      break;
    case BC_ALL_GATHER: rf_all_gather_n(b->g, name, xs, n, ys); break;
    case BC_REDUCE_SCATTER:
      rf_reduce_scatter_n(b->g, name, xs, n, RF_REDUCE_SUM, ys);
      break;
    case BC_REDUCE: {
      push_gpu(b, 0);
      rf_output r = rf_reduce(b->g, name, xs, n, RF_REDUCE_SUM);
      rf_graph_pop_device(b->g);
      consume_on(b, 0, r);
      return NULL;
    }
    case BC_BROADCAST: {
      rf_output y = rf_broadcast(b->g, name, xs[0]);
      for (int i = 0; i < n; i++) consume_on(b, i, y);
      return NULL;
    }
    default: return rf_status_new(RF_INVALID_ARGUMENT, "unknown collective");
  }
  /* The participants themselves are the targets. */
  for (int i = 0; i < n; i++) {
    b->targets[b->ntargets++] = ys[i].node;
    b->fetch_rank[b->nfetches] = i;
    b->fetches[b->nfetches++] = ys[i];
  }
  return NULL;
}

static rf_status *build(bench_gpu_coll *b) {
  rf_output xs[BG_MAX_DEV];
  for (int i = 0; i < b->nin; i++) xs[i] = input_of(b, i);
  for (int j = 0; j < b->k; j++) RF_TOOL_CHECK(add_collective(b, xs, j));
  return built(b);
}

static rf_status *make_session(bench_gpu_coll *b) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 1;
  o.num_gpu_devices = b->env->count;
  o.num_threads = b->env->threads;
  o.collective_timeout_ms = b->env->timeout_ms;
  RF_TOOL_CHECK(rf_session_new(b->g, &o, &b->s));
  rf_session *s = b->s;
  for (int i = 0; i < b->n; i++) {
    b->dev[i] = &s->devices[o.num_cpu_devices + b->env->index[i]];
    if (b->dev[i]->gpu_ordinal != b->env->ordinals[i])
      return rf_status_new(RF_INTERNAL,
                           "bench: gpu:%d runs on physical GPU %d, expected "
                           "%d",
                           b->env->index[i], b->dev[i]->gpu_ordinal,
                           b->env->ordinals[i]);
  }
  return NULL;
}

/* The variables' device buffers (after the init step). */
static rf_status *find_inputs(bench_gpu_coll *b) {
  rf_shape shape = rf_shape_of(1, b->in_count);
  for (int i = 0; i < b->nin; i++) {
    char name[32];
    snprintf(name, sizeof name, "v%d", i);
    rf__variable *v = NULL;
    RF_TOOL_CHECK(rf__device_variable(b->dev[i], name, RF_FLOAT32, &shape, &v));
    pthread_mutex_lock(&v->mu);
    const rf_tensor *t = v->value;
    b->in[i] = t && t->on_gpu ? t->data : NULL;
    pthread_mutex_unlock(&v->mu);
    if (!b->in[i])
      return rf_status_new(RF_INTERNAL,
                           "bench: variable %s on gpu:%d holds no device "
                           "value after the init step",
                           name, b->env->index[i]);
  }
  return NULL;
}

static rf_status *alloc_raw_outputs(bench_gpu_coll *b) {
  for (int r = 0; r < b->n; r++) {
    if (!has_output(b->c, r) || b->out_count == 0) continue;
    RF_TOOL_CHECK(b->dev[r]->enter(b->dev[r]));
    RF_CUDA_CHECK(cudaMalloc(&b->out[r], (size_t)b->out_count * 4));
    /* never time or check what a first touch or an old run left there */
    RF_CUDA_CHECK(cudaMemset(b->out[r], 0xff, (size_t)b->out_count * 4));
  }
  /* The devices' streams are non-blocking: they do not wait for cudaMemset
   * (legacy default stream) by themselves. */
  RF_CUDA_CHECK(cudaDeviceSynchronize());
  return NULL;
}

/* The CUDA-kernel backend's arguments, as comm/cuda/backend.c makes them. */
static void cuda_args(bench_gpu_coll *b) {
  rf__cuda_coll_args *a = &b->args;
  memset(a, 0, sizeof *a);
  a->dtype = RF_FLOAT32;
  a->op = 0; /* RF_REDUCE_SUM */
  a->n = b->c == BC_BROADCAST ? 1 : b->n;
  a->count = b->in_count;
  a->mode = b->c == BC_REDUCE_SCATTER ? RF_CUDA_COLL_REDUCE_SCATTER
            : b->c == BC_ALL_GATHER || b->c == BC_BROADCAST
                ? RF_CUDA_COLL_GATHER
                : RF_CUDA_COLL_REDUCE;
  for (int i = 0; i < a->n; i++) a->in[i] = b->in[i];
  for (int r = 0; r < b->n; r++) {
    if (!b->out[r]) continue;
    if (a->mode == RF_CUDA_COLL_REDUCE_SCATTER)
      a->out[r] = b->out[r];
    else
      a->out[a->num_outs++] = b->out[r];
  }
  if (a->mode == RF_CUDA_COLL_REDUCE_SCATTER) a->num_outs = b->n;
}

void bench_gpu_coll_free(bench_gpu_coll *b) {
  if (!b) return;
  for (int r = 0; r < b->n; r++)
    if (b->out[r]) {
      rf_status_free(b->dev[r]->enter(b->dev[r]));
      (void)cudaFree(b->out[r]);
    }
  rf_session_free(b->s);
  rf_graph_free(b->g);
  free(b);
}

rf_status *bench_gpu_coll_new(const bench_gpu_env *env, bench_coll c,
                              int64_t bytes, bench_gpu_coll **out) {
  *out = NULL;
  int n = env->n;
  int64_t count = bytes / 4, per = count / n;
  if ((c == BC_ALL_GATHER || c == BC_REDUCE_SCATTER) && per == 0) return NULL;
  /* A broadcast whose only consumer is its own device is removed by the
   * lowering: nothing to compare. */
  if (count == 0 || (c == BC_BROADCAST && n == 1)) return NULL;
  bench_gpu_coll *b = calloc(1, sizeof *b);
  if (!b) return rf_status_new(RF_RESOURCE_EXHAUSTED, "bench: no memory");
  b->env = env;
  b->c = c;
  b->n = n;
  b->k = env->per_step;
  b->nin = c == BC_BROADCAST ? 1 : n; /* broadcast: the root's input */
  b->in_count = c == BC_ALL_GATHER       ? per
                : c == BC_REDUCE_SCATTER ? per * n
                                         : count;
  b->out_count = c == BC_ALL_GATHER       ? per * n
                 : c == BC_REDUCE_SCATTER ? per
                                          : count;
  b->g = rf_graph_new();
  rf_status *st =
      b->g ? build(b) : rf_status_new(RF_RESOURCE_EXHAUSTED, "no memory");
  if (!st) st = make_session(b);
  if (!st) st = rf_session_run(b->s, NULL, 0, NULL, 0, b->inits, b->nin, NULL);
  if (!st) st = find_inputs(b);
  if (!st) st = alloc_raw_outputs(b);
  if (st) {
    bench_gpu_coll_free(b);
    return st;
  }
  cuda_args(b);
  *out = b;
  return NULL;
}

rf_status *bench_gpu_coll_step(void *coll) {
  bench_gpu_coll *b = coll;
  return rf_session_run(b->s, NULL, 0, NULL, 0, b->targets, b->ntargets, NULL);
}

rf_status *bench_gpu_coll_step_waiting(void *coll) {
  rf__gpu_coll_wait_for_kernels(true);
  rf_status *st = bench_gpu_coll_step(coll);
  rf__gpu_coll_wait_for_kernels(false);
  return st;
}

/* The session's gpu_sync_on_finish, switched between the timed calls (one
 * thread: nothing runs meanwhile). */
static void sync_on_finish(bench_gpu_coll *b, bool on) {
  b->s->opts.gpu_sync_on_finish = on;
}

rf_status *bench_gpu_coll_pipe(void *coll) {
  bench_gpu_coll *b = coll;
  sync_on_finish(b, false);
  rf_status *st = NULL;
  for (int i = 0; i < b->env->pipeline && !st; i++) st = bench_gpu_coll_step(b);
  rf_status *sync = rf_session_sync(b->s);
  sync_on_finish(b, true);
  if (!st) return sync;
  rf_status_free(sync);
  return st;
}

rf_status *bench_gpu_coll_base(void *coll) {
  bench_gpu_coll *b = coll;
  return rf_session_run(b->s, NULL, 0, NULL, 0, b->reads, b->nin, NULL);
}

#ifdef RF_HAVE_NCCL
/* Rank r's part of the raw NCCL call, as comm/nccl/backend.c issues it. */
static ncclResult_t nccl_issue(bench_gpu_coll *b, int r) {
  ncclComm_t comm = (ncclComm_t)b->env->comms[r];
  cudaStream_t s = (cudaStream_t)b->dev[r]->stream;
  const void *in = r < b->nin ? b->in[r] : NULL;
  void *out = b->out[r];
  size_t count = (size_t)b->in_count;
  switch (b->c) {
    case BC_ALL_REDUCE:
      return ncclAllReduce(in, out, count, ncclFloat32, ncclSum, comm, s);
    case BC_REDUCE:
      return ncclReduce(in, out, count, ncclFloat32, ncclSum, 0, comm, s);
    case BC_BROADCAST: /* in place at the root, which has no output */
      return ncclBroadcast(in, r == 0 ? (void *)in : out, count, ncclFloat32, 0,
                           comm, s);
    case BC_ALL_GATHER:
      return ncclAllGather(in, out, count, ncclFloat32, comm, s);
    case BC_REDUCE_SCATTER:
      return ncclReduceScatter(in, out, count / (size_t)b->n, ncclFloat32,
                               ncclSum, comm, s);
    default: return ncclInvalidArgument;
  }
}
#endif

/* Enqueues one raw call; *nstreams gets how many of dev[0..) it used (the
 * CUDA path: the leader's only). */
static rf_status *raw_enqueue_one(bench_gpu_coll *b, int *nstreams) {
#ifdef RF_HAVE_NCCL
  if (b->env->nccl) {
    RF_NCCL_CHECK(ncclGroupStart());
    ncclResult_t first = ncclSuccess;
    for (int r = 0; r < b->n && first == ncclSuccess; r++)
      first = nccl_issue(b, r);
    ncclResult_t end = ncclGroupEnd();
    RF_NCCL_CHECK(first);
    RF_NCCL_CHECK(end);
    *nstreams = b->n;
    return NULL;
  }
#endif
  const rf__device *lead = b->dev[0]; /* the root, or rank 0 */
  const rf__gpu_context *ctx = lead->gpu;
  RF_TOOL_CHECK(lead->enter(lead));
  /* with events: the backend's cross-stream waits around the kernel, made
   * as comm/cuda/backend.c makes them (so the leader's wait for a stream
   * that enqueued nothing since it last waited is left out there too) */
  for (int r = 1; b->raw_events && r < b->n; r++)
    RF_TOOL_CHECK(rf__gpu_order_after(b->dev[r], &lead, 1));
  rf__gpu_enqueue_begin(lead->order);
  rf_status *st =
      rf__cuda_coll_launch(&b->args, lead->stream, ctx->multiprocessors);
  rf__gpu_enqueue_end(lead->order);
  RF_TOOL_CHECK(st);
  *nstreams = 1;
  if (!b->raw_events || b->n == 1) return NULL;
  RF_TOOL_CHECK(
      rf__gpu_order_after(lead, (const rf__device *const *)b->dev, b->n));
  *nstreams = b->n;
  return NULL;
}

/* Enqueues the step's K raw calls. */
static rf_status *raw_enqueue(bench_gpu_coll *b, int *nstreams) {
  for (int j = 0; j < b->k; j++) RF_TOOL_CHECK(raw_enqueue_one(b, nstreams));
  return NULL;
}

/* `calls` times the K raw calls, then one wait of each stream used. */
static rf_status *raw_calls(bench_gpu_coll *b, int calls) {
  int ns = 0;
  for (int i = 0; i < calls; i++) RF_TOOL_CHECK(raw_enqueue(b, &ns));
  for (int r = 0; r < ns; r++) {
    RF_TOOL_CHECK(b->dev[r]->enter(b->dev[r]));
    RF_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)b->dev[r]->stream));
  }
  return NULL;
}

rf_status *bench_gpu_coll_raw(void *coll) { return raw_calls(coll, 1); }

rf_status *bench_gpu_coll_pipe_raw(void *coll) {
  bench_gpu_coll *b = coll;
  return raw_calls(b, b->env->pipeline);
}

rf_status *bench_gpu_coll_pipe_raw_events(void *coll) {
  bench_gpu_coll *b = coll;
  b->raw_events = !b->env->nccl;
  rf_status *st = raw_calls(b, b->env->pipeline);
  b->raw_events = false;
  return st;
}

rf_status *bench_gpu_coll_trace(bench_gpu_coll *b, const char *path) {
  RF_TOOL_CHECK(rf_session_trace_next_run(b->s, path));
  return bench_gpu_coll_step(b);
}

void bench_gpu_coll_fresh(const bench_gpu_coll *b, int64_t *blocks) {
  *blocks = 0;
  for (int r = 0; r < b->n; r++) {
    rf__gpu_alloc_stats st;
    rf__gpu_device_stats(b->dev[r], &st);
    *blocks += st.fresh;
  }
}

/* The listed input (0..n-1, holding its number + 1) whose block is block j
 * of an all-gather: the raw calls take the list's order; the session's
 * collectives rank in device order (collectives.h), so there block j is the
 * j-th lowest GPU index's (--devices gpu:1,0: block 0 is gpu:0's, listed
 * second). */
static int gathered_input(const bench_gpu_coll *b, bool session, int j) {
  if (!session) return j;
  for (int i = 0; i < b->n; i++) {
    int rank = 0;
    for (int e = 0; e < b->n; e++) rank += b->env->index[e] < b->env->index[i];
    if (rank == j) return i;
  }
  return j;
}

/* Element k of rank r's output. */
static double expected(const bench_gpu_coll *b, bool session, int64_t k) {
  int n = b->n;
  switch (b->c) {
    case BC_BROADCAST: return 1;
    case BC_ALL_GATHER:
      return (double)(gathered_input(b, session, (int)(k / b->in_count)) + 1);
    default: return (double)n * (n + 1) / 2; /* sums of 1..n */
  }
}

static rf_status *probe(const bench_gpu_coll *b, const char *what, int r,
                        int64_t m, double (*get)(const void *, int64_t),
                        const void *src) {
  int64_t at[3] = {0, m / 2, m - 1};
  bool session = strcmp(what, "session") == 0;
  for (int p = 0; p < 3; p++) {
    double got = get(src, at[p]), want = expected(b, session, at[p]);
    if (got != want)
      return rf_status_new(RF_INTERNAL,
                           "bench: %s %s on %d GPUs gave %g at element %lld "
                           "of gpu:%d's output, expected %g",
                           what, bench_coll_name(b->c), b->n, got,
                           (long long)at[p], b->env->index[r], want);
  }
  return NULL;
}

static double get_device(const void *src, int64_t k) {
  float v = -1;
  if (cudaMemcpy(&v, (const float *)src + k, 4, cudaMemcpyDeviceToHost) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return v;
}

static double get_tensor(const void *src, int64_t k) {
  return rf_tensor_get((const rf_tensor *)src, k);
}

rf_status *bench_gpu_coll_check(bench_gpu_coll *b, bool pipelined) {
  RF_TOOL_CHECK(pipelined ? bench_gpu_coll_pipe_raw(b) : bench_gpu_coll_raw(b));
  for (int r = 0; r < b->n; r++) {
    if (!b->out[r]) continue;
    RF_TOOL_CHECK(b->dev[r]->enter(b->dev[r]));
    RF_TOOL_CHECK(probe(b, "raw", r, b->out_count, get_device, b->out[r]));
  }
  if (b->out_count * 4 * b->nfetches > FETCH_LIMIT) return NULL;
  rf_tensor **outs = calloc((size_t)b->nfetches, sizeof *outs);
  if (!outs) return rf_status_new(RF_RESOURCE_EXHAUSTED, "bench: no memory");
  rf_status *st = NULL;
  if (pipelined) sync_on_finish(b, false);
  for (int i = 0; pipelined && i < b->env->pipeline && !st; i++)
    st = bench_gpu_coll_step(b);
  if (!st)
    st = rf_session_run(b->s, NULL, 0, b->fetches, b->nfetches, NULL, 0, outs);
  if (pipelined) {
    rf_status *sync = rf_session_sync(b->s);
    sync_on_finish(b, true);
    if (!st)
      st = sync;
    else
      rf_status_free(sync);
  }
  for (int f = 0; f < b->nfetches && !st; f++)
    st = probe(b, "session", b->fetch_rank[f], rf_tensor_num_elements(outs[f]),
               get_tensor, outs[f]);
  for (int f = 0; f < b->nfetches; f++) rf_tensor_release(outs[f]);
  free(outs);
  return st;
}

double bench_gpu_coll_traffic(const bench_gpu_coll *b) {
  double outs = 0;
  for (int r = 0; r < b->n; r++) outs += has_output(b->c, r);
  return 4.0 *
         ((double)b->nin * (double)b->in_count + outs * (double)b->out_count);
}
