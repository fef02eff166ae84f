/* tools/bench_gpu.c - `ringflow bench --devices gpu:0-N`: every collective
 * on the GPU devices through a session against the raw backend call on the same
 * input buffers and streams, in one run (bench_gpu_coll.c), then the
 * executor's cost per GPU node (bench_gpu_exec.c). Which backend: the one
 * the runtime picks - NCCL when every device has its own physical GPU, the
 * CUDA-kernel backend when devices share GPUs (NCCL refuses two ranks on one
 * GPU) - or NCCL with a one-rank communicator for one device on request.
 * Columns follow nccl-tests: algbw = bytes / time, busbw = algbw * factor;
 * ratio = busbw through the session / busbw of the raw call. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_gpu.h"
#include "tools.h"

#ifndef RF_HAVE_CUDA

int bench_gpu_main(const bench_gpu_opts *o) {
  (void)o;
  fprintf(stderr, "ringflow: bench: no GPU: this build has no CUDA\n");
  return 1;
}

#else

#include <cuda_runtime_api.h>

#include "comm/gpu/gpu_coll.h"
#include "core/cuda_check.h"
#include "device/gpu/gpu.h"

#define ROUNDS 5

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Seconds of k calls of f. */
static rf_status *batch(rf_status *(*f)(void *), void *arg, int k,
                        double *seconds) {
  double t0 = now_seconds();
  for (int i = 0; i < k; i++) RF_TOOL_CHECK(f(arg));
  *seconds = now_seconds() - t0;
  return NULL;
}

/* Calls per batch so that one batch lasts at least `target` seconds. */
static rf_status *calibrate(rf_status *(*f)(void *), void *arg, double target,
                            int *k) {
  for (*k = 1;; *k *= 2) {
    double t;
    RF_TOOL_CHECK(batch(f, arg, *k, &t));
    if (t >= target || *k >= (1 << 20)) return NULL;
  }
}

rf_status *bench_gpu_time(rf_status *(*const *fns)(void *), int n, void *arg,
                          double min_time, double *seconds, int *iters) {
  double t[BG_MAX_FNS][ROUNDS], dt;
  for (int f = 0; f < n; f++) {
    RF_TOOL_CHECK(batch(fns[f], arg, 3, &dt)); /* warm-up */
    RF_TOOL_CHECK(calibrate(fns[f], arg, min_time / ROUNDS, &iters[f]));
  }
  for (int r = 0; r < ROUNDS; r++) /* taking turns: drift hits all alike */
    for (int f = 0; f < n; f++) {
      RF_TOOL_CHECK(batch(fns[f], arg, iters[f], &dt));
      t[f][r] = dt / iters[f];
    }
  for (int f = 0; f < n; f++) {
    qsort(t[f], ROUNDS, sizeof t[f][0], cmp_double);
    seconds[f] = t[f][ROUNDS / 2];
  }
  return NULL;
}

/* ---- the run's devices and backend ---- */

typedef struct gpu_info {
  int count; /* physical GPUs */
  char name[256];
  int cc_major, cc_minor, sms;
  double mem_gib;
  int driver, runtime, nccl; /* versions; 0 unknown */
} gpu_info;

static rf_status *probe_gpus(gpu_info *gi) {
  RF_TOOL_CHECK(rf__gpu_count(&gi->count));
  struct cudaDeviceProp p;
  RF_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  snprintf(gi->name, sizeof gi->name, "%s", p.name);
  gi->cc_major = p.major;
  gi->cc_minor = p.minor;
  gi->sms = p.multiProcessorCount;
  gi->mem_gib = (double)p.totalGlobalMem / (1 << 30);
  (void)cudaDriverGetVersion(&gi->driver);
  (void)cudaRuntimeGetVersion(&gi->runtime);
#ifdef RF_HAVE_NCCL
  (void)ncclGetVersion(&gi->nccl);
#endif
  (void)cudaGetLastError();
  return NULL;
}

static bool distinct(const bench_gpu_env *env) {
  for (int i = 1; i < env->n; i++)
    for (int k = 0; k < i; k++)
      if (env->ordinals[k] == env->ordinals[i]) return false;
  return true;
}

/* Decides the backend (as the runtime will) and makes the raw NCCL
 * communicators. Exit code 2 on a backend that cannot apply. */
static int setup_env(const bench_gpu_opts *o, const gpu_info *gi,
                     bench_gpu_env *env) {
  const tool_devices *d = o->devices;
  env->n = d->n;
  env->count = d->count;
  for (int i = 0; i < d->n; i++) env->index[i] = d->index[i];
  env->threads = o->threads;
  env->timeout_ms = 60000;
  env->per_step = o->per_step;
  env->pipeline = o->pipeline;
  for (int i = 0; i < d->n; i++) env->ordinals[i] = d->index[i] % gi->count;
  bool nccl_runtime = d->n > 1 && distinct(env); /* the runtime's choice */
#ifndef RF_HAVE_NCCL
  nccl_runtime = false;
  if (o->backend == BG_NCCL)
    return tool_fail("bench: --backend nccl: this build has no NCCL");
#else
  if (o->backend == BG_NCCL && !nccl_runtime && d->n > 1)
    return tool_fail(
        "bench: --backend nccl needs every device on its own GPU (%d devices "
        "on %d GPUs: NCCL refuses two ranks on one GPU)",
        d->n, gi->count);
  if (o->backend == BG_NCCL && d->n == 1) {
    nccl_runtime = true;
    rf__gpu_coll_nccl_for_single(true);
  }
#endif
  if (o->backend == BG_CUDA && nccl_runtime)
    return tool_fail(
        "bench: --backend cuda: the runtime sends devices on distinct GPUs "
        "through NCCL");
  env->nccl = nccl_runtime;
#ifdef RF_HAVE_NCCL
  if (env->nccl) {
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* no multicast, as the backend */
    RF_TOOL_TRY(RF_NCCL_STATUS(
        ncclCommInitAll((ncclComm_t *)env->comms, env->n, env->ordinals)));
  }
#endif
  return 0;
}

static void free_env(bench_gpu_env *env) {
#ifdef RF_HAVE_NCCL
  for (int i = 0; env->nccl && i < env->n; i++)
    if (env->comms[i]) (void)ncclCommDestroy((ncclComm_t)env->comms[i]);
  rf__gpu_coll_nccl_for_single(false);
#endif
  (void)env;
}

static void print_header(const bench_gpu_opts *o, const gpu_info *gi,
                         const bench_gpu_env *env) {
  char load[64];
  tool_load_average(load, sizeof load);
  int used = 0; /* distinct physical GPUs */
  for (int i = 0; i < env->n; i++) {
    int k = 0;
    while (k < i && env->ordinals[k] != env->ordinals[i]) k++;
    used += k == i;
  }
  char list[256];
  if (tool_devices_dense(o->devices))
    snprintf(list, sizeof list, "gpu:0..gpu:%d", env->n - 1);
  else
    tool_devices_format(o->devices, list, sizeof list);
  printf(
      "ringflow bench: %d GPU devices %s on %d of %d physical GPUs\n"
      "gpu: %s, compute capability %d.%d, %d multiprocessors, %.1f GiB\n"
      "versions: CUDA driver %d.%d, runtime %d.%d, NCCL %d (0: none)\n"
      "machine: %ld online cores; load average %s at start\n",
      env->n, list, used, gi->count, gi->name, gi->cc_major, gi->cc_minor,
      gi->sms, gi->mem_gib, gi->driver / 1000, gi->driver % 1000 / 10,
      gi->runtime / 1000, gi->runtime % 1000 / 10, gi->nccl,
      sysconf(_SC_NPROCESSORS_ONLN), load);
  if (env->nccl)
    printf(
        "backend: NCCL (%s); raw call: ncclGroupStart, one nccl<Collective> "
        "per rank on its device's stream, ncclGroupEnd, cudaStreamSynchronize "
        "of every stream, on a communicator of its own (ncclCommInitAll)\n",
        env->n == 1 ? "one-rank communicator" : "one rank per GPU");
  else
    printf(
        "backend: CUDA kernels (devices share GPUs); raw call: the backend's "
        "kernel entry rf__cuda_coll_launch on gpu:%d's stream, then "
        "cudaStreamSynchronize\n",
        env->index[0]);
  printf(
      "session: Variable -> ReadVariable -> %d independent collective%s of "
      "those inputs on every device per step, targets only (no host "
      "copies), one rf_session_run per step; raw: %d raw call%s, then one "
      "wait; float32, sum; same input buffers; median of %d alternating "
      "batches of >= %.3f s\n"
      "time, raw, wait: microseconds per collective (a step's or a wait's "
      "time / %d); wait: the session step with each collective's dones "
      "waiting for its kernel (completion thread + pool task), as before "
      "the collectives completed in stream order; base: the session step "
      "without the collectives (targets: the ReadVariables), per step; "
      "ovh = time - raw; ratio = raw / time\n",
      o->per_step, o->per_step > 1 ? "s" : "", o->per_step,
      o->per_step > 1 ? "s" : "", ROUNDS, o->min_time / ROUNDS, o->per_step);
  if (o->pipeline > 0)
    printf(
        "pipelined: %d session steps back to back with gpu_sync_on_finish "
        "off (each returns once its GPU work is enqueued), then one "
        "rf_session_sync, against %d x %d raw call%s back to back, then one "
        "wait (nccl-tests' timing); pipe, praw: microseconds per collective "
        "(time / %d); pratio = praw / pipe; prawev: praw with the CUDA-kernel "
        "backend's cross-stream waits around each call (what the virtual "
        "devices' streams cost the GPU; NCCL: praw); results checked by a "
        "fetch after %d pipelined steps\n",
        o->pipeline, o->pipeline, o->per_step, o->per_step > 1 ? "s" : "",
        o->pipeline * o->per_step, o->pipeline);
}

/* ---- collectives ---- */

typedef struct coll_row {
  bool valid;
  bench_row rf, raw;
  /* per collective: the session step with dones after the kernels; the
   * session step without the collectives (per step) */
  double wait_us, base_us;
  /* pipelined (--pipeline T): per collective, session and raw */
  double pipe_us, pipe_raw_us;
  double pipe_raw_ev_us; /* raw with the backend's cross-stream waits */
  double traffic;        /* bytes through device memory at least */
  int64_t fresh;         /* cudaMalloc'ed blocks during the timing */
} coll_row;

/* One traced session step per collective, at the smallest and the largest
 * size, to PREFIX_<collective>_<bytes>.json. */
static rf_status *maybe_trace(const bench_gpu_opts *o, bench_gpu_coll *b,
                              bench_coll c, int64_t size) {
  if (!o->trace_prefix ||
      (size != o->sizes[0] && size != o->sizes[o->nsizes - 1]))
    return NULL;
  char path[1024];
  snprintf(path, sizeof path, "%s_%s_%lld.json", o->trace_prefix,
           bench_coll_name(c), (long long)size);
  return bench_gpu_coll_trace(b, path);
}

static rf_status *measure_one(const bench_gpu_opts *o, const bench_gpu_env *env,
                              bench_coll c, int64_t size, coll_row *row) {
  bench_gpu_coll *b = NULL;
  RF_TOOL_CHECK(bench_gpu_coll_new(env, c, size, &b));
  if (!b) return NULL; /* too small to split over n ranks */
  static rf_status *(*const fns[])(void *) = {
      bench_gpu_coll_step,           bench_gpu_coll_raw,
      bench_gpu_coll_step_waiting,   bench_gpu_coll_base,
      bench_gpu_coll_pipe,           bench_gpu_coll_pipe_raw,
      bench_gpu_coll_pipe_raw_events};
  /* raw with the cross-stream waits: the CUDA-kernel path only */
  int nfns = env->pipeline > 0 ? (env->nccl ? 6 : 7) : 4;
  double s[7] = {0};
  int k[7] = {0};
  int64_t fresh0 = 0, fresh1 = 0;
  rf_status *st = bench_gpu_coll_check(b, false);
  if (!st && env->pipeline > 0) st = bench_gpu_coll_check(b, true);
  if (!st) {
    bench_gpu_coll_fresh(b, &fresh0);
    st = bench_gpu_time(fns, nfns, b, o->min_time, s, k);
    bench_gpu_coll_fresh(b, &fresh1);
  }
  /* and once more after the timing: the values the timed steps left */
  if (!st && env->pipeline > 0) st = bench_gpu_coll_check(b, true);
  if (!st) st = maybe_trace(o, b, c, size);
  if (!st) {
    double bytes = bench_counted_bytes(c, env->n, size), per = env->per_step;
    bench_row_set(&row->rf, c, env->n, bytes, k[0], s[0] / per);
    bench_row_set(&row->raw, c, env->n, bytes, k[1], s[1] / per);
    row->wait_us = s[2] / per * 1e6;
    row->base_us = s[3] * 1e6;
    double calls = per * env->pipeline;
    row->pipe_us = env->pipeline > 0 ? s[4] / calls * 1e6 : 0;
    row->pipe_raw_us = env->pipeline > 0 ? s[5] / calls * 1e6 : 0;
    row->pipe_raw_ev_us = nfns > 6 ? s[6] / calls * 1e6 : row->pipe_raw_us;
    row->traffic = bench_gpu_coll_traffic(b);
    row->fresh = fresh1 - fresh0;
    row->valid = true;
  }
  bench_gpu_coll_free(b);
  return st;
}

static void print_coll_header(bool csv, bool pipe) {
  if (csv)
    printf(
        "collective,devices,backend,per_step,bytes,iters,time_us,algbw_gbs,"
        "busbw_gbs,raw_iters,raw_time_us,raw_algbw_gbs,raw_busbw_gbs,ratio,"
        "overhead_us,mem_gbs,wait_us,base_step_us,fresh_blocks%s\n",
        pipe ? ",pipeline,pipe_time_us,pipe_raw_time_us,pipe_busbw_gbs,"
               "pipe_raw_busbw_gbs,pipe_ratio,pipe_raw_events_time_us"
             : "");
  else
    printf("%-15s %11s %9s %9s %9s %9s %9s %9s %9s %6s %9s %9s%s\n",
           "collective", "bytes", "time(us)", "raw(us)", "wait(us)", "base",
           "ovh(us)", "algbw", "busbw", "ratio", "raw_busbw", "mem(GB/s)",
           pipe ? "  pipe(us)  praw(us) pbusbw pratio  prawev(us)" : "");
}

static void print_coll_row(const bench_gpu_env *env, int c, const coll_row *r,
                           bool csv) {
  double pratio = r->pipe_raw_us / r->pipe_us;
  /* busbw scales as 1 / time: the K = 1 row's, rescaled */
  double pbus = r->rf.busbw * r->rf.time_us / r->pipe_us;
  double prbus = r->rf.busbw * r->rf.time_us / r->pipe_raw_us;
  double ratio = r->raw.time_us / r->rf.time_us;
  double ovh = r->rf.time_us - r->raw.time_us;
  double mem = r->traffic / (r->rf.time_us * 1e-6) / 1e9;
  if (csv)
    printf(
        "%s,%d,%s,%d,%.0f,%d,%.3f,%.4f,%.4f,%d,%.3f,%.4f,%.4f,%.4f,%.3f,"
        "%.2f,%.3f,%.3f,%lld",
        bench_coll_name((bench_coll)c), env->n, env->nccl ? "nccl" : "cuda",
        env->per_step, r->rf.bytes, r->rf.iters, r->rf.time_us, r->rf.algbw,
        r->rf.busbw, r->raw.iters, r->raw.time_us, r->raw.algbw, r->raw.busbw,
        ratio, ovh, mem, r->wait_us, r->base_us, (long long)r->fresh);
  else
    printf(
        "%-15s %11.0f %9.1f %9.1f %9.1f %9.1f %9.1f %9.2f %9.2f %6.3f %9.2f "
        "%9.1f",
        bench_coll_name((bench_coll)c), r->rf.bytes, r->rf.time_us,
        r->raw.time_us, r->wait_us, r->base_us, ovh, r->rf.algbw, r->rf.busbw,
        ratio, r->raw.busbw, mem);
  if (env->pipeline > 0 && csv)
    printf(",%d,%.3f,%.3f,%.4f,%.4f,%.4f,%.3f", env->pipeline, r->pipe_us,
           r->pipe_raw_us, pbus, prbus, pratio, r->pipe_raw_ev_us);
  else if (env->pipeline > 0)
    printf(" %9.1f %9.1f %6.1f %6.3f %11.1f", r->pipe_us, r->pipe_raw_us, pbus,
           pratio, r->pipe_raw_ev_us);
  printf("\n");
  tool_flush();
}

/* Per collective: the lowest ratio at >= 32 MiB, and the overhead at
 * 8 B..64 KiB (median and range), with the targets. */
static void print_pipe_summary(const bench_gpu_opts *o,
                               coll_row (*rows)[BENCH_MAX_SIZES]) {
  printf(
      "\n# summary, pipelined (%d steps per rf_session_sync, against %d raw "
      "calls per wait): busbw ratio at >= 32 MiB, target >= 0.97\n",
      o->pipeline, o->pipeline * o->per_step);
  for (int c = 0; c < BC_COUNT; c++) {
    double lo = 0;
    int nbig = 0;
    char list[256] = "", evs[256] = "";
    for (int i = 0; i < o->nsizes; i++) {
      const coll_row *r = &rows[c][i];
      if (!r->valid || o->sizes[i] < (32 << 20)) continue;
      double q = r->pipe_raw_us / r->pipe_us;
      lo = nbig++ ? (q < lo ? q : lo) : q;
      size_t len = strlen(list);
      snprintf(list + len, sizeof list - len, "%s%.3f", len ? " / " : "", q);
      len = strlen(evs);
      snprintf(evs + len, sizeof evs - len, "%s%.3f", len ? " / " : "",
               r->pipe_raw_ev_us / r->pipe_us);
    }
    if (!nbig) continue;
    printf(
        "%-15s lowest ratio %.3f over %d sizes (%s): %s; against raw with "
        "the cross-stream waits: %s\n",
        bench_coll_name((bench_coll)c), lo, nbig, lo >= 0.97 ? "met" : "missed",
        list, evs);
  }
}

static void print_summary(const bench_gpu_opts *o,
                          coll_row (*rows)[BENCH_MAX_SIZES]) {
  printf(
      "\n# summary (%d collective%s per step): busbw ratio (session / raw) "
      "at >= 32 MiB, target >= 0.97; overhead per collective (session - "
      "raw) at <= 64 KiB\n",
      o->per_step, o->per_step > 1 ? "s" : "");
  for (int c = 0; c < BC_COUNT; c++) {
    double lo = 0, ovh[BENCH_MAX_SIZES];
    int nbig = 0, nsmall = 0;
    for (int i = 0; i < o->nsizes; i++) {
      const coll_row *r = &rows[c][i];
      if (!r->valid) continue;
      if (o->sizes[i] >= (32 << 20)) {
        double q = r->raw.time_us / r->rf.time_us;
        lo = nbig++ ? (q < lo ? q : lo) : q;
      }
      if (o->sizes[i] <= (64 << 10))
        ovh[nsmall++] = r->rf.time_us - r->raw.time_us;
    }
    if (!nbig && !nsmall) continue;
    printf("%-15s", bench_coll_name((bench_coll)c));
    if (nbig)
      printf(" lowest ratio %.3f over %d sizes (%s)", lo, nbig,
             lo >= 0.97 ? "met" : "missed");
    if (nsmall) {
      qsort(ovh, (size_t)nsmall, sizeof *ovh, cmp_double);
      printf("; overhead median %.1f us (%.1f..%.1f) over %d sizes",
             ovh[nsmall / 2], ovh[0], ovh[nsmall - 1], nsmall);
    }
    printf("\n");
  }
}

static int run_collectives(const bench_gpu_opts *o, const bench_gpu_env *env) {
  coll_row(*rows)[BENCH_MAX_SIZES] = calloc(BC_COUNT, sizeof *rows);
  if (!rows) return tool_fail("bench: out of memory");
  if (!o->csv) printf("\n# collectives\n");
  print_coll_header(o->csv, o->pipeline > 0);
  int rc = 0;
  for (int c = 0; c < BC_COUNT && !rc; c++) {
    if (o->only >= 0 && o->only != c) continue;
    for (int i = 0; i < o->nsizes && !rc; i++) {
      rf_status *st =
          measure_one(o, env, (bench_coll)c, o->sizes[i], &rows[c][i]);
      if (st) {
        fprintf(stderr, "ringflow: bench: %s at %lld bytes:\n",
                bench_coll_name((bench_coll)c), (long long)o->sizes[i]);
        rc = tool_report(st);
      } else if (rows[c][i].valid) {
        print_coll_row(env, c, &rows[c][i], o->csv);
      }
    }
  }
  if (!rc && !o->csv) {
    print_summary(o, rows);
    if (o->pipeline > 0) print_pipe_summary(o, rows);
    int64_t fresh = 0;
    for (int c = 0; c < BC_COUNT; c++)
      for (int i = 0; i < o->nsizes; i++) fresh += rows[c][i].fresh;
    printf(
        "allocator: %lld device blocks taken from cudaMalloc during the "
        "timed calls (0: every step reused cached buffers)\n",
        (long long)fresh);
  }
  free(rows);
  return rc;
}

/* ---- executor ---- */

static int run_executor(const bench_gpu_opts *o, const bench_gpu_env *env) {
  bench_gpu_exec_row rows[BG_EXEC_ROWS];
  RF_TOOL_TRY(bench_gpu_executor(env, o->min_time, rows));
  const bench_gpu_exec_row *a = &rows[0], *z = &rows[BG_EXEC_ROWS - 1];
  double dn = z->nodes - a->nodes;
  double per_s = (z->session_s - a->session_s) / dn * 1e6;
  double per_d = (z->direct_s - a->direct_s) / dn * 1e6;
  if (o->csv) {
    printf("\nnodes,session_us,direct_us,session_iters,direct_iters\n");
    for (int r = 0; r < BG_EXEC_ROWS; r++)
      printf("%d,%.3f,%.3f,%d,%d\n", rows[r].nodes, rows[r].session_s * 1e6,
             rows[r].direct_s * 1e6, rows[r].session_iters,
             rows[r].direct_iters);
    return 0;
  }
  printf(
      "\n# executor overhead: a chain of N Add kernels (float32[4]) on "
      "gpu:%d\n"
      "# session: one rf_session_run targeting the chain's end (waits for the "
      "stream)\n"
      "# direct: the GPU Add kernel's compute function N times on gpu:%d's "
      "stream, one cudaStreamSynchronize\n",
      env->index[0], env->index[0]);
  printf("%6s %14s %14s %12s\n", "N", "session(us)", "direct(us)",
         "difference");
  for (int r = 0; r < BG_EXEC_ROWS; r++)
    printf("%6d %14.1f %14.1f %12.1f\n", rows[r].nodes, rows[r].session_s * 1e6,
           rows[r].direct_s * 1e6,
           (rows[r].session_s - rows[r].direct_s) * 1e6);
  printf(
      "per node (N=%d vs N=%d): session %.2f us, direct %.2f us, executor "
      "overhead %.2f us per node; fixed cost of a step %.1f us\n",
      z->nodes, a->nodes, per_s, per_d, per_s - per_d,
      (a->session_s - a->direct_s) * 1e6);
  return 0;
}

int bench_gpu_main(const bench_gpu_opts *o) {
  gpu_info gi = {0};
  rf_status *st = probe_gpus(&gi);
  if (st) {
    fprintf(stderr, "ringflow: bench: %s\n", rf_status_message(st));
    rf_status_free(st);
    return 1;
  }
  bench_gpu_env env = {0};
  int rc = setup_env(o, &gi, &env);
  if (rc) {
    free_env(&env);
    return rc;
  }
  if (!o->csv) print_header(o, &gi, &env);
  if (o->collectives) rc = run_collectives(o, &env);
  if (!rc && o->executor) rc = run_executor(o, &env);
  free_env(&env);
  return rc;
}

#endif
