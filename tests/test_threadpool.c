/* tests/test_threadpool.c - the worker pool: scheduling, draining on free,
 * parallel_for coverage and chunking, nesting from pool threads without
 * deadlock, and allocation failures. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#include "ringflow/debug.h"
#include "core/cores.h"
#include "device/threadpool.h"

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void count_task(void *arg) { atomic_fetch_add((atomic_int *)arg, 1); }

static void test_new_errors(void **state) {
  rf__threadpool *p = NULL;
  assert_status(rf__threadpool_new(-1, &p), RF_INVALID_ARGUMENT, "num_threads");
  assert_null(p);
  assert_ok(rf__threadpool_new(0, &p));
  assert_true(rf__threadpool_size(p) >= 1);
  rf__threadpool_free(p);
  rf__threadpool_free(NULL);
  assert_int_equal(rf__threadpool_size(NULL), 0);
  assert_int_equal(rf__threadpool_idle(NULL), 0);
}

/* num_threads 0 counts the cores the process may run on, not the machine's:
 * under taskset or a cpuset a pool of every online core oversubscribes. */
static void test_default_size_follows_affinity(void **state) {
  cpu_set_t old, one;
  assert_int_equal(sched_getaffinity(0, sizeof old, &old), 0);
  int first = 0;
  while (!CPU_ISSET(first, &old)) first++;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
  rf__threadpool *p = NULL;
  rf_status *st = rf__threadpool_new(0, &p);
  int size = rf__threadpool_size(p);
  rf__threadpool_free(p);
  assert_int_equal(sched_setaffinity(0, sizeof old, &old), 0);
  assert_ok(st);
  assert_int_equal(size, 1);
}

/* Default pool size with OMPI_COMM_WORLD_LOCAL_SIZE=2, restored after. */
static int size_with_two_local_ranks(void) {
  const char *had = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  char *saved = had ? strdup(had) : NULL;
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  rf__threadpool *p = NULL;
  rf_status *st = rf__threadpool_new(0, &p);
  int size = p ? rf__threadpool_size(p) : -1;
  rf__threadpool_free(p);
  if (saved)
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", saved, 1);
  else
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  free(saved);
  assert_ok(st);
  return size;
}

/* The first CPU of set, alone: a mask narrower than set's. */
static cpu_set_t first_cpu_of(const cpu_set_t *set) {
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, set)) {
      CPU_SET(c, &one);
      break;
    }
  return one;
}

/* rf__cores_crowded with OMPI_COMM_WORLD_LOCAL_SIZE=ranks (NULL: unset),
 * restored after. */
static bool crowded_with(const char *ranks) {
  const char *had = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  char *saved = had ? strdup(had) : NULL;
  if (ranks)
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", ranks, 1);
  else
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  bool crowded = rf__cores_crowded();
  if (saved)
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", saved, 1);
  else
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  free(saved);
  return crowded;
}

/* A node is crowded when its launcher's ranks outnumber the machine's
 * CPUs, or, unbound, this process's usable cores; a rank bound to a core
 * of its own (`--bind-to core`, narrower than its parent's mask) is not,
 * as long as the node's ranks fit the machine. */
static void test_crowded_nodes(void **state) {
  const char *had = getenv("MPI_LOCALNRANKS");
  if (had) { /* the other launcher's variable would answer instead */
    skip();
    return;
  }
  cpu_set_t set, parent;
  assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
  assert_int_equal(sched_getaffinity(getppid(), sizeof parent, &parent), 0);
  int usable = CPU_COUNT(&set);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  char n[32];
  assert_false(crowded_with(NULL));
  assert_false(crowded_with("1"));
  snprintf(n, sizeof n, "%ld", online + 1);
  assert_true(crowded_with(n));
  if (!CPU_EQUAL(&set, &parent) || usable < 1) return; /* bound already */
  snprintf(n, sizeof n, "%d", usable);
  assert_false(crowded_with(n));
  snprintf(n, sizeof n, "%d", usable + 1);
  /* unbound: usable + 1 ranks share usable cores */
  if (usable + 1 <= online) assert_true(crowded_with(n));
  /* bound to one CPU by "the launcher" (narrower than the parent's mask,
   * so this needs two): 2 ranks, a core each */
  if (online < 2 || usable < 2) return;
  cpu_set_t one = first_cpu_of(&set);
  assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
  bool bound2 = crowded_with("2");
  assert_int_equal(sched_setaffinity(0, sizeof set, &set), 0);
  assert_false(bound2);
}

/* Under an MPI launcher that did not bind the ranks (each has its parent's
 * mask: the whole machine, or what taskset left mpirun), the node's ranks
 * share those cores instead of each taking all of them; a rank whose mask
 * is narrower than its parent's (bound) keeps its mask. */
static void test_default_size_shares_cores_between_local_ranks(void **state) {
  cpu_set_t set, parent;
  assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
  assert_int_equal(sched_getaffinity(getppid(), sizeof parent, &parent), 0);
  int usable = CPU_COUNT(&set);
  if (usable < 2 || !CPU_EQUAL(&set, &parent)) {
    skip(); /* bound already: the mask is the share */
    return;
  }
  assert_int_equal(size_with_two_local_ranks(), usable / 2);
  /* bound to one CPU by "the launcher": narrower than the parent's */
  cpu_set_t one = first_cpu_of(&set);
  assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
  int bound = size_with_two_local_ranks();
  assert_int_equal(sched_setaffinity(0, sizeof set, &set), 0);
  assert_int_equal(bound, 1);
  /* `taskset -c <two CPUs> mpirun --bind-to none`: a parent narrowed to two
   * of the machine's CPUs, a rank with its mask: one thread each (a mask
   * narrower than the machine was taken as bound, and each rank ran two). */
  if (usable < 3) return;
  cpu_set_t two;
  CPU_ZERO(&two);
  for (int c = 0, n = 0; c < CPU_SETSIZE && n < 2; c++)
    if (CPU_ISSET(c, &set)) CPU_SET(c, &two), n++;
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (sched_setaffinity(0, sizeof two, &two) != 0) _exit(2);
    pid_t rank = fork();
    if (rank < 0) _exit(2);
    if (rank == 0) _exit(size_with_two_local_ranks() == 1 ? 0 : 1);
    int st;
    _exit(waitpid(rank, &st, 0) == rank && WIFEXITED(st) ? WEXITSTATUS(st) : 2);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_free_runs_every_queued_task(void **state) {
  for (int threads = 1; threads <= 3; threads++) {
    rf__threadpool *p;
    assert_ok(rf__threadpool_new(threads, &p));
    assert_int_equal(rf__threadpool_size(p), threads);
    atomic_int n = 0;
    for (int i = 0; i < 1000; i++)
      assert_ok(rf__threadpool_schedule(p, count_task, &n));
    rf__threadpool_free(p);
    assert_int_equal(atomic_load(&n), 1000);
  }
}

typedef struct nest {
  rf__threadpool *p;
  atomic_int count;
  int depth;
} nest;

/* Each task schedules two more until depth runs out: 2^k - 1 tasks in all,
 * all scheduled from pool threads, some while free() is already draining. */
typedef struct nest_task {
  nest *n;
  int depth;
} nest_task;

static nest_task nest_slots[1 << 10];
static atomic_int nest_next;

static void nested(void *arg) {
  nest_task *t = arg;
  atomic_fetch_add(&t->n->count, 1);
  if (t->depth == 0) return;
  for (int i = 0; i < 2; i++) {
    nest_task *c = &nest_slots[atomic_fetch_add(&nest_next, 1)];
    c->n = t->n;
    c->depth = t->depth - 1;
    assert_ok(rf__threadpool_schedule(t->n->p, nested, c));
  }
}

static void test_tasks_schedule_tasks(void **state) {
  nest n = {0};
  assert_ok(rf__threadpool_new(2, &n.p));
  atomic_store(&nest_next, 1);
  nest_slots[0] = (nest_task){&n, 8};
  assert_ok(rf__threadpool_schedule(n.p, nested, &nest_slots[0]));
  rf__threadpool_free(n.p);
  assert_int_equal(atomic_load(&n.count), (1 << 9) - 1);
}

static void test_idle_count(void **state) {
  rf__threadpool *p;
  assert_ok(rf__threadpool_new(3, &p));
  int idle = 0;
  for (int i = 0; i < 2000 && (idle = rf__threadpool_idle(p)) != 3; i++)
    sleep_ms(1);
  assert_int_equal(idle, 3);
  rf__threadpool_free(p);
}

/* parallel_for: every index visited exactly once. */
typedef struct cover {
  atomic_int *hits;
  atomic_int calls;
  pthread_t caller;
  atomic_int off_caller; /* chunks run by another thread */
} cover;

static void cover_fn(void *arg, int64_t b, int64_t e) {
  cover *c = arg;
  assert_true(b < e);
  atomic_fetch_add(&c->calls, 1);
  if (!pthread_equal(pthread_self(), c->caller))
    atomic_fetch_add(&c->off_caller, 1);
  for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
}

static int run_cover(rf__threadpool *p, int64_t n, int64_t cost, int *calls) {
  cover c = {0};
  c.hits = calloc((size_t)(n > 0 ? n : 1), sizeof(atomic_int));
  c.caller = pthread_self();
  rf__threadpool_parallel_for(p, n, cost, cover_fn, &c);
  for (int64_t i = 0; i < n; i++) assert_int_equal(atomic_load(&c.hits[i]), 1);
  free(c.hits);
  if (calls) *calls = atomic_load(&c.calls);
  return atomic_load(&c.off_caller);
}

static void test_parallel_for_covers_each_index_once(void **state) {
  uint64_t rng = rf_test_seed();
  rf__threadpool *p;
  assert_ok(rf__threadpool_new(2, &p));
  const int64_t sizes[] = {0, 1, 2, 3, 7, 1000, 4097, 100003};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    int64_t cost = 1 + (int64_t)(rf_test_rand(&rng) % 100000);
    run_cover(p, sizes[i], cost, NULL);
    run_cover(NULL, sizes[i], cost, NULL);
  }
  rf__threadpool_free(p);
}

static void test_parallel_for_small_loops_run_inline(void **state) {
  rf__threadpool *p;
  assert_ok(rf__threadpool_new(2, &p));
  int calls = 0;
  /* 100 items of 10 cycles: far below one chunk's worth. */
  assert_int_equal(run_cover(p, 100, 10, &calls), 0);
  assert_int_equal(calls, 1);
  /* Large loops are split. */
  run_cover(p, 100000, 1000, &calls);
  assert_true(calls > 1);
  /* A NULL pool always runs inline, in one call. */
  assert_int_equal(run_cover(NULL, 100000, 1000, &calls), 0);
  assert_int_equal(calls, 1);
  rf__threadpool_free(p);
}

/* A parallel_for's helper is not left to a spinner on the caller's own
 * core: that spinner runs only once the caller stops, after it has claimed
 * every chunk itself, so a sleeper (free to run on another core) is woken.
 * Every thread pinned to one core puts the spinner on the caller's; a long
 * spin keeps it spinning. */
static void note_task(void *arg) { atomic_store((atomic_int *)arg, 1); }

static void nothing_fn(void *arg, int64_t b, int64_t e) {
  atomic_fetch_add((atomic_int *)arg, (int)(e - b));
}

static void test_parallel_for_wakes_past_a_spinner_on_its_core(void **state) {
  cpu_set_t old, one;
  assert_int_equal(sched_getaffinity(0, sizeof old, &old), 0);
  int first = 0;
  while (!CPU_ISSET(first, &old)) first++;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
  rf__threadpool *p;
  assert_ok(rf__threadpool_new(2, &p)); /* its threads inherit the core */
  rf__threadpool_set_spin_ns(p, 60LL * 1000000000);
  /* One worker runs a task and then spins (60 s), the other sleeps. */
  atomic_int ran = 0;
  assert_ok(rf__threadpool_schedule(p, note_task, &ran));
  for (int i = 0; i < 2000000 && !atomic_load(&ran); i++) sched_yield();
  assert_int_equal(atomic_load(&ran), 1);
  for (int i = 0; i < 2000000 && rf__threadpool_idle(p) < 2; i++) sched_yield();
  assert_int_equal(rf__threadpool_idle(p), 2);
  int64_t before = rf__threadpool_wakeups(p);
  atomic_int items = 0;
  rf__threadpool_parallel_for(p, 2, 1000000000, nothing_fn, &items);
  int64_t woken = rf__threadpool_wakeups(p) - before;
  rf__threadpool_free(p); /* stops the spinner */
  assert_int_equal(sched_setaffinity(0, sizeof old, &old), 0);
  assert_int_equal(atomic_load(&items), 2);
  assert_int_equal(woken, 1);
}

/* A parallel_for inside tasks that occupy every worker must still finish:
 * the callers run all chunks themselves. */
typedef struct busy {
  rf__threadpool *p;
  atomic_int done;
} busy;

static void busy_task(void *arg) {
  busy *b = arg;
  int ok = 0;
  run_cover(b->p, 50000, 100000, &ok);
  atomic_fetch_add(&b->done, 1);
}

static void test_parallel_for_from_pool_threads(void **state) {
  rf__threadpool *p;
  assert_ok(rf__threadpool_new(1, &p));
  busy b = {p, 0};
  for (int i = 0; i < 4; i++)
    assert_ok(rf__threadpool_schedule(p, busy_task, &b));
  for (int i = 0; i < 20000 && atomic_load(&b.done) < 4; i++) sleep_ms(1);
  assert_int_equal(atomic_load(&b.done), 4);
  rf__threadpool_free(p);
}

/* Nested parallel_for: a chunk calls parallel_for again. */
typedef struct outer {
  rf__threadpool *p;
  atomic_llong sum;
} outer;

static void inner_fn(void *arg, int64_t b, int64_t e) {
  outer *o = arg;
  for (int64_t i = b; i < e; i++) atomic_fetch_add(&o->sum, i);
}

static void outer_fn(void *arg, int64_t b, int64_t e) {
  outer *o = arg;
  for (int64_t i = b; i < e; i++)
    rf__threadpool_parallel_for(o->p, 1000, 100, inner_fn, o);
}

static void test_nested_parallel_for(void **state) {
  outer o = {0};
  assert_ok(rf__threadpool_new(2, &o.p));
  rf__threadpool_parallel_for(o.p, 64, 1000000, outer_fn, &o);
  assert_int_equal(atomic_load(&o.sum), 64LL * (999LL * 1000 / 2));
  rf__threadpool_free(o.p);
}

/* A task that holds the only worker until released. */
typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int open, entered;
} gate;

static void gate_task(void *arg) {
  gate *g = arg;
  pthread_mutex_lock(&g->mu);
  g->entered = 1;
  pthread_cond_broadcast(&g->cv);
  while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static void test_schedule_out_of_memory(void **state) {
  rf__threadpool *p;
  assert_ok(rf__threadpool_new(1, &p));
  gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
  assert_ok(rf__threadpool_schedule(p, gate_task, &g));
  pthread_mutex_lock(&g.mu);
  while (!g.entered) pthread_cond_wait(&g.cv, &g.mu);
  pthread_mutex_unlock(&g.mu);
  /* Fill the ring (64 slots) while the worker is held, then fail growth. */
  atomic_int n = 0;
  int scheduled = 0;
  for (; scheduled < 64; scheduled++)
    assert_ok(rf__threadpool_schedule(p, count_task, &n));
  rf_debug_fail_allocation_after(1);
  assert_status(rf__threadpool_schedule(p, count_task, &n),
                RF_RESOURCE_EXHAUSTED, NULL);
  rf_debug_fail_allocation_after(0);
  assert_ok(rf__threadpool_schedule(p, count_task, &n)); /* grows now */
  scheduled++;
  pthread_mutex_lock(&g.mu);
  g.open = 1;
  pthread_cond_broadcast(&g.cv);
  pthread_mutex_unlock(&g.mu);
  rf__threadpool_free(p);
  assert_int_equal(atomic_load(&n), scheduled);
}

static void test_new_out_of_memory_leaks_nothing(void **state) {
  int64_t live = rf_debug_live_allocations();
  for (int k = 1;; k++) {
    rf__threadpool *p = NULL;
    rf_debug_fail_allocation_after(k);
    rf_status *st = rf__threadpool_new(2, &p);
    rf_debug_fail_allocation_after(0);
    if (!st) {
      rf__threadpool_free(p);
      assert_int_equal(rf_debug_live_allocations(), live);
      break;
    }
    assert_status(st, RF_RESOURCE_EXHAUSTED, NULL);
    assert_null(p);
    assert_int_equal(rf_debug_live_allocations(), live);
    assert_true(k < 10);
  }
}

int main(void) {
  rf_test_seed();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_new_errors),
      cmocka_unit_test(test_default_size_follows_affinity),
      cmocka_unit_test(test_default_size_shares_cores_between_local_ranks),
      cmocka_unit_test(test_crowded_nodes),
      cmocka_unit_test(test_free_runs_every_queued_task),
      cmocka_unit_test(test_tasks_schedule_tasks),
      cmocka_unit_test(test_idle_count),
      cmocka_unit_test(test_parallel_for_covers_each_index_once),
      cmocka_unit_test(test_parallel_for_small_loops_run_inline),
      cmocka_unit_test(test_parallel_for_wakes_past_a_spinner_on_its_core),
      cmocka_unit_test(test_parallel_for_from_pool_threads),
      cmocka_unit_test(test_nested_parallel_for),
      cmocka_unit_test(test_schedule_out_of_memory),
      cmocka_unit_test(test_new_out_of_memory_leaks_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
