/* tools/bench_job.c - `mpirun -np N ringflow bench`: every collective across
 * the N processes of the job (each with --devices devices, default 1)
 * through ringflow sessions, against the same operation as plain MPI
 * (MPI_Allreduce, MPI_Reduce, MPI_Bcast, MPI_Allgather,
 * MPI_Reduce_scatter_block) and, for all-reduce, Gloo over loopback TCP when
 * it was built, in the same processes on the same buffers. Rounds alternate
 * ringflow, MPI, Gloo windows (each of as many operations as last
 * --min-time for that way; between two barriers, timed by its slowest
 * process), and each figure is
 * the median over rounds, so load on the machine hits all alike. Task 0
 * prints. MPI builds only; the library initialises MPI with
 * MPI_THREAD_MULTIPLE, so this thread may call MPI beside ringflow's. */
#ifdef RF_HAVE_MPI
#include <dirent.h>
#include <malloc.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "ringflow/collectives.h"
#include "tools.h"

#define MAX_DEV 64
#define MAX_ROUNDS 15

typedef struct jb {
  const bench_job_args *a;
  int task, ntasks, n; /* n: devices in the job */
  bench_gloo *gloo;
} jb;

/* ---- one (collective, size) ---- */

typedef struct setup {
  rf_graph *g;
  rf_session *s;
  rf_feed feeds[MAX_DEV];
  rf_output fetches[MAX_DEV];
  rf_node *target; /* a reduce on another task: this task's senders */
  int nfeeds, nfetches;
  int ranks[MAX_DEV]; /* of the fetches: the output's participant */
  int64_t in_count;   /* elements of each input */
  void *mpi_out;      /* the baseline's receive buffer */
} setup;

/* The job-wide rank of this task's i-th listed device: ranks follow device
 * order (task, then index: collectives.h), not the list's (cpu:1,0). */
static int rank_of(const jb *b, int i) {
  return b->task * b->a->devices->n + tool_devices_rank(b->a->devices, i);
}

static void dev_name(const jb *b, int i, char *buf, size_t len) {
  int per = b->a->devices->n;
  snprintf(buf, len, "/task:%d/%s", i / per, b->a->devices->name[i % per]);
}

static rf_status *build(const jb *b, setup *su, bench_coll c) {
  rf_graph *g = su->g;
  rf_output xs[MAX_DEV], ys[MAX_DEV];
  int first = b->task * b->a->devices->n, nx = c == BC_BROADCAST ? 1 : b->n;
  char dev[48];
  for (int i = 0; i < nx; i++) {
    dev_name(b, i, dev, sizeof dev);
    RF_TOOL_CHECK(rf_graph_push_device(g, dev));
    xs[i] = rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_of(1, su->in_count));
    rf_graph_pop_device(g);
  }
  switch (c) {
    case BC_ALL_REDUCE:
      rf_all_reduce_n(g, "coll", xs, b->n, RF_REDUCE_SUM, ys);
      break;
    case BC_REDUCE:
      ys[0] = rf_reduce(g, "coll", xs, b->n, RF_REDUCE_SUM);
      break;
    case BC_BROADCAST: {
      rf_output y = rf_broadcast(g, "coll", xs[0]);
      for (int i = 0; i < b->n; i++) {
        dev_name(b, i, dev, sizeof dev);
        RF_TOOL_CHECK(rf_graph_push_device(g, dev));
        ys[i] = rf_identity(g, NULL, y);
        rf_graph_pop_device(g);
      }
      break;
    }
    case BC_ALL_GATHER: rf_all_gather_n(g, "coll", xs, b->n, ys); break;
    case BC_REDUCE_SCATTER:
      rf_reduce_scatter_n(g, "coll", xs, b->n, RF_REDUCE_SUM, ys);
      break;
    default: return rf_status_new(RF_INVALID_ARGUMENT, "unknown collective");
  }
  RF_TOOL_CHECK(rf_graph_status(g));
  for (int i = 0; i < b->a->devices->n; i++) { /* this task's */
    if (first + i < nx) su->feeds[su->nfeeds++].output = xs[first + i];
    if (c == BC_REDUCE) continue;
    su->ranks[su->nfetches] = rank_of(b, i);
    su->fetches[su->nfetches++] = ys[first + i];
  }
  if (c == BC_REDUCE && b->task == 0) su->fetches[su->nfetches++] = ys[0];
  if (c == BC_REDUCE && b->task != 0) su->target = ys[0].node;
  return NULL;
}

static rf_status *setup_new(const jb *b, bench_coll c, int64_t bytes,
                            setup *su) {
  int64_t count = bytes / 4, per = count / b->n;
  memset(su, 0, sizeof *su);
  su->in_count = c == BC_ALL_GATHER       ? per
                 : c == BC_REDUCE_SCATTER ? per * b->n
                                          : count;
  su->g = rf_graph_new();
  if (!su->g) return rf_status_new(RF_RESOURCE_EXHAUSTED, "out of memory");
  RF_TOOL_CHECK(build(b, su, c));
  rf_session_options o;
  rf_session_options_init(&o);
  tool_devices_session(b->a->devices, &o);
  o.num_threads = b->a->threads;
  RF_TOOL_CHECK(rf_session_new(su->g, &o, &su->s));
  rf_shape shape = rf_shape_of(1, su->in_count);
  for (int i = 0; i < su->nfeeds; i++) { /* the device's rank, as expected */
    RF_TOOL_CHECK(rf_tensor_new(RF_FLOAT32, &shape, NULL, &su->feeds[i].value));
    float *d = rf_tensor_mutable_data(su->feeds[i].value);
    int g = c == BC_BROADCAST ? 0 : rank_of(b, i); /* broadcast: the root's */
    for (int64_t k = 0; k < su->in_count; k++) d[k] = (float)((k + g) % 7);
  }
  int64_t out = c == BC_ALL_GATHER ? per * b->ntasks : su->in_count;
  su->mpi_out = calloc((size_t)(out > 0 ? out : 1), sizeof(float));
  if (!su->mpi_out) return rf_status_new(RF_RESOURCE_EXHAUSTED, "no memory");
  return NULL;
}

static void setup_free(setup *su) {
  for (int i = 0; i < su->nfeeds; i++) rf_tensor_release(su->feeds[i].value);
  rf_session_free(su->s);
  rf_graph_free(su->g);
  free(su->mpi_out);
}

/* ---- the three ways to run it ---- */

/* ringflow's results, probed, so a broken collective cannot post a time. */
static rf_status *check(const jb *b, const setup *su, bench_coll c,
                        rf_tensor **outs) {
  for (int f = 0; f < su->nfetches; f++) {
    int64_t m = rf_tensor_num_elements(outs[f]), probe[3] = {0, m / 2, m - 1};
    for (int p = 0; p < 3 && m > 0; p++) {
      double want =
          bench_expected(c, b->n, su->in_count, su->ranks[f], probe[p]);
      double got = rf_tensor_get(outs[f], probe[p]);
      if (got != want)
        return rf_status_new(RF_INTERNAL,
                             "bench: %s across %d processes gave %g at "
                             "element %lld, expected %g",
                             bench_coll_name(c), b->ntasks, got,
                             (long long)probe[p], want);
    }
  }
  return NULL;
}

static rf_status *rf_op(const jb *b, setup *su, bench_coll c, bool checked) {
  rf_tensor *outs[MAX_DEV];
  RF_TOOL_CHECK(rf_session_run(su->s, su->feeds, su->nfeeds, su->fetches,
                               su->nfetches, &su->target, su->target ? 1 : 0,
                               outs));
  rf_status *st = checked ? check(b, su, c, outs) : NULL;
  for (int i = 0; i < su->nfetches; i++) rf_tensor_release(outs[i]);
  return st;
}

/* MPI on this process's first buffer (one per process, as MPI has). */
static void mpi_op(const jb *b, setup *su, bench_coll c) {
  void *in = rf_tensor_mutable_data(su->feeds[0].value), *out = su->mpi_out;
  int count = (int)su->in_count, per = (int)(su->in_count / b->ntasks);
  switch (c) {
    case BC_ALL_REDUCE:
      MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case BC_REDUCE:
      MPI_Reduce(in, out, count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
      break;
    case BC_BROADCAST:
      MPI_Bcast(b->task == 0 ? in : out, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
    case BC_ALL_GATHER:
      MPI_Allgather(in, count, MPI_FLOAT, out, count, MPI_FLOAT,
                    MPI_COMM_WORLD);
      break;
    case BC_REDUCE_SCATTER:
      MPI_Reduce_scatter_block(in, out, per, MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD);
      break;
    default: break;
  }
}

enum { WAY_RF, WAY_MPI, WAY_GLOO, NUM_WAYS };

/* Seconds per op of k ops one way, as the slowest process saw it. */
static rf_status *window(const jb *b, setup *su, bench_coll c, int way, int k,
                         double *secs) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < k; i++) {
    if (way == WAY_RF) RF_TOOL_CHECK(rf_op(b, su, c, k == 2 && i == 0));
    if (way == WAY_MPI) mpi_op(b, su, c);
    if (way == WAY_GLOO &&
        !bench_gloo_allreduce(b->gloo, rf_tensor_data(su->feeds[0].value),
                              su->mpi_out, su->in_count))
      return rf_status_new(RF_INTERNAL, "bench: Gloo's all-reduce failed");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime() - t0;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  *secs = t / k;
  return NULL;
}

static int by_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

typedef struct result {
  bool valid[NUM_WAYS];
  double secs[NUM_WAYS]; /* medians */
  int iters, rounds;
} result;

static rf_status *measure(const jb *b, bench_coll c, int64_t bytes, result *r) {
  setup su;
  rf_status *st = setup_new(b, c, bytes, &su);
  bool gloo = b->gloo && c == BC_ALL_REDUCE && b->a->devices->n == 1;
  int ways = gloo ? 3 : 2, k[NUM_WAYS] = {1, 1, 1};
  double t[NUM_WAYS][MAX_ROUNDS];
  memset(r, 0, sizeof *r);
  /* warm-up (compiles, fills caches), then for each way the k that makes
   * its window last min_time: one k for all made the slowest way's windows
   * last its ratio to ringflow times longer (Gloo at 1 KiB, 1000x: minutes
   * for --quick) */
  for (int w = 0; !st && w < ways; w++) st = window(b, &su, c, w, 2, &t[w][0]);
  for (int w = 0; !st && w < ways; w++)
    while (!st) {
      double s;
      st = window(b, &su, c, w, k[w], &s);
      if (st || s * k[w] >= b->a->min_time || k[w] >= (1 << 20)) break;
      k[w] *= 2;
    }
  for (int round = 0; !st && round < b->a->rounds; round++)
    for (int w = 0; !st && w < ways; w++)
      st = window(b, &su, c, w, k[w], &t[w][round]);
  if (!st) {
    for (int w = 0; w < ways; w++) {
      qsort(t[w], (size_t)b->a->rounds, sizeof(double), by_double);
      r->secs[w] = t[w][b->a->rounds / 2];
      r->valid[w] = true;
    }
    r->iters = k[WAY_RF];
    r->rounds = b->a->rounds;
  }
  setup_free(&su);
  return st;
}

/* ---- printing ---- */

static void print_header(const jb *b) {
  if (b->a->csv) {
    printf(
        "collective,tasks,devices,bytes,iters,rounds,ringflow_us,mpi_us,"
        "gloo_us,ringflow_busbw_gbs,mpi_busbw_gbs,gloo_busbw_gbs,"
        "ratio_vs_mpi,ratio_vs_gloo\n");
    return;
  }
  printf("%-15s %12s %6s %11s %11s %11s %9s %9s %9s %7s %7s\n", "collective",
         "bytes", "iters", "rf(us)", "mpi(us)", "gloo(us)", "rf_busbw",
         "mpi_bw", "gloo_bw", "rf/mpi", "rf/gloo");
}

static void print_row(const jb *b, bench_coll c, int64_t bytes,
                      const result *r) {
  double counted = bench_counted_bytes(c, b->n, bytes);
  double f = bench_bus_factor(c, b->n), bw[NUM_WAYS] = {0};
  for (int w = 0; w < NUM_WAYS; w++)
    if (r->valid[w]) bw[w] = counted / r->secs[w] / 1e9 * f;
  /* ratio: time of the other / ringflow's time (> 1: ringflow is faster) */
  double vs_mpi = r->secs[WAY_MPI] / r->secs[WAY_RF];
  double vs_gloo = r->valid[WAY_GLOO] ? r->secs[WAY_GLOO] / r->secs[WAY_RF] : 0;
  if (b->a->csv) {
    printf("%s,%d,%d,%.0f,%d,%d,%.3f,%.3f,", bench_coll_name(c), b->ntasks,
           b->n, counted, r->iters, r->rounds, r->secs[WAY_RF] * 1e6,
           r->secs[WAY_MPI] * 1e6);
    if (r->valid[WAY_GLOO]) printf("%.3f", r->secs[WAY_GLOO] * 1e6);
    printf(",%.4f,%.4f,", bw[WAY_RF], bw[WAY_MPI]);
    if (r->valid[WAY_GLOO]) printf("%.4f", bw[WAY_GLOO]);
    printf(",%.3f,", vs_mpi);
    if (r->valid[WAY_GLOO]) printf("%.3f", vs_gloo);
    printf("\n");
  } else {
    char gt[16] = "-", gb[16] = "-", gr[16] = "-";
    if (r->valid[WAY_GLOO]) {
      snprintf(gt, sizeof gt, "%.1f", r->secs[WAY_GLOO] * 1e6);
      snprintf(gb, sizeof gb, "%.3f", bw[WAY_GLOO]);
      snprintf(gr, sizeof gr, "%.2f", vs_gloo);
    }
    printf("%-15s %12.0f %6d %11.1f %11.1f %11s %9.3f %9.3f %9s %7.2f %7s\n",
           bench_coll_name(c), counted, r->iters, r->secs[WAY_RF] * 1e6,
           r->secs[WAY_MPI] * 1e6, gt, bw[WAY_RF], bw[WAY_MPI], gb, vs_mpi, gr);
  }
  tool_flush();
}

#ifndef RF_HAVE_GLOO
bool bench_gloo_new(int rank, int size, const char *dir, bench_gloo **out,
                    char *why, size_t why_len) {
  (void)rank, (void)size, (void)dir, (void)out;
  snprintf(why, why_len, "not built (Gloo not found: Debian's libgloo-dev)");
  return false;
}
bool bench_gloo_allreduce(bench_gloo *g, const float *in, float *out,
                          int64_t count) {
  (void)g, (void)in, (void)out, (void)count;
  return false;
}
void bench_gloo_free(bench_gloo *g) { (void)g; }
#endif

/* Gloo meets through files: task 0 makes a directory, every task connects
 * there, then task 0 removes it. false (why) when Gloo is not there. */
static bool gloo_connect(jb *b, char *why, size_t why_len) {
  char dir[256] = "";
  if (b->task == 0) {
    snprintf(dir, sizeof dir, "%s/ringflow-gloo-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) dir[0] = '\0';
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (!dir[0]) {
    snprintf(why, why_len, "no directory for Gloo's rendezvous");
    return false;
  }
  int ok = bench_gloo_new(b->task, b->ntasks, dir, &b->gloo, why, why_len);
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (b->task == 0) { /* everyone is connected (or gave up) */
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      char path[600];
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      if (e->d_name[0] != '.') unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
  }
  if (!ok) {
    bench_gloo_free(b->gloo);
    b->gloo = NULL;
  }
  return ok;
}

/* glibc's malloc, as both sides get it: unless the environment sets it,
 * blocks up to 32 MiB come from the heap and the heap is not trimmed, so
 * the temporary buffers MPI allocates in every collective are reused
 * instead of mapped fresh each call (first touch costs ~10-15 us per 4 KiB
 * page on these VMs; with glibc's sliding threshold, MPI_Reduce_scatter of
 * 16 MiB on 4 processes took 28-30 ms against 16-17 ms, and which side paid
 * depended on the history of the process). Before MPI starts. */
static const char *fix_malloc(void) {
  if (getenv("MALLOC_MMAP_THRESHOLD_") || getenv("MALLOC_TRIM_THRESHOLD_") ||
      getenv("GLIBC_TUNABLES"))
    return "as the environment sets it";
  if (mallopt(M_MMAP_THRESHOLD, 32 << 20) && mallopt(M_TRIM_THRESHOLD, 1 << 30))
    return "heap up to 32 MiB a block, never trimmed (mallopt)";
  return "glibc's defaults (mallopt refused)";
}

int bench_job(const bench_job_args *a) {
  jb b = {.a = a};
  const char *malloc_mode = fix_malloc();
  RF_TOOL_TRY(rf_job_tasks(&b.task, &b.ntasks));
  tool_task = b.task;
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE)
    return tool_fail(
        "bench: MPI gives thread level %d; this bench calls MPI "
        "beside ringflow's thread and needs MPI_THREAD_MULTIPLE",
        level);
  b.n = b.ntasks * a->devices->n;
  if (b.n > MAX_DEV) return tool_fail("bench: at most %d devices", MAX_DEV);
  char why[512] = "skipped (--no-gloo)";
  if (!a->no_gloo) gloo_connect(&b, why, sizeof why);
  char load[64];
  tool_load_average(load, sizeof load);
  bool lead = b.task == 0;
  int64_t largest = a->lo; /* the largest size run, at most a->hi */
  while (largest <= a->hi / a->factor) largest *= a->factor;
  if (lead && !a->csv)
    printf(
        "ringflow bench across processes: %d processes x %d device%s, "
        "float32, sum; %lld..%lld bytes (x%d)\nmachine: %ld online cores; "
        "load average %s (1/5/15 min) at start\n"
        "each figure: the median of %d rounds; a round times a window of "
        "each way, each of its own number of operations (>= %g s; iters: "
        "ringflow's)\n"
        "malloc: %s\nGloo: %s\n\n",
        b.ntasks, a->devices->n, a->devices->n > 1 ? "s" : "", (long long)a->lo,
        (long long)largest, a->factor, sysconf(_SC_NPROCESSORS_ONLN), load,
        a->rounds, a->min_time, malloc_mode,
        b.gloo ? "ring all-reduce, TCP on 127.0.0.1 (1 device per process)"
               : why);
  if (lead) print_header(&b);
  int rc = 0;
  for (int c = 0; c < BC_COUNT && !rc; c++) {
    if (a->only >= 0 && a->only != c) continue;
    for (int64_t s = a->lo; s <= a->hi && !rc; s *= a->factor) {
      if ((c == BC_ALL_GATHER || c == BC_REDUCE_SCATTER) && s / 4 < b.n) {
        if (lead && !a->csv) /* say why rather than leave a gap */
          printf(
              "%-15s %12lld  (no row: fewer than one float32 per device to "
              "split over %d devices)\n",
              bench_coll_name((bench_coll)c), (long long)s, b.n);
        continue;
      }
      result r;
      rf_status *st = measure(&b, (bench_coll)c, s, &r);
      if (st)
        rc = tool_report(st);
      else if (lead)
        print_row(&b, (bench_coll)c, s, &r);
    }
    rf_default_allocator_trim();
  }
  tool_load_average(load, sizeof load);
  if (lead && !a->csv && !rc) printf("load average %s at the end\n", load);
  bench_gloo_free(b.gloo);
  return rc;
}
#endif
