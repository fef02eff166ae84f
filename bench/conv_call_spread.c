/* bench/conv_call_spread.c - how one convolution's time spreads over many
 * calls, ringflow's (through a session, `threads` pool threads) against
 * oneDNN called directly (OpenMP, OMP_NUM_THREADS=threads, each layout left
 * to oneDNN: its fastest column in bench_conv_cpu_vs_onednn). Best-of-N
 * figures hide a bimodal spread: on 2 cores, a call whose two halves run
 * one after the other on one core takes twice as long (PERFORMANCE.md,
 * "Session 13: convpool"). Prints min / p10 / p50 / p90 / max in ms.
 *
 *   bench_conv_call_spread [threads=2] [calls=500] [batch=64] [c=1] [hw=28]
 *                          [oc=32]
 *
 * The defaults are `ringflow train --model cnn`'s first layer (5x5, SAME,
 * stride 1, NHWC) at batch 64; forward and filter gradient. */
#include <oneapi/dnnl/dnnl.h>
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

static void dcheck(dnnl_status_t s, const char *what) {
  if (s == dnnl_success) return;
  fprintf(stderr, "%s: oneDNN status %d\n", what, (int)s);
  exit(1);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void report(const char *what, double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  printf("%-34s %7.3f %7.3f %7.3f %7.3f %8.3f\n", what, t[0] * 1e3,
         t[n / 10] * 1e3, t[n / 2] * 1e3, t[n * 9 / 10] * 1e3, t[n - 1] * 1e3);
}

static rf_tensor *randn(rf_shape s) {
  rf_tensor *t;
  check(rf_tensor_new(RF_FLOAT32, &s, NULL, &t), "tensor");
  float *d = rf_tensor_mutable_data(t);
  for (int64_t i = 0; i < rf_tensor_num_elements(t); i++)
    d[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  return t;
}

/* k 0: forward, 1: filter gradient; five untimed calls first. */
static void time_ringflow(int threads, int calls, rf_tensor *const *in,
                          double *t) {
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_tensor_shape(in[0]));
  rf_output w = rf_placeholder(g, "w", RF_FLOAT32, rf_tensor_shape(in[1]));
  rf_output dy = rf_placeholder(g, "dy", RF_FLOAT32, rf_tensor_shape(in[2]));
  const int64_t s[4] = {1, 1, 1, 1};
  rf_output f[2] = {
      rf_conv2d(g, "fwd", x, w, s, "SAME", NULL),
      rf_conv2d_backprop_filter(g, "bwd_weights", x,
                                rf_shape_of_op(g, NULL, w, RF_INT32), dy, s,
                                "SAME", NULL)};
  check(rf_graph_status(g), "graph");
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_threads = threads;
  rf_session *sess;
  check(rf_session_new(g, &o, &sess), "session");
  rf_feed feeds[3] = {{x, in[0]}, {w, in[1]}, {dy, in[2]}};
  for (int k = 0; k < 2; k++)
    for (int r = -5; r < calls; r++) {
      rf_tensor *out;
      double t0 = now_s();
      check(rf_session_run(sess, feeds, 3, &f[k], 1, NULL, 0, &out), "run");
      if (r >= 0) t[k * calls + r] = now_s() - t0;
      rf_tensor_release(out);
    }
  rf_session_free(sess);
  rf_graph_free(g);
}

static dnnl_memory_t new_mem(dnnl_engine_t eng, const_dnnl_primitive_desc_t pd,
                             dnnl_query_t what) {
  dnnl_memory_t m;
  dcheck(dnnl_memory_create(&m, dnnl_primitive_desc_query_md(pd, what, 0), eng,
                            DNNL_MEMORY_ALLOCATE),
         "memory");
  void *p;
  dcheck(dnnl_memory_get_data_handle(m, &p), "handle");
  memset(p, 0,
         dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, what, 0)));
  return m;
}

static void time_onednn(const int64_t *dims, int calls, double *t) {
  int64_t n = dims[0], c = dims[1], hw = dims[2], oc = dims[3], k = 5;
  dnnl_engine_t eng;
  dnnl_stream_t st;
  dcheck(dnnl_engine_create(&eng, dnnl_cpu, 0), "engine");
  dcheck(dnnl_stream_create(&st, eng, dnnl_stream_default_flags), "stream");
  dnnl_memory_desc_t src, wei, dst;
  dnnl_dims_t sd = {n, c, hw, hw}, wd = {oc, c, k, k}, dd = {n, oc, hw, hw};
  dcheck(
      dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, dnnl_format_tag_any),
      "md");
  dcheck(
      dnnl_memory_desc_init_by_tag(&wei, 4, wd, dnnl_f32, dnnl_format_tag_any),
      "md");
  dcheck(
      dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, dnnl_format_tag_any),
      "md");
  dnnl_dims_t strides = {1, 1}, pad = {(k - 1) / 2, (k - 1) / 2};
  dnnl_convolution_desc_t fd, wdsc;
  dcheck(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                            dnnl_convolution_direct, &src, &wei,
                                            NULL, &dst, strides, pad, pad),
         "fwd desc");
  dcheck(dnnl_convolution_backward_weights_desc_init(
             &wdsc, dnnl_convolution_direct, &src, &wei, NULL, &dst, strides,
             pad, pad),
         "bww desc");
  dnnl_primitive_desc_t pd[2];
  dcheck(dnnl_primitive_desc_create(&pd[0], &fd, NULL, eng, NULL), "fwd pd");
  dcheck(dnnl_primitive_desc_create(&pd[1], &wdsc, NULL, eng, pd[0]), "bww pd");
  const dnnl_query_t q[2][3] = {
      {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
      {dnnl_query_src_md, dnnl_query_diff_weights_md, dnnl_query_diff_dst_md}};
  const int args[2][3] = {
      {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
      {DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST}};
  for (int j = 0; j < 2; j++) {
    dnnl_primitive_t p;
    dcheck(dnnl_primitive_create(&p, pd[j]), "primitive");
    dnnl_exec_arg_t a[3];
    for (int i = 0; i < 3; i++)
      a[i] = (dnnl_exec_arg_t){args[j][i], new_mem(eng, pd[j], q[j][i])};
    for (int r = -5; r < calls; r++) {
      double t0 = now_s();
      dcheck(dnnl_primitive_execute(p, st, 3, a), "execute");
      dcheck(dnnl_stream_wait(st), "wait");
      if (r >= 0) t[j * calls + r] = now_s() - t0;
    }
    const char *impl;
    dnnl_primitive_desc_query(pd[j], dnnl_query_impl_info_str, 0, &impl);
    printf("# oneDNN %s: %s\n", j ? "filter grad" : "forward", impl);
    for (int i = 0; i < 3; i++) dnnl_memory_destroy(a[i].memory);
    dnnl_primitive_destroy(p);
    dnnl_primitive_desc_destroy(pd[j]);
  }
  dnnl_stream_destroy(st);
  dnnl_engine_destroy(eng);
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  int calls = argc > 2 ? atoi(argv[2]) : 500;
  int64_t dims[4] = {64, 1, 28, 32}; /* batch, c, hw, oc */
  for (int i = 0; i < 4; i++)
    if (argc > 3 + i) dims[i] = atoll(argv[3 + i]);
  if (threads < 1 || calls < 10) {
    fprintf(stderr, "threads >= 1 and calls >= 10\n");
    return 2;
  }
  char nt[16];
  snprintf(nt, sizeof nt, "%d", threads);
  setenv("OMP_NUM_THREADS", nt, 1); /* before oneDNN starts OpenMP */
  rf_tensor *in[3] = {
      randn(rf_shape_of(4, dims[0], dims[2], dims[2], dims[1])),
      randn(rf_shape_of(4, (int64_t)5, (int64_t)5, dims[1], dims[3])),
      randn(rf_shape_of(4, dims[0], dims[2], dims[2], dims[3]))};
  double *rf = malloc(sizeof(double) * 2 * (size_t)calls);
  double *dn = malloc(sizeof(double) * 2 * (size_t)calls);
  if (!rf || !dn) return 1;
  time_ringflow(threads, calls, in, rf);
  time_onednn(dims, calls, dn);
  printf("# b%lld %lldx%lldx%lld k5 oc%lld, %d threads, %d calls each; ms\n",
         (long long)dims[0], (long long)dims[2], (long long)dims[2],
         (long long)dims[1], (long long)dims[3], threads, calls);
  printf("%-34s %7s %7s %7s %7s %8s\n", "", "min", "p10", "p50", "p90", "max");
  report("ringflow forward", rf, calls);
  report("oneDNN forward (its layouts)", dn, calls);
  report("ringflow filter grad", rf + calls, calls);
  report("oneDNN filter grad (its layouts)", dn + calls, calls);
  free(rf), free(dn);
  for (int i = 0; i < 3; i++) rf_tensor_release(in[i]);
  return 0;
}
