/* tools/bench.c - `ringflow bench`: every collective on N virtual CPU devices
 * at sizes min..max (xF steps), with, in the same run, a memory-bandwidth
 * floor (bench_floor.c) and OpenMPI at the same sizes (bench_mpi.c, default
 * glibc and MALLOC_MMAP_THRESHOLD_=1 GiB), then a table of ratios; or, with
 * --devices gpu:0-N, on GPU devices against the raw backend call
 * (bench_gpu.c). Columns follow nccl-tests: algbw = bytes / time, busbw =
 * algbw * factor. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cores.h"
#include "bench.h"
#include "devices.h"
#include "options.h"
#include "tools.h"

typedef struct opts {
  tool_devices devices;
  int threads, factor, rounds;
  bench_gpu_backend backend;
  bool executor_only, no_executor;
  const char *trace_prefix;
  int per_step; /* GPU: collectives per session step */
  int pipeline; /* GPU: pipelined steps per wait (0: no such columns) */
  int64_t lo, hi;
  double min_time;
  bool quick, csv, no_mpi, no_floor, no_gloo, devices_given;
  bool rounds_given; /* --rounds: across processes only */
  int only;          /* a bench_coll, or -1 for all */
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

static const char *const synopsis =
    "usage: ringflow bench [options]\n"
    "  times all_reduce (sum), reduce, broadcast, all_gather and\n"
    "  reduce_scatter (float32) at sizes --min, --min x F, ... up to --max.\n"
    "  On CPU devices: against a 2-thread memory floor and OpenMPI (mpirun\n"
    "  -np N --mca btl self,vader), then a table of ratios. On GPU devices\n"
    "  (gpu:i runs on physical GPU i % count): through a session against\n"
    "  the raw backend call on the same GPU buffers - the CUDA-kernel entry\n"
    "  when devices share GPUs, NCCL when each has its own (--backend nccl\n"
    "  with one device: a one-rank NCCL communicator) - then the executor's\n"
    "  cost per GPU node on the first device.\n"
    "  Under mpirun (mpirun -np N ringflow bench): each collective across\n"
    "  the N processes (CPU devices only) against MPI_Allreduce,\n"
    "  MPI_Reduce, ... and Gloo (all_reduce, when built) in the same\n"
    "  processes on the same buffers: medians of --rounds rounds of\n"
    "  alternating windows.\n"
    "options:\n";
static const char *const footer =
    "SIZE: bytes, as 512, 64K, 1.5M or 2G (K, M, G: x1024; a B may follow)\n"
    "Columns follow nccl-tests: algbw = bytes / time, busbw = algbw x the\n"
    "collective's bus factor. rf/mpi, rf/gloo and rf/floor (CSV: ratio_vs_*)\n"
    "are ringflow's speed as a multiple of the other's (the other's time /\n"
    "ringflow's): above 1, ringflow is faster.\n"
    "RF_LOG=debug|info|warn|error prints ringflow's log messages to stderr.\n";

#define MAX_BYTES (8.0 * (1 << 30)) /* --min, --max */

/* The largest size run: lo x factor^k, at most hi (lo <= hi). */
static int64_t largest_size(int64_t lo, int64_t hi, int factor) {
  int64_t s = lo;
  while (s <= hi / factor) s *= factor;
  return s;
}

static const char *const backend_choices[] = {"auto", "cuda", "nccl", NULL};
static const char *coll_choices[BC_COUNT + 1];

/* 0: parsed; otherwise the command's exit code (help: 0 with *stop). */
static int parse_args(int argc, char **argv, opts *o, bool *stop) {
  *o = (opts){
      .factor = 4, .only = -1, .rounds = 5, .per_step = 1, .pipeline = 20};
  char why[64];
  tool_devices_parse("4", &o->devices, why, sizeof why);
  for (int c = 0; c < BC_COUNT; c++) coll_choices[c] = bench_coll_name(c);
  int backend = BG_AUTO;
  bool min_given = false, max_given = false, time_given = false,
       rounds_given = false, pipeline_given = false;
  const tool_opt table[] = {
      TOOL_DEVICES("devices", &o->devices,
                   "the devices (default 4: cpu:0-3; under mpirun 1: cpu:0 "
                   "in each process)",
                   .given = &o->devices_given),
      TOOL_SIZE("min", &o->lo, "SIZE",
                "the smallest size (default 1K; 8 on GPU devices)", 4,
                MAX_BYTES, .given = &min_given),
      TOOL_SIZE("max", &o->hi, "SIZE",
                "the largest size (default 256M, at most 1G, on CPU devices; "
                "512M on GPU devices)",
                4, MAX_BYTES, .given = &max_given),
      TOOL_INT("factor", &o->factor, "F",
               "each size is F times the last (default 4)", 2, 16),
      TOOL_FLAG("quick", &o->quick,
                "sizes 1K..4M, 0.02 s per size (for tests)"),
      TOOL_REAL("min-time", &o->min_time, "SECONDS",
                "time each size for at least this long (default 0.2; 0.02 "
                "with --quick)",
                0, 3600, .given = &time_given),
      TOOL_INT("threads", &o->threads, "T",
               "the session's thread pool (default 0: one a core)", 0, 256),
      TOOL_CHOICE("collective", &o->only, "NAME",
                  "only this collective (default: all)", coll_choices),
      TOOL_FLAG("csv", &o->csv, "CSV tables"),
      TOOL_FLAG("no-mpi", &o->no_mpi, "no OpenMPI baseline"),
      TOOL_FLAG("no-floor", &o->no_floor, "no memory floor"),
      TOOL_STRING("mpi-baseline", &o->mpi_program, "PATH",
                  "the OpenMPI baseline program (default: "
                  "ringflow-mpi-baseline of the build tree, or next to "
                  "ringflow)"),
      TOOL_CHOICE("backend", &backend, "NAME",
                  "GPU: the backend to compare with (default auto: the "
                  "runtime's choice)",
                  backend_choices),
      TOOL_FLAG("executor", &o->executor_only,
                "GPU: only the executor's cost per node"),
      TOOL_FLAG("no-executor", &o->no_executor,
                "GPU: not the executor's cost per node"),
      TOOL_STRING("trace", &o->trace_prefix, "PREFIX",
                  "GPU: a Chrome trace of one step per collective at the "
                  "smallest and largest size, to "
                  "PREFIX_<collective>_<bytes>.json"),
      TOOL_INT("per-step", &o->per_step, "K",
               "GPU: K independent collectives of the same inputs per "
               "session step, against K raw calls then one wait (default 1)",
               1, 64),
      TOOL_INT("pipeline", &o->pipeline, "T",
               "GPU: also T steps back to back with gpu_sync_on_finish off, "
               "then one rf_session_sync, against T x K raw calls then one "
               "wait (default 20; 0: not)",
               0, 1000, .given = &pipeline_given),
      TOOL_INT("rounds", &o->rounds, "R",
               "under mpirun (in one process a usage error): the rounds "
               "whose medians are printed (default "
               "5; 3 with --quick)",
               1, 15, .given = &rounds_given),
      TOOL_FLAG("no-gloo", &o->no_gloo,
                "under mpirun (in one process a usage error): no Gloo "
                "baseline"),
  };
  const tool_cmd cmd = {"bench", synopsis, footer, table,
                        (int)(sizeof table / sizeof *table)};
  char *pos[1];
  int npos, rc = tool_parse(&cmd, argc, argv, pos, 0, &npos);
  if (rc == TOOL_HELP_SHOWN) *stop = true;
  if (rc) return rc == TOOL_HELP_SHOWN ? 0 : rc;
  o->backend = (bench_gpu_backend)backend;
  bool gpu = o->devices.gpu;
  char a[32], b[32];
  if (!min_given) o->lo = o->quick || !gpu ? 1 << 10 : 8;
  if (!max_given) o->hi = o->quick ? 4 << 20 : gpu ? 512 << 20 : 256 << 20;
  if (!time_given) o->min_time = o->quick ? 0.02 : 0.2;
  if (o->quick && !rounds_given) o->rounds = 3;
  o->rounds_given = rounds_given;
  tool_format_size(o->lo, a, sizeof a);
  tool_format_size(o->hi, b, sizeof b);
  if (o->hi < o->lo)
    return tool_usage_error(&cmd, "%s--max %s is below --min %s",
                            max_given ? "" : "the default ", b, a);
  if (!gpu && o->hi > (1 << 30))
    return tool_usage_error(&cmd, "--max %s: at most 1G on CPU devices", b);
  if (!gpu && (o->backend || o->executor_only || o->no_executor ||
               o->trace_prefix || o->per_step != 1 || pipeline_given))
    return tool_usage_error(
        &cmd,
        "--backend, --executor, --no-executor, --trace, --per-step and "
        "--pipeline need GPU devices");
  if (o->executor_only && o->no_executor)
    return tool_usage_error(&cmd,
                            "--executor and --no-executor exclude each other");
  if (o->no_mpi && o->mpi_program)
    return tool_usage_error(&cmd,
                            "--mpi-baseline and --no-mpi exclude each "
                            "other");
  /* A baseline asked for by path is not skipped in silence. */
  if (!gpu && o->mpi_program) {
    int e = tool_executable_errno(o->mpi_program);
    if (e)
      return tool_report(rf_status_new(
          e == ENOENT || e == ENOTDIR ? RF_NOT_FOUND
          : e == EISDIR               ? RF_INVALID_ARGUMENT
                                      : RF_PERMISSION_DENIED,
          "bench: --mpi-baseline '%.200s' is not an executable file: %s",
          o->mpi_program, strerror(e)));
  }
  /* All-gather and reduce-scatter split the vector over the devices: with
   * --collective one of them and no size that splits, nothing would run.
   * The largest size run decides, which may be below --max (--min 4 --max
   * 12: 4 only). */
  int64_t largest = largest_size(o->lo, o->hi, o->factor);
  int split = o->devices.n; /* the participants, in every process */
#ifdef RF_HAVE_MPI
  int task = 0, ntasks = 1; /* under mpirun: 1 device a process by default */
  rf_status_free(rf_job_tasks(&task, &ntasks));
  if (ntasks > 1) split = ntasks * (o->devices_given ? o->devices.n : 1);
#endif
  if ((o->only == BC_ALL_GATHER || o->only == BC_REDUCE_SCATTER) && !gpu &&
      largest / 4 < split) {
    tool_format_size(largest, a, sizeof a);
    return tool_usage_error(&cmd,
                            "--collective %s splits the vector over the %d "
                            "devices: the largest size (%s: --min x %d^k up "
                            "to --max %s) must be at least %d bytes (one "
                            "float32 each)",
                            bench_coll_name((bench_coll)o->only), split, a,
                            o->factor, b, 4 * split);
  }
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
  RF_TOOL_TRY(bench_floor_new(o->devices.n, o->hi, &f));
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
          tool_flush();
  }
  if (!o->csv) printf("(sum = %d buffers of `bytes` into one)\n", o->devices.n);
  bench_floor_free(f);
  return 0;
}

static int measure_ringflow(const opts *o, results *r) {
  if (!o->csv) {
    printf(
        "\n# ringflow: shared-memory backend, %d virtual CPU devices, "
        "session pool of %d threads\n",
        o->devices.n, o->threads ? o->threads : rf__usable_cores());
    print_header();
  }
  char fresh_notes[512] = "";
  for (int c = 0; c < BC_COUNT; c++) {
    if (!wanted(o, c)) continue;
    for (int i = 0; i < r->nsizes; i++) {
      int64_t fresh = 0;
      RF_TOOL_TRY(bench_ringflow((bench_coll)c, &o->devices, o->threads,
                                 r->sizes[i], o->min_time, &r->rf[c][i],
                                 &fresh));
      if (fresh && strlen(fresh_notes) < sizeof fresh_notes - 64)
        snprintf(fresh_notes + strlen(fresh_notes), 64, " %s@%lld:+%lld",
                 bench_coll_name((bench_coll)c), (long long)r->sizes[i],
                 (long long)fresh);
      if (!o->csv && r->rf[c][i].valid)
        print_row(c, &r->rf[c][i]), tool_flush();
      else if (!o->csv) /* no row: say why rather than leave a gap */
        printf(
            "%-15s %12lld  (no row: fewer than one float32 per device "
            "to split over %d devices)\n",
            bench_coll_name((bench_coll)c), (long long)r->sizes[i],
            o->devices.n);
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
    bench_mpi_args a = {program,   o->devices.n, r->sizes, r->nsizes,
                        o->factor, o->min_time,  k == 1};
    char command[2048], buf[2048];
    const char *err =
        bench_mpi_run(&a, r->mpi[k], command, sizeof command, buf, sizeof buf);
    r->mpi_ran[k] = !err;
    fprintf(note, "\n# OpenMPI, %s: %s\n",
            k ? "MALLOC_MMAP_THRESHOLD_=1073741824" : "default environment",
            command);
    if (err) fprintf(note, "OpenMPI baseline: failed: %s\n", err);
    if (o->csv) continue;
    bool header = false; /* none without a row (a failed run) */
    for (int c = 0; c < BC_COUNT; c++)
      for (int i = 0; i < r->nsizes; i++)
        if (wanted(o, c) && r->mpi[k][c][i].valid) {
          if (!header) print_header(), header = true;
          print_row(c, &r->mpi[k][c][i]);
        }
  }
}

/* The busbw a plain loop reaches for collective c: the sum of n buffers for
 * the reducing collectives, a copy of the whole buffer otherwise. */
static double floor_busbw(const opts *o, const results *r, int c, int i) {
  bool sums = c == BC_ALL_REDUCE || c == BC_REDUCE || c == BC_REDUCE_SCATTER;
  double t = sums ? r->sum_s[i] : r->copy_s[i];
  return t > 0 ? bench_counted_bytes((bench_coll)c, o->devices.n, r->sizes[i]) /
                     t / 1e9 * bench_bus_factor((bench_coll)c, o->devices.n)
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

/* v formatted with fmt, or "" when there is no value (v <= 0). */
static const char *csv_or_empty(char buf[16], double v, const char *fmt) {
  if (v <= 0) return "";
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
      if (o->csv) { /* a value not measured is an empty field */
        char cf[16], cd[16], cm[16], cr[16], cq[16];
        printf("%s,%d,%.0f,%d,%.3f,%.4f,%.4f,%s,%s,%s,%s,%s\n",
               bench_coll_name((bench_coll)c), o->devices.n, x->bytes, x->iters,
               x->time_us, x->algbw, x->busbw, csv_or_empty(cf, fl, "%.4f"),
               csv_or_empty(cd, d, "%.4f"), csv_or_empty(cm, m, "%.4f"),
               csv_or_empty(cr, best > 0 ? x->busbw / best : 0, "%.3f"),
               csv_or_empty(cq, fl > 0 ? x->busbw / fl : 0, "%.3f"));
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
  if (ntasks > 1 && o.devices.gpu)
    return tool_fail(
        "bench: across processes only on CPU devices (--devices N); GPU "
        "devices are benchmarked in one process");
  if (ntasks > 1) {
    char why[64];
    tool_devices one;
    tool_devices_parse("1", &one, why, sizeof why);
    bench_job_args a = {.devices = o.devices_given ? &o.devices : &one,
                        .threads = o.threads,
                        .only = o.only,
                        .rounds = o.rounds,
                        .factor = o.factor,
                        .lo = o.lo,
                        .hi = o.hi,
                        .min_time = o.min_time,
                        .csv = o.csv,
                        .no_gloo = o.no_gloo};
    return bench_job(&a);
  }
#endif
  /* In one process they would change nothing: say so rather than run a
   * bench that silently ignores them. */
  if (o.rounds_given || o.no_gloo)
    return tool_fail(
        "bench: %s only across processes (mpirun -np N ringflow bench); "
        "see ringflow bench --help",
        o.rounds_given ? "--rounds applies" : "--no-gloo applies");
  results *r = calloc(1, sizeof *r);
  if (!r) return tool_fail("bench: out of memory");
  for (int64_t s = o.lo; s <= o.hi && r->nsizes < BENCH_MAX_SIZES;
       s *= o.factor)
    r->sizes[r->nsizes++] = s;
  if (o.devices.gpu) {
    bench_gpu_opts g = {.devices = &o.devices,
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
  char load[64], list[256];
  tool_load_average(load, sizeof load);
  tool_devices_format(&o.devices, list, sizeof list);
  if (!o.csv)
    printf(
        "ringflow bench: %d virtual CPU devices %s, float32, sum; "
        "%lld..%lld bytes (x%d); >= %g s per size\nmachine: %ld online "
        "cores; load average %s (1/5/15 min) at start\n",
        o.devices.n, list, (long long)r->sizes[0],
        (long long)r->sizes[r->nsizes - 1], o.factor, o.min_time,
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
