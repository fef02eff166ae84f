/* tests/test_gpu_pipeline.c - steps that return before their GPU work has
 * run (rf_session_options.gpu_sync_on_finish = 0) and rf_session_sync:
 *   - hundreds of pipelined steps whose data changes every step (variables
 *     updated by every step, an all-reduce reading them across 4 virtual
 *     GPUs) give exactly the values computed here, fetched mid-stream and
 *     after rf_session_sync; two threads pipelining one session as well;
 *   - a step check (how NCCL errors surface) of a pipelined step runs only
 *     once its stream has passed the step, and its error comes back once:
 *     from rf_session_sync, or from the next run (which then does not run);
 *     with the option on, from the step's own run;
 *   - a participant that never arrives fails its (pipelined) step promptly
 *     and the session goes on;
 *   - a one-rank NCCL collective (with NCCL) whose check comes long after
 *     the collective timeout is not mistaken for a stuck one;
 *   - freeing a session with work in flight;
 *   - the leader of a collective of virtual GPUs leaves out its waits for
 *     streams that enqueued nothing since they waited for it, and only
 *     those (device/gpu/order.h).
 * Without a GPU every test skips ("GPU tests skipped: <reason>"). */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringflow/collectives.h"
#include "runtime/session_internal.h"
#include "device/step.h"
#include "runtime_test_ops.h"
#ifdef RF_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "comm/gpu/gpu_coll.h"
#include "device/gpu/gpu.h"
#include "device/gpu/order.h"
#endif

#define NDEV 4

/* ---- TestLateCheck: a GPU kernel with a step check ---- */

/* TestLateCheck(x: T) -> x. On its device's stream it enqueues a host
 * function that marks its record as reached (after waiting for `gate` when
 * the node's gate attr is set), and it adds a step check that returns
 * INTERNAL "late trouble: <message>" (nothing when the message is empty).
 * The check counts a violation if it runs before the stream reached the
 * mark: a check must only run once the step's GPU work has. */
#ifdef RF_HAVE_CUDA
static atomic_int check_calls, violations, gate_timeouts, gate_passes;
static sem_t gate;

typedef struct late {
  rf__step_check check;
  atomic_int reached;
  char message[64];
} late;

static rf_status *late_check(void *arg) {
  late *l = arg;
  if (!atomic_load(&l->reached)) atomic_fetch_add(&violations, 1);
  atomic_fetch_add(&check_calls, 1);
  rf_status *st =
      l->message[0] ? rf_status_new(RF_INTERNAL, "late trouble: %s", l->message)
                    : NULL;
  free(l);
  return st;
}

static void CUDART_CB wait_gate(void *arg) {
  (void)arg;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 30; /* never hang the suite */
  while (sem_timedwait(&gate, &ts) != 0)
    if (errno != EINTR) {
      atomic_fetch_add(&gate_timeouts, 1);
      return;
    }
  atomic_fetch_add(&gate_passes, 1);
}

/* Whether gpu:i's stream of session s is still held (has work left). */
static bool gpu_held(const rf_session *s, int i) {
  const rf__device *d = &s->devices[s->opts.num_cpu_devices + i];
  cudaSetDevice(d->gpu_ordinal);
  return cudaStreamQuery((cudaStream_t)d->stream) == cudaErrorNotReady;
}

/* gpu:i's order counters (device/gpu/order.h). */
static const rf__gpu_order *gpu_order(const rf_session *s, int i) {
  return s->devices[s->opts.num_cpu_devices + i].order;
}

static void CUDART_CB mark_reached(void *arg) {
  atomic_store(&((late *)arg)->reached, 1);
}

static rf_status *late_compute(rf__kernel_ctx *ctx) {
  const char *msg = "";
  bool gated = false;
  RF_CHECK(rf__attrs_get_string(&ctx->node->attrs, "message", &msg));
  RF_CHECK(rf__attrs_get_bool(&ctx->node->attrs, "gate", &gated));
  late *l = calloc(1, sizeof *l);
  if (!l) return rf__oom();
  snprintf(l->message, sizeof l->message, "%s", msg);
  cudaStream_t s = (cudaStream_t)rf__gpu_kernel_stream(ctx);
  cudaError_t e = gated ? cudaLaunchHostFunc(s, wait_gate, NULL) : cudaSuccess;
  if (e == cudaSuccess) e = cudaLaunchHostFunc(s, mark_reached, l);
  if (e != cudaSuccess) {
    free(l);
    return rf__kernel_error(ctx, RF_INTERNAL, "cudaLaunchHostFunc: %s",
                            cudaGetErrorString(e));
  }
  l->check = (rf__step_check){.fn = late_check, .arg = l};
  rf__step_add_check(ctx->step, &l->check);
  rf__kernel_forward_input(ctx, 0, 0);
  return NULL;
}
#endif

static const rf__op_spec test_specs[] = {
    {.name = "TestLateCheck",
     .inputs = "x: T",
     .outputs = "y: T",
     .attrs = "T: type; message: string = ''; gate: bool = false",
     .shape = rt_same_shape,
     .flags = RF_OP_STATEFUL},
};

#ifdef RF_HAVE_CUDA
static const rf__kernel_def late_kernel = {.op = "TestLateCheck",
                                           .device_type = RF_DEVICE_GPU,
                                           .compute = late_compute};
#endif

static int setup(void **state) {
  (void)state;
  static int done;
  rt_register();
  if (done) return 0;
  done = 1;
  for (size_t i = 0; i < sizeof test_specs / sizeof *test_specs; i++)
    assert_ok(rf__op_register(&test_specs[i]));
#ifdef RF_HAVE_CUDA
  sem_init(&gate, 0, 0);
  assert_ok(rf__kernel_register(&late_kernel));
#endif
  return 0;
}

/* ---- sessions ---- */

static rf_session_options options(int ngpu, int sync_on_finish,
                                  int64_t timeout_ms) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_threads = 4;
  o.num_gpu_devices = ngpu;
  o.gpu_sync_on_finish = sync_on_finish;
  o.collective_timeout_ms = timeout_ms;
  /* Uncaptured: TestLateCheck adds its step check only when its kernel runs. */
  o.gpu_graphs = 0;
  return o;
}

/* Skips unless a session can have GPU devices; prints the reason once. */
static void need_gpu(void) { rf_test_need_gpu(); }

static rf_session *session(const rf_graph *g, int ngpu, int sync_on_finish,
                           int64_t timeout_ms) {
  rf_session_options o = options(ngpu, sync_on_finish, timeout_ms);
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

static void gpu_name(int i, char *buf, size_t len) {
  snprintf(buf, len, "gpu:%d", i);
}

/* ---- the accumulating graph ---- */

/* On each of n devices: variables v_i (float32[len], starts at
 * i + e % 5) and acc_i (starts at 0). A step all-reduces (sum) the v_i and
 * adds the sum to every acc_i, then adds 1 to every v_i (after its read: a
 * control edge from the all-reduce). After t steps, on every device:
 *   acc[e] = t * S[e] + n * t (t - 1) / 2,  S[e] = sum_i (i + e % 5)
 *   v_i[e] = i + e % 5 + t
 * - integers, exact in float32 at these sizes. `late`: a TestLateCheck with
 * an empty message on device 1 joins the step (a check per step that
 * passes). */
typedef struct accum {
  int n;
  int64_t len;
  rf_node *init[2 * NDEV];
  rf_node *step[2 * NDEV + 1];
  int nstep;
  rf_output acc[NDEV], v[NDEV];
} accum;

static rf_tensor *filled(int64_t len, int i, double add) {
  rf_shape s = rf_shape_of(1, len);
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, &t));
  float *p = t->data;
  for (int64_t e = 0; e < len; e++)
    p[e] = i < 0 ? (float)add : (float)(i + e % 5);
  return t;
}

static void build_accum(rf_graph *g, const char *prefix, int n, int64_t len,
                        bool with_late, accum *a) {
  memset(a, 0, sizeof *a);
  a->n = n;
  a->len = len;
  rf_shape shape = rf_shape_of(1, len);
  rf_output vars[NDEV], accs[NDEV], xs[NDEV], ys[NDEV], m1[NDEV], one[NDEV];
  char name[64], dev[16];
  for (int i = 0; i < n; i++) {
    gpu_name(i, dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    snprintf(name, sizeof name, "%s_v%d", prefix, i);
    vars[i] = rf_variable(g, name, RF_FLOAT32, shape);
    snprintf(name, sizeof name, "%s_acc%d", prefix, i);
    accs[i] = rf_variable(g, name, RF_FLOAT32, shape);
    rf_tensor *t = filled(len, i, 0);
    snprintf(name, sizeof name, "%s_base%d", prefix, i);
    rf_output base = rf_const(g, name, t);
    rf_tensor_release(t);
    t = filled(len, -1, 0);
    snprintf(name, sizeof name, "%s_zero%d", prefix, i);
    rf_output zero = rf_const(g, name, t);
    rf_tensor_release(t);
    t = filled(len, -1, 1);
    snprintf(name, sizeof name, "%s_one%d", prefix, i);
    one[i] = rf_const(g, name, t);
    rf_tensor_release(t);
    snprintf(name, sizeof name, "%s_m1_%d", prefix, i);
    m1[i] = rf_const_scalar(g, name, RF_FLOAT32, -1);
    snprintf(name, sizeof name, "%s_init_v%d", prefix, i);
    a->init[2 * i] = rf_assign(g, name, vars[i], base);
    snprintf(name, sizeof name, "%s_init_acc%d", prefix, i);
    a->init[2 * i + 1] = rf_assign(g, name, accs[i], zero);
    snprintf(name, sizeof name, "%s_x%d", prefix, i);
    xs[i] = rf_read_variable(g, name, vars[i]);
    rf_graph_pop_device(g);
  }
  if (with_late) { /* device 1's input passes a TestLateCheck first */
    gpu_name(1, dev, sizeof dev);
    snprintf(name, sizeof name, "%s_late", prefix);
    xs[1] = rt_unary_node(g, "TestLateCheck", name, dev, xs[1]);
  }
  snprintf(name, sizeof name, "%s_sum", prefix);
  rf_all_reduce_n(g, name, xs, n, RF_REDUCE_SUM, ys);
  for (int i = 0; i < n; i++) {
    gpu_name(i, dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    snprintf(name, sizeof name, "%s_add_acc%d", prefix, i);
    a->step[a->nstep++] =
        rf_apply_gradient_descent(g, name, accs[i], m1[i], ys[i]);
    snprintf(name, sizeof name, "%s_add_v%d", prefix, i);
    rf_node *uv = rf_apply_gradient_descent(g, name, vars[i], m1[i], one[i]);
    assert_ok(rf_graph_add_control_edge(g, ys[i].node, uv));
    a->step[a->nstep++] = uv;
    snprintf(name, sizeof name, "%s_read_acc%d", prefix, i);
    a->acc[i] = rf_read_variable(g, name, accs[i]);
    snprintf(name, sizeof name, "%s_read_v%d", prefix, i);
    a->v[i] = rf_read_variable(g, name, vars[i]);
    rf_graph_pop_device(g);
  }
}

/* Fetches acc and v on every device and compares every element with the
 * values after t steps. */
static void check_accum(rf_session *s, const accum *a, int64_t t) {
  rf_output f[2 * NDEV];
  rf_tensor *out[2 * NDEV] = {NULL};
  for (int i = 0; i < a->n; i++) f[i] = a->acc[i], f[a->n + i] = a->v[i];
  assert_ok(rf_session_run(s, NULL, 0, f, 2 * a->n, NULL, 0, out));
  int64_t bad = 0;
  for (int i = 0; i < a->n; i++) {
    const float *acc = out[i]->data, *v = out[a->n + i]->data;
    for (int64_t e = 0; e < a->len; e++) {
      double S = 0;
      for (int k = 0; k < a->n; k++) S += k + e % 5;
      double want_acc = (double)t * S + (double)a->n * t * (t - 1) / 2;
      double want_v = i + e % 5 + (double)t;
      if (acc[e] != want_acc || v[e] != want_v) {
        if (!bad)
          fprintf(stderr,
                  "after %lld steps, gpu:%d element %lld: acc %g (want %g), "
                  "v %g (want %g)\n",
                  (long long)t, i, (long long)e, acc[e], want_acc, v[e],
                  want_v);
        bad++;
      }
    }
  }
  for (int i = 0; i < 2 * a->n; i++) rf_tensor_release(out[i]);
  assert_int_equal(bad, 0);
}

static void run_steps(rf_session *s, const accum *a, int steps) {
  for (int k = 0; k < steps; k++)
    assert_ok(rf_session_run(s, NULL, 0, NULL, 0, a->step, a->nstep, NULL));
}

/* ---- values ---- */

/* 16 MiB a device, so the GPU has real work behind the host: 150 steps
 * fetched without a sync (the fetch's values are complete), 3 fetches of a
 * variable in between, 50 more and rf_session_sync, then the check. */
static void test_pipelined_steps_give_exact_values(void **state) {
  (void)state;
  need_gpu();
  rf_graph *g = rf_graph_new();
  accum a;
  build_accum(g, "p", NDEV, (int64_t)1 << 22, false, &a);
  assert_graph_ok(g);
  rf_session *s = session(g, NDEV, 0, 60000);
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, a.init, 2 * NDEV, NULL));
  int t = 0;
  for (int round = 0; round < 3; round++) {
    run_steps(s, &a, 37);
    t += 37;
    rf_tensor *v = NULL;
    assert_ok(rf_session_run(s, NULL, 0, &a.v[3], 1, NULL, 0, &v));
    const float *p = v->data;
    assert_true(p[0] == 3 + t && p[a.len - 1] == 3 + (a.len - 1) % 5 + t);
    rf_tensor_release(v);
  }
  run_steps(s, &a, 150 - t);
  check_accum(s, &a, 150);
  run_steps(s, &a, 50);
  assert_ok(rf_session_sync(s));
  check_accum(s, &a, 200);
  assert_ok(rf_session_sync(s)); /* nothing left: fine again */
  rf_session_free(s);
  rf_graph_free(g);
}

/* The same graph with the option on (every step waits) gives the same
 * values: the default path is unchanged. */
static void test_synchronous_steps_give_the_same_values(void **state) {
  (void)state;
  need_gpu();
  rf_graph *g = rf_graph_new();
  accum a;
  build_accum(g, "q", NDEV, (int64_t)1 << 16, false, &a);
  assert_graph_ok(g);
  rf_session *s = session(g, NDEV, 1, 60000);
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, a.init, 2 * NDEV, NULL));
  run_steps(s, &a, 40);
  check_accum(s, &a, 40);
  assert_ok(rf_session_sync(s)); /* nothing to wait for */
  rf_session_free(s);
  rf_graph_free(g);
}

/* ---- checks and their errors ---- */

#ifdef RF_HAVE_CUDA
static rf_node *late_node(rf_graph *g, const char *name, rf_output x,
                          const char *message, bool gated) {
  rf_node_builder *b = rf_node_builder_new(g, "TestLateCheck", name);
  rf_node_builder_device(b, "gpu:1");
  rf_node_builder_input(b, x);
  rf_node_builder_attr_string(b, "message", message);
  rf_node_builder_attr_bool(b, "gate", gated);
  return rt_finish(b);
}

static rf_output gpu1_const(rf_graph *g) {
  assert_ok(rf_graph_push_device(g, "gpu:1"));
  rf_output c = rf_const_scalar(g, "c", RF_FLOAT32, 7);
  rf_graph_pop_device(g);
  return c;
}

static void reset_counts(void) {
  atomic_store(&gate_passes, 0);
  atomic_store(&check_calls, 0);
  atomic_store(&violations, 0);
  atomic_store(&gate_timeouts, 0);
}
#endif

/* A pipelined step returns while its stream is held at the gate, with its
 * check not run; once the gate opens, rf_session_sync returns the check's
 * error, once. Then a failing step with no gate: after the GPU has passed
 * it, the next run returns its error instead of running, and the run after
 * that works. */
static void test_deferred_error_surfaces_once(void **state) {
  (void)state;
  need_gpu();
#ifdef RF_HAVE_CUDA
  rf_graph *g = rf_graph_new();
  rf_output c = gpu1_const(g);
  rf_node *held = late_node(g, "held", c, "gpu:1 held", true);
  rf_node *bad = late_node(g, "bad", c, "gpu:1 again", false);
  rf_node *good = late_node(g, "good", c, "", false);
  assert_graph_ok(g);
  rf_session *s = session(g, NDEV, 0, 60000);
  reset_counts();
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, &held, 1, NULL));
  /* returned with the stream held: the step did not wait */
  assert_true(gpu_held(s, 1));
  assert_int_equal(atomic_load(&check_calls), 0);
  assert_int_equal(atomic_load(&gate_passes), 0);
  sem_post(&gate);
  rf_status *st = rf_session_sync(s);
  assert_non_null(st);
  assert_int_equal(rf_status_code(st), RF_INTERNAL);
  const char *m = rf_status_message(st);
  assert_non_null(strstr(m, "rf_session_sync"));
  assert_non_null(strstr(m, "late trouble: gpu:1 held"));
  assert_non_null(strstr(m, "returned before its GPU work ran"));
  rf_status_free(st);
  assert_int_equal(atomic_load(&check_calls), 1);
  assert_int_equal(atomic_load(&gate_timeouts), 0);
  assert_int_equal(atomic_load(&gate_passes), 1);
  assert_ok(rf_session_sync(s)); /* reported once */

  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, &bad, 1, NULL));
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess); /* passed it */
  st = rf_session_run(s, NULL, 0, NULL, 0, &good, 1, NULL);
  assert_non_null(st);
  assert_non_null(strstr(rf_status_message(st), "late trouble: gpu:1 again"));
  rf_status_free(st);
  assert_int_equal(atomic_load(&check_calls), 2); /* good did not run */
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, &good, 1, NULL));
  assert_ok(rf_session_sync(s));
  assert_int_equal(atomic_load(&check_calls), 3);
  assert_int_equal(atomic_load(&violations), 0);
  rf_session_free(s);

  /* The option on: the step's own run returns its check's error. */
  s = session(g, NDEV, 1, 60000);
  reset_counts();
  sem_post(&gate); /* the gate opens at once */
  assert_status(rf_session_run(s, NULL, 0, NULL, 0, &held, 1, NULL),
                RF_INTERNAL, "late trouble: gpu:1 held");
  assert_int_equal(atomic_load(&check_calls), 1);
  assert_int_equal(atomic_load(&gate_passes), 1);
  assert_ok(rf_session_sync(s));
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, &good, 1, NULL));
  assert_int_equal(atomic_load(&violations), 0);
  assert_int_equal(atomic_load(&gate_timeouts), 0);
  rf_session_free(s);
  rf_graph_free(g);
#endif
}

/* Freeing a session with pipelined work in flight and a pending check whose
 * stream is still held: the work is waited for (once the gate opens), the
 * check runs once, and its error is dropped. */
static void test_free_with_work_in_flight(void **state) {
  (void)state;
  need_gpu();
#ifdef RF_HAVE_CUDA
  rf_graph *g = rf_graph_new();
  accum a;
  build_accum(g, "f", NDEV, (int64_t)1 << 22, false, &a);
  rf_output c = gpu1_const(g);
  rf_node *held = late_node(g, "held", c, "dropped", true);
  assert_graph_ok(g);
  rf_session *s = session(g, NDEV, 0, 60000);
  reset_counts();
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, a.init, 2 * NDEV, NULL));
  run_steps(s, &a, 20);
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, &held, 1, NULL));
  assert_true(gpu_held(s, 1));
  assert_int_equal(atomic_load(&check_calls), 0);
  sem_post(&gate);
  rf_session_free(s);
  assert_int_equal(atomic_load(&check_calls), 1);
  assert_int_equal(atomic_load(&gate_passes), 1);
  assert_int_equal(atomic_load(&violations), 0);
  rf_graph_free(g);
#endif
}

/* ---- waits left out (device/gpu/order.h) ---- */

#ifdef RF_HAVE_CUDA
/* Every element of the fetched tensors t[0..n) is sum_i (i + e % 5) + add,
 * with gpu:2's term 10 more when bumped. */
static void check_sums(rf_tensor **t, int n, int64_t len, bool bumped) {
  int64_t bad = 0;
  for (int i = 0; i < n; i++) {
    const float *p = t[i]->data;
    for (int64_t e = 0; e < len; e++) {
      double want = bumped ? 10 : 0;
      for (int k = 0; k < NDEV; k++) want += k + e % 5;
      if (p[e] != want && bad++ == 0)
        fprintf(stderr, "gpu:%d element %lld: %g, want %g\n", i, (long long)e,
                p[e], want);
    }
    rf_tensor_release(t[i]);
  }
  assert_int_equal(bad, 0);
}
#endif

/* 4 virtual GPUs all-reduce variable reads: after the first of 20 pipelined
 * steps the leader (gpu:0) leaves out its 3 waits (the other streams only
 * waited for it since), and the values are exact. Then gpu:1's input passes
 * a kernel held at a gate: the leader waits for it again (gpu:0's stream is
 * still held 50 ms later), and once the gate opens the all-reduce, stored
 * in variables, is exact. A variable update on gpu:2 (a kernel) makes the
 * leader wait for gpu:2 again, and the next sum has the new value. */
static void test_leader_leaves_out_only_needless_waits(void **state) {
  (void)state;
  need_gpu();
#ifdef RF_HAVE_CUDA
  enum { LEN = 1 << 16 };
  rf_graph *g = rf_graph_new();
  rf_shape shape = rf_shape_of(1, (int64_t)LEN);
  rf_output xs[NDEV], ys[NDEV], held[NDEV], zs[NDEV], ws[NDEV], wread[NDEV];
  rf_node *init[2 * NDEV], *store[NDEV], *bump = NULL;
  char name[32], dev[16];
  for (int i = 0; i < NDEV; i++) {
    gpu_name(i, dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    snprintf(name, sizeof name, "v%d", i);
    rf_output v = rf_variable(g, name, RF_FLOAT32, shape);
    snprintf(name, sizeof name, "w%d", i);
    ws[i] = rf_variable(g, name, RF_FLOAT32, shape);
    rf_tensor *t = filled(LEN, i, 0);
    snprintf(name, sizeof name, "base%d", i);
    rf_output base = rf_const(g, name, t);
    rf_tensor_release(t);
    snprintf(name, sizeof name, "init_v%d", i);
    init[2 * i] = rf_assign(g, name, v, base);
    snprintf(name, sizeof name, "init_w%d", i);
    init[2 * i + 1] = rf_assign(g, name, ws[i], base);
    snprintf(name, sizeof name, "x%d", i);
    xs[i] = held[i] = rf_read_variable(g, name, v);
    if (i == 2) { /* v2 -= 1 * -10 */
      t = filled(LEN, -1, -10);
      rf_output m10 = rf_const(g, "m10", t);
      rf_tensor_release(t);
      rf_output one = rf_const_scalar(g, "one", RF_FLOAT32, 1);
      bump = rf_apply_gradient_descent(g, "bump", v, one, m10);
    }
    snprintf(name, sizeof name, "wread%d", i);
    wread[i] = rf_read_variable(g, name, ws[i]);
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "idle_sum", xs, NDEV, RF_REDUCE_SUM, ys);
  held[1] = (rf_output){late_node(g, "held", xs[1], "", true), 0};
  rf_all_reduce_n(g, "held_sum", held, NDEV, RF_REDUCE_SUM, zs);
  for (int i = 0; i < NDEV; i++) {
    gpu_name(i, dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    snprintf(name, sizeof name, "store%d", i);
    store[i] = rf_assign(g, name, ws[i], zs[i]);
    rf_graph_pop_device(g);
  }
  assert_graph_ok(g);
  rf_session *s = session(g, NDEV, 0, 60000);
  reset_counts();
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, init, 2 * NDEV, NULL));
  rf_node *idle[NDEV];
  for (int i = 0; i < NDEV; i++) idle[i] = ys[i].node;
  int64_t skipped0 = atomic_load(&gpu_order(s, 0)->waits_skipped);
  for (int k = 0; k < 20; k++)
    assert_ok(rf_session_run(s, NULL, 0, NULL, 0, idle, NDEV, NULL));
  assert_ok(rf_session_sync(s));
  int64_t skipped = atomic_load(&gpu_order(s, 0)->waits_skipped) - skipped0;
  assert_true(skipped >= 3 * 19);
  rf_tensor *out[NDEV] = {NULL};
  assert_ok(rf_session_run(s, NULL, 0, ys, NDEV, NULL, 0, out));
  check_sums(out, NDEV, LEN, false);

  /* a kernel on gpu:1, held: the leader waits for it */
  int64_t waits0 = atomic_load(&gpu_order(s, 0)->waits);
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, store, NDEV, NULL));
  struct timespec nap = {0, 50 * 1000000L};
  nanosleep(&nap, NULL);
  assert_true(gpu_held(s, 1));
  assert_true(gpu_held(s, 0)); /* its kernel waits behind gpu:1 */
  assert_true(atomic_load(&gpu_order(s, 0)->waits) > waits0);
  sem_post(&gate);
  assert_ok(rf_session_sync(s));
  assert_int_equal(atomic_load(&gate_passes), 1);
  assert_ok(rf_session_run(s, NULL, 0, wread, NDEV, NULL, 0, out));
  check_sums(out, NDEV, LEN, false);

  /* a kernel on gpu:2 changes its input: the leader waits, the sum has it */
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, &bump, 1, NULL));
  waits0 = atomic_load(&gpu_order(s, 0)->waits);
  assert_ok(rf_session_run(s, NULL, 0, ys, NDEV, NULL, 0, out));
  assert_true(atomic_load(&gpu_order(s, 0)->waits) > waits0);
  check_sums(out, NDEV, LEN, true);
  assert_int_equal(atomic_load(&violations), 0);
  rf_session_free(s);
  rf_graph_free(g);
#endif
}

/* ---- concurrent callers ---- */

typedef struct worker {
  rf_session *s;
  const accum *a;
  int steps;
  int failures;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  for (int k = 0; k < w->steps; k++) {
    rf_status *st =
        rf_session_run(w->s, NULL, 0, NULL, 0, w->a->step, w->a->nstep, NULL);
    if (st) {
      fprintf(stderr, "worker step %d: %s\n", k, rf_status_message(st));
      rf_status_free(st);
      w->failures++;
    }
  }
  return NULL;
}

/* Two threads pipeline two independent groups of one session (one with a
 * check every step): both exact after rf_session_sync, every check run
 * once, none before its step's GPU work. */
static void test_concurrent_pipelined_callers(void **state) {
  (void)state;
  need_gpu();
  rf_graph *g = rf_graph_new();
  accum a, b;
  build_accum(g, "a", NDEV, (int64_t)1 << 18, false, &a);
#ifdef RF_HAVE_CUDA
  build_accum(g, "b", NDEV, (int64_t)1 << 18, true, &b);
  reset_counts();
#else
  build_accum(g, "b", NDEV, (int64_t)1 << 18, false, &b);
#endif
  assert_graph_ok(g);
  rf_session *s = session(g, NDEV, 0, 60000);
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, a.init, 2 * NDEV, NULL));
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, b.init, 2 * NDEV, NULL));
  worker w[2] = {{s, &a, 120, 0}, {s, &b, 120, 0}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  assert_int_equal(w[0].failures + w[1].failures, 0);
  assert_ok(rf_session_sync(s));
  check_accum(s, &a, 120);
  check_accum(s, &b, 120);
#ifdef RF_HAVE_CUDA
  assert_int_equal(atomic_load(&check_calls), 120);
  assert_int_equal(atomic_load(&violations), 0);
#endif
  rf_session_free(s);
  rf_graph_free(g);
}

/* ---- collective errors ---- */

/* Device 2's participant is held back 600 ms beyond the 100 ms timeout: the
 * pipelined step fails (failed steps wait for their GPUs), the session
 * pipelines a good group right after, exactly, and rf_session_sync has
 * nothing to report. */
static void test_missing_participant_in_pipelined_session(void **state) {
  (void)state;
  need_gpu();
  rf_graph *g = rf_graph_new();
  accum a;
  build_accum(g, "m", 3, 1024, false, &a);
  rf_output xs[3], ys[3];
  for (int i = 0; i < 3; i++) {
    char dev[16], name[16];
    gpu_name(i, dev, sizeof dev);
    snprintf(name, sizeof name, "k%d", i);
    assert_ok(rf_graph_push_device(g, dev));
    xs[i] = rf_const_scalar(g, name, RF_FLOAT32, i);
    rf_graph_pop_device(g);
  }
  xs[2] = rt_nap_node(g, "nap", "gpu:2", xs[2], 600);
  rf_all_reduce_n(g, "slowpoke", xs, 3, RF_REDUCE_SUM, ys);
  assert_graph_ok(g);
  rf_session *s = session(g, 3, 0, 100);
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, a.init, 6, NULL));
  for (int round = 0; round < 2; round++) {
    rf_node *targets[3] = {ys[0].node, ys[1].node, ys[2].node};
    assert_status(rf_session_run(s, NULL, 0, NULL, 0, targets, 3, NULL),
                  RF_DEADLINE_EXCEEDED, "waiting for gpu:2");
    run_steps(s, &a, 25);
    assert_ok(rf_session_sync(s));
  }
  check_accum(s, &a, 50);
  rf_session_free(s);
  rf_graph_free(g);
}

/* One-rank NCCL all-reduces (with NCCL built), pipelined with a 100 ms
 * collective timeout, then the host idles 400 ms before rf_session_sync:
 * the checks come long after the deadline, yet the collectives ran - no
 * DEADLINE_EXCEEDED, no aborted communicator, exact values. */
static void test_nccl_checks_after_the_deadline(void **state) {
  (void)state;
  need_gpu();
#ifdef RF_HAVE_NCCL
  rf__gpu_coll_nccl_for_single(true);
  rf_graph *g = rf_graph_new();
  accum a;
  build_accum(g, "n", 1, (int64_t)1 << 20, false, &a);
  assert_graph_ok(g);
  rf_session *s = session(g, 1, 0, 100);
  assert_ok(rf_session_run(s, NULL, 0, NULL, 0, a.init, 2, NULL));
  run_steps(s, &a, 30);
  struct timespec nap = {0, 400 * 1000000L};
  nanosleep(&nap, NULL);
  rf_status *st = rf_session_sync(s);
  if (st) rf__gpu_coll_nccl_for_single(false);
  assert_ok(st);
  check_accum(s, &a, 30);
  run_steps(s, &a, 10); /* the communicator still works */
  st = rf_session_sync(s);
  rf__gpu_coll_nccl_for_single(false);
  assert_ok(st);
  check_accum(s, &a, 40);
  rf_session_free(s);
  rf_graph_free(g);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_pipelined_steps_give_exact_values, setup),
      cmocka_unit_test_setup(test_synchronous_steps_give_the_same_values,
                             setup),
      cmocka_unit_test_setup(test_deferred_error_surfaces_once, setup),
      cmocka_unit_test_setup(test_free_with_work_in_flight, setup),
      cmocka_unit_test_setup(test_leader_leaves_out_only_needless_waits, setup),
      cmocka_unit_test_setup(test_concurrent_pipelined_callers, setup),
      cmocka_unit_test_setup(test_missing_participant_in_pipelined_session,
                             setup),
      cmocka_unit_test_setup(test_nccl_checks_after_the_deadline, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
