/* device/threadpool.c - fixed worker threads around one FIFO ring buffer.
 * The ring grows by doubling under the pool's mutex, so scheduling a task never
 * allocates in steady state. A worker that runs out of work spins a little
 * while (one at a time, yielding the core) before it sleeps, so that work
 * arriving soon after - a parallel_for's helpers, the next step's devices -
 * costs no futex wake-up; schedule signals a sleeper only for tasks the
 * spinner will take. A parallel_for's helpers are not left to a spinner on
 * the caller's own core: that one runs only when the caller stops, after it
 * has claimed every chunk itself. parallel_for's caller claims chunks from an
 * atomic counter alongside the helpers it queued and only waits for chunks that
 * are already running, so it cannot deadlock even when called from a worker. */
#define _GNU_SOURCE /* sched_getcpu */
#include "device/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

#include "core/cores.h"
#include "core/mem.h"
#include "core/status.h"

typedef struct task {
  void (*fn)(void *);
  void *arg;
} task;

struct rf__threadpool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  task *ring; /* cap slots; count tasks starting at head */
  int cap, head, count;
  bool stop;
  bool spinner;           /* a worker is spinning (under mu) */
  atomic_int spinner_cpu; /* the core it last spun on (a hint) */
  int64_t spin_ns;        /* how long an idle worker spins (under mu) */
  int64_t wakeups;        /* sleepers signalled for work (under mu) */
  atomic_int idle;        /* workers waiting on cv or spinning */
  atomic_int queued;      /* mirrors count, readable without the lock */
  atomic_bool stopping;
  int num_threads, started;
  int sleepers; /* workers waiting on cv (under mu) */
  pthread_t *threads;
};

/* How long an idle worker spins before it sleeps. A futex wake-up and the
 * context switch cost ~5-20 us on these machines; work often arrives within
 * that (the helpers of the next parallel_for, the next step's devices). */
#define SPIN_NS 50000

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Called with mu held and the queue empty; returns with mu held and a task
 * queued or the pool stopping. One worker at a time spins, with mu released,
 * polling `queued` and yielding its core to any runnable thread (ours
 * included: on 2 cores a spinner must not hold up the thread it waits for);
 * the others, and the spinner after SPIN_NS, sleep on cv. */
static void wait_for_work(rf__threadpool *p) {
  if (!p->spinner) {
    p->spinner = true;
    atomic_store_explicit(&p->spinner_cpu, sched_getcpu(),
                          memory_order_relaxed);
    atomic_fetch_add_explicit(&p->idle, 1, memory_order_relaxed);
    int64_t until = mono_ns() + p->spin_ns;
    pthread_mutex_unlock(&p->mu);
    while (atomic_load_explicit(&p->queued, memory_order_relaxed) == 0 &&
           !atomic_load_explicit(&p->stopping, memory_order_relaxed) &&
           mono_ns() < until) {
      sched_yield();
      /* yielding may have moved it */
      atomic_store_explicit(&p->spinner_cpu, sched_getcpu(),
                            memory_order_relaxed);
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_sub_explicit(&p->idle, 1, memory_order_relaxed);
    p->spinner = false;
  }
  while (p->count == 0 && !p->stop) {
    p->sleepers++;
    atomic_fetch_add_explicit(&p->idle, 1, memory_order_relaxed);
    pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub_explicit(&p->idle, 1, memory_order_relaxed);
    p->sleepers--;
  }
}

static void *worker_main(void *arg) {
  rf__threadpool *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    if (p->count == 0 && !p->stop) wait_for_work(p);
    if (p->count == 0) break; /* stopping and drained */
    task t = p->ring[p->head];
    p->head = (p->head + 1) % p->cap;
    p->count--;
    atomic_store_explicit(&p->queued, p->count, memory_order_relaxed);
    pthread_mutex_unlock(&p->mu);
    t.fn(t.arg);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

rf_status *rf__threadpool_new(int num_threads, rf__threadpool **out) {
  if (num_threads < 0)
    return rf__invalid("thread pool: num_threads must be >= 0, got %d",
                       num_threads);
  if (num_threads == 0) num_threads = rf__cores_for_this_process();
  rf__threadpool *p = rf__calloc(1, sizeof *p);
  RF_CHECK_ALLOC(p);
  p->cap = 64;
  p->ring = rf__malloc(sizeof(task) * (size_t)p->cap);
  p->threads = rf__calloc((size_t)num_threads, sizeof(pthread_t));
  if (!p->ring || !p->threads) {
    rf__free(p->ring);
    rf__free(p->threads);
    rf__free(p);
    return rf__oom();
  }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  atomic_init(&p->idle, 0);
  atomic_init(&p->queued, 0);
  atomic_init(&p->stopping, false);
  atomic_init(&p->spinner_cpu, -1);
  p->spin_ns = SPIN_NS;
  p->num_threads = num_threads;
  for (int i = 0; i < num_threads; i++) {
    if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) {
      rf__threadpool_free(p);
      return rf__error(RF_RESOURCE_EXHAUSTED,
                       "thread pool: could not start thread %d of %d", i,
                       num_threads);
    }
    p->started++;
  }
  *out = p;
  return NULL;
}

void rf__threadpool_free(rf__threadpool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  atomic_store(&p->stopping, true);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
  /* With no thread started, queued tasks still run (the contract). */
  while (p->count > 0) {
    task t = p->ring[p->head];
    p->head = (p->head + 1) % p->cap;
    p->count--;
    t.fn(t.arg);
  }
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  rf__free(p->ring);
  rf__free(p->threads);
  rf__free(p);
}

int rf__threadpool_size(const rf__threadpool *p) {
  return p ? p->num_threads : 0;
}

/* Waiting (sleeping or spinning) workers minus tasks already queued for
 * them: a worker signalled but not yet awake is not idle, or callers would
 * pile up work for it. */
int rf__threadpool_idle(const rf__threadpool *p) {
  if (!p) return 0;
  rf__threadpool *q = (rf__threadpool *)p;
  int n = atomic_load_explicit(&q->idle, memory_order_relaxed) -
          atomic_load_explicit(&q->queued, memory_order_relaxed);
  return n > 0 ? n : 0;
}

/* Doubles the ring, unrolling it so head becomes 0. Called with mu held. */
static bool grow_ring(rf__threadpool *p) {
  int ncap = p->cap * 2;
  task *r = rf__malloc(sizeof(task) * (size_t)ncap);
  if (!r) return false;
  for (int i = 0; i < p->count; i++) r[i] = p->ring[(p->head + i) % p->cap];
  rf__free(p->ring);
  p->ring = r;
  p->cap = ncap;
  p->head = 0;
  return true;
}

/* keeps_core: the caller goes on computing after this (a parallel_for), so a
 * spinner on its core cannot take the task until the caller is done. */
static rf_status *schedule(rf__threadpool *p, void (*fn)(void *), void *arg,
                           bool keeps_core) {
  pthread_mutex_lock(&p->mu);
  if (p->count == p->cap && !grow_ring(p)) {
    pthread_mutex_unlock(&p->mu);
    return rf__oom();
  }
  p->ring[(p->head + p->count) % p->cap] = (task){fn, arg};
  p->count++;
  atomic_store_explicit(&p->queued, p->count, memory_order_relaxed);
  /* Waking only when someone sleeps keeps the busy case cheap, and the
   * spinner (it re-checks the queue under mu before it sleeps) takes one
   * task without a wake-up, unless it shares the core of a caller that
   * keeps it: measured (CNN layer 1, batch 64, 2 threads), a helper left to
   * such a spinner started ~0.7 ms late, after the whole loop, in 10-60% of
   * the calls, where a woken sleeper started in 8-30 us. */
  bool spinner_takes =
      p->spinner &&
      !(keeps_core &&
        atomic_load_explicit(&p->spinner_cpu, memory_order_relaxed) ==
            sched_getcpu());
  if (p->sleepers > 0 && p->count > (spinner_takes ? 1 : 0)) {
    p->wakeups++;
    pthread_cond_signal(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

rf_status *rf__threadpool_schedule(rf__threadpool *p, void (*fn)(void *),
                                   void *arg) {
  return schedule(p, fn, arg, false);
}

void rf__threadpool_set_spin_ns(rf__threadpool *p, int64_t ns) {
  pthread_mutex_lock(&p->mu);
  p->spin_ns = ns < 0 ? 0 : ns;
  pthread_mutex_unlock(&p->mu);
}

int64_t rf__threadpool_wakeups(rf__threadpool *p) {
  pthread_mutex_lock(&p->mu);
  int64_t n = p->wakeups;
  pthread_mutex_unlock(&p->mu);
  return n;
}

/* ---- parallel_for ---- */

/* Below this many cycles of total work a loop runs inline; one chunk should be
 * worth at least this much, so handing it to another thread pays off. */
#define MIN_CHUNK_COST 20000
#define CHUNKS_PER_THREAD 4

/* Shared by the caller and its helpers; freed by whoever drops the last
 * reference (helpers may start after the caller has finished everything). */
typedef struct pfor {
  atomic_int refs;
  atomic_llong next_chunk;
  atomic_llong chunks_done;
  int64_t n, chunk, num_chunks;
  void (*fn)(void *, int64_t, int64_t);
  void *arg;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} pfor;

static void pfor_release(pfor *w) {
  if (atomic_fetch_sub_explicit(&w->refs, 1, memory_order_acq_rel) != 1) return;
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  rf__free(w);
}

/* Runs chunks until none is left unclaimed. */
static void pfor_work(pfor *w) {
  for (;;) {
    int64_t c =
        atomic_fetch_add_explicit(&w->next_chunk, 1, memory_order_relaxed);
    if (c >= w->num_chunks) return;
    int64_t b = c * w->chunk;
    int64_t e = b + w->chunk < w->n ? b + w->chunk : w->n;
    w->fn(w->arg, b, e);
    int64_t done =
        atomic_fetch_add_explicit(&w->chunks_done, 1, memory_order_acq_rel) + 1;
    if (done == w->num_chunks) {
      pthread_mutex_lock(&w->mu);
      pthread_cond_broadcast(&w->cv);
      pthread_mutex_unlock(&w->mu);
    }
  }
}

static void pfor_helper(void *arg) {
  pfor *w = arg;
  pfor_work(w);
  pfor_release(w);
}

void rf__threadpool_parallel_for(rf__threadpool *p, int64_t n,
                                 int64_t cost_per_item,
                                 void (*fn)(void *arg, int64_t b, int64_t e),
                                 void *arg) {
  if (n <= 0) return;
  if (cost_per_item < 1) cost_per_item = 1;
  double total = (double)n * (double)cost_per_item;
  /* The caller and num_threads - 1 helpers (at least one): a pool has one
   * thread per core, and the caller is a worker or keeps a core busy too,
   * so one more helper only adds a wake-up and a thread fighting for a
   * core. */
  int threads = !p ? 1 : p->num_threads > 1 ? p->num_threads : 2;
  int64_t chunks = (int64_t)(total / MIN_CHUNK_COST);
  if (chunks > (int64_t)threads * CHUNKS_PER_THREAD)
    chunks = (int64_t)threads * CHUNKS_PER_THREAD;
  if (chunks > n) chunks = n;
  if (chunks <= 1 || threads <= 1) {
    fn(arg, 0, n);
    return;
  }
  pfor *w = rf__malloc(sizeof *w);
  if (!w) { /* no memory for sharing: still correct inline */
    fn(arg, 0, n);
    return;
  }
  w->chunk = (n + chunks - 1) / chunks;
  w->num_chunks = (n + w->chunk - 1) / w->chunk;
  w->n = n;
  w->fn = fn;
  w->arg = arg;
  atomic_init(&w->next_chunk, 0);
  atomic_init(&w->chunks_done, 0);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  int helpers =
      (int)(w->num_chunks - 1 < threads - 1 ? w->num_chunks - 1 : threads - 1);
  atomic_init(&w->refs, 1 + helpers);
  for (int i = 0; i < helpers; i++) {
    rf_status *st = schedule(p, pfor_helper, w, true);
    if (st) {
      /* The caller covers the chunks this helper would have taken. */
      rf_status_free(st);
      atomic_fetch_sub_explicit(&w->refs, helpers - i, memory_order_relaxed);
      break;
    }
  }
  pfor_work(w);
  /* Every chunk is claimed now; wait only for those still running. */
  if (atomic_load_explicit(&w->chunks_done, memory_order_acquire) <
      w->num_chunks) {
    pthread_mutex_lock(&w->mu);
    while (atomic_load_explicit(&w->chunks_done, memory_order_acquire) <
           w->num_chunks)
      pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
  }
  pfor_release(w);
}
