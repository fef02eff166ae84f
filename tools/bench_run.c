/* tools/bench_run.c - times one collective through the public API: one
 * placeholder per device fed with a tensor made (and touched) beforehand, the
 * collective built with rf_all_reduce_n / rf_reduce / rf_broadcast /
 * rf_all_gather_n / rf_reduce_scatter_n, every result fetched (and released)
 * each step. Warm-up steps compile the signature and fill the allocator's
 * cache; the result is checked once so a broken collective cannot post a
 * fast time. */
#include <math.h>
#include <stdio.h>

#include "bench.h"
#include "ringflow/collectives.h"
#include "tools.h"

#define MAX_DEV 64

const char *bench_coll_name(bench_coll c) {
  static const char *const names[] = {"all_reduce", "reduce", "broadcast",
                                      "all_gather", "reduce_scatter"};
  return c >= 0 && c < BC_COUNT ? names[c] : "?";
}

double bench_bus_factor(bench_coll c, int n) {
  switch (c) {
    case BC_ALL_REDUCE: return 2.0 * (n - 1) / n;
    case BC_ALL_GATHER:
    case BC_REDUCE_SCATTER: return (double)(n - 1) / n;
    default: return 1.0;
  }
}

double bench_counted_bytes(bench_coll c, int n, int64_t nominal) {
  int64_t count = nominal / 4;
  if (c == BC_ALL_GATHER || c == BC_REDUCE_SCATTER) count = count / n * n;
  return 4.0 * (double)count;
}

void bench_row_set(bench_row *r, bench_coll c, int n, double bytes, int iters,
                   double seconds) {
  r->valid = true;
  r->bytes = bytes;
  r->iters = iters;
  r->time_us = seconds * 1e6;
  r->algbw = seconds > 0 ? bytes / seconds / 1e9 : 0;
  r->busbw = r->algbw * bench_bus_factor(c, n);
}

/* The graph, its feeds and fetches for one (collective, size). */
typedef struct setup {
  rf_graph *g;
  rf_session *s;
  rf_feed feeds[MAX_DEV];
  rf_output fetches[MAX_DEV];
  int nfeeds, nfetches;
  int64_t in_count;  /* elements of each input */
  int rank[MAX_DEV]; /* of the i-th listed device: ranks follow device order
                        (collectives.h), not the list's (cpu:1,0) */
} setup;

static rf_status *build_graph(setup *su, bench_coll c, const tool_devices *d) {
  rf_output xs[MAX_DEV];
  char name[32];
  int n = d->n;
  for (int i = 0; i < n; i++) su->rank[i] = tool_devices_rank(d, i);
  su->nfeeds = c == BC_BROADCAST ? 1 : n; /* broadcast: the root's input */
  for (int i = 0; i < su->nfeeds; i++) {
    snprintf(name, sizeof name, "x%d", i);
    RF_TOOL_CHECK(rf_graph_push_device(su->g, d->name[i]));
    xs[i] =
        rf_placeholder(su->g, name, RF_FLOAT32, rf_shape_of(1, su->in_count));
    rf_graph_pop_device(su->g);
    su->feeds[i].output = xs[i];
  }
  su->nfetches = n;
  switch (c) {
    case BC_ALL_REDUCE:
      rf_all_reduce_n(su->g, "coll", xs, n, RF_REDUCE_SUM, su->fetches);
      break;
    case BC_REDUCE:
      su->fetches[0] = rf_reduce(su->g, "coll", xs, n, RF_REDUCE_SUM);
      su->nfetches = 1;
      break;
    case BC_BROADCAST: {
      /* One consumer per device: each device receives the value. */
      rf_output y = rf_broadcast(su->g, "coll", xs[0]);
      for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "y%d", i);
        RF_TOOL_CHECK(rf_graph_push_device(su->g, d->name[i]));
        su->fetches[i] = rf_identity(su->g, name, y);
        rf_graph_pop_device(su->g);
      }
      break;
    }
    case BC_ALL_GATHER:
      rf_all_gather_n(su->g, "coll", xs, n, su->fetches);
      break;
    case BC_REDUCE_SCATTER:
      rf_reduce_scatter_n(su->g, "coll", xs, n, RF_REDUCE_SUM, su->fetches);
      break;
    default: return rf_status_new(RF_INVALID_ARGUMENT, "unknown collective");
  }
  return rf_graph_status(su->g);
}

/* The input of rank r holds (k + r) % 7 at element k (broadcast's root:
 * r = 0, as bench_expected has it): small integers, so float sums are exact
 * and the check below is exact too. */
static rf_status *make_inputs(setup *su) {
  for (int i = 0; i < su->nfeeds; i++) {
    rf_tensor *t;
    rf_shape shape = rf_shape_of(1, su->in_count);
    RF_TOOL_CHECK(rf_tensor_new(RF_FLOAT32, &shape, NULL, &t));
    float *d = rf_tensor_mutable_data(t);
    int r = su->nfeeds > 1 ? su->rank[i] : 0;
    for (int64_t k = 0; k < su->in_count; k++) d[k] = (float)((k + r) % 7);
    su->feeds[i].value = t;
  }
  return NULL;
}

double bench_expected(bench_coll c, int n, int64_t in_count, int f, int64_t k) {
  double sum = 0;
  switch (c) {
    case BC_ALL_REDUCE:
    case BC_REDUCE:
      for (int i = 0; i < n; i++) sum += (double)((k + i) % 7);
      return sum;
    case BC_BROADCAST: return (double)(k % 7);
    case BC_ALL_GATHER: /* rank k / in_count's element k % in_count */
      return (double)((k % in_count + k / in_count) % 7);
    case BC_REDUCE_SCATTER: {
      int64_t per = in_count / n, g = (int64_t)f * per + k;
      for (int i = 0; i < n; i++) sum += (double)((g + i) % 7);
      return sum;
    }
    default: return NAN;
  }
}

static rf_status *check_outputs(bench_coll c, int n, const setup *su,
                                rf_tensor **outs) {
  for (int f = 0; f < su->nfetches; f++) {
    int64_t m = rf_tensor_num_elements(outs[f]);
    int64_t probes[3] = {0, m / 2, m - 1};
    for (int p = 0; p < 3; p++) {
      double want = bench_expected(c, n, su->in_count, su->rank[f], probes[p]);
      double got = rf_tensor_get(outs[f], probes[p]);
      if (got != want)
        return rf_status_new(RF_INTERNAL,
                             "bench: %s on %d devices gave %g at element %lld "
                             "of output %d, expected %g",
                             bench_coll_name(c), n, got, (long long)probes[p],
                             f, want);
    }
  }
  return NULL;
}

static rf_status *step(setup *su, rf_tensor **outs) {
  RF_TOOL_CHECK(rf_session_run(su->s, su->feeds, su->nfeeds, su->fetches,
                               su->nfetches, NULL, 0, outs));
  return NULL;
}

static void release_all(rf_tensor **outs, int n) {
  for (int i = 0; i < n; i++) rf_tensor_release(outs[i]);
}

static int64_t allocator_total(void) {
  size_t cached, in_use;
  rf_default_allocator_stats(&cached, &in_use);
  return (int64_t)(cached + in_use);
}

/* Warm-up, then batches of 2, 4, 8... steps until one batch lasts
 * min_time: that batch is the measurement. */
static rf_status *measure(setup *su, bench_coll c, int n, double min_time,
                          int *iters, double *seconds, int64_t *fresh) {
  rf_tensor *outs[MAX_DEV];
  int64_t bytes = su->in_count * 4;
  int warm = bytes >= (64 << 20) ? 2 : 3;
  for (int w = 0; w < warm; w++) {
    RF_TOOL_CHECK(step(su, outs));
    rf_status *st = w == 0 ? check_outputs(c, n, su, outs) : NULL;
    release_all(outs, su->nfetches);
    if (st) return st;
  }
  int64_t before = allocator_total();
  for (int k = 2;; k *= 2) {
    double t0 = now_seconds();
    for (int i = 0; i < k; i++) {
      RF_TOOL_CHECK(step(su, outs));
      release_all(outs, su->nfetches);
    }
    double t = now_seconds() - t0;
    if (t >= min_time || k >= (1 << 24)) {
      *seconds = t / k;
      *iters = k;
      break;
    }
  }
  *fresh = allocator_total() - before;
  return NULL;
}

rf_status *bench_ringflow(bench_coll c, const tool_devices *d, int threads,
                          int64_t bytes, double min_time, bench_row *out,
                          int64_t *fresh_bytes) {
  int n = d->n;
  if (n < 1 || n > MAX_DEV || d->gpu)
    return rf_status_new(RF_INVALID_ARGUMENT, "bench: 1..%d CPU devices",
                         MAX_DEV);
  int64_t count = bytes / 4, per = count / n;
  if ((c == BC_ALL_GATHER || c == BC_REDUCE_SCATTER) && per == 0)
    return NULL; /* too small to split: no row */
  setup su = {.in_count = c == BC_ALL_GATHER       ? per
                          : c == BC_REDUCE_SCATTER ? per * n
                                                   : count};
  double counted = bench_counted_bytes(c, n, bytes);
  su.g = rf_graph_new();
  if (!su.g) return rf_status_new(RF_RESOURCE_EXHAUSTED, "bench: no memory");
  rf_status *st = build_graph(&su, c, d);
  rf_session_options o;
  rf_session_options_init(&o);
  tool_devices_session(d, &o);
  o.num_threads = threads;
  if (!st) st = rf_session_new(su.g, &o, &su.s);
  if (!st) st = make_inputs(&su);
  int iters = 0;
  double seconds = 0;
  if (!st) st = measure(&su, c, n, min_time, &iters, &seconds, fresh_bytes);
  if (!st) bench_row_set(out, c, n, counted, iters, seconds);
  for (int i = 0; i < su.nfeeds; i++) rf_tensor_release(su.feeds[i].value);
  rf_session_free(su.s);
  rf_graph_free(su.g);
  return st;
}
