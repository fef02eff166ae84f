/* bench/conv_cpu_vs_onednn.c - ringflow's CPU Conv2D (im2col + OpenBLAS on
 * the session's pool: kernels/cpu/conv.c) against oneDNN called directly on
 * the same NHWC tensors, for the convolutions of `ringflow train --model
 * cnn`'s network (issue 17): 5x5x32 on 28x28x1 and 5x5x64 on 14x14x32, SAME,
 * stride 1, at batch 64 and 256. Forward, input gradient and filter gradient
 * are timed apart; each figure is the best of `reps` calls, in ms.
 *
 *   bench_conv_cpu_vs_onednn [threads=2] [reps=10] [ringflow]
 *
 * "ringflow" as the third argument times ringflow alone (oneDNN's columns
 * print as -): for before/after figures of ringflow's kernels.
 *
 * ringflow gets `threads` pool threads (OpenBLAS single-threaded inside,
 * blas_threads.c); oneDNN (its Debian build threads with OpenMP) gets
 * OMP_NUM_THREADS=threads. oneDNN sees plain nhwc / hwio memory, the layout
 * ringflow's tensors have, and picks its best implementation for it; a
 * third figure lets oneDNN choose its own (blocked) layouts, without the
 * reorders from and to NHWC that using them in ringflow would add. */
#include <oneapi/dnnl/dnnl.h>
#include <stdbool.h>
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

/* CPU time of the whole process (all threads): on a loaded machine it
 * moves far less than wall time. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
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

typedef struct layer {
  int64_t n, h, w, c, k, oc;
} layer;

static rf_tensor *randn(rf_shape s) {
  rf_tensor *t;
  check(rf_tensor_new(RF_FLOAT32, &s, NULL, &t), "tensor");
  float *d = rf_tensor_mutable_data(t);
  for (int64_t i = 0; i < rf_tensor_num_elements(t); i++)
    d[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  return t;
}

/* ---- ringflow ---- */

static void time_ringflow(const layer *L, int threads, int reps, double *ms,
                          double *cpu_ms, rf_tensor *const *in) {
  rf_graph *g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_tensor_shape(in[0]));
  rf_output w = rf_placeholder(g, "w", RF_FLOAT32, rf_tensor_shape(in[1]));
  rf_output dy = rf_placeholder(g, "dy", RF_FLOAT32, rf_tensor_shape(in[2]));
  const int64_t s[4] = {1, 1, 1, 1};
  rf_output f[3];
  f[0] = rf_conv2d(g, "fwd", x, w, s, "SAME", NULL);
  f[1] = rf_conv2d_backprop_input(g, "bwd_data",
                                  rf_shape_of_op(g, NULL, x, RF_INT32), w, dy,
                                  s, "SAME", NULL);
  f[2] = rf_conv2d_backprop_filter(g, "bwd_weights", x,
                                   rf_shape_of_op(g, NULL, w, RF_INT32), dy, s,
                                   "SAME", NULL);
  check(rf_graph_status(g), "graph");
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_threads = threads;
  rf_session *sess;
  check(rf_session_new(g, &o, &sess), "session");
  rf_feed feeds[3] = {{x, in[0]}, {w, in[1]}, {dy, in[2]}};
  for (int k = 0; k < 3; k++) {
    double best = 1e30, best_cpu = 1e30;
    for (int r = 0; r < reps + 1; r++) {
      rf_tensor *out;
      double t0 = now_s(), c0 = cpu_s();
      check(rf_session_run(sess, feeds, 3, &f[k], 1, NULL, 0, &out), "run");
      double t = now_s() - t0, c = cpu_s() - c0;
      rf_tensor_release(out);
      if (r > 0 && t < best) best = t;
      if (r > 0 && c < best_cpu) best_cpu = c;
    }
    ms[k] = best * 1e3;
    cpu_ms[k] = best_cpu * 1e3;
  }
  rf_session_free(sess);
  rf_graph_free(g);
}

/* ---- oneDNN ---- */

typedef struct dn {
  dnnl_engine_t eng;
  dnnl_stream_t st;
} dn;

static double best_of(dn *d, dnnl_primitive_t p, int nargs,
                      const dnnl_exec_arg_t *args, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps + 1; r++) {
    double t0 = now_s();
    dcheck(dnnl_primitive_execute(p, d->st, nargs, args), "execute");
    dcheck(dnnl_stream_wait(d->st), "wait");
    double t = now_s() - t0;
    if (r > 0 && t < best) best = t;
  }
  return best * 1e3;
}

/* The memory for pd's argument `what`: over `plain` when given, else a
 * zeroed buffer of oneDNN's own in the layout pd chose. */
static dnnl_memory_t arg_mem(dn *d, const_dnnl_primitive_desc_t pd,
                             dnnl_query_t what, void *plain) {
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what, 0);
  dnnl_memory_t m;
  dcheck(
      dnnl_memory_create(&m, md, d->eng, plain ? plain : DNNL_MEMORY_ALLOCATE),
      "memory");
  if (!plain) {
    void *p;
    dcheck(dnnl_memory_get_data_handle(m, &p), "handle");
    memset(p, 0, dnnl_memory_desc_get_size(md));
  }
  return m;
}

/* blocked: every layout left to oneDNN (format_tag any); the reorders to
 * and from NHWC that ringflow would need are not timed. */
static void time_onednn(dn *d, const layer *L, int mode, int reps, double *ms,
                        rf_tensor *const *in, void *out_y, void *out_dx,
                        void *out_dw) {
  dnnl_memory_desc_t src, wei, dst;
  dnnl_dims_t sd = {L->n, L->c, L->h, L->w}, wd = {L->oc, L->c, L->k, L->k};
  dnnl_dims_t dd = {L->n, L->oc, L->h, L->w};
  bool blocked = mode == 2;
  dnnl_format_tag_t act = blocked ? dnnl_format_tag_any : dnnl_nhwc;
  dnnl_format_tag_t filt = mode ? dnnl_format_tag_any : dnnl_hwio;
  dcheck(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, act), "md");
  dcheck(dnnl_memory_desc_init_by_tag(&wei, 4, wd, dnnl_f32, filt), "md");
  dcheck(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, act), "md");
  dnnl_dims_t strides = {1, 1}, pad = {(L->k - 1) / 2, (L->k - 1) / 2};
  dnnl_convolution_desc_t fd, bd, wdsc;
  dcheck(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                            dnnl_convolution_direct, &src, &wei,
                                            NULL, &dst, strides, pad, pad),
         "fwd desc");
  dnnl_primitive_desc_t fpd, bpd, wpd;
  dcheck(dnnl_primitive_desc_create(&fpd, &fd, NULL, d->eng, NULL), "fwd pd");
  dcheck(dnnl_convolution_backward_data_desc_init(
             &bd, dnnl_convolution_direct, &src, &wei, &dst, strides, pad, pad),
         "bwd desc");
  dcheck(dnnl_primitive_desc_create(&bpd, &bd, NULL, d->eng, fpd), "bwd pd");
  dcheck(dnnl_convolution_backward_weights_desc_init(
             &wdsc, dnnl_convolution_direct, &src, &wei, NULL, &dst, strides,
             pad, pad),
         "bww desc");
  dcheck(dnnl_primitive_desc_create(&wpd, &wdsc, NULL, d->eng, fpd), "bww pd");
  dnnl_primitive_t fp, bp, wp;
  dcheck(dnnl_primitive_create(&fp, fpd), "fwd");
  dcheck(dnnl_primitive_create(&bp, bpd), "bwd");
  dcheck(dnnl_primitive_create(&wp, wpd), "bww");
  /* plain: the NHWC tensors themselves; blocked: oneDNN's own zeroed
   * buffers in the layouts it chose */
  void *px = blocked ? NULL : (void *)rf_tensor_data(in[0]);
  void *pw = mode ? NULL : (void *)rf_tensor_data(in[1]);
  void *pdy = blocked ? NULL : (void *)rf_tensor_data(in[2]);
  dnnl_exec_arg_t fa[3] = {
      {DNNL_ARG_SRC, arg_mem(d, fpd, dnnl_query_src_md, px)},
      {DNNL_ARG_WEIGHTS, arg_mem(d, fpd, dnnl_query_weights_md, pw)},
      {DNNL_ARG_DST,
       arg_mem(d, fpd, dnnl_query_dst_md, blocked ? NULL : out_y)}};
  dnnl_exec_arg_t ba[3] = {
      {DNNL_ARG_DIFF_DST, arg_mem(d, bpd, dnnl_query_diff_dst_md, pdy)},
      {DNNL_ARG_WEIGHTS, arg_mem(d, bpd, dnnl_query_weights_md, pw)},
      {DNNL_ARG_DIFF_SRC,
       arg_mem(d, bpd, dnnl_query_diff_src_md, blocked ? NULL : out_dx)}};
  dnnl_exec_arg_t wa[3] = {
      {DNNL_ARG_SRC, arg_mem(d, wpd, dnnl_query_src_md, px)},
      {DNNL_ARG_DIFF_DST, arg_mem(d, wpd, dnnl_query_diff_dst_md, pdy)},
      {DNNL_ARG_DIFF_WEIGHTS,
       arg_mem(d, wpd, dnnl_query_diff_weights_md, mode ? NULL : out_dw)}};
  ms[0] = best_of(d, fp, 3, fa, reps);
  ms[1] = best_of(d, bp, 3, ba, reps);
  ms[2] = best_of(d, wp, 3, wa, reps);
  const char *impl[3];
  dnnl_primitive_desc_query(fpd, dnnl_query_impl_info_str, 0, &impl[0]);
  dnnl_primitive_desc_query(bpd, dnnl_query_impl_info_str, 0, &impl[1]);
  dnnl_primitive_desc_query(wpd, dnnl_query_impl_info_str, 0, &impl[2]);
  printf("#   oneDNN implementations: %s / %s / %s\n", impl[0], impl[1],
         impl[2]);
  for (int i = 0; i < 3; i++) {
    dnnl_memory_destroy(fa[i].memory);
    dnnl_memory_destroy(ba[i].memory);
    dnnl_memory_destroy(wa[i].memory);
  }
  dnnl_primitive_destroy(fp), dnnl_primitive_destroy(bp);
  dnnl_primitive_destroy(wp);
  dnnl_primitive_desc_destroy(fpd), dnnl_primitive_desc_destroy(bpd);
  dnnl_primitive_desc_destroy(wpd);
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  int reps = argc > 2 ? atoi(argv[2]) : 10;
  bool only_rf = argc > 3 && strcmp(argv[3], "ringflow") == 0;
  char nt[16];
  snprintf(nt, sizeof nt, "%d", threads);
  setenv("OMP_NUM_THREADS", nt, 1); /* before oneDNN starts OpenMP */
  dn d;
  dcheck(dnnl_engine_create(&d.eng, dnnl_cpu, 0), "engine");
  dcheck(dnnl_stream_create(&d.st, d.eng, dnnl_stream_default_flags), "stream");
  static const layer layers[] = {{64, 28, 28, 1, 5, 32},
                                 {64, 14, 14, 32, 5, 64},
                                 {256, 28, 28, 1, 5, 32},
                                 {256, 14, 14, 32, 5, 64}};
  printf(
      "# %d threads, best of %d; ms per call: ringflow / oneDNN on NHWC / "
      "oneDNN in its own layouts (reorders not timed)\n",
      threads, reps);
  printf("%-26s %24s %24s %24s\n", "layer", "forward", "input grad",
         "filter grad");
  for (int i = 0; i < 4; i++) {
    const layer *L = &layers[i];
    rf_tensor *in[3] = {randn(rf_shape_of(4, L->n, L->h, L->w, L->c)),
                        randn(rf_shape_of(4, L->k, L->k, L->c, L->oc)),
                        randn(rf_shape_of(4, L->n, L->h, L->w, L->oc))};
    double r[3], rc[3], o[3] = {-1, -1, -1}, b[3] = {-1, -1, -1};
    double m[3] = {-1, -1, -1};
    time_ringflow(L, threads, reps, r, rc, in);
    int64_t ny = L->n * L->h * L->w * L->oc, nx = L->n * L->h * L->w * L->c;
    int64_t nw = L->k * L->k * L->c * L->oc;
    float *y = malloc(sizeof(float) * (size_t)ny);
    float *dx = malloc(sizeof(float) * (size_t)nx);
    float *dw = malloc(sizeof(float) * (size_t)nw);
    if (!only_rf) {
      time_onednn(&d, L, 0, reps, o, in, y, dx, dw);
      time_onednn(&d, L, 1, reps, m, in, y, dx, dw);
      time_onednn(&d, L, 2, reps, b, in, y, dx, dw);
    }
    char name[64];
    snprintf(name, sizeof name, "b%lld %lldx%lldx%lld k%lld oc%lld",
             (long long)L->n, (long long)L->h, (long long)L->w, (long long)L->c,
             (long long)L->k, (long long)L->oc);
    printf(
        "%-26s %7.2f / %6.2f / %6.2f %7.2f / %6.2f / %6.2f "
        "%7.2f / %6.2f / %6.2f\n",
        name, r[0], o[0], b[0], r[1], o[1], b[1], r[2], o[2], b[2]);
    if (!only_rf)
      printf(
          "%-26s %7s   %6.2f %17s   %6.2f %17s   %6.2f   (oneDNN: NHWC, "
          "filter in its layout)\n",
          "", "", m[0], "", m[1], "", m[2]);
    if (only_rf)
      printf("%-26s %7.2f %24.2f %24.2f   (ringflow: CPU ms, all threads)\n",
             "", rc[0], rc[1], rc[2]);
    free(y), free(dx), free(dw);
    for (int k = 0; k < 3; k++) rf_tensor_release(in[k]);
  }
  dnnl_stream_destroy(d.st);
  dnnl_engine_destroy(d.eng);
  return 0;
}
