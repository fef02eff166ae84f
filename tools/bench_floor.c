/* tools/bench_floor.c - the memory-bandwidth floor of `ringflow bench`: a
 * plain copy loop (memcpy) and a plain "sum n buffers into one" loop over the
 * same bytes, split in two halves run by two threads (this one and a helper
 * that lives as long as the floor). Each op ends at a barrier of the two
 * threads, as a real collective must; the buffers are allocated and touched
 * once, so no op touches fresh memory. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"
#include "tools.h"

#define MAX_IN 64
#define BLOCK 4096 /* floats per block when n > 4: the output stays in L1 */

enum { JOB_COPY, JOB_SUM, JOB_STOP };

/* One op's job, copied by each thread after the posting barrier: the main
 * thread rewrites the floor's fields for the next job as soon as it leaves
 * the last barrier of this one, maybe before the helper has left it. */
typedef struct job {
  int kind, iters;
  int64_t count, mid;
} job;

struct bench_floor {
  int n;
  float *in[MAX_IN], *out;
  pthread_t helper;
  bool started;
  pthread_barrier_t bar;
  job posted; /* set before the posting barrier */
};

/* out[b, e) = in[0] + ... + in[n-1], four inputs per pass. */
static void sum_range(float *restrict out, float *const *in, int n, int64_t b,
                      int64_t e) {
  for (int64_t s = b; s < e; s += BLOCK) {
    int64_t t = s + BLOCK < e ? s + BLOCK : e;
    for (int k = 0; k < n; k += 4) {
      int m = n - k < 4 ? n - k : 4;
      const float *restrict x0 = in[k], *restrict x1 = in[k + (m > 1)],
                            *restrict x2 = in[k + 2 * (m > 2)],
                            *restrict x3 = in[k + 3 * (m > 3)];
      float *restrict o = out;
      if (k == 0 && m == 4)
        for (int64_t i = s; i < t; i++) o[i] = x0[i] + x1[i] + x2[i] + x3[i];
      else if (k == 0 && m == 3)
        for (int64_t i = s; i < t; i++) o[i] = x0[i] + x1[i] + x2[i];
      else if (k == 0 && m == 2)
        for (int64_t i = s; i < t; i++) o[i] = x0[i] + x1[i];
      else if (k == 0)
        memcpy(o + s, x0 + s, (size_t)(t - s) * sizeof(float));
      else if (m == 4)
        for (int64_t i = s; i < t; i++) o[i] += x0[i] + x1[i] + x2[i] + x3[i];
      else if (m == 3)
        for (int64_t i = s; i < t; i++) o[i] += x0[i] + x1[i] + x2[i];
      else if (m == 2)
        for (int64_t i = s; i < t; i++) o[i] += x0[i] + x1[i];
      else
        for (int64_t i = s; i < t; i++) o[i] += x0[i];
    }
  }
}

/* This thread's half of one op: half 0 is [0, mid), half 1 [mid, count). */
static void do_half(bench_floor *f, const job *j, int half) {
  int64_t b = half ? j->mid : 0, e = half ? j->count : j->mid;
  if (e <= b) return;
  if (j->kind == JOB_COPY)
    memcpy(f->out + b, f->in[0] + b, (size_t)(e - b) * sizeof(float));
  else
    sum_range(f->out, f->in, f->n, b, e);
}

static void *helper_main(void *arg) {
  bench_floor *f = arg;
  for (;;) {
    pthread_barrier_wait(&f->bar); /* a job was posted */
    job j = f->posted;
    if (j.kind == JOB_STOP) return NULL;
    for (int i = 0; i < j.iters; i++) {
      do_half(f, &j, 1);
      pthread_barrier_wait(&f->bar);
    }
  }
}

rf_status *bench_floor_new(int n, int64_t max_bytes, bench_floor **out) {
  if (n < 1 || n > MAX_IN)
    return rf_status_new(RF_INVALID_ARGUMENT, "floor: 1..%d buffers", MAX_IN);
  bench_floor *f = calloc(1, sizeof *f);
  if (!f) return rf_status_new(RF_RESOURCE_EXHAUSTED, "floor: no memory");
  f->n = n;
  size_t bytes = (size_t)max_bytes;
  bool ok = true;
  for (int i = 0; i <= n && ok; i++) {
    float **p = i < n ? &f->in[i] : &f->out;
    ok = posix_memalign((void **)p, 2 << 20, bytes) == 0;
#ifdef MADV_HUGEPAGE /* as the default allocator does for its big blocks */
    if (ok && bytes >= (2u << 20)) madvise(*p, bytes, MADV_HUGEPAGE);
#endif
    if (ok) memset(*p, 0, bytes); /* first touch, here and only here */
  }
  if (ok) ok = pthread_barrier_init(&f->bar, NULL, 2) == 0;
  if (ok) f->started = pthread_create(&f->helper, NULL, helper_main, f) == 0;
  if (!ok || !f->started) {
    if (ok) pthread_barrier_destroy(&f->bar);
    f->started = false;
    bench_floor_free(f);
    return rf_status_new(RF_RESOURCE_EXHAUSTED,
                         "floor: cannot set up %d buffers of %lld bytes and "
                         "a thread", n + 1, (long long)max_bytes);
  }
  *out = f;
  return NULL;
}

/* Seconds per op of `iters` ops of `job` on count floats. */
static double run_job(bench_floor *f, int kind, int64_t count, int iters) {
  /* 64-byte aligned halves */
  job j = {kind, iters, count, (count / 2) & ~(int64_t)15};
  f->posted = j;
  pthread_barrier_wait(&f->bar); /* post */
  double t0 = now_seconds();
  for (int i = 0; i < iters; i++) {
    do_half(f, &j, 0);
    pthread_barrier_wait(&f->bar);
  }
  return (now_seconds() - t0) / iters;
}

/* Batches of 2, 4, 8... ops until one lasts min_time. */
static double time_job(bench_floor *f, int kind, int64_t count,
                       double min_time) {
  run_job(f, kind, count, 2); /* warm the caches */
  for (int k = 2;; k *= 2) {
    double t = run_job(f, kind, count, k);
    if (t * k >= min_time || k >= (1 << 24)) return t;
  }
}

void bench_floor_measure(bench_floor *f, int64_t bytes, double min_time,
                         double *copy_s, double *sum_s) {
  int64_t count = bytes / (int64_t)sizeof(float);
  *copy_s = time_job(f, JOB_COPY, count, min_time);
  *sum_s = time_job(f, JOB_SUM, count, min_time);
}

void bench_floor_free(bench_floor *f) {
  if (!f) return;
  if (f->started) {
    f->posted.kind = JOB_STOP;
    pthread_barrier_wait(&f->bar);
    pthread_join(f->helper, NULL);
    pthread_barrier_destroy(&f->bar);
  }
  for (int i = 0; i < f->n; i++) free(f->in[i]);
  free(f->out);
  free(f);
}
