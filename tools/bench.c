/* tools/bench.c - `ringflow bench`: every collective on N virtual CPU devices
 * at sizes min..max (x4 steps), with, in the same run, a memory-bandwidth
 * floor (bench_floor.c) and OpenMPI at the same sizes (bench_mpi.c, default
 * glibc and MALLOC_MMAP_THRESHOLD_=1 GiB), then a table of ratios. Columns
 * follow nccl-tests: algbw = bytes / time, busbw = algbw * factor. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "tools.h"

typedef struct opts {
  int n, threads, rounds;
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
    "usage: ringflow bench [--devices N] [--min SIZE] [--max SIZE] [--quick]\n"
    "                      [--csv] [--min-time SECONDS] [--threads T]\n"
    "                      [--collective NAME] [--no-mpi] [--no-floor]\n"
    "                      [--mpi-baseline PATH]\n"
    "  times all_reduce (sum), reduce, broadcast, all_gather and "
    "reduce_scatter\n"
    "  (float32) on N virtual CPU devices (default 4) at sizes SIZE..SIZE in\n"
    "  steps of x4 (default 1K..256M; K/M/G suffixes), against a 2-thread\n"
    "  memory floor and OpenMPI (mpirun -np N --mca btl self,vader).\n"
    "  --quick: 1K..4M, 0.02 s per size (for tests); --csv: one CSV table.\n"
    "Under mpirun (mpirun -np N ringflow bench): each collective across the\n"
    "  N processes (--devices each, default 1) against MPI_Allreduce,\n"
    "  MPI_Reduce, ... and Gloo (all_reduce, when built) in the same\n"
    "  processes on the same buffers: medians of --rounds rounds (default\n"
    "  5) of alternating windows; [--no-gloo].\n";

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
  if (!*s || *end || bytes < 4 || bytes > (double)(1ll << 30)) return -1;
  *out = (int64_t)bytes;
  return 0;
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
      {"no-gloo", no_argument, 0, 'G'},
      {"rounds", required_argument, 0, 'R'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  *o = (opts){.n = 4,
              .lo = 1 << 10,
              .hi = 256 << 20,
              .min_time = -1,
              .only = -1,
              .rounds = 5};
  bool max_given = false;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
    int bad = 0;
    switch (c) {
      case 'n':
        bad = parse_int(optarg, 1, 64, &o->n), o->devices_given = true;
        break;
      case 'G': o->no_gloo = true; break;
      case 'R': bad = parse_int(optarg, 1, 15, &o->rounds); break;
      case 'a': bad = parse_size(optarg, &o->lo); break;
      case 'b': bad = parse_size(optarg, &o->hi), max_given = true; break;
      case 'q': o->quick = true; break;
      case 'c': o->csv = true; break;
      case 't': o->min_time = atof(optarg), bad = o->min_time <= 0; break;
      case 'T': bad = parse_int(optarg, 0, 256, &o->threads); break;
      case 'C': bad = (o->only = coll_by_name(optarg)) < 0; break;
      case 'M': o->no_mpi = true; break;
      case 'F': o->no_floor = true; break;
      case 'P': o->mpi_program = optarg; break;
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
  if (o->quick && !max_given) o->hi = 4 << 20;
  if (o->min_time < 0) o->min_time = o->quick ? 0.02 : 0.2;
  if (o->hi < o->lo) return tool_fail("bench: --max is below --min");
  return 0;
}

static void load_average(char *buf, size_t len) {
  FILE *f = fopen("/proc/loadavg", "r");
  double a = 0, b = 0, c = 0;
  if (f && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
    snprintf(buf, len, "%.2f %.2f %.2f", a, b, c);
  else
    snprintf(buf, len, "unknown");
  if (f) fclose(f);
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
  if (ntasks > 1) {
    bench_job_args a = {.devices = o.devices_given ? o.n : 1,
                        .threads = o.threads,
                        .only = o.only,
                        .rounds = o.quick && o.rounds == 5 ? 3 : o.rounds,
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
  for (int64_t s = o.lo; s <= o.hi && r->nsizes < BENCH_MAX_SIZES; s *= 4)
    r->sizes[r->nsizes++] = s;
  char load[64];
  load_average(load, sizeof load);
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
  load_average(load, sizeof load);
  if (!rc && !o.csv) printf("load average %s at the end\n", load);
  free(r);
  return rc;
}
