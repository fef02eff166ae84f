/* tests/test_mpi_go_queue.c - collectives across processes that task 0 has
 * agreed (GO) but that wait to be issued behind one that does not finish
 * (comm/mpi/member.c, RF_OP_GO): white-box, in one process, on the engine's
 * own functions with a job made here and the clock passed in. No run of the
 * public API gets there on purpose: every process issues its GOs in the one
 * order task 0 gave, so an agreed op only waits long behind a collective
 * that another process never issued or never finished, because it died,
 * left or stalled between receiving the GO and its MPI call, a moment no
 * API call can choose (its engine issues in the same turn that received the
 * GO; a process that fails its step still issues what it agreed to).
 *  - a blocking reduce on the data thread never returns: at its timeout
 *    the other tasks are probed for 1 s, then it fails with
 *    DEADLINE_EXCEEDED, and the two collectives agreed behind it
 *    fail with FAILED_PRECONDITION naming it and saying to make the
 *    sessions again; a collective that comes afterwards fails the same way
 *    at once; nothing is issued meanwhile; every done fires exactly once;
 *    when the reduce finally returns and the job is freed, every allocation
 *    is released;
 *  - the op at the head of the queue never has its data ready: it and the
 *    op behind it fail with DEADLINE_EXCEEDED at the timeout plus the grace
 *    (2 s), not before.
 * Needs no MPI calls: nothing here is issued. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/mpi/op.h"
#include "core/mem.h"
#include "ringflow/debug.h"
#include "testutil.h"

#define MS 1000000LL

/* What the dones saw, per participant. */
typedef struct seen {
  int calls;
  rf_code code;
  char msg[512];
} seen;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int total_calls;

static void done(void *arg, rf_status *st, rf_tensor *out) {
  seen *s = arg;
  pthread_mutex_lock(&mu);
  s->calls++;
  s->code = rf_status_code(st);
  snprintf(s->msg, sizeof s->msg, "%s", rf_status_message(st));
  total_calls++;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  rf_status_free(st);
  rf_tensor_release(out);
}

/* Waits until the dones fired n times in all (they run on the pool, once
 * an op is marked reported); 60 s without them is a hang. */
static void wait_calls(int n) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 60;
  pthread_mutex_lock(&mu);
  int rc = 0;
  while (total_calls < n && rc == 0)
    rc = pthread_cond_timedwait(&cv, &mu, &until);
  int got = total_calls;
  pthread_mutex_unlock(&mu);
  if (got < n) fail_msg("%d of %d dones fired", got, n);
}

static bool reported(rf__mpi_op *op) { return atomic_load(&op->reported); }

static int calls(void) {
  pthread_mutex_lock(&mu);
  int n = total_calls;
  pthread_mutex_unlock(&mu);
  return n;
}

static rf__job *job_new(int64_t timeout_ms) {
  rf__job *j = rf__calloc(1, sizeof *j);
  assert_non_null(j);
  assert_ok(rf__threadpool_new(2, &j->pool));
  j->task = 0;
  j->ntasks = 2;
  j->timeout_ms = timeout_ms;
  return j;
}

static void job_free(rf__job *j) {
  rf__mpi_member_free(j);
  rf__threadpool_free(j->pool); /* runs the reports still queued */
  rf_status_free(j->broken);
  rf__free(j);
}

/* An all-reduce (or a blocking reduce) of this task's 2 participants over
 * both tasks, as the preparing thread hands it to the engine: one ref (the
 * engine's), not yet in the job's table. */
static rf__mpi_op *op_new(rf__job *j, const char *name, int64_t job_step,
                          bool blocking, seen *s) {
  rf__mpi_op *op = rf__calloc(1, sizeof *op);
  assert_non_null(op);
  char key[128];
  snprintf(key, sizeof key, "%s\x1f%lld", name, (long long)job_step);
  op->key = rf__strdup(key);
  op->name = rf__strdup(name);
  op->devices =
      rf__strdup("/task:0/cpu:0,/task:0/cpu:1,/task:1/cpu:0,/task:1/cpu:1");
  op->parts = rf__calloc(2, sizeof *op->parts);
  assert_true(op->key && op->name && op->devices && op->parts);
  for (int i = 0; i < 2; i++)
    op->parts[i] = (rf__coll_participant){.done = done, .arg = &s[i]};
  op->g =
      (rf__coll_group){.kind = blocking ? RF_COLL_REDUCE : RF_COLL_ALL_REDUCE,
                       .n = 2,
                       .root = -1,
                       .p = op->parts,
                       .key = op->name,
                       .timeout_ms = j->timeout_ms};
  op->job = j;
  op->job_step = job_step;
  op->timeout_ms = j->timeout_ms;
  op->num_devices = 4;
  op->blocking = blocking;
  op->root_index = -1;
  atomic_init(&op->refs, 1);
  atomic_init(&op->prepared, 1);
  return op;
}

/* What rf__mpi_member_ready does before sending READY to task 0. */
static void wait_verdict(rf__job *j, rf__mpi_op *op) {
  int rf__hash_oom = 0;
  HASH_ADD_KEYPTR(hh, j->ops, op->key, strlen(op->key), op);
  assert_int_equal(rf__hash_oom, 0);
  op->state = RF_OP_WAIT_VERDICT;
}

/* Task 0's GO for op, as the engine receives it. */
static void go(rf__job *j, const rf__mpi_op *op) {
  rf__mpi_msg h = {.type = RF_MSG_GO, .job_step = op->job_step};
  rf__mpi_msg_view v = {.h = &h, .name = op->name, .devices = "", .text = ""};
  rf__mpi_member_verdict(j, &v, rf__mpi_now_ns());
}

static void poll_job(rf__job *j, int64_t now, bool *busy, bool *waiting) {
  *busy = *waiting = false;
  rf__mpi_member_poll(j, now, busy, waiting);
}

static void check_broken(const seen *s) {
  assert_int_equal(s->calls, 1);
  assert_int_equal(s->code, RF_FAILED_PRECONDITION);
  assert_string_equal(s->msg,
                      "an earlier collective across processes ('big_reduce', "
                      "job step 7) did not finish; this session cannot run "
                      "collectives across processes any more: make the "
                      "sessions again in every process");
}

static void test_behind_a_reduce_that_never_returns(void **state) {
  rf_default_allocator_trim();
  int64_t live = rf_debug_live_allocations();
  total_calls = 0;
  rf__job *j = job_new(1000);
  seen sb[2] = {0}, s1[2] = {0}, s2[2] = {0}, s3[2] = {0};
  /* The blocking reduce, on the data thread since t0. */
  int64_t t0 = rf__mpi_now_ns();
  rf__mpi_op *b = op_new(j, "big_reduce", 7, true, sb);
  wait_verdict(j, b);
  b->state = RF_OP_IN_FLIGHT;
  b->deadline_ns = t0 + 1000 * MS;
  j->blocking = b;
  j->in_flight = 1;
  /* Two all-reduces of the next job step, agreed meanwhile. */
  rf__mpi_op *q1 = op_new(j, "ar1", 8, false, s1);
  rf__mpi_op *q2 = op_new(j, "ar2", 8, false, s2);
  wait_verdict(j, q1);
  wait_verdict(j, q2);
  go(j, q1);
  go(j, q2);
  assert_int_equal(q1->state, RF_OP_GO);
  assert_true(j->go_head == q1 && q1->go_next == q2 && j->go_tail == q2);
  /* Up to the reduce's timeout: nothing issued, nothing reported; the
   * engine waits for the data thread rather than spinning. */
  bool busy, waiting;
  poll_job(j, t0, &busy, &waiting);
  poll_job(j, t0 + 999 * MS, &busy, &waiting);
  assert_false(busy);
  assert_true(waiting);
  assert_true(j->go_head == q1 && q1->state == RF_OP_GO);
  assert_false(reported(b) || reported(q1) || reported(q2));
  assert_int_equal(calls(), 0);
  /* Its timeout: the other tasks are asked whether they are there (this
   * op names none: nobody is asked), for 1 s; then it fails, the job is
   * broken, so do the two behind it (within two polls: the table's order
   * decides which comes first). */
  poll_job(j, t0 + 1000 * MS, &busy, &waiting);
  assert_null(j->broken);
  assert_false(reported(b));
  poll_job(j, t0 + 2000 * MS, &busy, &waiting);
  assert_non_null(j->broken);
  poll_job(j, t0 + 2000 * MS, &busy, &waiting);
  assert_true(reported(b) && reported(q1) && reported(q2));
  wait_calls(6);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(sb[i].calls, 1);
    assert_int_equal(sb[i].code, RF_DEADLINE_EXCEEDED);
    assert_string_equal(sb[i].msg,
                        "collective 'big_reduce' (job step 7): the MPI "
                        "collective did not finish within 1000 ms (a process "
                        "may have died)");
    check_broken(&s1[i]);
    check_broken(&s2[i]);
  }
  /* Nothing starts on a broken job, and a new collective fails at once. */
  assert_true(j->go_head == q1 && q1->state == RF_OP_GO);
  rf__mpi_op *q3 = op_new(j, "ar3", 9, false, s3);
  rf__mpi_member_ready(j, q3);
  wait_calls(8);
  check_broken(&s3[0]);
  check_broken(&s3[1]);
  /* Much later the reduce returns after all (MPI gave up on it): it leaves
   * the job without a second report; freeing the job frees the rest. */
  atomic_store(&b->async_done, 1);
  poll_job(j, t0 + 60000 * MS, &busy, &waiting);
  assert_null(j->blocking);
  assert_int_equal(j->in_flight, 0);
  assert_int_equal(HASH_COUNT(j->ops), 2);
  job_free(j);
  assert_int_equal(calls(), 8);
  assert_int_equal(sb[0].calls + s1[0].calls + s2[0].calls + s3[0].calls, 4);
  rf_default_allocator_trim();
  assert_int_equal(rf_debug_live_allocations(), live);
}

static void test_head_never_prepared(void **state) {
  rf_default_allocator_trim();
  int64_t live = rf_debug_live_allocations();
  total_calls = 0;
  rf__job *j = job_new(1000);
  seen sh[2] = {0}, sq[2] = {0};
  rf__mpi_op *h = op_new(j, "head", 3, false, sh);
  rf__mpi_op *q = op_new(j, "behind", 3, false, sq);
  atomic_store(&h->prepared, 0);
  wait_verdict(j, h);
  wait_verdict(j, q);
  int64_t t0 = rf__mpi_now_ns();
  go(j, h);
  go(j, q);
  /* GO's deadline: the timeout plus the grace (2 s). */
  int64_t end = h->deadline_ns;
  assert_true(end >= t0 + 3000 * MS && q->deadline_ns >= end);
  bool busy, waiting;
  poll_job(j, end - 1, &busy, &waiting);
  assert_false(busy);
  assert_true(waiting);
  assert_false(reported(h) || reported(q));
  poll_job(j, q->deadline_ns, &busy, &waiting);
  assert_true(reported(h) && reported(q));
  wait_calls(4);
  assert_int_equal(sh[0].code, RF_DEADLINE_EXCEEDED);
  assert_int_equal(sq[1].calls, 1);
  assert_int_equal(sq[1].code, RF_DEADLINE_EXCEEDED);
  assert_string_equal(sq[1].msg,
                      "collective 'behind' (job step 3): could not start "
                      "within 3000 ms: an earlier collective across "
                      "processes has not finished");
  assert_null(j->broken); /* nothing was issued: MPI is still consistent */
  job_free(j);
  assert_int_equal(calls(), 4);
  rf_default_allocator_trim();
  assert_int_equal(rf_debug_live_allocations(), live);
}

/* A check of an agreed collective that does not finish (agreed.c): the
 * text names the tasks that have not reached it; when every task has, it
 * says so and never "waiting for : 0 of 4 participants missing". */
static void test_late_check_text(void **state) {
  (void)state;
  int tasks[2] = {0, 1}, counts[2] = {2, 2};
  unsigned char answered[2] = {1, 1};
  rf__mpi_op op = {.name = "grads",
                   .job_step = 7,
                   .timeout_ms = 1000,
                   .nset = 2,
                   .tasks = tasks,
                   .counts = counts,
                   .answered = answered,
                   .devices =
                       "/task:0/cpu:0,/task:0/cpu:1,/task:1/cpu:0,"
                       "/task:1/cpu:1"};
  char buf[4096];
  rf__mpi_agreed_late_text(&op, buf, sizeof buf);
  assert_null(strstr(buf, "waiting for :"));
  assert_null(strstr(buf, "0 of 4"));
  assert_non_null(strstr(buf, "collective 'grads' (job step 7)"));
  assert_non_null(strstr(buf,
                         "all 4 participants reached it (task 0 "
                         "(/task:0/cpu:0, /task:0/cpu:1), task 1 "
                         "(/task:1/cpu:0, /task:1/cpu:1))"));
  answered[1] = 0; /* task 1 silent */
  rf__mpi_agreed_late_text(&op, buf, sizeof buf);
  assert_non_null(strstr(buf,
                         "waiting for task 1 (/task:1/cpu:0, "
                         "/task:1/cpu:1): 2 of 4 participants missing; "
                         "arrived: task 0 (/task:0/cpu:0, /task:0/cpu:1)"));
  assert_non_null(strstr(buf, "task 1 did not answer"));
  op.answered = NULL; /* no memory to ask */
  rf__mpi_agreed_late_text(&op, buf, sizeof buf);
  assert_null(strstr(buf, "0 of 4"));
  assert_non_null(strstr(buf,
                         "which of the 4 participants are missing is "
                         "unknown"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_behind_a_reduce_that_never_returns),
      cmocka_unit_test(test_head_never_prepared),
      cmocka_unit_test(test_late_check_text),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
