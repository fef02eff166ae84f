/* bench/conv_gpu_vs_cudnn.c - ringflow's GPU Conv2D, Conv2DBackpropInput and
 * Conv2DBackpropFilter (kernels/cuda/conv.cu, through cuDNN) against cuDNN
 * called directly on the same NHWC tensors with the fastest algorithm its
 * search finds (deterministic or not; float32 without TF32 on both sides),
 * for the convolutions of `ringflow train --model cnn` (issue 17): 5x5x32 on
 * 28x28x1 and 5x5x64 on 14x14x32, SAME, stride 1, at batch 128 and 1024, in
 * float32 and bfloat16. cuDNN takes the filter in its own KRSC layout here.
 * ringflow runs twice: with HWIO filters (filter_format's default,
 * TensorFlow's), which it transposes on every call (counted), and with OHWI
 * filters, which are KRSC and go to cuDNN as they are.
 *
 *   bench_conv_gpu_vs_cudnn [reps=50] [graphs=0] [layer=-1] [chain=0]
 *
 * layer (0-3): only that float32 layer, and no pools (for a profiler;
 * -1: all). chain 1: the ringflow step's PER convolutions form one chain
 * of control edges, as a training step's do, instead of independent nodes
 * (measured on an H200: no consistent difference, PERFORMANCE.md).
 *
 * graphs 1: ringflow's sessions run with gpu_graphs 1, so the timed steps
 * are replays of a captured step (as `ringflow train --gpu-graphs on`):
 * the executor's and cuDNN's host costs per node drop out, and what is
 * left against cuDNN direct is the GPU's work (the filter transposes, the
 * algorithm chosen, the feeds' device copies into the graph's buffers).
 * Compare the two runs to tell host cost from GPU cost per call.
 *
 * ringflow: one step holds `per` copies of the op over the same inputs and
 * steps are enqueued back to back (gpu_sync_on_finish 0) then waited for
 * once: ms per op = wall time / (steps x per), after two untimed steps. The
 * inputs are variables, assigned once from the device buffers before the
 * timing: a step that feeds a GPU device waits for its GPU work (the copy
 * reads the caller's borrowed tensor; runtime/session_sync.c), which left
 * the GPU idle for a step's launch between steps (a CUPTI timeline,
 * bench/cupti_trace.c, showed 70-130 us a step), where cuDNN direct's calls
 * never wait. cuDNN: `reps` calls between two
 * CUDA events after three untimed ones. Each side times WINDOWS (3) such
 * windows in a row and keeps its fastest. The ratio is cuDNN's time over
 * ringflow's (>= 1: ringflow as fast). cuDNN is timed twice: writing one
 * output buffer on every call (the ratio before the slash), and rotating
 * over PER output buffers (after it), as the ringflow step's PER ops write
 * PER outputs: an output that stays in L2 from one call to the next is
 * cheaper to write. The last column times cuDNN direct
 * once more in NCHW (PyTorch's layout, filter KCRS) on the same buffers:
 * whether NCHW's float32 algorithms beat NHWC's here. A second table does the
 * same for the network's 2x2 max pools (MaxPool and MaxPoolGrad, ringflow's
 * direct kernels against cudnnPoolingForward / cudnnPoolingBackward). */
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringflow/ringflow.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void check(rf_status *st, const char *what) {
  if (!st) return;
  fprintf(stderr, "%s: %s\n", what, rf_status_message(st));
  exit(1);
}

static void ccheck(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  exit(1);
}

static void dcheck(cudnnStatus_t s, const char *what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  fprintf(stderr, "%s: %s\n", what, cudnnGetErrorString(s));
  exit(1);
}

typedef struct layer {
  int n, h, w, c, k, oc;
} layer;

/* A device buffer of n elements of dt, uniform in [-0.5, 0.5). */
static void *dev_random(rf_dtype dt, int64_t n) {
  size_t es = rf_dtype_size(dt);
  void *h = malloc(es * (size_t)n), *d;
  for (int64_t i = 0; i < n; i++) {
    float v = (float)rand() / (float)RAND_MAX - 0.5f;
    if (dt == RF_FLOAT32)
      ((float *)h)[i] = v;
    else
      ((uint16_t *)h)[i] = rf_float_to_bfloat16(v);
  }
  ccheck(cudaMalloc(&d, es * (size_t)n), "cudaMalloc");
  ccheck(cudaMemcpy(d, h, es * (size_t)n, cudaMemcpyHostToDevice), "copy");
  free(h);
  return d;
}

static void no_release(void *data, void *arg) {
  (void)data;
  (void)arg;
}

/* ---- ringflow ---- */

enum { PER = 16 };
/* Timed windows per figure, on both sides; a figure is its fastest window
 * (a shared host's GPU varies by more than the 0.9x target's margin on the
 * 20-40 us calls of batch 128). */
enum { WINDOWS = 3 };

static int graphs; /* rf_session_options.gpu_graphs of ringflow's sessions */
static int chain;  /* 1: the ringflow step's ops in one chain */

/* The inputs of a timed step: placeholders p[0..n) (fed once), variables
 * holding them, the assigns that fill the variables (init) and the reads the
 * ops take (read). */
typedef struct held {
  int n;
  rf_output p[3], read[3];
  rf_node *init[3];
} held;

static void hold(rf_graph *g, held *h, int n, rf_dtype dt,
                 const rf_shape *shapes) {
  static const char *const names[3] = {"a", "b", "c"};
  h->n = n;
  for (int i = 0; i < n; i++) {
    char name[16];
    snprintf(name, sizeof name, "feed_%s", names[i]);
    h->p[i] = rf_placeholder(g, name, dt, shapes[i]);
    snprintf(name, sizeof name, "var_%s", names[i]);
    rf_output v = rf_variable(g, name, dt, shapes[i]);
    snprintf(name, sizeof name, "init_%s", names[i]);
    h->init[i] = rf_assign(g, name, v, h->p[i]);
    snprintf(name, sizeof name, "read_%s", names[i]);
    h->read[i] = rf_read_variable(g, name, v);
  }
}

/* ms per op of ops[0..PER) of g (on gpu:0) whose inputs h holds, fed once
 * from dev[0..h->n) (device buffers of h's shapes): steps enqueued back to
 * back after two untimed ones, then waited for once. Frees g. */
static double time_session(rf_graph *g, const held *h, rf_dtype dt,
                           const rf_shape *shapes, void *const *dev,
                           rf_node *const *ops, int reps) {
  check(rf_graph_status(g), "graph");
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_gpu_devices = 1;
  o.gpu_sync_on_finish = 0;
  o.gpu_graphs = graphs;
  rf_session *sess;
  check(rf_session_new(g, &o, &sess), "session");
  {
    rf_tensor *t[3];
    rf_feed feeds[3];
    for (int i = 0; i < h->n; i++) {
      check(rf_tensor_new_external_gpu(dt, &shapes[i], 0, dev[i], no_release,
                                       NULL, &t[i]),
            "external tensor");
      feeds[i] = (rf_feed){h->p[i], t[i]};
    }
    check(rf_session_run(sess, feeds, h->n, NULL, 0, h->init, h->n, NULL),
          "init");
    for (int i = 0; i < h->n; i++) rf_tensor_release(t[i]);
  }
  int steps = reps / PER > 2 ? reps / PER : 2;
  int warm = graphs ? 4 : 2; /* with graphs: searched, captured, replayed */
  for (int r = 0; r < warm; r++)
    check(rf_session_run(sess, NULL, 0, NULL, 0, ops, PER, NULL), "run");
  double ms = 1e30;
  for (int w = 0; w < WINDOWS; w++) {
    check(rf_session_sync(sess), "sync");
    double t0 = now_s();
    for (int r = 0; r < steps; r++)
      check(rf_session_run(sess, NULL, 0, NULL, 0, ops, PER, NULL), "run");
    check(rf_session_sync(sess), "sync");
    double t = (now_s() - t0) * 1e3 / (steps * PER);
    if (t < ms) ms = t;
  }
  rf_session_free(sess);
  rf_graph_free(g);
  return ms;
}

/* ms per op for kinds 0 (forward), 1 (input grad), 2 (filter grad), the
 * filter in the layout `fmt` (HWIO or OHWI). */
static void time_ringflow(const layer *L, rf_dtype dt, const char *fmt,
                          int reps, void *x, void *w, void *dy, double ms[3]) {
  rf_shape xs = rf_shape_of(4, L->n, L->h, L->w, L->c);
  rf_shape ws = fmt[0] == 'O' ? rf_shape_of(4, L->oc, L->k, L->k, L->c)
                              : rf_shape_of(4, L->k, L->k, L->c, L->oc);
  rf_shape ys = rf_shape_of(4, L->n, L->h, L->w, L->oc);
  for (int kind = 0; kind < 3; kind++) {
    rf_graph *g = rf_graph_new();
    check(rf_graph_push_device(g, "gpu:0"), "device");
    rf_shape shapes[3] = {xs, ws, ys};
    held h = {0};
    hold(g, &h, 3, dt, shapes);
    rf_output px = h.read[0], pw = h.read[1], pdy = h.read[2];
    const int64_t s[4] = {1, 1, 1, 1};
    rf_node *ops[PER];
    for (int i = 0; i < PER; i++) {
      rf_output o;
      if (kind == 0)
        o = rf_conv2d_with_format(g, NULL, px, pw, s, "SAME", NULL, fmt);
      else if (kind == 1)
        o = rf_conv2d_backprop_input_with_format(
            g, NULL, rf_shape_of_op(g, NULL, px, RF_INT32), pw, pdy, s, "SAME",
            NULL, fmt);
      else
        o = rf_conv2d_backprop_filter_with_format(
            g, NULL, px, rf_shape_of_op(g, NULL, pw, RF_INT32), pdy, s, "SAME",
            NULL, fmt);
      ops[i] = o.node;
      /* one chain, as a training step's convolutions: independent ops
       * would be branches the GPU may run at once, where cuDNN direct runs
       * its calls one after the other */
      if (chain && i > 0)
        check(rf_graph_add_control_edge(g, ops[i - 1], ops[i]), "edge");
    }
    void *dev[3] = {x, w, dy};
    ms[kind] = time_session(g, &h, dt, shapes, dev, ops, reps);
  }
}

/* ---- cuDNN ---- */

/* fmt: CUDNN_TENSOR_NHWC (ringflow's layout; filter KRSC) or
 * CUDNN_TENSOR_NCHW (PyTorch's; filter KCRS), over the same buffers; the
 * calls write `outs` output buffers in turn (1 or PER). */
static void time_cudnn(cudnnHandle_t h, cudnnTensorFormat_t fmt, const layer *L,
                       rf_dtype dt, int reps, int outs, void *x, void *w,
                       void *dy, double ms[3]) {
  cudnnDataType_t t = dt == RF_FLOAT32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16;
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  dcheck(cudnnCreateTensorDescriptor(&xd), "desc");
  dcheck(cudnnCreateTensorDescriptor(&yd), "desc");
  dcheck(cudnnCreateFilterDescriptor(&wd), "desc");
  dcheck(cudnnCreateConvolutionDescriptor(&cd), "desc");
  dcheck(cudnnSetTensor4dDescriptor(xd, fmt, t, L->n, L->c, L->h, L->w), "x");
  dcheck(cudnnSetTensor4dDescriptor(yd, fmt, t, L->n, L->oc, L->h, L->w), "y");
  dcheck(cudnnSetFilter4dDescriptor(wd, t, fmt, L->oc, L->c, L->k, L->k), "w");
  int p = L->k / 2;
  dcheck(cudnnSetConvolution2dDescriptor(
             cd, p, p, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
         "conv");
  dcheck(cudnnSetConvolutionMathType(
             cd, dt == RF_FLOAT32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH),
         "math");
  size_t es = rf_dtype_size(dt);
  void *ys[PER], *dxs[PER], *dws[PER], *ws;
  size_t wsb = (size_t)1 << 30;
  for (int i = 0; i < outs; i++) {
    ccheck(cudaMalloc(&ys[i], es * (size_t)L->n * L->h * L->w * L->oc), "y");
    ccheck(cudaMalloc(&dxs[i], es * (size_t)L->n * L->h * L->w * L->c), "dx");
    ccheck(cudaMalloc(&dws[i], es * (size_t)L->k * L->k * L->c * L->oc), "dw");
  }
  void *y = ys[0], *dx = dxs[0], *dw = dws[0];
  ccheck(cudaMalloc(&ws, wsb), "ws");
  const float one = 1, zero = 0;
  cudaEvent_t e0, e1;
  ccheck(cudaEventCreate(&e0), "event");
  ccheck(cudaEventCreate(&e1), "event");
  for (int kind = 0; kind < 3; kind++) {
    int got = 0, algo = 0;
    size_t mem = 0;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    if (kind == 0) {
      cudnnConvolutionFwdAlgoPerf_t pf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      dcheck(cudnnFindConvolutionForwardAlgorithmEx(
                 h, xd, x, wd, w, cd, yd, y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                 &got, pf, ws, wsb),
             "find");
      algo = pf[0].algo, mem = pf[0].memory, math = pf[0].mathType;
    } else if (kind == 1) {
      cudnnConvolutionBwdDataAlgoPerf_t
          pf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      dcheck(cudnnFindConvolutionBackwardDataAlgorithmEx(
                 h, wd, w, yd, dy, cd, xd, dx,
                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, pf, ws, wsb),
             "find");
      algo = pf[0].algo, mem = pf[0].memory, math = pf[0].mathType;
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t
          pf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      dcheck(cudnnFindConvolutionBackwardFilterAlgorithmEx(
                 h, xd, x, yd, dy, cd, wd, dw,
                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, pf, ws, wsb),
             "find");
      algo = pf[0].algo, mem = pf[0].memory, math = pf[0].mathType;
    }
    if (dt == RF_FLOAT32 && math != CUDNN_FMA_MATH &&
        math != CUDNN_DEFAULT_MATH)
      math = CUDNN_FMA_MATH; /* keep TF32 out */
    dcheck(cudnnSetConvolutionMathType(cd, math), "math");
    ms[kind] = 1e30;
    for (int r = 0; r < 3 + WINDOWS * reps; r++) {
      if (r >= 3 && (r - 3) % reps == 0) { /* a window begins */
        if (r > 3) {                       /* the last one ends */
          ccheck(cudaEventRecord(e1, 0), "record");
          ccheck(cudaEventSynchronize(e1), "sync");
          float t_ms = 0;
          ccheck(cudaEventElapsedTime(&t_ms, e0, e1), "elapsed");
          if (t_ms / reps < ms[kind]) ms[kind] = t_ms / reps;
        }
        ccheck(cudaEventRecord(e0, 0), "record");
      }
      y = ys[r % outs], dx = dxs[r % outs], dw = dws[r % outs];
      if (kind == 0)
        dcheck(cudnnConvolutionForward(h, &one, xd, x, wd, w, cd,
                                       (cudnnConvolutionFwdAlgo_t)algo, ws, mem,
                                       &zero, yd, y),
               "fwd");
      else if (kind == 1)
        dcheck(cudnnConvolutionBackwardData(h, &one, wd, w, yd, dy, cd,
                                            (cudnnConvolutionBwdDataAlgo_t)algo,
                                            ws, mem, &zero, xd, dx),
               "bwd data");
      else
        dcheck(
            cudnnConvolutionBackwardFilter(
                h, &one, xd, x, yd, dy, cd,
                (cudnnConvolutionBwdFilterAlgo_t)algo, ws, mem, &zero, wd, dw),
            "bwd filter");
    }
    ccheck(cudaEventRecord(e1, 0), "record");
    ccheck(cudaEventSynchronize(e1), "sync");
    float t_ms = 0;
    ccheck(cudaEventElapsedTime(&t_ms, e0, e1), "elapsed");
    if (t_ms / reps < ms[kind]) ms[kind] = t_ms / reps;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  for (int i = 0; i < outs; i++)
    cudaFree(ys[i]), cudaFree(dxs[i]), cudaFree(dws[i]);
  cudaFree(ws);
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
}

/* ---- max pool 2x2 stride 2 ---- */

static void time_ringflow_pool(const layer *L, rf_dtype dt, int reps, void *x,
                               void *y, void *dy, double ms[2]) {
  rf_shape xs = rf_shape_of(4, L->n, L->h, L->w, L->c);
  rf_shape ys = rf_shape_of(4, L->n, L->h / 2, L->w / 2, L->c);
  const int64_t k[4] = {1, 2, 2, 1};
  for (int kind = 0; kind < 2; kind++) {
    rf_graph *g = rf_graph_new();
    check(rf_graph_push_device(g, "gpu:0"), "device");
    rf_shape shapes[3] = {xs, ys, ys};
    held h = {0};
    hold(g, &h, kind ? 3 : 1, dt, shapes);
    rf_output px = h.read[0], py = h.read[1], pdy = h.read[2];
    rf_node *ops[PER];
    for (int i = 0; i < PER; i++) {
      if (kind == 0) {
        ops[i] = rf_max_pool(g, NULL, px, k, k, "SAME").node;
        continue;
      }
      rf_node_builder *b = rf_node_builder_new(g, "MaxPoolGrad", NULL);
      rf_node_builder_input(b, px);
      rf_node_builder_input(b, py);
      rf_node_builder_input(b, pdy);
      rf_node_builder_attr_dtype(b, "T", dt);
      rf_node_builder_attr_int_list(b, "ksize", k, 4);
      rf_node_builder_attr_int_list(b, "strides", k, 4);
      rf_node_builder_attr_string(b, "padding", "SAME");
      check(rf_node_builder_finish(b, &ops[i]), "MaxPoolGrad");
    }
    void *dev[3] = {x, y, dy};
    ms[kind] = time_session(g, &h, dt, shapes, dev, ops, reps);
  }
}

static void time_cudnn_pool(cudnnHandle_t h, const layer *L, rf_dtype dt,
                            int reps, void *x, void *y, void *dy,
                            double ms[2]) {
  cudnnDataType_t t = dt == RF_FLOAT32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16;
  cudnnTensorDescriptor_t xd, yd;
  cudnnPoolingDescriptor_t pd;
  dcheck(cudnnCreateTensorDescriptor(&xd), "desc");
  dcheck(cudnnCreateTensorDescriptor(&yd), "desc");
  dcheck(cudnnCreatePoolingDescriptor(&pd), "desc");
  dcheck(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, t, L->n, L->c, L->h,
                                    L->w),
         "x");
  dcheck(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, t, L->n, L->c,
                                    L->h / 2, L->w / 2),
         "y");
  dcheck(cudnnSetPooling2dDescriptor(pd, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN,
                                     2, 2, 0, 0, 2, 2),
         "pool");
  void *out, *dx;
  size_t es = rf_dtype_size(dt);
  ccheck(cudaMalloc(&out, es * (size_t)L->n * (L->h / 2) * (L->w / 2) * L->c),
         "y");
  ccheck(cudaMalloc(&dx, es * (size_t)L->n * L->h * L->w * L->c), "dx");
  const float one = 1, zero = 0;
  cudaEvent_t e0, e1;
  ccheck(cudaEventCreate(&e0), "event");
  ccheck(cudaEventCreate(&e1), "event");
  for (int kind = 0; kind < 2; kind++) {
    for (int r = 0; r < reps + 3; r++) {
      if (r == 3) ccheck(cudaEventRecord(e0, 0), "record");
      if (kind == 0)
        dcheck(cudnnPoolingForward(h, pd, &one, xd, x, &zero, yd, out), "fwd");
      else
        dcheck(cudnnPoolingBackward(h, pd, &one, yd, out, yd, dy, xd, x, &zero,
                                    xd, dx),
               "bwd");
    }
    ccheck(cudaEventRecord(e1, 0), "record");
    ccheck(cudaEventSynchronize(e1), "sync");
    float t_ms = 0;
    ccheck(cudaEventElapsedTime(&t_ms, e0, e1), "elapsed");
    ms[kind] = t_ms / reps;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(out), cudaFree(dx);
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyPoolingDescriptor(pd);
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 50;
  graphs = argc > 2 ? atoi(argv[2]) != 0 : 0;
  int only = argc > 3 ? atoi(argv[3]) : -1; /* one float32 layer */
  chain = argc > 4 ? atoi(argv[4]) != 0 : 0;
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) {
    printf("bench_conv_gpu_vs_cudnn: skipped, no GPU\n");
    return 0;
  }
  cudnnHandle_t h;
  dcheck(cudnnCreate(&h), "cudnnCreate");
  static const layer layers[] = {{128, 28, 28, 1, 5, 32},
                                 {128, 14, 14, 32, 5, 64},
                                 {1024, 28, 28, 1, 5, 32},
                                 {1024, 14, 14, 32, 5, 64}};
  static const rf_dtype dts[] = {RF_FLOAT32, RF_BFLOAT16};
  printf(
      "# cuDNN %zu, %d reps, ringflow gpu_graphs %d; ms per call: ringflow / "
      "cuDNN direct (ratio = cuDNN / ringflow)\n",
      cudnnGetVersion(), reps, graphs);
  printf(
      "# the NCHW column: cuDNN direct in PyTorch's layout (forward / input "
      "grad / filter grad, ms), for reference only\n");
  printf("# summary\n");
  printf(
      "# ms: ringflow / cuDNN writing 1 output / cuDNN rotating %d outputs; "
      "ratios: cuDNN / ringflow for both\n",
      (int)PER);
  printf(
      "| layer | dtype | filter | forward | ratio | input grad | ratio | "
      "filter grad | ratio | cuDNN NCHW |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n");
  static const char *const fmts[] = {"HWIO", "OHWI"};
  double worst[2][2] = {{1e9, 1e9}, {1e9, 1e9}};
  for (int d = 0; d < (only >= 0 ? 1 : 2); d++)
    for (int i = 0; i < 4; i++) {
      if (only >= 0 && i != only) continue;
      const layer *L = &layers[i];
      void *x = dev_random(dts[d], (int64_t)L->n * L->h * L->w * L->c);
      void *w = dev_random(dts[d], (int64_t)L->k * L->k * L->c * L->oc);
      void *dy = dev_random(dts[d], (int64_t)L->n * L->h * L->w * L->oc);
      double r[2][3], c[3], cr[3], nchw[3];
      time_ringflow(L, dts[d], fmts[0], reps, x, w, dy, r[0]);
      time_cudnn(h, CUDNN_TENSOR_NHWC, L, dts[d], reps, 1, x, w, dy, c);
      time_ringflow(L, dts[d], fmts[1], reps, x, w, dy, r[1]);
      time_cudnn(h, CUDNN_TENSOR_NHWC, L, dts[d], reps, PER, x, w, dy, cr);
      time_cudnn(h, CUDNN_TENSOR_NCHW, L, dts[d], reps, 1, x, w, dy, nchw);
      for (int f = 0; f < 2; f++) {
        printf("| b%d %dx%dx%d k%d oc%d | %s | %s", L->n, L->h, L->w, L->c,
               L->k, L->oc, rf_dtype_name(dts[d]), fmts[f]);
        for (int k = 0; k < 3; k++) {
          printf(" | %.3f / %.3f / %.3f | %.2fx / %.2fx", r[f][k], c[k], cr[k],
                 c[k] / r[f][k], cr[k] / r[f][k]);
          if (c[k] / r[f][k] < worst[f][0]) worst[f][0] = c[k] / r[f][k];
          if (cr[k] / r[f][k] < worst[f][1]) worst[f][1] = cr[k] / r[f][k];
        }
        printf(" | %.3f / %.3f / %.3f |\n", nchw[0], nchw[1], nchw[2]);
      }
      fflush(stdout);
      cudaFree(x), cudaFree(w), cudaFree(dy);
    }
  printf(
      "worst ratio (1 output / %d outputs): HWIO %.2fx / %.2fx, OHWI %.2fx / "
      "%.2fx (target >= 0.9x)\n",
      (int)PER, worst[0][0], worst[0][1], worst[1][0], worst[1][1]);
  if (only >= 0) {
    cudnnDestroy(h);
    return 0;
  }
  static const layer pools[] = {{128, 28, 28, 32, 2, 32},
                                {128, 14, 14, 64, 2, 64},
                                {1024, 28, 28, 32, 2, 32},
                                {1024, 14, 14, 64, 2, 64}};
  printf(
      "\n| max pool 2x2 | dtype | MaxPool | ratio | MaxPoolGrad | ratio |\n"
      "|---|---|---|---|---|---|\n");
  for (int d = 0; d < 2; d++)
    for (int i = 0; i < 4; i++) {
      const layer *L = &pools[i];
      int64_t nx = (int64_t)L->n * L->h * L->w * L->c, ny = nx / 4;
      void *x = dev_random(dts[d], nx);
      void *y = dev_random(dts[d], ny);
      void *dy = dev_random(dts[d], ny);
      double r[2], c[2];
      time_ringflow_pool(L, dts[d], reps, x, y, dy, r);
      time_cudnn_pool(h, L, dts[d], reps, x, y, dy, c);
      printf(
          "| b%d %dx%dx%d | %s | %.3f / %.3f | %.2fx | %.3f / %.3f | "
          "%.2fx |\n",
          L->n, L->h, L->w, L->c, rf_dtype_name(dts[d]), r[0], c[0],
          c[0] / r[0], r[1], c[1], c[1] / r[1]);
      fflush(stdout);
      cudaFree(x), cudaFree(y), cudaFree(dy);
    }
  cudnnDestroy(h);
  return 0;
}
