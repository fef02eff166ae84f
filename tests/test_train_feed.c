/* tests/test_train_feed.c - `ringflow train --feed` (tools/train.c): the data
 * set copied once onto every device, each step feeding only its rows'
 * indices (indices), against each step feeding its rows' images and labels
 * (batches). Each run is cmd_train in a child process on CPU devices and a
 * small data set in Fashion-MNIST's format written here:
 *  - indices and batches save the very same checkpoint, bit for bit, and
 *    print the same test accuracy, for the MLP (all-reduce; sharded with the
 *    gathered gradients; --check's one-device reference) and the CNN; with
 *    indices the data goes to the devices once and a step feeds per replica
 *    its indices and the learning rate, nothing else (Adam's beta powers
 *    live on the devices);
 *  - when the copy does not fit (the upload fails with RESOURCE_EXHAUSTED),
 *    auto says so on stderr and trains by batches to the same checkpoint;
 *    indices fails with the error; neither leaks;
 *  - a --feed value that is not a mode is a usage error.
 * rf_session_run is wrapped (-Wl,--wrap) to count the runs and fail the
 * upload on purpose. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "ringflow/debug.h"
#include "testutil.h"
#include "tools.h"

#define TRAIN_ROWS 512
#define TEST_ROWS 70 /* not a multiple of the batch: the last one is padded */

/* What a child saw, in memory shared with the parent. */
typedef struct report {
  int uploads;        /* runs of the load_data target */
  int steps;          /* runs of the train target */
  int step_feeds;     /* most feeds of a training step */
  int64_t run_leaked; /* allocations left by the whole run */
} report;

static report *rep;
static bool fail_upload;
static char dir[64];

rf_status *__real_rf_session_run(rf_session *s, const rf_feed *feeds,
                                 int nfeeds, const rf_output *fetches,
                                 int nfetches, rf_node *const *targets,
                                 int ntargets, rf_tensor **outputs);

rf_status *__wrap_rf_session_run(rf_session *s, const rf_feed *feeds,
                                 int nfeeds, const rf_output *fetches,
                                 int nfetches, rf_node *const *targets,
                                 int ntargets, rf_tensor **outputs) {
  const char *target = ntargets == 1 ? rf_node_name(targets[0]) : "";
  if (strcmp(target, "load_data") == 0) {
    rep->uploads++;
    if (fail_upload)
      return rf_status_new(RF_RESOURCE_EXHAUSTED,
                           "out of memory on purpose (the data set)");
  }
  if (strcmp(target, "train") == 0) {
    rep->steps++;
    if (nfeeds > rep->step_feeds) rep->step_feeds = nfeeds;
  }
  return __real_rf_session_run(s, feeds, nfeeds, fetches, nfetches, targets,
                               ntargets, outputs);
}

static int64_t live_after_trim(void) {
  rf_default_allocator_trim();
  return rf_debug_live_allocations();
}

/* Runs `ringflow train ARGS --feed FEED --data DIR --epochs 1 [--save
 * DIR/SAVE]` in a child (after an unwrapped warm-up run that fills the
 * library's registries), its stdout into out and stderr into err; returns
 * its exit code, or -1 if it did not exit. */
static int run_child(const char *const *args, const char *feed,
                     const char *save, char *out, char *err, size_t len) {
  char paths[2][96], data[128], feedarg[64], savearg[128];
  snprintf(paths[0], sizeof paths[0], "%s/stdout", dir);
  snprintf(paths[1], sizeof paths[1], "%s/stderr", dir);
  snprintf(data, sizeof data, "--data=%s", dir);
  snprintf(feedarg, sizeof feedarg, "--feed=%s", feed);
  snprintf(savearg, sizeof savearg, "--save=%s/%s", dir, save ? save : "");
  char *argv[32] = {"train"};
  int argc = 1;
  for (; args[argc - 1]; argc++) argv[argc] = (char *)args[argc - 1];
  argv[argc++] = data;
  argv[argc++] = feedarg;
  argv[argc++] = "--epochs=1";
  if (save) argv[argc++] = savearg;
  argv[argc] = NULL;
  memset(rep, 0, sizeof *rep);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(240);
    int fo = open(paths[0], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fe = open(paths[1], O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int null = open("/dev/null", O_WRONLY);
    if (fo < 0 || fe < 0 || null < 0) _exit(100);
    dup2(null, 1);
    char warm_data[128];
    snprintf(warm_data, sizeof warm_data, "--data=%s", dir);
    char *warm[] = {
        "train",      "--devices=cpu:0-1", "--batch=32", "--steps=1",
        "--epochs=1", "--quiet",           warm_data,    NULL};
    if (cmd_train(7, warm) != 0) _exit(101);
    int64_t live = live_after_trim();
    memset(rep, 0, sizeof *rep);
    dup2(fo, 1);
    dup2(fe, 2);
    int rc = cmd_train(argc, argv);
    fflush(NULL);
    rep->run_leaked = live_after_trim() - live;
    exit(rc);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  char *bufs[2] = {out, err};
  for (int k = 0; k < 2; k++) {
    FILE *f = fopen(paths[k], "r");
    assert_non_null(f);
    size_t got = fread(bufs[k], 1, len - 1, f);
    bufs[k][got] = 0;
    fclose(f);
  }
  fprintf(stderr, "%s", err);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void write_idx(const char *name, int rank, const int *dims,
                      uint64_t *rng, int range) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  gzFile f = gzopen(path, "wb1");
  assert_non_null(f);
  unsigned char head[4] = {0, 0, 8, (unsigned char)rank};
  assert_int_equal(gzwrite(f, head, 4), 4);
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    unsigned char d[4] = {
        (unsigned char)(dims[i] >> 24), (unsigned char)(dims[i] >> 16),
        (unsigned char)(dims[i] >> 8), (unsigned char)dims[i]};
    assert_int_equal(gzwrite(f, d, 4), 4);
    n *= dims[i];
  }
  for (int64_t i = 0; i < n; i++) {
    unsigned char v = (unsigned char)(rf_test_rand(rng) % (uint64_t)range);
    assert_int_equal(gzwrite(f, &v, 1), 1);
  }
  assert_int_equal(gzclose(f), Z_OK);
}

/* Random pixels, labels 0..9. */
static void write_data(void) {
  uint64_t rng = rf_test_rng(19);
  int train_images[] = {TRAIN_ROWS, 28, 28},
      test_images[] = {TEST_ROWS, 28, 28};
  int train_labels[] = {TRAIN_ROWS}, test_labels[] = {TEST_ROWS};
  write_idx("train-images-idx3-ubyte.gz", 3, train_images, &rng, 256);
  write_idx("train-labels-idx1-ubyte.gz", 1, train_labels, &rng, 10);
  write_idx("t10k-images-idx3-ubyte.gz", 3, test_images, &rng, 256);
  write_idx("t10k-labels-idx1-ubyte.gz", 1, test_labels, &rng, 10);
}

static char *slurp(const char *name, size_t *len) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc(*len + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, *len, f), *len);
  fclose(f);
  return buf;
}

static void assert_same_file(const char *a, const char *b) {
  size_t na, nb;
  char *ca = slurp(a, &na), *cb = slurp(b, &nb);
  assert_true(na > 1000);
  assert_true(na == nb && memcmp(ca, cb, na) == 0);
  free(ca);
  free(cb);
}

/* The text from "test accuracy" to the end of its line: the same for both
 * modes (the line's seconds are not). */
static void accuracy(const char *out, char *buf, size_t len) {
  const char *p = strstr(out, "test accuracy");
  assert_non_null(p);
  size_t n = strcspn(p, ",");
  assert_true(n < len);
  memcpy(buf, p, n);
  buf[n] = 0;
}

static char out[1 << 16], err[1 << 16];

/* Both modes on one configuration: the same checkpoint and accuracy.
 * switches: feeds per device beyond the data and the 3 scalars (the CNN's
 * dropout switch). */
static void same_both_ways(const char *const *args, int devices, int switches) {
  char acc[2][64], check[2][160];
  const char *feeds[] = {"batches", "indices"},
             *saves[] = {"batches.ckpt", "indices.ckpt"};
  for (int k = 0; k < 2; k++) {
    assert_int_equal(run_child(args, feeds[k], saves[k], out, err, sizeof out),
                     0);
    accuracy(out, acc[k], sizeof acc[k]);
    const char *c = strstr(out, "check against 1 device");
    snprintf(check[k], sizeof check[k], "%.*s", c ? (int)strcspn(c, "\n") : 0,
             c ? c : "");
    assert_true(rep->steps > 0);
    assert_int_equal(rep->run_leaked, 0);
    if (k == 0) {
      assert_int_equal(rep->uploads, 0);
      /* x, y, the learning rate */
      assert_int_equal(rep->step_feeds, (3 + switches) * devices);
    } else {
      /* the run's trainer, and --check's */
      assert_int_equal(rep->uploads, strstr(out, "check against") ? 2 : 1);
      /* idx, the learning rate */
      assert_int_equal(rep->step_feeds, (2 + switches) * devices);
    }
  }
  assert_string_equal(acc[0], acc[1]);
  assert_string_equal(check[0], check[1]);
  assert_same_file("batches.ckpt", "indices.ckpt");
}

static void test_mlp_allreduce_same_both_ways(void **state) {
  const char *args[] = {"--devices=cpu:0-1", "--batch=32", "--steps=6",
                        "--quiet", NULL};
  same_both_ways(args, 2, 0);
}

/* 8 rows per device: the sharded weights' gradients from the whole batch */
static void test_mlp_sharded_check_same_both_ways(void **state) {
  const char *args[] = {
      "--devices=cpu:0-3", "--batch=32", "--steps=4", "--sync=sharded",
      "--check",           "--quiet",    NULL};
  same_both_ways(args, 4, 0);
  assert_non_null(strstr(out, "check against 1 device"));
}

static void test_cnn_same_both_ways(void **state) {
  /* Without dropout: its random key counts session runs, and the upload
   * is one more (--help says so). */
  const char *args[] = {
      "--devices=cpu:0-1", "--model=cnn", "--batch=8", "--steps=2",
      "--dropout=0",       "--quiet",     NULL};
  same_both_ways(args, 2, 0);
}

static void test_does_not_fit(void **state) {
  const char *args[] = {"--devices=cpu:0-1", "--batch=32", "--steps=3",
                        "--quiet", NULL};
  assert_int_equal(
      run_child(args, "batches", "batches.ckpt", out, err, sizeof out), 0);
  fail_upload = true;
  /* auto: one line on stderr, then the batches' very checkpoint */
  assert_int_equal(run_child(args, "auto", "auto.ckpt", out, err, sizeof out),
                   0);
  assert_non_null(strstr(err,
                         "ringflow train: the data set does not fit on the "
                         "devices (out of memory on purpose (the data set)); "
                         "feeding each step's batch from host memory "
                         "instead\n"));
  assert_int_equal(rep->uploads, 1);
  assert_int_equal(rep->step_feeds, 3 * 2); /* x, y, the learning rate */
  assert_int_equal(rep->run_leaked, 0);
  assert_same_file("batches.ckpt", "auto.ckpt");
  /* indices: the error, no training */
  assert_int_equal(
      run_child(args, "indices", "indices.ckpt", out, err, sizeof out), 1);
  assert_non_null(
      strstr(err,
             "error (RESOURCE_EXHAUSTED): out of memory on purpose (the data "
             "set)"));
  assert_int_equal(rep->steps, 0);
  assert_int_equal(rep->run_leaked, 0);
  fail_upload = false;
}

static void test_bad_mode(void **state) {
  const char *args[] = {"--devices=cpu:0-1", "--steps=1", NULL};
  assert_int_equal(run_child(args, "host", NULL, out, err, sizeof out), 2);
  assert_non_null(strstr(err, "--feed"));
  assert_int_equal(rep->steps, 0);
}

int main(void) {
  rep = mmap(NULL, sizeof *rep, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (rep == MAP_FAILED) return 1;
  snprintf(dir, sizeof dir, "/tmp/rf_feed_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  write_data();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp_allreduce_same_both_ways),
      cmocka_unit_test(test_mlp_sharded_check_same_both_ways),
      cmocka_unit_test(test_cnn_same_both_ways),
      cmocka_unit_test(test_does_not_fit),
      cmocka_unit_test(test_bad_mode),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  const char *files[] = {"train-images-idx3-ubyte.gz",
                         "train-labels-idx1-ubyte.gz",
                         "t10k-images-idx3-ubyte.gz",
                         "t10k-labels-idx1-ubyte.gz",
                         "batches.ckpt",
                         "indices.ckpt",
                         "auto.ckpt",
                         "stdout",
                         "stderr"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    unlink(path);
  }
  rmdir(dir);
  return rc;
}
