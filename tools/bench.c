/* tools/bench.c - `ringflow bench`: every collective on N virtual CPU devices
 * at sizes min..max (x4 steps), with, in the same run, a memory-bandwidth
 * floor (bench_floor.c) and OpenMPI at the same sizes (bench_mpi.c, default
 * glibc and MALLOC_MMAP_THRESHOLD_=1 GiB), then a table of ratios; or, with
 * --devices gpu:0-N, on GPU devices against the raw backend call
 * (bench_gpu.c). Columns follow nccl-tests: algbw = bytes / time, busbw =
 * algbw * factor. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "tools.h"

typedef struct opts {
  int n, threads, factor, rounds;
  bool gpu; /* --devices gpu:0-N */
  bench_gpu_backend backend;
  bool executor_only, no_executor;
  const char *trace_prefix;
  int per_step; /* GPU: collectives per session step */
  int pipeline; /* GPU: pipelined steps per wait (0: no such columns) */
  int64_t lo, hi;
  double min_time;
  bool quick, csv, no_mpi, no_floor, no_gloo, devices_given;
  int only; /* a bench_coll, or -1 for all */
  const char *mpi_program;
} opts;

typedef struct results {
  int64_t sizes[BENCH_MAX_SIZES];
  int nsizes;
  bench_row rf[BC_COUNT][BENCH_MAX_SIZES];
  bench_row mpi[2][BC_COUNT][BENCH_MAX_SIZES]; /* [default, mmap threshold] */
  bool mpi_ran[2];
  double copy_s[BENCH_MAX_SIZES], sum_s[BENCH_MAX_SIZES];
} results;

static const char *const usage_text =
    "usage: ringflow bench [--devices N|cpu:0-N|gpu:0-N] [--min SIZE]\n"
    "                      [--max SIZE] [--factor F] [--quick] [--csv]\n"
    "                      [--min-time SECONDS] [--threads T]\n"
    "                      [--collective NAME] [--no-mpi] [--no-floor]\n"
    "                      [--mpi-baseline PATH] [--backend auto|cuda|nccl]\n"
    "                      [--executor | --no-executor] [--trace PREFIX]\n"
    "                      [--per-step K] [--pipeline T]\n"
    "  times all_reduce (sum), reduce, broadcast, all_gather and "
    "reduce_scatter\n"
    "  (float32) at sizes SIZE..SIZE in steps of xF (default 4; K/M/G\n"
    "  suffixes). On N virtual CPU devices (default 4; sizes 1K..256M, at\n"
    "  most 1G): against a 2-thread memory floor and OpenMPI (mpirun -np N\n"
    "  --mca btl self,vader). On GPU devices gpu:0..N-1 (gpu:i on physical\n"
    "  GPU i % count; sizes 8..512M, at most 8G): through a session against\n"
    "  the raw backend call on the same GPU buffers - the CUDA-kernel entry\n"
    "  when devices share GPUs, NCCL when each has its own (--backend nccl\n"
    "  with gpu:0: a one-rank NCCL communicator) - then the executor's cost\n"
    "  per GPU node (--executor: only that; --no-executor: not that);\n"
    "  --trace PREFIX writes a Chrome trace of one step per collective at\n"
    "  the smallest and largest size (PREFIX_<collective>_<bytes>.json);\n"
    "  --per-step K: K independent collectives of the same inputs per\n"
    "  session step, against K raw calls then one wait (default 1);\n"
    "  --pipeline T: also T steps back to back with gpu_sync_on_finish off\n"
    "  then one rf_session_sync, against T x K raw calls then one wait\n"
    "  (default 20; 0: not).\n"
    "  --quick: 1K..4M, 0.02 s per size (for tests); --csv: CSV tables.\n"
    "Under mpirun (mpirun -np N ringflow bench): each collective across the\n"
    "  N processes (--devices each, default 1) against MPI_Allreduce,\n"
    "  MPI_Reduce, ... and Gloo (all_reduce, when built) in the same\n"
    "  processes on the same buffers: medians of --rounds rounds (default\n"
    "  5) of alternating windows; [--no-gloo].\n"
    "RF_LOG=debug|info|warn|error prints ringflow's log messages to "
    "stderr.\n";

static int parse_size(const char *s, int64_t *out) {
  char *end;
  double v = strtod(s, &end);
  int64_t mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = 1 << 10, end++;
  else if (*end == 'M' || *end == 'm')
    mult = 1 << 20, end++;
  else if (*end == 'G' || *end == 'g')
    mult = 1 << 30, end++;
  if (*end == 'B' || *end == 'b') end++;
  double bytes = v * (double)mult;
  if (!*s || *end || bytes < 4 || bytes > (double)(1ll << 33)) return -1;
  *out = (int64_t)bytes;
  return 0;
}

/* --devices "cpu:0-N" or "gpu:0-N": devices 0..N-1 of one type. Reports
 * its errors; 0 when parsed. */
static int parse_device_arg(const char *s, opts *o) {
  char names[64][32];
  int n;
  rf_session_options so;
  if (parse_devices(s, names, 64, &n, &so)) return -1;
  o->gpu = strncmp(names[0], "gpu:", 4) == 0;
  for (int i = 0; i < n; i++) {
    char want[32];
    snprintf(want, sizeof want, "%s:%d", o->gpu ? "gpu" : "cpu", i);
    if (strcmp(names[i], want) != 0)
      return tool_fail("bench: --devices must be %s:0..%s:N-1 in order",
                       o->gpu ? "gpu" : "cpu", o->gpu ? "gpu" : "cpu");
  }
  o->n = n;
  return 0;
}

static int backend_by_name(const char *s, bench_gpu_backend *out) {
  static const char *const names[] = {"auto", "cuda", "nccl"};
  for (int i = 0; i < 3; i++)
    if (strcmp(s, names[i]) == 0) return *out = (bench_gpu_backend)i, 0;
  return -1;
}

static int coll_by_name(const char *s) {
  for (int c = 0; c < BC_COUNT; c++)
    if (strcmp(s, bench_coll_name((bench_coll)c)) == 0) return c;
  return -1;
}

/* 0: parsed; otherwise the command's exit code (help: 0 with *stop). */
static int parse_args(int argc, char **argv, opts *o, bool *stop) {
  static const struct option longs[] = {
      {"devices", required_argument, 0, 'n'},
      {"min", required_argument, 0, 'a'},
      {"max", required_argument, 0, 'b'},
      {"quick", no_argument, 0, 'q'},
      {"csv", no_argument, 0, 'c'},
      {"min-time", required_argument, 0, 't'},
      {"threads", required_argument, 0, 'T'},
      {"collective", required_argument, 0, 'C'},
      {"no-mpi", no_argument, 0, 'M'},
      {"mpi-baseline", required_argument, 0, 'P'},
      {"no-floor", no_argument, 0, 'F'},
      {"factor", required_argument, 0, 'f'},
      {"backend", required_argument, 0, 'B'},
      {"executor", no_argument, 0, 'E'},
      {"no-executor", no_argument, 0, 'X'},
      {"trace", required_argument, 0, 'R'},
      {"no-gloo", no_argument, 0, 'G'},
      {"rounds", required_argument, 0, 'r'},
      {"per-step", required_argument, 0, 'K'},
      {"pipeline", required_argument, 0, 'L'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  *o = (opts){.n = 4,
              .factor = 4,
              .min_time = -1,
              .only = -1,
              .rounds = 5,
              .per_step = 1,
              .pipeline = -1};
  bool min_given = false, max_given = false;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
    int bad = 0;
    switch (c) {
      case 'n':
        if (!strchr(optarg, ':'))
          bad = parse_int(optarg, 1, 64, &o->n);
        else if (parse_device_arg(optarg, o))
          return 2; /* reported */
        o->devices_given = true;
        break;
      case 'G': o->no_gloo = true; break;
      case 'r': bad = parse_int(optarg, 1, 15, &o->rounds); break;
      case 'a': bad = parse_size(optarg, &o->lo), min_given = true; break;
      case 'b': bad = parse_size(optarg, &o->hi), max_given = true; break;
      case 'q': o->quick = true; break;
      case 'c': o->csv = true; break;
      case 't': o->min_time = atof(optarg), bad = o->min_time <= 0; break;
      case 'T': bad = parse_int(optarg, 0, 256, &o->threads); break;
      case 'C': bad = (o->only = coll_by_name(optarg)) < 0; break;
      case 'M': o->no_mpi = true; break;
      case 'F': o->no_floor = true; break;
      case 'P': o->mpi_program = optarg; break;
      case 'f': bad = parse_int(optarg, 2, 16, &o->factor); break;
      case 'B': bad = backend_by_name(optarg, &o->backend); break;
      case 'E': o->executor_only = true; break;
      case 'X': o->no_executor = true; break;
      case 'R': o->trace_prefix = optarg; break;
      case 'K': bad = parse_int(optarg, 1, 64, &o->per_step); break;
      case 'L': bad = parse_int(optarg, 0, 1000, &o->pipeline); break;
      case 'h':
        fputs(usage_text, stdout);
        *stop = true;
        return 0;
      default: bad = 1;
    }
    if (bad) {
      if (c != '?') tool_fail("bench: bad value '%s'", optarg ? optarg : "");
      fputs(usage_text, stderr);
      return 2;
    }
  }
  if (optind != argc)
    return tool_fail("bench: unexpected argument '%s'", argv[optind]);
  if (!min_given) o->lo = o->quick || !o->gpu ? 1 << 10 : 8;
  if (!max_given) o->hi = o->quick ? 4 << 20 : o->gpu ? 512 << 20 : 256 << 20;
  if (o->min_time < 0) o->min_time = o->quick ? 0.02 : 0.2;
  if (o->hi < o->lo) return tool_fail("bench: --max is below --min");
  if (!o->gpu && o->hi > (1 << 30))
    return tool_fail("bench: at most 1G on CPU devices");
  if (!o->gpu && (o->backend || o->executor_only || o->no_executor ||
                  o->trace_prefix || o->per_step != 1 || o->pipeline >= 0))
    return tool_fail(
        "bench: --backend, --executor, --no-executor, --trace, --per-step "
        "and --pipeline need GPU devices");
  if (o->pipeline < 0) o->pipeline = 20;
  if (o->executor_only && o->no_executor)
    return tool_fail("bench: --executor and --no-executor exclude each other");
  return 0;
}

static bool wanted(const opts *o, int c) { return o->only < 0 || o->only == c; }

static void print_header(void) {
  printf("%-15s %12s %8s %12s %12s %12s\n", "collective", "bytes", "iters",
         "time(us)", "algbw(GB/s)", "busbw(GB/s)");
}

static void print_row(int c, const bench_row *r) {
  printf("%-15s %12.0f %8d %12.1f %12.3f %12.3f\n",
         bench_coll_name((bench_coll)c), r->bytes, r->iters, r->time_us,
         r->algbw, r->busbw);
}

static int measure_floor(const opts *o, results *r) {
  bench_floor *f;
  RF_TOOL_TRY(bench_floor_new(o->n, o->hi, &f));
  if (!o->csv) {
    printf(
        "\n# memory floor: plain loops on 2 threads, one barrier per op; "
        "GB/s = bytes / time\n");
    printf("%12s %12s %12s %12s %12s\n", "bytes", "copy(us)", "copy(GB/s)",
           "sum(us)", "sum(GB/s)");
  }
  for (int i = 0; i < r->nsizes; i++) {
    bench_floor_measure(f, r->sizes[i], o->min_time, &r->copy_s[i],
                        &r->sum_s[i]);
    double b = (double)r->sizes[i];
    if (!o->csv)
      printf("%12lld %12.1f %12.3f %12.1f %12.3f\n", (long long)r->sizes[i],
             r->copy_s[i] * 1e6, b / r->copy_s[i] / 1e9, r->sum_s[i] * 1e6,
             b / r->sum_s[i] / 1e9),
          fflush(stdout);
  }
  if (!o->csv) printf("(sum = %d buffers of `bytes` into one)\n", o->n);
  bench_floor_free(f);
  return 0;
}

static int measure_ringflow(const opts *o, results *r) {
  if (!o->csv) {
    printf(
        "\n# ringflow: shared-memory backend, %d virtual CPU devices, "
        "session pool of %d threads\n",
        o->n, o->threads ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN));
    print_header();
  }
  char fresh_notes[512] = "";
  for (int c = 0; c < BC_COUNT; c++) {
    if (!wanted(o, c)) continue;
    for (int i = 0; i < r->nsizes; i++) {
      int64_t fresh = 0;
      RF_TOOL_TRY(bench_ringflow((bench_coll)c, o->n, o->threads, r->sizes[i],
                                 o->min_time, &r->rf[c][i], &fresh));
      if (fresh && strlen(fresh_notes) < sizeof fresh_notes - 64)
        snprintf(fresh_notes + strlen(fresh_notes), 64, " %s@%lld:+%lld",
                 bench_coll_name((bench_coll)c), (long long)r->sizes[i],
                 (long long)fresh);
      if (!o->csv && r->rf[c][i].valid)
        print_row(c, &r->rf[c][i]), fflush(stdout);
    }
    rf_default_allocator_trim(); /* keep memory bounded between collectives */
  }
  if (!o->csv)
    printf("allocator: %s%s\n",
           fresh_notes[0]
               ? "fresh memory taken during timed "
                 "steps:"
               : "timed steps reused cached buffers only (0 fresh bytes)",
           fresh_notes);
  return 0;
}

static void measure_mpi(const opts *o, results *r) {
  const char *why = NULL, *program = bench_mpi_find(o->mpi_program, &why);
  FILE *note = o->csv ? stderr : stdout;
  if (!program) {
    fprintf(note, "\nOpenMPI baseline: skipped (%s)\n", why);
    return;
  }
  for (int k = 0; k < 2; k++) {
    bench_mpi_args a = {program,   o->n,        r->sizes,
                        r->nsizes, o->min_time, k == 1};
    char command[2048], buf[2048];
    const char *err =
        bench_mpi_run(&a, r->mpi[k], command, sizeof command, buf, sizeof buf);
    r->mpi_ran[k] = !err;
    fprintf(note, "\n# OpenMPI, %s: %s\n",
            k ? "MALLOC_MMAP_THRESHOLD_=1073741824" : "default environment",
            command);
    if (err) fprintf(note, "OpenMPI baseline: failed: %s\n", err);
    if (o->csv) continue;
    print_header();
    for (int c = 0; c < BC_COUNT; c++)
      for (int i = 0; i < r->nsizes; i++)
        if (wanted(o, c) && r->mpi[k][c][i].valid)
          print_row(c, &r->mpi[k][c][i]);
  }
}

/* The busbw a plain loop reaches for collective c: the sum of n buffers for
 * the reducing collectives, a copy of the whole buffer otherwise. */
static double floor_busbw(const opts *o, const results *r, int c, int i) {
  bool sums = c == BC_ALL_REDUCE || c == BC_REDUCE || c == BC_REDUCE_SCATTER;
  double t = sums ? r->sum_s[i] : r->copy_s[i];
  return t > 0 ? bench_counted_bytes((bench_coll)c, o->n, r->sizes[i]) / t /
                     1e9 * bench_bus_factor((bench_coll)c, o->n)
               : 0;
}

static double mpi_best(const results *r, int c, int i) {
  double a = r->mpi[0][c][i].valid ? r->mpi[0][c][i].busbw : 0;
  double b = r->mpi[1][c][i].valid ? r->mpi[1][c][i].busbw : 0;
  return a > b ? a : b;
}

/* v formatted with fmt, or "-" when there is no value (v <= 0). */
static const char *fmt_or_dash(char buf[16], double v, const char *fmt) {
  if (v <= 0) return "-";
  snprintf(buf, 16, fmt, v);
  return buf;
}

static void print_summary(const opts *o, const results *r) {
  if (o->csv)
    printf(
        "collective,devices,bytes,iters,time_us,algbw_gbs,busbw_gbs,"
        "floor_busbw_gbs,openmpi_default_busbw_gbs,openmpi_mmap_busbw_gbs,"
        "ratio_vs_openmpi_best,ratio_vs_floor\n");
  else
    printf(
        "\n# summary (busbw, GB/s): ringflow vs OpenMPI's best setting and vs "
        "the floor\n# floor = the plain loop an ideal shared-memory collective "
        "runs, in busbw units\n%-15s %12s %10s %10s %10s %8s %10s %8s\n",
        "collective", "bytes", "ringflow", "mpi_dflt", "mpi_mmap", "rf/mpi",
        "floor", "rf/floor");
  for (int c = 0; c < BC_COUNT; c++) {
    for (int i = 0; i < r->nsizes; i++) {
      const bench_row *x = &r->rf[c][i];
      if (!x->valid) continue;
      double best = mpi_best(r, c, i), fl = floor_busbw(o, r, c, i);
      double d = r->mpi[0][c][i].valid ? r->mpi[0][c][i].busbw : 0;
      double m = r->mpi[1][c][i].valid ? r->mpi[1][c][i].busbw : 0;
      if (o->csv) {
        printf("%s,%d,%.0f,%d,%.3f,%.4f,%.4f,%.4f,",
               bench_coll_name((bench_coll)c), o->n, x->bytes, x->iters,
               x->time_us, x->algbw, x->busbw, fl);
        if (best > 0)
          printf("%.4f,%.4f,%.3f,", d, m, x->busbw / best);
        else
          printf(",,,");
        if (fl > 0)
          printf("%.3f\n", x->busbw / fl);
        else
          printf("\n");
        continue;
      }
      char cd[16], cm[16], cr[16], cf[16], cq[16];
      printf("%-15s %12.0f %10.3f %10s %10s %8s %10s %8s\n",
             bench_coll_name((bench_coll)c), x->bytes, x->busbw,
             fmt_or_dash(cd, d, "%.3f"), fmt_or_dash(cm, m, "%.3f"),
             fmt_or_dash(cr, best > 0 ? x->busbw / best : 0, "%.2f"),
             fmt_or_dash(cf, fl, "%.3f"),
             fmt_or_dash(cq, fl > 0 ? x->busbw / fl : 0, "%.2f"));
    }
  }
}

int cmd_bench(int argc, char **argv) {
  opts o;
  bool stop = false;
  int rc = parse_args(argc, argv, &o, &stop);
  if (rc || stop) return rc;
#ifdef RF_HAVE_MPI
  int task = 0, ntasks = 1;
  RF_TOOL_TRY(rf_job_tasks(&task, &ntasks));
  if (ntasks > 1 && o.gpu)
    return tool_fail(
        "bench: across processes only on CPU devices (--devices N); GPU "
        "devices are benchmarked in one process");
  if (ntasks > 1) {
    bench_job_args a = {.devices = o.devices_given ? o.n : 1,
                        .threads = o.threads,
                        .only = o.only,
                        .rounds = o.quick && o.rounds == 5 ? 3 : o.rounds,
                        .factor = o.factor,
                        .lo = o.lo,
                        .hi = o.hi,
                        .min_time = o.min_time,
                        .csv = o.csv,
                        .no_gloo = o.no_gloo};
    return bench_job(&a);
  }
#endif
  results *r = calloc(1, sizeof *r);
  if (!r) return tool_fail("bench: out of memory");
  for (int64_t s = o.lo; s <= o.hi && r->nsizes < BENCH_MAX_SIZES;
       s *= o.factor)
    r->sizes[r->nsizes++] = s;
  if (o.gpu) {
    bench_gpu_opts g = {.n = o.n,
                        .threads = o.threads,
                        .backend = o.backend,
                        .sizes = r->sizes,
                        .nsizes = r->nsizes,
                        .min_time = o.min_time,
                        .only = o.only,
                        .csv = o.csv,
                        .collectives = !o.executor_only,
                        .executor = !o.no_executor,
                        .trace_prefix = o.trace_prefix,
                        .per_step = o.per_step,
                        .pipeline = o.pipeline};
    rc = bench_gpu_main(&g);
    free(r);
    return rc;
  }
  char load[64];
  tool_load_average(load, sizeof load);
  if (!o.csv)
    printf(
        "ringflow bench: %d virtual CPU devices, float32, sum; %lld..%lld "
        "bytes (x4); >= %.2f s per size\nmachine: %ld online cores; load "
        "average %s (1/5/15 min) at start\n",
        o.n, (long long)o.lo, (long long)o.hi, o.min_time,
        sysconf(_SC_NPROCESSORS_ONLN), load);
  rc = o.no_floor ? 0 : measure_floor(&o, r);
  if (!rc) rc = measure_ringflow(&o, r);
  rf_default_allocator_trim();
  if (!rc && !o.no_mpi)
    measure_mpi(&o, r);
  else if (!rc && !o.csv)
    printf("\nOpenMPI baseline: skipped (--no-mpi)\n");
  if (!rc) print_summary(&o, r);
  tool_load_average(load, sizeof load);
  if (!rc && !o.csv) printf("load average %s at the end\n", load);
  free(r);
  return rc;
}
