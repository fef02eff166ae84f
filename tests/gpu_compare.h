/* tests/gpu_compare.h - GPU kernels checked against the CPU kernels: each
 * case's graph is built twice from the same random inputs, once with every
 * node on cpu:0 and once on gpu:0; one CPU session and one GPU session run
 * all cases of a set at once and every output must agree (float tolerance,
 * exact for integers and bool, NaN where NaN).
 *
 * Without a GPU (or a CUDA build) the tests skip ("GPU tests skipped:
 * <reason>"). RF_GPU_TEST_ON_CPU=1 runs them anyway with cpu:1 standing in
 * for gpu:0, which checks the tests themselves on a machine without a GPU
 * (GPU-only behaviour is then not checked). Static functions: one copy per
 * test file that includes it. */
#ifndef RF_TESTS_GPU_COMPARE_H
#define RF_TESTS_GPU_COMPARE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* ---- the device under test ---- */

static inline int gc_on_cpu(void) {
  const char *e = getenv("RF_GPU_TEST_ON_CPU");
  return e && e[0] == '1';
}

static inline const char *gc_device(void) {
  return gc_on_cpu() ? "cpu:1" : "gpu:0";
}

static inline rf_session_options gc_options(int gpu) {
  rf_session_options o;
  rf_session_options_init(&o);
  o.num_threads = 2;
  if (gpu && gc_on_cpu()) {
    o.num_cpu_devices = 2;
  } else if (gpu) {
    o.num_gpu_devices = 1;
  }
  return o;
}

/* Skips the calling test unless a session can have a GPU device; prints the
 * reason once. */
static inline void gc_need_gpu(void) {
  if (!gc_on_cpu()) rf_test_need_gpu();
}

/* Skips a check of GPU-only behaviour when cpu:1 stands in for the GPU. */
static inline int gc_real_gpu(void) { return !gc_on_cpu(); }

/* ---- case sets ---- */

enum { GC_MAX_IN = 48, GC_MAX_OUT = 8, GC_MAX_CASES = 400, GC_ARG = 96 };

/* Adds the case's nodes to g (the device scope is set) over placeholders
 * in[] for its inputs; stores its outputs in out[] and returns how many. */
typedef int (*gc_build)(rf_graph *g, const rf_output *in, const void *arg,
                        rf_output *out);

typedef struct gc_case {
  char label[96];
  int nin;
  rf_tensor *in[GC_MAX_IN]; /* owned */
  gc_build build;
  char arg[GC_ARG];
  double tol; /* < 0: rf_test_tolerance of each output's dtype */
  int nout, first_out;
} gc_case;

typedef struct gc_set {
  int n;
  gc_case c[GC_MAX_CASES];
} gc_set;

static inline gc_set *gc_new(void) {
  gc_set *s = calloc(1, sizeof *s);
  assert_non_null(s);
  return s;
}

/* Adds a case taking ownership of the nin tensors in[]; arg (argsize
 * bytes, at most GC_ARG) is copied. Returns the case. */
static inline gc_case *gc_add(gc_set *s, const char *label, gc_build build,
                              const void *arg, size_t argsize, double tol,
                              int nin, rf_tensor *const *in) {
  assert_true(s->n < GC_MAX_CASES && nin <= GC_MAX_IN && argsize <= GC_ARG);
  gc_case *c = &s->c[s->n++];
  memset(c, 0, sizeof *c);
  snprintf(c->label, sizeof c->label, "%s", label);
  c->build = build;
  if (argsize) memcpy(c->arg, arg, argsize);
  c->tol = tol;
  c->nin = nin;
  for (int i = 0; i < nin; i++) c->in[i] = in[i];
  return c;
}

/* The set's graph on `device`: fills feeds/fetches (arrays big enough). */
static inline rf_graph *gc_graph(gc_set *s, const char *device, rf_feed *feeds,
                                 int *nfeeds, rf_output *fetches,
                                 int *nfetches) {
  rf_graph *g = rf_graph_new();
  *nfeeds = *nfetches = 0;
  for (int k = 0; k < s->n; k++) {
    gc_case *c = &s->c[k];
    assert_ok(rf_graph_push_device(g, device));
    rf_output in[GC_MAX_IN];
    for (int i = 0; i < c->nin; i++) {
      char name[64];
      snprintf(name, sizeof name, "in%d_%d", k, i);
      in[i] = rf_placeholder(g, name, rf_tensor_dtype(c->in[i]),
                             rf_tensor_shape(c->in[i]));
      feeds[*nfeeds].output = in[i];
      feeds[(*nfeeds)++].value = c->in[i];
    }
    rf_output out[GC_MAX_OUT];
    c->nout = c->build(g, in, c->arg, out);
    rf_graph_pop_device(g);
    rf_status *st = rf_graph_status(g);
    if (st) fprintf(stderr, "building case %s\n", c->label);
    assert_ok(st);
    c->first_out = *nfetches;
    for (int i = 0; i < c->nout; i++) fetches[(*nfetches)++] = out[i];
  }
  return g;
}

/* Runs every case on the CPU (cpu:0) and on the GPU, compares, frees s. */
static inline void gc_run(gc_set *s) {
  int nin = 0;
  for (int k = 0; k < s->n; k++) nin += s->c[k].nin;
  size_t cap = (size_t)s->n * GC_MAX_OUT + 1;
  rf_feed *feeds = calloc((size_t)nin + 1, sizeof *feeds);
  rf_output *fetches = calloc(cap, sizeof *fetches);
  rf_tensor **got[2] = {calloc(cap, sizeof(rf_tensor *)),
                        calloc(cap, sizeof(rf_tensor *))};
  int nf = 0, nout = 0;
  for (int gpu = 0; gpu < 2; gpu++) {
    rf_graph *g =
        gc_graph(s, gpu ? gc_device() : "cpu:0", feeds, &nf, fetches, &nout);
    rf_session_options o = gc_options(gpu);
    rf_session *sess = NULL;
    assert_ok(rf_session_new(g, &o, &sess));
    assert_ok(
        rf_session_run(sess, feeds, nf, fetches, nout, NULL, 0, got[gpu]));
    rf_session_free(sess);
    rf_graph_free(g);
  }
  for (int k = 0; k < s->n; k++) {
    const gc_case *c = &s->c[k];
    for (int i = 0; i < c->nout; i++) {
      const rf_tensor *want = got[0][c->first_out + i];
      const rf_tensor *have = got[1][c->first_out + i];
      rf_dtype dt = rf_tensor_dtype(want);
      if (rf_tensor_dtype(have) != dt) {
        fprintf(stderr, "case %s output %d: dtype %s, want %s\n", c->label, i,
                rf_dtype_name(rf_tensor_dtype(have)), rf_dtype_name(dt));
        fail();
      }
      double *w = rf_test_to_doubles(want);
      double tol = c->tol >= 0 ? c->tol : rf_test_tolerance(dt);
      int64_t n = rf_tensor_num_elements(want);
      rf_shape ws = rf_tensor_shape(want), hs = rf_tensor_shape(have);
      int ok = rf_shape_equal(&ws, &hs);
      for (int64_t j = 0; ok && j < n; j++) {
        double h = rf_tensor_get(have, j);
        ok = (isnan(w[j]) && isnan(h)) || h == w[j] ||
             fabs(h - w[j]) <= tol * (1.0 + fabs(w[j]));
        if (!ok)
          fprintf(stderr,
                  "case %s output %d (%s): element %lld is %.17g on the GPU, "
                  "%.17g on the CPU (tol %g)\n",
                  c->label, i, rf_dtype_name(dt), (long long)j, h, w[j], tol);
      }
      if (!rf_shape_equal(&ws, &hs)) {
        char a[96], b[96];
        rf_shape_format(&hs, a, sizeof a);
        rf_shape_format(&ws, b, sizeof b);
        fprintf(stderr, "case %s output %d: shape %s, want %s\n", c->label, i,
                a, b);
      }
      free(w);
      if (!ok) fail();
    }
  }
  for (int gpu = 0; gpu < 2; gpu++) {
    for (int i = 0; i < nout; i++) rf_tensor_release(got[gpu][i]);
    free(got[gpu]);
  }
  for (int k = 0; k < s->n; k++)
    for (int i = 0; i < s->c[k].nin; i++) rf_tensor_release(s->c[k].in[i]);
  free(feeds);
  free(fetches);
  free(s);
}

/* ---- inputs ---- */

static inline uint64_t gc_rng(uint64_t salt) {
  uint64_t s = rf_test_seed() ^ (salt * 0x9E3779B97F4A7C15ull);
  return s ? s : 1;
}

/* The full range of an integer dtype (wrap-around gets exercised), or
 * [lo, hi) for floats. */
static inline rf_tensor *gc_random(uint64_t *rng, rf_dtype dt, rf_shape shape,
                                   double lo, double hi) {
  switch (dt) {
    case RF_INT8: return rf_test_random_tensor(rng, dt, shape, -128, 128);
    case RF_UINT8: return rf_test_random_tensor(rng, dt, shape, 0, 256);
    case RF_INT32:
      return rf_test_random_tensor(rng, dt, shape, -2147483648.0, 2147483648.0);
    case RF_INT64:
      return rf_test_random_tensor(rng, dt, shape, -9.0e18, 9.0e18);
    default: return rf_test_random_tensor(rng, dt, shape, lo, hi);
  }
}

/* A node of op over in[0, n) with attr T = in[0]'s dtype (internal ops). */
static inline rf_output gc_node(rf_graph *g, const char *op,
                                const rf_output *in, int n) {
  rf_node_builder *b = rf_node_builder_new(g, op, NULL);
  for (int i = 0; i < n; i++) rf_node_builder_input(b, in[i]);
  rf_node_builder_attr_dtype(b, "T", rf_output_dtype(in[0]));
  rf_node *node = NULL;
  rf_status *st = rf_node_builder_finish(b, &node);
  if (st) {
    fprintf(stderr, "building %s: %s\n", op, rf_status_message(st));
    rf_status_free(st);
    fail();
  }
  rf_output o = {node, 0};
  return o;
}

static const rf_dtype __attribute__((unused))
gc_floats[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32, RF_FLOAT64};
static const rf_dtype __attribute__((unused))
gc_numeric[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32, RF_FLOAT64,
                RF_INT8,    RF_UINT8,    RF_INT32,   RF_INT64};
static const rf_dtype __attribute__((unused))
gc_all[] = {RF_FLOAT16, RF_BFLOAT16, RF_FLOAT32, RF_FLOAT64, RF_INT8,
            RF_UINT8,   RF_INT32,    RF_INT64,   RF_BOOL};
#define GC_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

#endif
