/* tests/test_gpu_runtime.c - GPU devices through the session: feeds and
 * fetches on GPUs, chains crossing cpu -> gpu -> gpu -> cpu, host-memory
 * arguments, a failing GPU kernel cancelling the step (streams still
 * synchronised), device buffers reused across steps, eight virtual GPUs on
 * one physical GPU, concurrent runs, and allocation failures. Each test skips
 * ("GPU tests skipped: <reason>") without a GPU or a CUDA build. The GPU test
 * kernels use only the CUDA runtime and cuBLAS (tests are C): TestGpuScale
 * (a device copy and cublasDscal on the device's stream), TestHostRead (a
 * host-memory int32 input), TestHostShape (a host-memory output). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#include "ringflow/debug.h"
#include "runtime/session_internal.h"
#include "runtime_test_ops.h"
#ifdef RF_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#include "device/gpu/gpu.h"
#endif

/* ---- test ops ---- */

static const rf__op_spec gpu_test_specs[] = {
    {.name = "TestGpuScale",
     .inputs = "x: float64",
     .outputs = "y: float64",
     .attrs = "scale: float = 2",
     .shape = rt_same_shape},
    {.name = "TestHostRead", /* y = x * k[0]; k in host memory on GPUs */
     .inputs = "x: float64, k: int32",
     .outputs = "y: float64",
     .shape = rt_same_shape},
    {.name = "TestHostShape", /* the dims of x; host memory on GPUs */
     .inputs = "x: T",
     .outputs = "s: int32",
     .attrs = "T: type"},
};

static rf_status *cpu_scale_by(rf__kernel_ctx *ctx, double scale) {
  const rf_tensor *x = ctx->inputs[0];
  rf_tensor *y;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, RF_FLOAT64, &x->shape, &y));
  const double *a = x->data;
  double *b = y->data;
  for (int64_t i = 0; i < x->num_elements; i++) b[i] = a[i] * scale;
  return NULL;
}

static rf_status *cpu_scale(rf__kernel_ctx *ctx) {
  double scale;
  RF_CHECK(rf__attrs_get_float(&ctx->node->attrs, "scale", &scale));
  return cpu_scale_by(ctx, scale);
}

static rf_status *cpu_host_read(rf__kernel_ctx *ctx) {
  return cpu_scale_by(ctx, ((const int32_t *)ctx->inputs[1]->data)[0]);
}

/* Runs on CPUs and GPUs alike: the output is host memory either way. */
static rf_status *host_shape(rf__kernel_ctx *ctx) {
  const rf_tensor *x = ctx->inputs[0];
  rf_shape s = rf_shape_of(1, (int64_t)x->shape.rank);
  rf_tensor *out;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, RF_INT32, &s, &out));
  if (out->on_gpu)
    return rf__kernel_error(ctx, RF_INTERNAL, "host output in device memory");
  for (int i = 0; i < x->shape.rank; i++)
    ((int32_t *)out->data)[i] = (int32_t)x->shape.dims[i];
  return NULL;
}

#ifdef RF_HAVE_CUDA
/* y = x * scale on the device: a copy, then cublasDscal, both on the stream
 * (the handle is bound to it). */
static rf_status *gpu_scale_by(rf__kernel_ctx *ctx, double scale) {
  const rf_tensor *x = ctx->inputs[0];
  if (!x->on_gpu)
    return rf__kernel_error(ctx, RF_INTERNAL, "input 0 in host memory");
  /* Device inputs come from this device's own cache (a _Recv copies into
   * its own buffer): blocks are reused in this stream's order only. */
  if (x->allocator != ctx->device->allocator)
    return rf__kernel_error(ctx, RF_INTERNAL,
                            "input 0 is memory of another device's cache");
  rf_tensor *y;
  RF_CHECK(rf__kernel_alloc_output(ctx, 0, RF_FLOAT64, &x->shape, &y));
  if (!y->on_gpu)
    return rf__kernel_error(ctx, RF_INTERNAL, "output in host memory");
  if (x->num_elements == 0) return NULL;
  cudaStream_t s = (cudaStream_t)rf__gpu_kernel_stream(ctx);
  RF_CUDA_CHECK(cudaMemcpyAsync(y->data, x->data, x->nbytes,
                                cudaMemcpyDeviceToDevice, s));
  RF_CUBLAS_CHECK(cublasDscal((cublasHandle_t)ctx->device->blas,
                              (int)x->num_elements, &scale, y->data, 1));
  return NULL;
}

static rf_status *gpu_scale(rf__kernel_ctx *ctx) {
  double scale;
  RF_CHECK(rf__attrs_get_float(&ctx->node->attrs, "scale", &scale));
  return gpu_scale_by(ctx, scale);
}

static rf_status *gpu_host_read(rf__kernel_ctx *ctx) {
  const rf_tensor *k = ctx->inputs[1];
  if (k->on_gpu) /* the point of the test: never device memory here */
    return rf__kernel_error(ctx, RF_INTERNAL, "input 1 in device memory");
  return gpu_scale_by(ctx, ((const int32_t *)k->data)[0]);
}

/* Identity until the CUDA kernels of the op families are merged. */
static rf_status *gpu_forward(rf__kernel_ctx *ctx) {
  rf__kernel_forward_input(ctx, 0, 0);
  return NULL;
}
#endif

static const rf__kernel_def gpu_test_kernels[] = {
    {.op = "TestGpuScale", .device_type = RF_DEVICE_CPU, .compute = cpu_scale},
    {.op = "TestHostRead",
     .device_type = RF_DEVICE_CPU,
     .compute = cpu_host_read},
    {.op = "TestHostShape",
     .device_type = RF_DEVICE_CPU,
     .compute = host_shape},
#ifdef RF_HAVE_CUDA
    {.op = "TestGpuScale", .device_type = RF_DEVICE_GPU, .compute = gpu_scale},
    {.op = "TestHostRead",
     .device_type = RF_DEVICE_GPU,
     .compute = gpu_host_read,
     .host_memory_inputs = 1u << 1},
    {.op = "TestHostShape",
     .device_type = RF_DEVICE_GPU,
     .compute = host_shape,
     .host_memory_outputs = 1u},
    {.op = "TestFail", .device_type = RF_DEVICE_GPU, .compute = rt_fail},
    {.op = "Identity", .device_type = RF_DEVICE_GPU, .compute = gpu_forward},
#endif
};

static int setup(void **state) {
  static int done;
  rt_register();
  if (done) return 0;
  done = 1;
  for (size_t i = 0; i < sizeof gpu_test_specs / sizeof gpu_test_specs[0]; i++)
    assert_ok(rf__op_register(&gpu_test_specs[i]));
  for (size_t i = 0; i < sizeof gpu_test_kernels / sizeof gpu_test_kernels[0];
       i++) {
    const rf__kernel_def *k = &gpu_test_kernels[i];
    if (!rf__kernel_find(k->op, k->device_type)) /* keep real kernels */
      assert_ok(rf__kernel_register(k));
  }
  return 0;
}

/* ---- skipping ---- */

/* Skips the calling test unless a session can have GPU devices; prints the
 * reason once. */
static void need_gpu(void) { rf_test_need_gpu(); }

/* ---- helpers ---- */

static rf_session *session(const rf_graph *g, int ncpu, int ngpu) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = ncpu;
  o.num_gpu_devices = ngpu;
  o.num_threads = 4;
  rf_session *s = NULL;
  assert_ok(rf_session_new(g, &o, &s));
  return s;
}

static rf_output scale_node(rf_graph *g, const char *name, const char *dev,
                            rf_output x, double scale) {
  rf_node_builder *b = rf_node_builder_new(g, "TestGpuScale", name);
  rf_node_builder_device(b, dev);
  rf_node_builder_input(b, x);
  rf_node_builder_attr_float(b, "scale", scale);
  return (rf_output){rt_finish(b), 0};
}

static rf_output identity_on(rf_graph *g, const char *name, const char *dev,
                             rf_output x) {
  assert_ok(rf_graph_push_device(g, dev));
  rf_output y = rf_identity(g, name, x);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  return y;
}

static rf_output placeholder_on(rf_graph *g, const char *name, const char *dev,
                                rf_dtype dt) {
  assert_ok(rf_graph_push_device(g, dev));
  rf_output x =
      rf_placeholder(g, name, dt, rf_shape_of(1, (int64_t)RF_UNKNOWN_DIM));
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  return x;
}

/* t holds x's elements multiplied by f[0], then f[1], ... (one float64
 * rounding per factor, as the kernels do), exactly. */
static void assert_scaled_by(const rf_tensor *t, const rf_tensor *x,
                             const double *f, int nf) {
  assert_non_null(t);
  assert_int_equal(rf_tensor_dtype(t), RF_FLOAT64);
  assert_int_equal(rf_tensor_num_elements(t), rf_tensor_num_elements(x));
  const double *a = rf_tensor_data(x), *b = rf_tensor_data(t);
  assert_true(rf_tensor_num_elements(t) == 0 || b != NULL); /* host memory */
  for (int64_t i = 0; i < rf_tensor_num_elements(x); i++) {
    double want = a[i];
    for (int k = 0; k < nf; k++) want *= f[k];
    if (b[i] == want) continue;
    fail_msg("element %lld: %.17g, expected %.17g", (long long)i, b[i], want);
  }
}

static void assert_scaled(const rf_tensor *t, const rf_tensor *x,
                          double scale) {
  assert_scaled_by(t, x, &scale, 1);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- tests ---- */

/* Every dtype and element counts 0, 1, odd and large: fed on gpu:0, fetched
 * from gpu:0 (a D2H copy) and from gpu:1 (D2D then D2H), bit for bit. */
static void test_feed_gpu0_fetch_gpu1(void **state) {
  need_gpu();
  uint64_t rng = rf_test_seed();
  const rf_dtype dts[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32,
                          RF_FLOAT64, RF_INT8,     RF_UINT8,
                          RF_INT32,   RF_INT64,    RF_BOOL};
  const int64_t sizes[] = {0, 1, 257, (int64_t)1 << 20};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
    rf_graph *g = rf_graph_new();
    rf_output x = placeholder_on(g, "x", "gpu:0", dts[d]);
    rf_output y = identity_on(g, "y", "gpu:1", x);
    rf_session *s = session(g, 1, 2);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      double lo = dts[d] == RF_UINT8 ? 0 : -100;
      rf_tensor *v = rf_test_random_tensor(&rng, dts[d],
                                           rf_shape_of(1, sizes[k]), lo, 100);
      rf_feed feed = {x, v};
      rf_output fetch[2] = {y, x};
      rf_tensor *out[2] = {NULL, NULL};
      assert_ok(rf_session_run(s, &feed, 1, fetch, 2, NULL, 0, out));
      assert_same_bytes(out[0], v);
      assert_same_bytes(out[1], v);
      rf_tensor_release(out[0]);
      rf_tensor_release(out[1]);
      rf_tensor_release(v);
    }
    rf_session_free(s);
    rf_graph_free(g);
  }
}

/* x (cpu:0) -> *2 (cpu:0) -> Identity, *3 (gpu:0) -> Identity, *5 (gpu:1)
 * -> Identity, *7 (cpu:1): every crossing kind, values checked at each
 * device. */
typedef struct chain {
  rf_graph *g;
  rf_output x, at_gpu0, at_gpu1, at_cpu1;
} chain;

static chain make_chain(void) {
  chain c = {.g = rf_graph_new()};
  c.x = placeholder_on(c.g, "x", "cpu:0", RF_FLOAT64);
  rf_output a = scale_node(c.g, "a", "cpu:0", c.x, 2);
  rf_output b = identity_on(c.g, "b", "gpu:0", a);
  c.at_gpu0 = scale_node(c.g, "b3", "gpu:0", b, 3);
  rf_output d = identity_on(c.g, "d", "gpu:1", c.at_gpu0);
  c.at_gpu1 = scale_node(c.g, "d5", "gpu:1", d, 5);
  rf_output e = identity_on(c.g, "e", "cpu:1", c.at_gpu1);
  c.at_cpu1 = scale_node(c.g, "e7", "cpu:1", e, 7);
  return c;
}

static void run_chain(rf_session *s, const chain *c, rf_tensor *x) {
  rf_feed feed = {c->x, x};
  rf_output fetch[3] = {c->at_gpu0, c->at_gpu1, c->at_cpu1};
  rf_tensor *out[3] = {NULL, NULL, NULL};
  assert_ok(rf_session_run(s, &feed, 1, fetch, 3, NULL, 0, out));
  const double f[4] = {2, 3, 5, 7};
  assert_scaled_by(out[0], x, f, 2);
  assert_scaled_by(out[1], x, f, 3);
  assert_scaled_by(out[2], x, f, 4);
  for (int i = 0; i < 3; i++) rf_tensor_release(out[i]);
}

static void test_chain_cpu_gpu_gpu_cpu(void **state) {
  need_gpu();
  uint64_t rng = rf_test_seed();
  chain c = make_chain();
  rf_session *s = session(c.g, 2, 2);
  const int64_t sizes[] = {1, 0, 1001, (int64_t)1 << 18};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    rf_tensor *x = rf_test_random_tensor(&rng, RF_FLOAT64,
                                         rf_shape_of(1, sizes[k]), -1, 1);
    run_chain(s, &c, x);
    rf_tensor_release(x);
  }
  rf_session_free(s);
  rf_graph_free(c.g);
}

#ifdef RF_HAVE_CUDA
/* Every GPU device of s has nothing queued and no device memory in use. */
static void assert_gpus_idle(rf_session *s) {
  for (int i = 0; i < s->num_devices; i++) {
    rf__device *d = &s->devices[i];
    if (d->name.type != RF_DEVICE_GPU) continue;
    assert_int_equal(cudaStreamQuery((cudaStream_t)d->stream), cudaSuccess);
    rf__gpu_alloc_stats st;
    rf__gpu_device_stats(d, &st);
    assert_int_equal(st.in_use, 0);
  }
}
#endif

/* gpu:0 fails at once while gpu:1 and cpu:1 wait on receives of its result
 * and gpu:1 also has a long queue of its own: the run returns the error,
 * promptly, with every stream drained; the session runs on afterwards. */
static void test_gpu_error_cancels_the_step(void **state) {
  need_gpu();
  uint64_t rng = rf_test_seed();
  rf_graph *g = rf_graph_new();
  rf_output x = placeholder_on(g, "x", "cpu:0", RF_FLOAT64);
  rf_output a = identity_on(g, "a", "gpu:0", x);
  rf_output bad = rt_fail_node(g, "bad", "gpu:0", a, "boom");
  rf_output w1 = identity_on(g, "w1", "gpu:1", bad);
  rf_output w2 = scale_node(g, "w2", "cpu:1", bad, 2);
  rf_output busy = identity_on(g, "busy_in", "gpu:1", x);
  for (int i = 0; i < 40; i++) busy = scale_node(g, NULL, "gpu:1", busy, 1);
  rf_session *s = session(g, 2, 2);
  rf_tensor *v = rf_test_random_tensor(&rng, RF_FLOAT64,
                                       rf_shape_of(1, (int64_t)1 << 22), -1, 1);
  rf_feed feed = {x, v};
  rf_output fetch[3] = {w1, w2, busy};
  for (int rep = 0; rep < 2; rep++) {
    rf_tensor *out[3] = {NULL, NULL, NULL};
    double t0 = now_s();
    assert_status(rf_session_run(s, &feed, 1, fetch, 3, NULL, 0, out),
                  RF_INTERNAL, "node 'bad' (TestFail) on gpu:0: boom");
    assert_true(now_s() - t0 < 10);
    for (int i = 0; i < 3; i++) assert_null(out[i]);
#ifdef RF_HAVE_CUDA
    assert_gpus_idle(s); /* a failed step still synchronises */
#endif
  }
  /* The busy chain alone still runs, on the same session. */
  rf_tensor *out = NULL;
  assert_ok(rf_session_run(s, &feed, 1, &busy, 1, NULL, 0, &out));
  assert_scaled(out, v, 1);
  rf_tensor_release(out);
  rf_tensor_release(v);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Steady-state steps allocate no new device (or pinned) memory. */
static void test_buffers_reused_across_steps(void **state) {
  need_gpu();
#ifdef RF_HAVE_CUDA
  uint64_t rng = rf_test_seed();
  chain c = make_chain();
  rf_session *s = session(c.g, 2, 2);
  rf_tensor *x = rf_test_random_tensor(&rng, RF_FLOAT64,
                                       rf_shape_of(1, (int64_t)50000), -1, 1);
  rf__gpu_alloc_stats g0[2], g1[2], p0, p1;
  for (int step = 0; step < 8; step++) {
    if (step == 2) {
      for (int i = 0; i < 2; i++)
        rf__gpu_device_stats(&s->devices[2 + i], &g0[i]);
      rf__gpu_pinned_stats(&p0);
    }
    run_chain(s, &c, x);
    assert_gpus_idle(s);
  }
  for (int i = 0; i < 2; i++) {
    rf__gpu_device_stats(&s->devices[2 + i], &g1[i]);
    assert_true(g0[i].fresh > 0);
    assert_int_equal(g1[i].fresh, g0[i].fresh);    /* no new cudaMalloc */
    assert_true(g1[i].allocs >= g0[i].allocs + 6); /* yet it allocated */
    assert_true(g1[i].cached > 0);
  }
  rf__gpu_pinned_stats(&p1);
  assert_int_equal(p1.fresh, p0.fresh);
  assert_true(p1.allocs >= p0.allocs + 6 * 2); /* two D2H copies a step */
  rf_tensor_release(x);
  rf_session_free(s);
  rf_graph_free(c.g);
#endif
}

/* num_gpu_devices = 8 on however many GPUs there are: gpu:i on physical
 * i % count with its own stream and handle; a value walks gpu:0..gpu:7,
 * doubled on each, and fans out to all eight. */
static void test_eight_virtual_gpus(void **state) {
  need_gpu();
  uint64_t rng = rf_test_seed();
  rf_graph *g = rf_graph_new();
  rf_output x = placeholder_on(g, "x", "gpu:0", RF_FLOAT64);
  rf_output walk[8], fan[8];
  rf_output v = x;
  for (int i = 0; i < 8; i++) {
    char dev[16], name[32];
    snprintf(dev, sizeof dev, "gpu:%d", i);
    snprintf(name, sizeof name, "walk%d", i);
    v = walk[i] = scale_node(g, name, dev, v, 2);
    snprintf(name, sizeof name, "fan%d", i);
    fan[i] = identity_on(g, name, dev, x);
  }
  rf_session *s = session(g, 1, 8);
#ifdef RF_HAVE_CUDA
  int count = 0;
  assert_ok(rf__gpu_count(&count));
  for (int i = 0; i < 8; i++) {
    rf__device *d = &s->devices[1 + i];
    assert_int_equal(d->index, 1 + i);
    assert_int_equal(d->name.type, RF_DEVICE_GPU);
    assert_int_equal(d->name.index, i);
    assert_int_equal(d->gpu_ordinal, i % count);
    for (int j = 0; j < i; j++) {
      assert_ptr_not_equal(d->stream, s->devices[1 + j].stream);
      assert_ptr_not_equal(d->blas, s->devices[1 + j].blas);
      assert_ptr_not_equal(d->allocator, s->devices[1 + j].allocator);
    }
  }
#endif
  rf_tensor *in = rf_test_random_tensor(&rng, RF_FLOAT64,
                                        rf_shape_of(1, (int64_t)4097), -1, 1);
  rf_feed feed = {x, in};
  rf_output fetch[16];
  memcpy(fetch, walk, sizeof walk);
  memcpy(fetch + 8, fan, sizeof fan);
  for (int rep = 0; rep < 3; rep++) {
    rf_tensor *out[16] = {NULL};
    assert_ok(rf_session_run(s, &feed, 1, fetch, 16, NULL, 0, out));
    for (int i = 0; i < 8; i++) {
      assert_scaled(out[i], in, (double)(2 << i));
      assert_same_bytes(out[8 + i], in);
    }
    for (int i = 0; i < 16; i++) rf_tensor_release(out[i]);
  }
  rf_tensor_release(in);
  rf_session_free(s);
  rf_graph_free(g);
}

/* Host-memory arguments: an int32 Const feeding a GPU kernel's host input
 * moves to cpu:0 and arrives without a device copy; a GPU kernel's host
 * output is fetched, sent to a CPU device and to another GPU's host input. */
static void test_host_memory_arguments(void **state) {
  need_gpu();
  uint64_t rng = rf_test_seed();
  rf_graph *g = rf_graph_new();
  rf_output x = placeholder_on(g, "x", "gpu:0", RF_FLOAT64);
  int32_t three = 3;
  rf_tensor *k3 = NULL;
  rf_shape one = rf_shape_of(1, (int64_t)1);
  assert_ok(rf_tensor_new_copy(RF_INT32, &one, &three, &k3));
  assert_ok(rf_graph_push_device(g, "gpu:0"));
  rf_output k = rf_const(g, "k", k3);
  rf_graph_pop_device(g);
  rf_tensor_release(k3);
  rf_node_builder *b = rf_node_builder_new(g, "TestHostRead", "y");
  rf_node_builder_device(b, "gpu:0");
  rf_node_builder_input(b, x);
  rf_node_builder_input(b, k);
  rf_output y = {rt_finish(b), 0};
  /* shape(x) = [n] in host memory on gpu:0; y2 = x * n on gpu:1. */
  b = rf_node_builder_new(g, "TestHostShape", "sx");
  rf_node_builder_device(b, "gpu:0");
  rf_node_builder_input(b, x);
  rf_output sx = {rt_finish(b), 0};
  rf_output x1 = identity_on(g, "x1", "gpu:1", x);
  b = rf_node_builder_new(g, "TestHostRead", "y2");
  rf_node_builder_device(b, "gpu:1");
  rf_node_builder_input(b, x1);
  rf_node_builder_input(b, sx);
  rf_output y2 = {rt_finish(b), 0};
  rf_output sx_cpu = identity_on(g, "sx_cpu", "cpu:0", sx);
  rf_session *s = session(g, 1, 2);
  rf_tensor *v = rf_test_random_tensor(&rng, RF_FLOAT64,
                                       rf_shape_of(1, (int64_t)37), -1, 1);
  rf_feed feed = {x, v};
  rf_output fetch[4] = {y, y2, sx, sx_cpu};
  rf_tensor *out[4] = {NULL};
  assert_ok(rf_session_run(s, &feed, 1, fetch, 4, NULL, 0, out));
  assert_scaled(out[0], v, 3);
  assert_scaled(out[1], v, 37);
  for (int i = 2; i < 4; i++) {
    assert_int_equal(rf_tensor_num_elements(out[i]), 1);
    assert_int_equal(((const int32_t *)rf_tensor_data(out[i]))[0], 37);
  }
  for (int i = 0; i < 4; i++) rf_tensor_release(out[i]);
  /* The Const went to the host: the compiled plan's 'k' is on cpu:0. */
  rf__plan *p, *tmp;
  int seen = 0;
  HASH_ITER(hh, s->cache, p, tmp) {
    rf_node *kn = rf_graph_find_node(p->graph, "k");
    assert_non_null(kn);
    assert_string_equal(s->devices[kn->assigned_device].canonical, "cpu:0");
    seen++;
  }
  assert_int_equal(seen, 1);
  rf_tensor_release(v);
  rf_session_free(s);
  rf_graph_free(g);
}

typedef struct runner {
  rf_session *s;
  const chain *c;
  uint64_t seed;
} runner;

static void *run_many(void *arg) {
  runner *r = arg;
  uint64_t rng = r->seed;
  for (int i = 0; i < 10; i++) {
    int64_t n = 1 + (int64_t)(rf_test_rand(&rng) % 5000);
    rf_tensor *x =
        rf_test_random_tensor(&rng, RF_FLOAT64, rf_shape_of(1, n), -1, 1);
    run_chain(r->s, r->c, x);
    rf_tensor_release(x);
  }
  return NULL;
}

/* Four threads run the chain at once on shared streams. */
static void test_concurrent_runs(void **state) {
  need_gpu();
  chain c = make_chain();
  rf_session *s = session(c.g, 2, 2);
  uint64_t seed = rf_test_seed();
  pthread_t th[4];
  runner r[4];
  for (int i = 0; i < 4; i++) {
    r[i] = (runner){s, &c, seed + 7919 * (uint64_t)(i + 1)};
    assert_int_equal(pthread_create(&th[i], NULL, run_many, &r[i]), 0);
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  rf_session_free(s);
  rf_graph_free(c.g);
}

static void trim_pinned(void) {
#ifdef RF_HAVE_CUDA
  rf__gpu_pinned_trim(); /* its free lists count as live allocations */
#endif
  rf_default_allocator_trim(); /* so do the host allocator's */
}

/* The k-th allocation fails, for every k: first through making a session
 * with GPUs, then through compiling and running one step on one session.
 * Every failure is RESOURCE_EXHAUSTED and nothing leaks. */
static void test_allocation_failures(void **state) {
  need_gpu();
  uint64_t rng = rf_test_seed();
  chain c = make_chain();
  rf_tensor *x = rf_test_random_tensor(&rng, RF_FLOAT64,
                                       rf_shape_of(1, (int64_t)100), -1, 1);
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_cpu_devices = 2;
  o.num_gpu_devices = 2;
  o.num_threads = 2;
  trim_pinned();
  int64_t live = rf_debug_live_allocations();
  int failures = 0;
  rf_session *s = NULL;
  for (int64_t k = 1; k < 100000; k++) {
    rf_debug_fail_allocation_after(k);
    rf_status *st = rf_session_new(c.g, &o, &s);
    rf_debug_fail_allocation_after(0);
    if (!st) break;
    failures++;
    assert_int_equal(rf_status_code(st), RF_RESOURCE_EXHAUSTED);
    rf_status_free(st);
    assert_int_equal(rf_debug_live_allocations(), live);
  }
  assert_true(failures > 5);
  failures = 0;
  rf_feed feed = {c.x, x};
  rf_output fetch[3] = {c.at_gpu0, c.at_gpu1, c.at_cpu1};
  for (int64_t k = 1; k < 100000; k++) {
    rf_tensor *out[3] = {NULL, NULL, NULL};
    rf_debug_fail_allocation_after(k);
    rf_status *st = rf_session_run(s, &feed, 1, fetch, 3, NULL, 0, out);
    rf_debug_fail_allocation_after(0);
    if (!st) {
      const double f[4] = {2, 3, 5, 7};
      assert_scaled_by(out[2], x, f, 4);
      for (int i = 0; i < 3; i++) rf_tensor_release(out[i]);
      break;
    }
    failures++;
    assert_int_equal(rf_status_code(st), RF_RESOURCE_EXHAUSTED);
    rf_status_free(st);
    for (int i = 0; i < 3; i++) assert_null(out[i]);
  }
  assert_true(failures > 10);
  run_chain(s, &c, x); /* and the session works on */
  rf_session_free(s);
  trim_pinned();
  assert_int_equal(rf_debug_live_allocations(), live);
  rf_tensor_release(x);
  rf_graph_free(c.g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_feed_gpu0_fetch_gpu1, setup),
      cmocka_unit_test_setup(test_chain_cpu_gpu_gpu_cpu, setup),
      cmocka_unit_test_setup(test_gpu_error_cancels_the_step, setup),
      cmocka_unit_test_setup(test_buffers_reused_across_steps, setup),
      cmocka_unit_test_setup(test_eight_virtual_gpus, setup),
      cmocka_unit_test_setup(test_host_memory_arguments, setup),
      cmocka_unit_test_setup(test_concurrent_runs, setup),
      cmocka_unit_test_setup(test_allocation_failures, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
