/* tests/test_bench_cli.c - `ringflow bench` keeps working: the quick run on 2
 * devices exits 0 and prints every section with the nccl-tests columns, one
 * row per collective and size, busbw = algbw * the nccl-tests factor; the CSV
 * table is complete; the first line names the sizes run; OpenMPI runs the
 * same sizes (--factor), and a failed baseline leaves no empty table; bad
 * options exit 2 with one line. On GPU devices it either
 * says there is no GPU (exit 1) or prints consistent rows (time, raw time,
 * overhead, ratio) and the executor table. Runs the built binary (RF_TOOL). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testutil.h"

#ifndef RF_TOOL
#error "RF_TOOL (the path of the ringflow binary) must be defined"
#endif

static const char *const colls[] = {"all_reduce", "reduce", "broadcast",
                                    "all_gather", "reduce_scatter"};
/* nccl-tests busbw factors for 2 devices, in the order of colls. */
static const double factors2[] = {1.0, 1.0, 1.0, 0.5, 0.5};

/* Runs `ringflow ARGS`, returns its exit code; *out gets stdout+stderr. */
static int run_tool(const char *args, char **out) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s %s 2>&1", RF_TOOL, args);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  assert_non_null(buf);
  size_t got;
  while ((got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
    len += got;
    if (cap - len < 1024) buf = realloc(buf, cap *= 2), assert_non_null(buf);
  }
  buf[len] = 0;
  int status = pclose(p);
  *out = buf;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The ringflow section: between "# ringflow" and the next "#" or blank. */
static void check_ringflow_rows(const char *out) {
  const char *sec = strstr(out, "# ringflow:");
  assert_non_null(sec);
  const char *hdr = strstr(sec, "\ncollective");
  assert_non_null(hdr);
  const char *cols[] = {"bytes", "iters", "time(us)", "algbw(GB/s)",
                        "busbw(GB/s)"};
  const char *eol = strchr(hdr + 1, '\n');
  for (int i = 0; i < 5; i++) {
    const char *at = strstr(hdr, cols[i]);
    assert_true(at && at < eol);
  }
  int rows[5] = {0};
  const char *line = eol + 1;
  char name[32];
  double bytes, us, alg, bus;
  int iters;
  while (sscanf(line, "%31s %lf %d %lf %lf %lf", name, &bytes, &iters, &us,
                &alg, &bus) == 6) {
    int c = 0;
    while (c < 5 && strcmp(name, colls[c]) != 0) c++;
    assert_true(c < 5);
    assert_true(bytes >= 1024 && bytes <= 4 << 20 && iters >= 2 && us > 0);
    /* time printed with 1 decimal, bandwidths with 3 */
    assert_true(fabs(alg - bytes / us / 1e3) <= 0.0006 + alg * 0.06 / us);
    assert_true(fabs(bus - alg * factors2[c]) <= 0.0011);
    rows[c]++;
    line = strchr(line, '\n') + 1;
  }
  for (int c = 0; c < 5; c++) assert_int_equal(rows[c], 7); /* 1K..4M, x4 */
}

static void quick_text_run(void **state) {
  (void)state;
  char *out;
  int rc = run_tool("bench --quick --devices 2 --min-time 0.005", &out);
  if (rc != 0) fprintf(stderr, "%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "2 virtual CPU devices"));
  assert_non_null(strstr(out, "# memory floor"));
  assert_non_null(strstr(out, "copy(GB/s)"));
  check_ringflow_rows(out);
  /* OpenMPI ran twice, or says why not. */
  bool skipped = strstr(out, "OpenMPI baseline: skipped") != NULL;
  bool ran = strstr(out, "# OpenMPI, default environment: ") &&
             strstr(out, "# OpenMPI, MALLOC_MMAP_THRESHOLD_=1073741824: ");
  assert_true(skipped || ran);
  assert_null(strstr(out, "OpenMPI baseline: failed"));
  assert_non_null(strstr(out, "# summary"));
  assert_non_null(strstr(out, "rf/mpi"));
  assert_non_null(strstr(out, "rf/floor"));
  assert_non_null(strstr(out, "allocator: "));
  free(out);
}

static void csv_run(void **state) {
  (void)state;
  char *out;
  int rc = run_tool(
      "bench --csv --devices 2 --min 1K --max 16K --min-time "
      "0.002 --no-mpi",
      &out);
  assert_int_equal(rc, 0);
  const char *hdr =
      "collective,devices,bytes,iters,time_us,algbw_gbs,"
      "busbw_gbs,floor_busbw_gbs,openmpi_default_busbw_gbs,"
      "openmpi_mmap_busbw_gbs,ratio_vs_openmpi_best,"
      "ratio_vs_floor\n";
  assert_memory_equal(out, hdr, strlen(hdr));
  int rows = 0;
  for (const char *l = out + strlen(hdr); *l; l = strchr(l, '\n') + 1) {
    int commas = 0;
    for (const char *p = l; *p && *p != '\n'; p++) commas += *p == ',';
    assert_int_equal(commas, 11);
    assert_int_equal(strncmp(l + strcspn(l, ","), ",2,", 3), 0);
    rows++;
  }
  assert_int_equal(rows, 5 * 3); /* 1K, 4K, 16K */
  free(out);
}

/* --no-floor --no-mpi: the floor and OpenMPI columns are empty, not 0. */
static void csv_run_without_baselines(void **state) {
  (void)state;
  char *out;
  int rc = run_tool(
      "bench --csv --devices 2 --min 1K --max 1K --min-time 0.002 --no-mpi "
      "--no-floor",
      &out);
  assert_int_equal(rc, 0);
  int rows = 0;
  for (const char *l = strchr(out, '\n') + 1; *l; l = strchr(l, '\n') + 1) {
    const char *f = l; /* the 8th field: floor_busbw_gbs */
    for (int k = 0; k < 7; k++) f = strchr(f, ',') + 1;
    assert_memory_equal(f, ",,,,\n", 5);
    rows++;
  }
  assert_int_equal(rows, 5);
  free(out);
}

/* The first line names the sizes run (the largest, not --max) and the
 * --min-time asked for, not a rounding of it. */
static void header_names_sizes_run(void **state) {
  (void)state;
  char *out;
  int rc = run_tool(
      "bench --min 4K --max 5K --collective reduce --no-mpi --no-floor "
      "--min-time 0.005",
      &out);
  assert_int_equal(rc, 0);
  if (!strstr(out, "; 4096..4096 bytes (x4); >= 0.005 s per size\n"))
    fprintf(stderr, "%s", out);
  assert_non_null(
      strstr(out, "; 4096..4096 bytes (x4); >= 0.005 s per size\n"));
  free(out);
}

/* The OpenMPI baseline runs the sizes ringflow runs, --factor included:
 * every row has its OpenMPI columns (2048 had none with --factor 2). */
static void mpi_baseline_follows_factor(void **state) {
  (void)state;
  char *out;
  int rc = run_tool(
      "bench --csv --factor 2 --min 1K --max 2K --collective reduce "
      "--no-floor --min-time 0.002",
      &out);
  assert_int_equal(rc, 0);
  if (strstr(out, "OpenMPI baseline: skipped")) {
    free(out);
    skip();
  }
  int rows = 0;
  for (const char *l = out; l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
    if (strncmp(l, "reduce,", 7) != 0) continue;
    /* fields 9 and 10: openmpi_default_busbw_gbs, openmpi_mmap_busbw_gbs */
    const char *f = l;
    for (int k = 0; k < 8; k++) f = strchr(f, ',') + 1;
    size_t dflt = strcspn(f, ","), mmap = strcspn(f + dflt + 1, ",");
    if (!dflt || !mmap)
      fprintf(stderr, "no OpenMPI figures: %.*s\n", (int)strcspn(l, "\n"), l);
    assert_true(dflt > 0 && mmap > 0);
    rows++;
  }
  assert_int_equal(rows, 2); /* 1024, 2048 */
  free(out);
}

/* A baseline asked for by a path that is not an executable file (or a
 * directory) is an error before anything is timed, not a note and exit 0;
 * with --no-mpi it is a usage error (an option never ignored). */
static void missing_baseline_path_is_an_error(void **state) {
  (void)state;
  char *out;
  int rc = run_tool(
      "bench --min 1K --max 1K --collective reduce --no-floor --min-time "
      "0.002 --mpi-baseline /nonexistent-dir/baseline",
      &out);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out,
                         "ringflow: error (NOT_FOUND): bench: --mpi-baseline "
                         "'/nonexistent-dir/baseline' is not an executable "
                         "file: No such file or directory"));
  assert_null(strstr(out, "time(us)"));
  free(out);
  rc = run_tool(
      "bench --min 1K --max 1K --collective reduce --no-floor --min-time "
      "0.002 --no-mpi --mpi-baseline /nonexistent-dir/baseline",
      &out);
  assert_int_equal(rc, 2);
  assert_non_null(
      strstr(out, "--mpi-baseline and --no-mpi exclude each other"));
  free(out);
  rc = run_tool(
      "bench --min 1K --max 1K --collective reduce --no-floor --min-time "
      "0.002 --mpi-baseline /tmp",
      &out);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out,
                         "ringflow: error (INVALID_ARGUMENT): bench: "
                         "--mpi-baseline '/tmp' is not an executable file: "
                         "Is a directory"));
  assert_null(strstr(out, "time(us)"));
  free(out);
}

/* A baseline that fails prints why, and no empty table under it. */
static void failed_baseline_prints_no_empty_table(void **state) {
  (void)state;
  char *out;
  int rc = run_tool(
      "bench --min 1K --max 1K --collective reduce --no-floor --min-time "
      "0.002 --mpi-baseline /bin/false",
      &out);
  assert_int_equal(rc, 0);
  if (strstr(out, "OpenMPI baseline: skipped")) {
    free(out);
    skip();
  }
  assert_non_null(strstr(out, "OpenMPI baseline: failed"));
  /* "time(us)" heads ringflow's own table, and no other */
  const char *first = strstr(out, "time(us)");
  assert_non_null(first);
  if (strstr(first + 1, "time(us)")) fprintf(stderr, "%s", out);
  assert_null(strstr(first + 1, "time(us)"));
  free(out);
}

/* The GPU collectives table: name bytes time raw wait base ovh algbw busbw
 * ratio raw_busbw mem, consistent with each other, for 2 devices. */
static void check_gpu_rows(const char *out, int want_rows) {
  const char *hdr = strstr(out, "# collectives\ncollective");
  assert_non_null(hdr);
  const char *line = strchr(strchr(hdr, '\n') + 1, '\n') + 1;
  char name[32];
  double v[11];
  int rows = 0;
  while (sscanf(line, "%31s %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf %lf", name,
                &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8],
                &v[9], &v[10]) == 12) {
    int c = 0;
    while (c < 5 && strcmp(name, colls[c]) != 0) c++;
    assert_true(c < 5);
    double bytes = v[0], us = v[1], raw = v[2], ovh = v[5], alg = v[6],
           bus = v[7], ratio = v[8];
    assert_true(bytes >= 8 && us > 0 && raw > 0 && v[3] > 0 && v[4] > 0);
    assert_true(fabs(ovh - (us - raw)) <= 0.16);
    assert_true(fabs(alg - bytes / us / 1e3) <= 0.006 + alg * 0.06 / us);
    assert_true(fabs(bus - alg * factors2[c]) <= 0.011);
    assert_true(fabs(ratio - raw / us) <= 0.001 + ratio * 0.06 / us);
    rows++;
    line = strchr(line, '\n') + 1;
  }
  assert_int_equal(rows, want_rows);
}

static void gpu_run(void **state) {
  (void)state;
  char *out;
  int rc = run_tool("bench --devices gpu:0-1 --min 8 --max 2K --min-time 0.005",
                    &out);
  if (rc == 1 && strstr(out, "no GPU")) {
    printf("no GPU here: %s", out);
    free(out);
    return;
  }
  if (rc != 0) fprintf(stderr, "%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "2 GPU devices gpu:0..gpu:1"));
  assert_non_null(strstr(out, "backend: "));
  check_gpu_rows(out, 5 * 5); /* 8..2K, x4 */
  assert_non_null(strstr(out, "allocator: "));
  assert_non_null(strstr(out, "# summary"));
  assert_non_null(strstr(out, "# executor overhead"));
  assert_non_null(strstr(out, "executor overhead "));
  free(out);
  /* three collectives per step: the same table, per collective */
  rc = run_tool(
      "bench --devices gpu:0-1 --min 8 --max 2K --min-time 0.005 --per-step 3 "
      "--no-executor",
      &out);
  if (rc != 0) fprintf(stderr, "%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "3 independent collectives"));
  check_gpu_rows(out, 5 * 5);
  assert_non_null(strstr(out, "# summary (3 collectives per step)"));
  assert_null(strstr(out, "# executor overhead"));
  free(out);
}

static void bad_options(void **state) {
  (void)state;
  /* The last: --max 12 runs 4 bytes only (x4), which no 3 devices split. */
  const char *bad[] = {"bench --devices 0",
                       "bench --devices 65",
                       "bench --min 2",
                       "bench --max 2G",
                       "bench --min 1M --max 1K",
                       "bench --collective all_to_all",
                       "bench --frobnicate",
                       "bench extra",
                       "bench --devices cpu:0,gpu:1",
                       "bench --devices cpu:1-0",
                       "bench --min-time 0.1s",
                       "bench --min 1K --max 1M --threads 2x",
                       "bench --devices gpu:0 --backend mpi",
                       "bench --backend nccl",
                       "bench --executor",
                       "bench --devices gpu:0 --max 16G",
                       "bench --devices gpu:0 --executor --no-executor",
                       "bench --factor 1",
                       "bench --trace /tmp/x",
                       "bench --per-step 2",
                       "bench --devices gpu:0 --per-step 0",
                       "bench --devices gpu:0 --per-step 65",
                       "bench --min 4 --max 12 --devices 3 --collective "
                       "all_gather"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char *out;
    int rc = run_tool(bad[i], &out);
    /* one line, not the help */
    const char *nl = strchr(out, '\n');
    bool one_line = nl && !nl[1];
    if (rc != 2 || !one_line) fprintf(stderr, "%s:\n%s", bad[i], out);
    assert_int_equal(rc, 2);
    assert_true(one_line);
    assert_non_null(strstr(out, "ringflow: bench: "));
    free(out);
  }
  char *out;
  assert_int_equal(run_tool("bench --help", &out), 0);
  assert_non_null(strstr(out, "usage: ringflow bench"));
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(quick_text_run),
      cmocka_unit_test(csv_run),
      cmocka_unit_test(csv_run_without_baselines),
      cmocka_unit_test(header_names_sizes_run),
      cmocka_unit_test(mpi_baseline_follows_factor),
      cmocka_unit_test(missing_baseline_path_is_an_error),
      cmocka_unit_test(failed_baseline_prints_no_empty_table),
      cmocka_unit_test(gpu_run),
      cmocka_unit_test(bad_options),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
