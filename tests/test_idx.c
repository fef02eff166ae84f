/* tests/test_idx.c - the IDX reader of `ringflow train` (tools/idx.c) on
 * files written here: plain and gzip files read back exactly; truncated,
 * overlong and corrupt files, and dims whose product overflows, are refused
 * saying why; a gzip bomb (small dims, then 256 MiB of zeros in a 256 KiB
 * file) and huge declared dims with little data cost memory in proportion to
 * the data that arrives, not to the stream or to the dims; the labelled-set
 * checks (counts, ranks, labels 0..9). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "idx.h"
#include "testutil.h"

static char dir[] = "/tmp/rf_test_idx_XXXXXX";

static void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* An IDX header of unsigned bytes with dims[0..rank) into h; its length. */
static size_t header(uint8_t *h, int rank, const uint32_t *dims) {
  h[0] = h[1] = 0;
  h[2] = 0x08;
  h[3] = (uint8_t)rank;
  for (int i = 0; i < rank; i++) put_be32(h + 4 + 4 * i, dims[i]);
  return 4 + 4 * (size_t)rank;
}

/* Writes header + data (+ zeros more zero bytes) to dir/name, gzip or
 * plain; returns the path (static buffer). */
static const char *write_file(const char *name, bool gz, int rank,
                              const uint32_t *dims, const uint8_t *data,
                              size_t len, size_t zeros) {
  static char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  uint8_t h[4 + 4 * 8];
  size_t hl = header(h, rank, dims);
  static uint8_t zero[1 << 20];
  if (gz) {
    gzFile f = gzopen(path, "wb9");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, h, (unsigned)hl), (int)hl);
    if (len) assert_int_equal(gzwrite(f, data, (unsigned)len), (int)len);
    for (size_t z = 0; z < zeros; z += sizeof zero) {
      unsigned n =
          (unsigned)(zeros - z < sizeof zero ? zeros - z : sizeof zero);
      assert_int_equal(gzwrite(f, zero, n), (int)n);
    }
    assert_int_equal(gzclose(f), Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(h, 1, hl, f), hl);
    if (len) assert_int_equal(fwrite(data, 1, len, f), len);
    for (size_t z = 0; z < zeros; z++) fputc(0, f);
    assert_int_equal(fclose(f), 0);
  }
  return path;
}

static void random_files_read_back(void **state) {
  (void)state;
  uint64_t rng = rf_test_rng(1);
  for (int trial = 0; trial < 20; trial++) {
    int rank = 1 + (int)(rf_test_rand(&rng) % IDX_MAX_DIMS);
    uint32_t dims[IDX_MAX_DIMS];
    size_t count = 1;
    for (int i = 0; i < rank; i++) {
      dims[i] = (uint32_t)(rf_test_rand(&rng) % 7); /* 0 too */
      count *= dims[i];
    }
    uint8_t *data = malloc(count + 1);
    for (size_t i = 0; i < count; i++) data[i] = (uint8_t)rf_test_rand(&rng);
    for (int gz = 0; gz < 2; gz++) {
      const char *path = write_file("ok.idx", gz, rank, dims, data, count, 0);
      idx_array a;
      assert_ok(idx_read(path, 1 << 20, &a));
      assert_int_equal(a.rank, rank);
      for (int i = 0; i < rank; i++) assert_int_equal(a.dims[i], dims[i]);
      assert_int_equal(a.size, count);
      assert_memory_equal(a.data, data, count ? count : 0);
      idx_free(&a);
    }
    free(data);
  }
}

static void bad_files_are_refused(void **state) {
  (void)state;
  uint32_t dims[3] = {2, 3, 4};
  uint8_t data[25] = {0};
  idx_array a;
  for (int gz = 0; gz < 2; gz++) {
    const char *p = write_file("short.idx", gz, 3, dims, data, 23, 0);
    assert_status(idx_read(p, 1 << 20, &a), RF_DATA_LOSS,
                  "23 bytes of data, but the dims say 24");
    p = write_file("long.idx", gz, 3, dims, data, 25, 0);
    assert_status(idx_read(p, 1 << 20, &a), RF_DATA_LOSS,
                  "more than the 24 bytes of data its dims say");
    p = write_file("header.idx", gz, 3, dims, data, 0, 0);
    assert_status(idx_read(p, 1 << 20, &a), RF_DATA_LOSS,
                  "0 bytes of data, but the dims say 24");
    /* dims whose product overflows 64 bits, and one over the cap */
    uint32_t huge[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    p = write_file("huge.idx", gz, 4, huge, data, 25, 0);
    assert_status(idx_read(p, (size_t)1 << 30, &a), RF_RESOURCE_EXHAUSTED,
                  "data would exceed 1073741824 bytes (rank 4, dims "
                  "4294967295 x ...)");
    p = write_file("cap.idx", gz, 3, dims, data, 24, 0);
    assert_status(idx_read(p, 23, &a), RF_RESOURCE_EXHAUSTED,
                  "data would exceed 23 bytes (rank 3, dims 2 x 3 x 4)");
    /* a file of another kind is named by its rank, before its size cap
     * and its data: an images file read as labels, and the other way */
    assert_status(
        idx_read_rank(p, 23, 1, &a), RF_DATA_LOSS,
        "IDX: rank 3; a labels file has rank 1 (count: magic 00 00 08 01)");
    p = write_file("rank2.idx", gz, 2, dims, data, 24, 0);
    assert_status(idx_read_rank(p, 1 << 20, 3, &a), RF_DATA_LOSS,
                  "IDX: rank 2; an images file has rank 3 (count, rows, "
                  "columns: magic 00 00 08 03)");
    p = write_file("rank3.idx", gz, 3, dims, data, 24, 0);
    assert_ok(idx_read_rank(p, 1 << 20, 3, &a));
    assert_int_equal(a.size, 24);
    idx_free(&a);
  }
  /* a rank out of range, another element type, a short header */
  char path[256];
  snprintf(path, sizeof path, "%s/rank.idx", dir);
  FILE *f = fopen(path, "wb");
  fwrite("\0\0\x08\x05", 1, 4, f);
  fclose(f);
  assert_status(idx_read(path, 1 << 20, &a), RF_DATA_LOSS, "rank 5 outside");
  f = fopen(path, "wb");
  fwrite("\0\0\x0d\x01\0\0\0\0", 1, 8, f);
  fclose(f);
  assert_status(idx_read(path, 1 << 20, &a), RF_UNIMPLEMENTED, "0x0d");
  f = fopen(path, "wb");
  fwrite("\0\0\x08\x02\0\0", 1, 6, f);
  fclose(f);
  assert_status(idx_read(path, 1 << 20, &a), RF_DATA_LOSS,
                "truncated header (6 of 12 bytes)");
  /* a gzip stream cut short */
  const char *p = write_file("cut.gz", true, 3, dims, data, 24, 1 << 16);
  assert_int_equal(truncate(p, 40), 0);
  assert_status(idx_read(p, 1 << 20, &a), RF_DATA_LOSS, NULL);
  assert_status(idx_read("/nonexistent/x.gz", 1 << 20, &a), RF_NOT_FOUND,
                "/nonexistent/x.gz");
}

/* The peak resident memory of this process, bytes. */
static long peak_rss(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss * 1024L;
}

/* In a child process (a fresh peak): reading path with the reader's
 * 1 GiB cap fails with want, and the peak grows by less than 32 MiB. */
static void read_in_bounded_memory(const char *path, rf_code want,
                                   const char *sub) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    long before = peak_rss();
    idx_array a;
    rf_status *st = idx_read(path, (size_t)1 << 30, &a);
    long grew = peak_rss() - before;
    int ok = st && rf_status_code(st) == want &&
             strstr(rf_status_message(st), sub) && grew < (32L << 20);
    fprintf(stderr, "%s: %s (peak RSS +%ld KiB)\n", path,
            st ? rf_status_message(st) : "read", grew >> 10);
    rf_status_free(st);
    _exit(ok ? 0 : 1);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static void gzip_bomb_costs_what_arrives(void **state) {
  (void)state;
  /* 10 images of 28x28, then 256 MiB of zeros: a 256 KiB file. */
  uint32_t dims[3] = {10, 28, 28};
  static uint8_t data[10 * 28 * 28];
  const char *p = write_file("bomb.gz", true, 3, dims, data, sizeof data,
                             (size_t)256 << 20);
  read_in_bounded_memory(p, RF_DATA_LOSS,
                         "more than the 7840 bytes of data its dims say");
  /* dims of 1 GiB (the cap), 1 MiB of data */
  uint32_t big[3] = {16384, 256, 256};
  p = write_file("big_dims.gz", true, 3, big, NULL, 0, (size_t)1 << 20);
  read_in_bounded_memory(p, RF_DATA_LOSS,
                         "1048576 bytes of data, but the dims say 1073741824");
}

static idx_array array_of(int rank, const int64_t *dims, uint8_t *data) {
  idx_array a = {.rank = rank, .data = data, .size = 1};
  for (int i = 0; i < rank; i++) {
    a.dims[i] = dims[i];
    a.size *= (size_t)dims[i];
  }
  return a;
}

static void labelled_set_checks(void **state) {
  (void)state;
  uint8_t pix[3 * 2 * 2] = {0}, lab[4] = {0, 9, 3, 1};
  idx_array im = array_of(3, (int64_t[]){3, 2, 2}, pix),
            lb = array_of(1, (int64_t[]){3}, lab);
  assert_ok(idx_check_labelled(&im, "im", &lb, "lb", 10));
  lab[1] = 10;
  assert_status(idx_check_labelled(&im, "im", &lb, "lb", 10), RF_DATA_LOSS,
                "lb: label 1 is 10, outside 0..9");
  lab[1] = 9;
  idx_array lb4 = array_of(1, (int64_t[]){4}, lab);
  assert_status(idx_check_labelled(&im, "im", &lb4, "lb", 10), RF_DATA_LOSS,
                "im and lb do not describe the same images (ranks 3 and 1, "
                "counts 3 and 4)");
  idx_array lb2 = array_of(2, (int64_t[]){3, 1}, lab);
  /* a file of the wrong kind is named as such, not as a count mismatch */
  assert_status(idx_check_labelled(&im, "im", &lb2, "lb", 10), RF_DATA_LOSS,
                "lb: rank 2; a labels file has rank 1");
  idx_array im2 = array_of(2, (int64_t[]){3, 4}, pix);
  assert_status(idx_check_labelled(&im2, "im", &lb, "lb", 10), RF_DATA_LOSS,
                "im: rank 2; an images file has rank 3");
}

static int setup(void **state) {
  (void)state;
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[64];
  const char *names[] = {"ok.idx",      "short.idx", "long.idx",  "header.idx",
                         "huge.idx",    "cap.idx",   "rank.idx",  "cut.gz",
                         "big_dims.gz", "bomb.gz",   "rank2.idx", "rank3.idx"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    snprintf(cmd, sizeof cmd, "%s/%s", dir, names[i]);
    unlink(cmd);
  }
  return rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      /* forks first, while this process is small */
      cmocka_unit_test(gzip_bomb_costs_what_arrives),
      cmocka_unit_test(random_files_read_back),
      cmocka_unit_test(bad_files_are_refused),
      cmocka_unit_test(labelled_set_checks),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
