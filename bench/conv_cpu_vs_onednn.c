/* bench/conv_cpu_vs_onednn.c - ringflow's CPU Conv2D (kernels/cpu/conv.c:
 * its own loops, oneDNN on the pool, or im2col + OpenBLAS) against oneDNN
 * called directly, for the convolutions of `ringflow train --model cnn`'s
 * network (issue 17): 5x5x32 on 28x28x1 and 5x5x64 on 14x14x32, SAME,
 * stride 1, at batch 64 and 256. Forward, input gradient and filter
 * gradient are timed apart; each figure is the best of `reps` calls, in ms.
 *
 *   bench_conv_cpu_vs_onednn [threads=2] [reps=10] [ringflow]
 *
 * "ringflow" as the third argument times ringflow alone (oneDNN's columns
 * print as -): for before/after figures of ringflow's kernels.
 *
 * ringflow gets `threads` pool threads (OpenBLAS single-threaded inside,
 * blas_threads.c); oneDNN (its Debian build threads with OpenMP) gets
 * `threads` OpenMP threads. The candidates, per op:
 *   ringflow   one rf_session_run of a graph holding the op;
 *   nhwc       oneDNN on the same NHWC tensors, filter HWIO;
 *   nhwc+f     the same with the filter in the layout oneDNN picks (a
 *              filter reorder a call not timed);
 *   blocked    every layout oneDNN's pick, reorders not timed: its kernels'
 *              best, which NHWC tensors do not get for free;
 *   blocked+r  the same with the reorders NHWC tensors need, timed: the
 *              activations into and out of oneDNN's layouts, the filter
 *              into it (the filter gradient: out of it).
 * The calls are interleaved: turns of up to 10 calls a candidate, after a 30 ms
 * pause, so that load from other processes falls on all of them alike. The last
 * column is ringflow against the fastest oneDNN figure a user with NHWC
 * tensors gets (nhwc, nhwc+f, blocked+r), and against blocked. */
#include <oneapi/dnnl/dnnl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringflow/ringflow.h"

/* libgomp's (oneDNN's OpenMP). OMP_NUM_THREADS set in main would come too
 * late: libgomp reads it when it is loaded. */
void omp_set_num_threads(int n);

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

enum { C_RF, C_NHWC, C_NHWC_F, C_BLOCKED, C_BLOCKED_R, NCAND };
static const char *const cand_name[NCAND] = {"ringflow", "nhwc", "nhwc+f",
                                             "blocked", "blocked+r"};

/* ---- ringflow: op k (0 forward, 1 input grad, 2 filter grad) ---- */

typedef struct rfc {
  rf_graph *g;
  rf_session *sess;
  rf_feed feeds[3];
  rf_output f[3];
} rfc;

static void rf_setup(rfc *r, int threads, rf_tensor *const *in) {
  rf_graph *g = r->g = rf_graph_new();
  rf_output x = rf_placeholder(g, "x", RF_FLOAT32, rf_tensor_shape(in[0]));
  rf_output w = rf_placeholder(g, "w", RF_FLOAT32, rf_tensor_shape(in[1]));
  rf_output dy = rf_placeholder(g, "dy", RF_FLOAT32, rf_tensor_shape(in[2]));
  const int64_t s[4] = {1, 1, 1, 1};
  r->f[0] = rf_conv2d(g, "fwd", x, w, s, "SAME", NULL);
  r->f[1] = rf_conv2d_backprop_input(g, "bwd_data",
                                     rf_shape_of_op(g, NULL, x, RF_INT32), w,
                                     dy, s, "SAME", NULL);
  r->f[2] = rf_conv2d_backprop_filter(g, "bwd_weights", x,
                                      rf_shape_of_op(g, NULL, w, RF_INT32), dy,
                                      s, "SAME", NULL);
  check(rf_graph_status(g), "graph");
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_threads = threads;
  check(rf_session_new(g, &o, &r->sess), "session");
  r->feeds[0] = (rf_feed){x, in[0]};
  r->feeds[1] = (rf_feed){w, in[1]};
  r->feeds[2] = (rf_feed){dy, in[2]};
}

static void rf_call(rfc *r, int k) {
  rf_tensor *out;
  check(rf_session_run(r->sess, r->feeds, 3, &r->f[k], 1, NULL, 0, &out),
        "run");
  rf_tensor_release(out);
}

static void rf_teardown(rfc *r) {
  rf_session_free(r->sess);
  rf_graph_free(r->g);
}

/* ---- oneDNN ---- */

typedef struct dn {
  dnnl_engine_t eng;
  dnnl_stream_t st;
} dn;

/* A reorder between two memories. */
typedef struct reo {
  dnnl_primitive_t p;
  dnnl_memory_t from, to;
} reo;

/* One oneDNN setting: the three primitives with their arguments; blocked+r
 * also the reorders before (into oneDNN's layouts) and after (out) each. */
typedef struct dnc {
  dnnl_primitive_desc_t pd[3];
  dnnl_primitive_t p[3];
  dnnl_exec_arg_t a[3][3];
  reo pre[3][2], post[3];
  bool reorders;
  dnnl_memory_t plain[6]; /* blocked+r: x, w, dy, y, dx, dw as the user has */
} dnc;

/* The memory for pd's argument `what`: over `data` when given, else a
 * zeroed buffer of oneDNN's own in the layout pd chose. */
static dnnl_memory_t arg_mem(dn *d, const_dnnl_primitive_desc_t pd,
                             dnnl_query_t what, void *data) {
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what, 0);
  dnnl_memory_t m;
  dcheck(dnnl_memory_create(&m, md, d->eng, data ? data : DNNL_MEMORY_ALLOCATE),
         "memory");
  if (!data) {
    void *p;
    dcheck(dnnl_memory_get_data_handle(m, &p), "handle");
    memset(p, 0, dnnl_memory_desc_get_size(md));
  }
  return m;
}

/* Memory over data in a plain layout (logical dims a, b, c, e). */
static dnnl_memory_t plain_mem(dn *d, int64_t a, int64_t b, int64_t c,
                               int64_t e, dnnl_format_tag_t tag, void *data) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {a, b, c, e};
  dcheck(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, tag), "md");
  dnnl_memory_t m;
  dcheck(dnnl_memory_create(&m, &md, d->eng, data), "memory");
  return m;
}

static reo reorder(dn *d, dnnl_memory_t from, dnnl_memory_t to) {
  const dnnl_memory_desc_t *fm, *tm;
  dcheck(dnnl_memory_get_memory_desc(from, &fm), "md");
  dcheck(dnnl_memory_get_memory_desc(to, &tm), "md");
  dnnl_primitive_desc_t pd;
  dcheck(dnnl_reorder_primitive_desc_create(&pd, fm, d->eng, tm, d->eng, NULL),
         "reorder pd");
  reo r = {NULL, from, to};
  dcheck(dnnl_primitive_create(&r.p, pd), "reorder");
  dnnl_primitive_desc_destroy(pd);
  return r;
}

static void reo_run(dn *d, const reo *r) {
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, r->from}, {DNNL_ARG_TO, r->to}};
  dcheck(dnnl_primitive_execute(r->p, d->st, 2, a), "reorder");
}

/* mode: C_NHWC, C_NHWC_F, C_BLOCKED or C_BLOCKED_R; out holds y, dx, dw. */
static void dn_setup(dn *d, dnc *c, const layer *L, int mode,
                     rf_tensor *const *in, void *const *out) {
  memset(c, 0, sizeof *c);
  bool blocked = mode == C_BLOCKED || mode == C_BLOCKED_R;
  dnnl_memory_desc_t src, wei, dst;
  dnnl_dims_t sd = {L->n, L->c, L->h, L->w}, wd = {L->oc, L->c, L->k, L->k};
  dnnl_dims_t dd = {L->n, L->oc, L->h, L->w};
  dnnl_format_tag_t act = blocked ? dnnl_format_tag_any : dnnl_nhwc;
  dnnl_format_tag_t filt = mode == C_NHWC ? dnnl_hwio : dnnl_format_tag_any;
  dcheck(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, act), "md");
  dcheck(dnnl_memory_desc_init_by_tag(&wei, 4, wd, dnnl_f32, filt), "md");
  dcheck(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, act), "md");
  dnnl_dims_t strides = {1, 1}, pad = {(L->k - 1) / 2, (L->k - 1) / 2};
  dnnl_convolution_desc_t fd, bd, wdsc;
  dcheck(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                            dnnl_convolution_direct, &src, &wei,
                                            NULL, &dst, strides, pad, pad),
         "fwd desc");
  dcheck(dnnl_primitive_desc_create(&c->pd[0], &fd, NULL, d->eng, NULL),
         "fwd pd");
  dcheck(dnnl_convolution_backward_data_desc_init(
             &bd, dnnl_convolution_direct, &src, &wei, &dst, strides, pad, pad),
         "bwd desc");
  dcheck(dnnl_primitive_desc_create(&c->pd[1], &bd, NULL, d->eng, c->pd[0]),
         "bwd pd");
  dcheck(dnnl_convolution_backward_weights_desc_init(
             &wdsc, dnnl_convolution_direct, &src, &wei, NULL, &dst, strides,
             pad, pad),
         "bww desc");
  dcheck(dnnl_primitive_desc_create(&c->pd[2], &wdsc, NULL, d->eng, c->pd[0]),
         "bww pd");
  for (int k = 0; k < 3; k++)
    dcheck(dnnl_primitive_create(&c->p[k], c->pd[k]), "primitive");
  /* nhwc: the tensors themselves; otherwise oneDNN's own zeroed buffers in
   * the layouts it chose */
  void *px = blocked ? NULL : (void *)rf_tensor_data(in[0]);
  void *pw = mode == C_NHWC ? (void *)rf_tensor_data(in[1]) : NULL;
  void *pdy = blocked ? NULL : (void *)rf_tensor_data(in[2]);
  static const int args[3][3] = {
      {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
      {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
      {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS}};
  static const dnnl_query_t q[3][3] = {
      {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
      {dnnl_query_diff_dst_md, dnnl_query_weights_md, dnnl_query_diff_src_md},
      {dnnl_query_src_md, dnnl_query_diff_dst_md, dnnl_query_diff_weights_md}};
  void *data[3][3] = {{px, pw, blocked ? NULL : out[0]},
                      {pdy, pw, blocked ? NULL : out[1]},
                      {px, pdy, mode == C_NHWC ? out[2] : NULL}};
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 3; i++)
      c->a[k][i] = (dnnl_exec_arg_t){args[k][i],
                                     arg_mem(d, c->pd[k], q[k][i], data[k][i])};
  if (mode != C_BLOCKED_R) return;
  c->reorders = true;
  void *x = (void *)rf_tensor_data(in[0]), *w = (void *)rf_tensor_data(in[1]);
  void *dy = (void *)rf_tensor_data(in[2]);
  dnnl_memory_t *m = c->plain;
  m[0] = plain_mem(d, L->n, L->c, L->h, L->w, dnnl_nhwc, x);
  m[1] = plain_mem(d, L->oc, L->c, L->k, L->k, dnnl_hwio, w);
  m[2] = plain_mem(d, L->n, L->oc, L->h, L->w, dnnl_nhwc, dy);
  m[3] = plain_mem(d, L->n, L->oc, L->h, L->w, dnnl_nhwc, out[0]);
  m[4] = plain_mem(d, L->n, L->c, L->h, L->w, dnnl_nhwc, out[1]);
  m[5] = plain_mem(d, L->oc, L->c, L->k, L->k, dnnl_hwio, out[2]);
  c->pre[0][0] = reorder(d, m[0], c->a[0][0].memory);
  c->pre[0][1] = reorder(d, m[1], c->a[0][1].memory);
  c->post[0] = reorder(d, c->a[0][2].memory, m[3]);
  c->pre[1][0] = reorder(d, m[2], c->a[1][0].memory);
  c->pre[1][1] = reorder(d, m[1], c->a[1][1].memory);
  c->post[1] = reorder(d, c->a[1][2].memory, m[4]);
  c->pre[2][0] = reorder(d, m[0], c->a[2][0].memory);
  c->pre[2][1] = reorder(d, m[2], c->a[2][1].memory);
  c->post[2] = reorder(d, c->a[2][2].memory, m[5]);
}

static void dn_call(dn *d, dnc *c, int k) {
  if (c->reorders) {
    reo_run(d, &c->pre[k][0]);
    reo_run(d, &c->pre[k][1]);
  }
  dcheck(dnnl_primitive_execute(c->p[k], d->st, 3, c->a[k]), "execute");
  if (c->reorders) reo_run(d, &c->post[k]);
  dcheck(dnnl_stream_wait(d->st), "wait");
}

static const char *dn_impl(const dnc *c, int k) {
  const char *impl = "?";
  dnnl_primitive_desc_query(c->pd[k], dnnl_query_impl_info_str, 0, &impl);
  return impl;
}

static void dn_teardown(dnc *c) {
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < 3; i++) dnnl_memory_destroy(c->a[k][i].memory);
    dnnl_primitive_destroy(c->p[k]);
    dnnl_primitive_desc_destroy(c->pd[k]);
    if (c->reorders) {
      dnnl_primitive_destroy(c->pre[k][0].p);
      dnnl_primitive_destroy(c->pre[k][1].p);
      dnnl_primitive_destroy(c->post[k].p);
    }
  }
  for (int i = 0; i < 6; i++) dnnl_memory_destroy(c->plain[i]);
}

/* ---- timing ---- */

#define PER_ROUND 10
#define SETTLE_NS 30000000

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  int reps = argc > 2 ? atoi(argv[2]) : 10;
  bool only_rf = argc > 3 && strcmp(argv[3], "ringflow") == 0;
  if (threads < 1 || reps < 1) {
    fprintf(stderr, "usage: %s [threads>=1] [reps>=1] [ringflow]\n", argv[0]);
    return 2;
  }
  omp_set_num_threads(threads);
  dn d;
  dcheck(dnnl_engine_create(&d.eng, dnnl_cpu, 0), "engine");
  dcheck(dnnl_stream_create(&d.st, d.eng, dnnl_stream_default_flags), "stream");
  static const layer layers[] = {{64, 28, 28, 1, 5, 32},
                                 {64, 14, 14, 32, 5, 64},
                                 {256, 28, 28, 1, 5, 32},
                                 {256, 14, 14, 32, 5, 64}};
  static const char *const op_name[3] = {"forward", "input grad",
                                         "filter grad"};
  printf(
      "# %d threads, best of %d calls (interleaved, %d a turn); ms per "
      "call; ratio: the fastest oneDNN figure / ringflow's\n",
      threads, reps, PER_ROUND);
  printf("%-22s %-11s", "layer", "op");
  for (int m = 0; m < NCAND; m++)
    printf(" %*s", m == C_BLOCKED_R ? 9 : 8, cand_name[m]);
  printf("   %-20s %s\n", "ratio (NHWC; blocked)",
         "oneDNN implementations (nhwc+f; blocked)");
  for (int i = 0; i < 4; i++) {
    const layer *L = &layers[i];
    rf_tensor *in[3] = {randn(rf_shape_of(4, L->n, L->h, L->w, L->c)),
                        randn(rf_shape_of(4, L->k, L->k, L->c, L->oc)),
                        randn(rf_shape_of(4, L->n, L->h, L->w, L->oc))};
    size_t ny = (size_t)(L->n * L->h * L->w * L->oc);
    size_t nx = (size_t)(L->n * L->h * L->w * L->c);
    size_t nw = (size_t)(L->k * L->k * L->c * L->oc);
    void *out[3] = {malloc(sizeof(float) * ny), malloc(sizeof(float) * nx),
                    malloc(sizeof(float) * nw)};
    rfc r;
    rf_setup(&r, threads, in);
    dnc c[NCAND];
    int ncand = only_rf ? 1 : NCAND;
    for (int m = 1; m < ncand; m++) dn_setup(&d, &c[m], L, m, in, out);
    char name[64];
    snprintf(name, sizeof name, "b%lld %lldx%lldx%lld k%lld oc%lld",
             (long long)L->n, (long long)L->h, (long long)L->w, (long long)L->c,
             (long long)L->k, (long long)L->oc);
    for (int k = 0; k < 3; k++) {
      double best[NCAND];
      for (int m = 0; m < NCAND; m++) best[m] = -1;
      /* one call each to warm up (primitive caches, first-touch pages) */
      for (int m = 0; m < ncand; m++)
        m == C_RF ? rf_call(&r, k) : dn_call(&d, &c[m], k);
      for (int done = 0; done < reps; done += PER_ROUND) {
        int n = reps - done < PER_ROUND ? reps - done : PER_ROUND;
        for (int m = 0; m < ncand; m++) {
          /* oneDNN's OpenMP threads spin for milliseconds after a call
           * (libgomp's default wait policy): let them sleep before the
           * next candidate's turn, so they do not take its cores */
          nanosleep(&(struct timespec){0, SETTLE_NS}, NULL);
          for (int j = 0; j < n; j++) {
            double t0 = now_s();
            m == C_RF ? rf_call(&r, k) : dn_call(&d, &c[m], k);
            double t = (now_s() - t0) * 1e3;
            if (best[m] < 0 || t < best[m]) best[m] = t;
          }
        }
      }
      printf("%-22s %-11s", k == 0 ? name : "", op_name[k]);
      for (int m = 0; m < NCAND; m++)
        best[m] < 0 ? printf(" %8s", "-")
                    : printf(" %*.3f", m == C_BLOCKED_R ? 9 : 8, best[m]);
      if (only_rf) {
        printf("\n");
        continue;
      }
      double user = best[C_NHWC];
      if (best[C_NHWC_F] < user) user = best[C_NHWC_F];
      if (best[C_BLOCKED_R] < user) user = best[C_BLOCKED_R];
      printf("   %5.2fx; %5.2fx       %s; %s\n", user / best[C_RF],
             best[C_BLOCKED] / best[C_RF], dn_impl(&c[C_NHWC_F], k),
             dn_impl(&c[C_BLOCKED], k));
    }
    rf_teardown(&r);
    for (int m = 1; m < ncand; m++) dn_teardown(&c[m]);
    for (int k = 0; k < 3; k++) free(out[k]), rf_tensor_release(in[k]);
  }
  dnnl_stream_destroy(d.st);
  dnnl_engine_destroy(d.eng);
  return 0;
}
