/* tests/test_train_prefetch.c - `ringflow train` (tools/train.c) when its
 * batch prefetch (tools/prefetch.c) or a step fails. Each run is cmd_train in
 * a child process, on 2 CPU devices and a small data set in Fashion-MNIST's
 * format written here:
 *  - prefetch_new fails: every step builds its own batch, and the run saves
 *    the very checkpoint, bit for bit, of a run whose batches came from the
 *    prefetch thread;
 *  - a batch fails on the prefetch thread: first every allocation of the
 *    batch fails in turn (each RESOURCE_EXHAUSTED, nothing left allocated),
 *    then the step that wanted it ends the run: exit code 1 and an error
 *    naming the step's input batch;
 *  - a step fails while the next batch is being built: exit code 1 with the
 *    step's error, the batch in flight released;
 * and every run, failed or not, releases everything it allocated. Also the
 * prefetcher alone: bad counts, a take of another batch, a failed batch
 * taken, batches built and freed without a take.
 * prefetch_new, prefetch_take and rf_session_run are wrapped (-Wl,--wrap):
 * the wrappers count, fail, or order the prefetch thread after the step
 * thread, so that injected allocation failures hit the batch alone. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "mlp.h"
#include "prefetch.h"
#include "ringflow/debug.h"
#include "testutil.h"
#include "tools.h"

#define DEVICES 2
#define STEPS 4 /* within the first epoch: 512 rows / batch 32 = 16 steps */
#define FAIL_STEP 3

enum mode { REAL, NO_PREFETCHER, BATCH_FAILS, STEP_FAILS };

/* What a child saw, in memory shared with the parent. */
typedef struct report {
  int helper_batches;   /* batches the prefetch thread built */
  int64_t batch_allocs; /* allocations of one batch (BATCH_FAILS) */
  int batch_failures;   /* attempts that failed, RESOURCE_EXHAUSTED */
  int wrong_codes;      /* ... with another code */
  int64_t batch_leaked; /* allocations left by failed attempts */
  int64_t run_leaked;   /* allocations left by the whole run */
  bool take_seen;       /* the step thread waited for the failing batch */
} report;

static report *rep;
static enum mode mode;
static char dir[64];

/* ---- the wrappers (in the child) ---- */

prefetch *__real_prefetch_new(prefetch_fn fn, void *arg, int count);
bool __real_prefetch_take(prefetch *p, const int *idx, rf_status **st,
                          rf_tensor **x, rf_tensor **y);
rf_status *__real_rf_session_run(rf_session *s, const rf_feed *feeds,
                                 int nfeeds, const rf_output *fetches,
                                 int nfetches, rf_node *const *targets,
                                 int ntargets, rf_tensor **outputs);

static prefetch_fn real_fn;
static int batch_count; /* real_fn's batches, on the prefetch thread */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool step_waits; /* the step thread is in prefetch_take */

static int64_t live_after_trim(void) {
  rf_default_allocator_trim();
  return rf_debug_live_allocations();
}

/* The batch of step FAIL_STEP, built once the step thread waits for it (so
 * no other thread allocates meanwhile): fails at each allocation in turn,
 * then succeeds (counting its allocations), then fails at the first. */
static rf_status *failing_batch(void *arg, const int *idx, rf_tensor **x,
                                rf_tensor **y) {
  pthread_mutex_lock(&mu);
  while (!step_waits) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  rep->take_seen = true;
  int64_t live = live_after_trim();
  for (int64_t k = 1; k < 1000; k++) {
    int64_t count = rf_debug_allocation_count();
    rf_debug_fail_allocation_after(k);
    rf_status *st = real_fn(arg, idx, x, y);
    rf_debug_fail_allocation_after(0);
    if (!st) {
      rep->batch_allocs = rf_debug_allocation_count() - count;
      for (int i = 0; i < DEVICES; i++) {
        rf_tensor_release(x[i]);
        rf_tensor_release(y[i]);
      }
      break;
    }
    if (rf_status_code(st) == RF_RESOURCE_EXHAUSTED)
      rep->batch_failures++;
    else
      rep->wrong_codes++;
    rf_status_free(st);
    rep->batch_leaked += live_after_trim() - live;
  }
  rf_debug_fail_allocation_after(1);
  rf_status *st = real_fn(arg, idx, x, y);
  rf_debug_fail_allocation_after(0);
  return st;
}

static rf_status *counted_batch(void *arg, const int *idx, rf_tensor **x,
                                rf_tensor **y) {
  rep->helper_batches++;
  /* The first step builds its own; the prefetch thread builds step 2's on. */
  if (mode == BATCH_FAILS && ++batch_count == FAIL_STEP - 1)
    return failing_batch(arg, idx, x, y);
  return real_fn(arg, idx, x, y);
}

prefetch *__wrap_prefetch_new(prefetch_fn fn, void *arg, int count) {
  if (mode == NO_PREFETCHER) return NULL;
  real_fn = fn;
  return __real_prefetch_new(counted_batch, arg, count);
}

bool __wrap_prefetch_take(prefetch *p, const int *idx, rf_status **st,
                          rf_tensor **x, rf_tensor **y) {
  pthread_mutex_lock(&mu);
  step_waits = true;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  bool took = __real_prefetch_take(p, idx, st, x, y);
  pthread_mutex_lock(&mu);
  step_waits = false;
  pthread_mutex_unlock(&mu);
  return took;
}

/* A training step: feeds, fetches and the train target. */
rf_status *__wrap_rf_session_run(rf_session *s, const rf_feed *feeds,
                                 int nfeeds, const rf_output *fetches,
                                 int nfetches, rf_node *const *targets,
                                 int ntargets, rf_tensor **outputs) {
  static int steps;
  if (mode == STEP_FAILS && nfeeds > 0 && nfetches > 0 && ntargets > 0 &&
      ++steps == FAIL_STEP)
    return rf_status_new(RF_INTERNAL, "step %d failed on purpose", steps);
  return __real_rf_session_run(s, feeds, nfeeds, fetches, nfetches, targets,
                               ntargets, outputs);
}

/* ---- the runs ---- */

static int train(const char *save, int steps) {
  char data[128], nsteps[16];
  snprintf(data, sizeof data, "--data=%s", dir);
  snprintf(nsteps, sizeof nsteps, "--steps=%d", steps);
  /* --feed batches: the path with the prefetcher */
  char *argv[] = {
      "train", "--devices=cpu:0-1", "--batch=32", "--epochs=1", nsteps,
      data,    "--feed=batches",    "--quiet",    "--save",     (char *)save,
      NULL};
  int argc = save ? 10 : 8;
  return cmd_train(argc, argv);
}

/* Runs cmd_train in a child in mode m (after an unwrapped warm-up run that
 * fills the library's registries), its stderr into *err; returns its exit
 * code, or -1 if it did not exit (a crash, or a hang caught by the alarm). */
static int run_child(enum mode m, const char *save, char *err, size_t len) {
  char path[96];
  snprintf(path, sizeof path, "%s/stderr", dir);
  memset(rep, 0, sizeof *rep);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(120);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int null = open("/dev/null", O_WRONLY);
    if (fd < 0 || null < 0) _exit(100);
    dup2(null, 1);
    mode = REAL;
    if (train(NULL, 1) != 0) _exit(101);
    int64_t live = live_after_trim();
    memset(rep, 0, sizeof *rep);
    dup2(fd, 2);
    mode = m;
    int rc = train(save, STEPS);
    rep->run_leaked = live_after_trim() - live;
    fflush(NULL);
    exit(rc);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t got = fread(err, 1, len - 1, f);
  err[got] = 0;
  fclose(f);
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

/* 512 training and 64 test images of random pixels, labels 0..9. */
static void write_data(void) {
  uint64_t rng = rf_test_seed();
  int train_images[] = {512, 28, 28}, test_images[] = {64, 28, 28};
  int train_labels[] = {512}, test_labels[] = {64};
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

static char err[8192];

static void test_without_prefetcher_same_checkpoint(void **state) {
  char a[96], b[96];
  snprintf(a, sizeof a, "%s/prefetched.ckpt", dir);
  snprintf(b, sizeof b, "%s/own.ckpt", dir);
  assert_int_equal(run_child(REAL, a, err, sizeof err), 0);
  assert_int_equal(rep->helper_batches, STEPS - 1);
  assert_int_equal(rep->run_leaked, 0);
  assert_int_equal(run_child(NO_PREFETCHER, b, err, sizeof err), 0);
  assert_int_equal(rep->helper_batches, 0);
  assert_int_equal(rep->run_leaked, 0);
  size_t na, nb;
  char *ca = slurp("prefetched.ckpt", &na), *cb = slurp("own.ckpt", &nb);
  assert_true(na > (size_t)(784 * 512 * 4));
  assert_true(na == nb && memcmp(ca, cb, na) == 0);
  free(ca);
  free(cb);
}

static void test_batch_fails_on_prefetch_thread(void **state) {
  int rc = run_child(BATCH_FAILS, NULL, err, sizeof err);
  fprintf(stderr, "%s", err);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(err,
                         "error (RESOURCE_EXHAUSTED): the input batch of "
                         "step 3: out of memory"));
  assert_true(rep->take_seen);
  assert_int_equal(rep->helper_batches, FAIL_STEP - 1);
  /* x and y of each device: a tensor and its buffer each */
  assert_int_equal(rep->batch_allocs, 4 * DEVICES);
  assert_int_equal(rep->batch_failures, rep->batch_allocs);
  assert_int_equal(rep->wrong_codes, 0);
  assert_int_equal(rep->batch_leaked, 0);
  assert_int_equal(rep->run_leaked, 0);
}

static void test_step_fails_with_batch_in_flight(void **state) {
  int rc = run_child(STEP_FAILS, NULL, err, sizeof err);
  fprintf(stderr, "%s", err);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(err, "error (INTERNAL): step 3 failed on purpose"));
  /* step 3 started step 4's before it failed */
  assert_int_equal(rep->helper_batches, FAIL_STEP);
  assert_int_equal(rep->run_leaked, 0);
}

/* prefetch.c alone (unwrapped): what train never does. */
static rf_status *one_batch(void *arg, const int *idx, rf_tensor **x,
                            rf_tensor **y) {
  if (arg) return rf_status_new(RF_RESOURCE_EXHAUSTED, "no batch %d", idx[0]);
  rf_shape s = rf_shape_of(1, 3);
  assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, x));
  assert_ok(rf_tensor_new(RF_INT32, &s, NULL, y));
  return NULL;
}

static void test_prefetcher_alone(void **state) {
  int fails = 1, a[1] = {7}, b[1] = {8};
  assert_null(__real_prefetch_new(one_batch, NULL, 0));
  assert_null(__real_prefetch_new(one_batch, NULL, MLP_MAX_DEVICES + 1));
  assert_null(__real_prefetch_new(one_batch, NULL, -1));
  rf_default_allocator_trim();
  int64_t live = rf_debug_live_allocations();
  /* Freed with a batch built and never taken, failed or not; a take of
   * another batch leaves everything as it was. */
  for (int failing = 0; failing < 2; failing++) {
    prefetch *p = __real_prefetch_new(one_batch, failing ? &fails : NULL, 1);
    assert_non_null(p);
    prefetch_start(p, a);
    rf_status *st = (rf_status *)&fails;
    rf_tensor *x = NULL, *y = NULL;
    assert_false(__real_prefetch_take(p, b, &st, &x, &y));
    assert_true(st == (rf_status *)&fails && !x && !y);
    prefetch_free(p);
  }
  /* A failed batch, taken: its error, no tensors; the next one starts. */
  prefetch *p = __real_prefetch_new(one_batch, &fails, 1);
  prefetch_start(p, a);
  rf_status *st = NULL;
  rf_tensor *x = NULL, *y = NULL;
  assert_true(__real_prefetch_take(p, a, &st, &x, &y));
  assert_status(st, RF_RESOURCE_EXHAUSTED, "no batch 7");
  assert_true(!x && !y);
  prefetch_start(p, b);
  assert_true(__real_prefetch_take(p, b, &st, &x, &y));
  assert_status(st, RF_RESOURCE_EXHAUSTED, "no batch 8");
  prefetch_free(p);
  rf_default_allocator_trim();
  assert_int_equal(rf_debug_live_allocations(), live);
}

int main(void) {
  rep = mmap(NULL, sizeof *rep, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (rep == MAP_FAILED) return 1;
  snprintf(dir, sizeof dir, "/tmp/rf_prefetch_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  write_data();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_without_prefetcher_same_checkpoint),
      cmocka_unit_test(test_batch_fails_on_prefetch_thread),
      cmocka_unit_test(test_step_fails_with_batch_in_flight),
      cmocka_unit_test(test_prefetcher_alone), /* threads: after the forks */
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  const char *files[] = {"train-images-idx3-ubyte.gz",
                         "train-labels-idx1-ubyte.gz",
                         "t10k-images-idx3-ubyte.gz",
                         "t10k-labels-idx1-ubyte.gz",
                         "prefetched.ckpt",
                         "own.ckpt",
                         "stderr"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    unlink(path);
  }
  rmdir(dir);
  return rc;
}
