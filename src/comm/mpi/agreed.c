/* comm/mpi/agreed.c - collectives agreed once, run many times. The first
 * time a collective runs, its READY asks task 0 to keep it agreed (NEW);
 * when every task asked, GO says so and every member, at that GO's place in
 * the GO order, duplicates the set's communicator for this collective alone
 * (MPI_Comm_dup). From then on each op of that name skips READY/GO: the
 * entry's ops run one after another, in this process's order of arrival, as
 * a check then the data, both on the entry's communicator:
 *
 *   check: MPI_Iallreduce(MAX) of {digest, -digest, job step, -job step,
 *          changed} - the digest of this task's descriptor (collective,
 *          dtype, reduction, device type, devices, shape), the job step,
 *          and whether the descriptor differs from the one agreed here;
 *   pass (every digest and step equal, nothing changed): the data go at
 *          once, with the agreed root and shape;
 *   same step, something differs: this op goes to task 0 as before (READY
 *          with UPDATE), which names the field that differs or, when every
 *          task changed alike (a new batch size), answers GO UPDATE: the
 *          entry keeps the new descriptor;
 *   steps differ (a task skipped a step, failed, or timed out): every
 *          member sees the same result, so every member retires the entry
 *          at the same check; its ops go to task 0 and are agreed anew.
 *
 * Order: a communicator of its own per collective, so collectives of
 * different names never meet on one communicator and may start in any
 * order; ops of one name go in order, check and data, and every process
 * issues the checks of a name in the same sequence (one per op), so checks
 * always pair; a check pairing two different job steps fails and retires.
 * Whether an entry exists is decided by GO and by check results, which
 * every task sees alike: an op arriving while an earlier op of its name
 * waits for a NEW verdict waits with it (concurrent steps of a session).
 *
 * A check that does not finish: the others are asked (PING) before the
 * timeout, and at the timeout the op fails naming the tasks that have not
 * reached the collective or did not answer; the op stays queued (MPI owns
 * its check) and its name's later ops wait behind it until it pairs.
 * GPU collectives are never kept: their checks say "changed" and they
 * always go through task 0.
 *
 * A task whose step failed before its collective tells the members of its
 * agreed collectives (FAILED, STEP_FAILED): there is no coordinator to
 * fail the others' checks, so each fails its own ops of that step at once,
 * as at the timeout (the check still pairs later, the steps differ, and it
 * is agreed anew).
 *
 * Blocking data (MPI's blocking calls, ringflow's ring: algorithm.c) run
 * on a thread of the entry's own, on a second communicator of its own
 * (dcomm), never on the session's data thread: there, two names whose
 * checks pass at about the same time can be handed over in opposite
 * orders by two processes (each sees its checks complete in its own
 * order), and each thread then waits in the call the other process has
 * not started (test_mpi_agreed_blocking hangs so within a few steps). Why
 * this cannot deadlock: an entry's k-th data call waits only for the k-th
 * data call of that name in the other members; each member issues it on
 * the name's own thread once its k-th check passed (so every member has
 * reached op k) and its (k-1)-th data call returned, and the checks of a
 * name pair in the same sequence everywhere; no other name's call and no
 * engine call stands in front of it (the engine only hands it over), so by
 * induction on k every call completes once every member reached it. The
 * communicators are made only at a GO, in GO order (one order for the
 * whole job), never at a check. Such data do not go with their check (a
 * blocking call cannot wait beside it): a failed check issues no data
 * anywhere, which every member decides alike
 * from the entry's `blocking`, not from its own op. */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi/mpi_status.h"
#include "comm/mpi/op.h"
#include "core/log.h"
#include "core/format.h"
#include "core/mem.h"
#include "core/status.h"

#define PROBE_MS 1000 /* the probe ends at the timeout, at most this early */
#define TOLD_MIN_NS 10000000000LL /* a told failure is kept at least 10 s */

/* A failure another task told this one: its job step (and collective, for
 * FAILED) failed there before its check was issued. */
struct rf__mpi_told {
  int64_t job_step, forget_ns;
  int task;
  rf_code code;
  char *name; /* FAILED: the collective; STEP_FAILED: NULL, all of them */
  char *text;
  rf__mpi_told *next;
};

enum { PENDING, ACTIVE };

struct rf__mpi_agreed {
  char *name;
  int state;
  MPI_Comm comm;
  atomic_bool comm_failed; /* set by the engine or the direct path */
  rf__mpi_msg desc;        /* this task's descriptor when agreed */
  char *devices;
  int nmembers, *tasks; /* its tasks (sorted): whom a failure here concerns */
  int root_index, root_rank;
  rf_shape root_shape;
  int nset, *counts; /* the agreed set: participants per task */
  int64_t digest;
  rf__mpi_op *head, *tail; /* its ops, in arrival order */
  /* The agreed descriptor's data run by blocking calls (op->blocking):
   * on `thread`, on dcomm (MPI_COMM_NULL until made at a GO). */
  bool blocking;
  MPI_Comm dcomm;
  rf__mpi_data_thread *thread;
  rf__mpi_agreed *next; /* the retired list */
  UT_hash_handle hh;
  /* The direct path (below), under direct_mu: how many ops are queued here
   * (the engine's), and whether a thread of the executor runs one. */
  int queued;
  atomic_bool taken;
};

/* Guards what the direct path reads from the engine's side: the job's
 * table of entries (the engine adds and removes under it; its own reads
 * need none), an entry's descriptor, state, queue length and `taken`. */
static pthread_mutex_t direct_mu = PTHREAD_MUTEX_INITIALIZER;

/* Data issued while their check was still running (tests). */
static atomic_llong with_check;
int64_t rf__mpi_agreed_with_check(void) { return atomic_load(&with_check); }

bool rf__mpi_agree_once(void) {
  static int on = -1;
  if (on < 0) {
    on = rf__mpi_env_flag("RF_MPI_AGREE_ONCE") != 0; /* bad: on, and an
                                                          error (algorithm.c) */
  }
  return on;
}

static uint64_t fnv(uint64_t x, const void *p, size_t n) {
  for (const unsigned char *c = p; n--; c++) x = (x ^ *c) * 1099511628211ULL;
  return x;
}

/* The fields every task must agree on (coordinator.c's agree()). */
static int64_t digest(const rf__mpi_msg *d, const char *devices) {
  int32_t f[7] = {d->kind,        d->dtype,        d->reduction, d->device_type,
                  d->num_devices, d->algo_setting, d->root_at};
  uint64_t x = fnv(14695981039346656037ULL, f, sizeof f);
  x = fnv(x, devices, strlen(devices));
  if (d->has_input) {
    x = fnv(x, &d->rank, sizeof d->rank);
    x = fnv(x, d->dims, sizeof d->dims[0] * (size_t)d->rank);
  }
  return (int64_t)(x >> 2); /* its negation fits */
}

static bool same(const rf__mpi_msg *a, const rf__mpi_msg *b) {
  if (a->kind != b->kind || a->dtype != b->dtype ||
      a->reduction != b->reduction || a->device_type != b->device_type ||
      a->num_devices != b->num_devices || a->local_count != b->local_count ||
      a->local_roots != b->local_roots || a->local_root != b->local_root ||
      a->has_input != b->has_input || a->rank != b->rank ||
      a->algo_setting != b->algo_setting || a->root_at != b->root_at)
    return false;
  for (int i = 0; i < a->rank && i < RF_MAX_RANK; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

static bool keepable(const rf__mpi_op *op) { return !op->gpu; }

static rf__mpi_agreed *find(rf__job *j, const char *name) {
  rf__mpi_agreed *a = NULL;
  HASH_FIND_STR(j->agreed, name, a);
  return a;
}

static void entry_free(rf__mpi_agreed *a) {
  if (!rf__mpi_data_thread_free(&a->thread) && a->dcomm != MPI_COMM_NULL)
    MPI_Comm_free(&a->dcomm); /* kept while its thread is stuck in it */
  rf__free(a->counts);
  rf__free(a->name);
  rf__free(a->devices);
  rf__free(a->tasks);
  rf__free(a);
}

static void enqueue(rf__mpi_agreed *a, rf__mpi_op *op) {
  op->agreed = a;
  op->agreed_next = NULL;
  pthread_mutex_lock(&direct_mu);
  if (a->tail)
    a->tail->agreed_next = op;
  else
    a->head = op;
  a->tail = op;
  a->queued++;
  pthread_mutex_unlock(&direct_mu);
}

/* uncount: the op leaves the count of queued ops too (else the caller
 * does it once it has issued what it issues on a's communicator). */
static rf__mpi_op *dequeue_op(rf__mpi_agreed *a, bool uncount) {
  pthread_mutex_lock(&direct_mu);
  rf__mpi_op *op = a->head;
  a->head = op->agreed_next;
  if (!a->head) a->tail = NULL;
  if (uncount) a->queued--;
  pthread_mutex_unlock(&direct_mu);
  op->agreed_next = NULL;
  op->agreed = NULL;
  return op;
}

static rf__mpi_op *dequeue(rf__mpi_agreed *a) { return dequeue_op(a, true); }

static void route(rf__job *j, rf__mpi_op *op, int64_t now) {
  if (!rf__mpi_agreed_take(j, op, now)) rf__mpi_member_send_ready(j, op);
}

/* The entry leaves the table; its queued ops go to task 0 (in order: the
 * first may ask for a new entry, the others then wait on it). Ops of a
 * job step before `stale` (a check paired them with a later step: some
 * task is past them) go without asking, so later steps need not wait for
 * their verdict. */
static void unlist(rf__job *j, rf__mpi_agreed *a, int64_t now, int64_t stale) {
  pthread_mutex_lock(&direct_mu);
  HASH_DEL(j->agreed, a);
  rf__mpi_op *ops = a->head;
  a->head = a->tail = NULL;
  a->queued = 0;
  pthread_mutex_unlock(&direct_mu);
  if (a->state == ACTIVE) {
    a->next = j->retired;
    j->retired = a;
  } else {
    entry_free(a);
  }
  while (ops) {
    rf__mpi_op *op = ops;
    ops = op->agreed_next;
    op->agreed = NULL;
    op->agreed_next = NULL;
    if (op->job_step < stale) {
      op->agree = RF_AGREE_NO;
      op->fresh = NULL;
      rf__mpi_member_send_ready(j, op);
    } else {
      route(j, op, now);
    }
  }
}

bool rf__mpi_agreed_take(rf__job *j, rf__mpi_op *op, int64_t now) {
  op->agree = RF_AGREE_NO;
  op->fresh = NULL;
  rf__mpi_agreed *a = find(j, op->name);
  if (a) {
    op->state = RF_OP_QUEUED;
    op->arrived_ns = now;
    op->deadline_ns = 0;
    enqueue(a, op);
    rf__mpi_engine_wake();
    return true;
  }
  if (!rf__mpi_agree_once() || !keepable(op)) return false;
  /* Ask to keep it: the entry waits for the verdict (no memory: not kept). */
  a = rf__calloc(1, sizeof *a);
  if (a) {
    a->name = rf__strdup(op->name);
    a->devices = rf__strdup(op->devices);
    a->tasks = rf__malloc(sizeof *a->tasks * (size_t)(op->nset ? op->nset : 1));
    if (a->tasks)
      memcpy(a->tasks, op->tasks, sizeof *a->tasks * (size_t)op->nset);
    a->nmembers = op->nset;
    a->comm = MPI_COMM_NULL;
    a->dcomm = MPI_COMM_NULL;
    a->state = PENDING; /* before the direct path can find it */
  }
  bool made = a && a->name && a->devices && a->tasks;
  int rf__hash_oom = 0;
  pthread_mutex_lock(&direct_mu);
  if (made) HASH_ADD_KEYPTR(hh, j->agreed, a->name, strlen(a->name), a);
  pthread_mutex_unlock(&direct_mu);
  if (!made || rf__hash_oom) {
    if (a) entry_free(a);
    return false;
  }
  op->fresh = a;
  op->agree = RF_AGREE_NEW;
  return false;
}

static void keep_descriptor(rf__mpi_agreed *a, const rf__mpi_op *op) {
  /* No memory: a changed descriptor cannot make the stand-in (its task
   * fails the op; the others time out, named). */
  int *counts = rf__malloc(sizeof *counts * (size_t)op->nset);
  if (counts) memcpy(counts, op->counts, sizeof *counts * (size_t)op->nset);
  rf__free(a->counts);
  a->counts = counts;
  a->nset = op->nset;
  pthread_mutex_lock(&direct_mu);
  rf__mpi_member_describe(op, &a->desc);
  a->root_index = op->root_index;
  a->root_rank = op->root_rank;
  a->root_shape = op->root_shape;
  a->digest = digest(&a->desc, a->devices);
  a->blocking = op->blocking;
  pthread_mutex_unlock(&direct_mu);
}

static void fail_comm(rf__mpi_agreed *a) {
  pthread_mutex_lock(&direct_mu);
  a->comm_failed = true;
  pthread_mutex_unlock(&direct_mu);
}

void rf__mpi_agreed_verdict(rf__job *j, rf__mpi_op *op, bool go, int agree) {
  rf__mpi_agreed *a = op->fresh;
  if (a && go && agree == RF_AGREE_NEW) {
    keep_descriptor(a, op); /* made when op is issued, in GO order */
    return;
  }
  if (a) { /* not kept: the ops waiting on it go to task 0 */
    op->fresh = NULL;
    unlist(j, a, rf__mpi_now_ns(), INT64_MIN);
    return;
  }
  a = find(j, op->name);
  if (go && agree == RF_AGREE_UPDATE && a && a->state == ACTIVE) {
    keep_descriptor(a, op); /* every task changed alike */
    op->dup_data = op->blocking && a->dcomm == MPI_COMM_NULL;
  }
}

/* The communicator of a's blocking data, from set_comm at op's GO (every
 * member is there now); false when MPI could not make it. */
static bool dup_data(rf__mpi_agreed *a, MPI_Comm set_comm) {
  if (MPI_Comm_dup(set_comm, &a->dcomm) != MPI_SUCCESS) {
    a->dcomm = MPI_COMM_NULL;
    return false;
  }
  MPI_Comm_set_errhandler(a->dcomm, MPI_ERRORS_RETURN);
  return true;
}

void rf__mpi_agreed_issued(rf__job *j, rf__mpi_op *op, MPI_Comm set_comm,
                           const rf_status *st) {
  rf__mpi_agreed *a = op->fresh;
  if (!a && op->dup_data && !st) { /* kept an UPDATE: its data's comm */
    op->dup_data = false;
    a = find(j, op->name);
    /* Not made: the others' data time out, named. */
    if (a && a->state == ACTIVE && a->dcomm == MPI_COMM_NULL &&
        !dup_data(a, set_comm))
      fail_comm(a);
    return;
  }
  if (!a || st) return; /* a failed issue: rf__mpi_agreed_verdict */
  op->fresh = NULL;
  /* Blocking, like sets.c's MPI_Comm_create_group: every member is at this
   * GO now. (MPI_Comm_idup, several pending on one communicator beside
   * nonblocking collectives, broke OpenMPI 4.1's schedules: MPI_ERR_TRUNCATE
   * in the reference matrix.) */
  if (MPI_Comm_dup(set_comm, &a->comm) != MPI_SUCCESS) {
    a->comm = MPI_COMM_NULL; /* the others' checks time out, named */
    unlist(j, a, rf__mpi_now_ns(), INT64_MIN);
    return;
  }
  MPI_Comm_set_errhandler(a->comm, MPI_ERRORS_RETURN);
  /* Shared memory: the collective's own segment, sized for it (a later
   * descriptor runs in it whatever its size, or MPI's call where it has
   * none: alike everywhere). */
  rf__mpi_shm *shm = NULL;
  if (op->algo == RF_MPI_SHM &&
      rf__mpi_shm_of(a->comm, rf__mpi_algorithm_bytes(op), j->crowded, &shm) !=
          MPI_SUCCESS) {
    MPI_Comm_free(&a->comm); /* the others' checks time out, named */
    unlist(j, a, rf__mpi_now_ns(), INT64_MIN);
    return;
  }
  if (op->blocking && !dup_data(a, set_comm)) {
    MPI_Comm_free(&a->comm); /* the others' checks time out, named */
    unlist(j, a, rf__mpi_now_ns(), INT64_MIN);
    return;
  }
  pthread_mutex_lock(&direct_mu);
  a->state = ACTIVE;
  pthread_mutex_unlock(&direct_mu);
}

/* ---- failures told by other tasks ---- */

void rf__mpi_agreed_told(rf__job *j, const rf__mpi_msg_view *v, int64_t now) {
  const rf__mpi_msg *h = v->h;
  if (h->task == j->task || !rf__mpi_agree_once()) return;
  /* Timed out there waiting for some task: it may be dead (task 0 too, so
   * no ABORT says so), and this task's exit must not wait for it. */
  if (h->code == RF_DEADLINE_EXCEEDED) rf__mpi_peer_suspect(j, now);
  rf__mpi_told *f = rf__calloc(1, sizeof *f);
  if (!f) return; /* no memory: the ops time out, naming the task */
  f->text = rf__strdup(v->text);
  f->name = h->type == RF_MSG_FAILED ? rf__strdup(v->name) : NULL;
  if (!f->text || (h->type == RF_MSG_FAILED && !f->name)) {
    rf__free(f->text);
    rf__free(f->name);
    rf__free(f);
    return;
  }
  f->job_step = h->job_step;
  f->task = h->task;
  f->code = (rf_code)h->code;
  int64_t keep = 2 * j->timeout_ms * 1000000;
  f->forget_ns = now + (keep > TOLD_MIN_NS ? keep : TOLD_MIN_NS);
  f->next = j->told;
  j->told = f;
}

static bool has_task(const int *tasks, int n, int t) {
  for (int i = 0; i < n; i++)
    if (tasks[i] == t) return true;
  return false;
}

/* Whether a's members were told of a failure of job_step already, by one
 * of them (which told every member of its agreed collectives). */
static bool covered(const rf__job *j, const rf__mpi_agreed *a,
                    int64_t job_step) {
  for (const rf__mpi_told *f = j->told; f; f = f->next)
    if (f->job_step == job_step && has_task(a->tasks, a->nmembers, f->task) &&
        (!f->name || strcmp(f->name, a->name) == 0))
      return true;
  return false;
}

void rf__mpi_agreed_tell(rf__job *j, const rf__mpi_msg *h, const char *name,
                         const char *text) {
  if (!rf__mpi_agree_once()) return;
  unsigned char *to = rf__calloc((size_t)j->ntasks, 1);
  for (int t = 0; !to && t < j->ntasks; t++) /* no memory: tell every task */
    if (t != 0 && t != j->task) rf__mpi_send_msg(j, t, h, name, NULL, text);
  if (!to) return;
  rf__mpi_agreed *a, *tmp;
  HASH_ITER(hh, j->agreed, a, tmp) {
    if ((name && strcmp(name, a->name)) || covered(j, a, h->job_step)) continue;
    for (int i = 0; i < a->nmembers; i++)
      if (a->tasks[i] >= 0 && a->tasks[i] < j->ntasks) to[a->tasks[i]] = 1;
  }
  for (int t = 1; t < j->ntasks; t++) /* task 0: the caller */
    if (to[t] && t != j->task) rf__mpi_send_msg(j, t, h, name, NULL, text);
  rf__free(to);
}

static void told_free(rf__mpi_told *f) {
  rf__free(f->name);
  rf__free(f->text);
  rf__free(f);
}

/* Fails op (unreported, not past its check) when a task of its set told
 * that op's step, or op itself, failed there: its check cannot pair in
 * this step. MPI's side is unchanged: the check is (or will be) issued and
 * pairs with that task's next one (the steps differ: agreed anew). */
static void told_check(rf__job *j, rf__mpi_op *op) {
  if (!j->told || atomic_load(&op->reported)) return;
  for (rf__mpi_told *f = j->told; f; f = f->next) {
    if (f->job_step != op->job_step || (f->name && strcmp(f->name, op->name)))
      continue;
    bool in_set = false;
    for (int i = 0; i < op->nset && !in_set; i++)
      in_set = op->tasks[i] == f->task;
    if (!in_set) continue;
    char msg[RF_MPI_TEXT_MAX];
    char *name = rf__format("%s", op->name); /* capped as quoted names are */
    if (f->name)
      snprintf(msg, sizeof msg,
               "collective '%s' (job step %lld) failed on task %d: %s",
               name ? name : "?", (long long)op->job_step, f->task, f->text);
    else
      snprintf(msg, sizeof msg,
               "collective '%s' (job step %lld): task %d failed that step: %s",
               name ? name : "?", (long long)op->job_step, f->task, f->text);
    rf__free(name);
    rf__mpi_member_report(op, rf__status_text(f->code, msg));
    return;
  }
}

static void told_forget(rf__job *j, int64_t now) {
  for (rf__mpi_told **p = &j->told; *p;) {
    rf__mpi_told *f = *p;
    if (now < f->forget_ns) {
      p = &f->next;
      continue;
    }
    *p = f->next;
    told_free(f);
  }
}

/* ---- the check ---- */

/* op's check on comm, into op->check_q: through comm's shared-memory
 * segment when it has one every process may use (made at the GO that
 * kept the entry, for its data: alike everywhere, so every process checks
 * the same way), else MPI's nonblocking all-reduce. The segment's check
 * takes three flag waits and no message; libnbc's takes MPI's round trips
 * (most of a 1 KiB collective's time between two processes). */
static rf_status *check_issue(rf__mpi_op *op, MPI_Comm comm) {
  rf__mpi_reqs_clear(&op->check_q);
  rf__mpi_shm *s = rf__mpi_shm_for_checks(comm);
  if (s) {
    rf__mpi_shm_start_max(&op->check_q.shm, s, op->check, op->checked, 5);
    return NULL;
  }
  return rf__mpi_nbc_iallreduce(op->check, op->checked, 5, MPI_INT64_T, MPI_MAX,
                                comm, rf__mpi_reqs_one(&op->check_q));
}

static void check_start(rf__job *j, rf__mpi_agreed *a, rf__mpi_op *op,
                        int64_t now) {
  rf__mpi_msg d;
  rf__mpi_member_describe(op, &d);
  bool changed = !keepable(op) || op->blocking != a->blocking ||
                 !same(&d, &a->desc) || strcmp(op->devices, a->devices);
  int64_t x = digest(&d, op->devices);
  op->check[0] = x;
  op->check[1] = -x;
  op->check[2] = op->job_step;
  op->check[3] = -op->job_step;
  op->check[4] = changed;
  op->state = RF_OP_CHECK;
  int64_t t = op->timeout_ms, early = t / 2 < PROBE_MS ? t / 2 : PROBE_MS;
  op->deadline_ns = op->arrived_ns + (t - early) * 1000000;
  if (op->deadline_ns < now) op->deadline_ns = now;
  rf_status *st = check_issue(op, a->comm);
  if (st) { /* this task cannot take part: its check is the others' timeout */
    rf__mpi_reqs_clear(&op->check_q);
    op->state = RF_OP_QUEUED;
    op->deadline_ns = 0;
    fail_comm(a);
    rf__mpi_member_report(op, st);
    (void)j;
  }
}

/* "task 1 (/task:1/cpu:0, /task:1/cpu:1)" of op's tasks whose answer is
 * (want: 1) or is not (want: 0) "it has reached the collective". */
static int list_tasks(const rf__mpi_op *op, int want, char *buf, size_t len) {
  size_t used = 0;
  int count = 0;
  buf[0] = '\0';
  for (int i = 0; i < op->nset && used < len; i++) {
    if ((op->answered[i] == 1) != (want == 1)) continue;
    count += op->counts[i];
    char prefix[32];
    int pl = snprintf(prefix, sizeof prefix, "/task:%d/", op->tasks[i]);
    used += (size_t)snprintf(buf + used, len - used, "%stask %d (",
                             used ? ", " : "", op->tasks[i]);
    bool first = true;
    for (const char *c = op->devices; *c && used < len;) {
      size_t k = strcspn(c, ",");
      if (k > (size_t)pl && strncmp(c, prefix, (size_t)pl) == 0) {
        used += (size_t)snprintf(buf + used, len - used, "%s%.*s",
                                 first ? "" : ", ", (int)k, c);
        first = false;
      }
      c += k + (c[k] == ',');
    }
    if (used < len) used += (size_t)snprintf(buf + used, len - used, ")");
  }
  return count;
}

/* The text of a check that did not finish (op probed): the tasks that
 * have not reached the collective or did not answer, or, when every task
 * has reached it, that MPI did not complete the check (never "waiting for
 * : 0 of N participants missing"). */
static void late_text(const rf__mpi_op *op, const char *name, char *buf,
                      size_t len) {
  char missing[2048], present[2048], silent[512], alive[512], left[512];
  char tail[1900] = "";
  size_t used = 0, used_alive = 0, used_left = 0;
  silent[0] = alive[0] = left[0] = '\0';
  int absent = 0, all = 0;
  for (int i = 0; i < op->nset; i++) all += op->counts[i];
  if (!op->answered) { /* no memory to ask: no names */
    snprintf(buf, len,
             "collective '%s' (job step %lld): timed out after %lld ms in "
             "its check; which of the %d participants are missing is "
             "unknown (no memory to ask the other tasks)",
             name, (long long)op->job_step, (long long)op->timeout_ms, all);
    return;
  }
  absent = list_tasks(op, 0, missing, sizeof missing);
  list_tasks(op, 1, present, sizeof present);
  for (int i = 0; i < op->nset; i++) {
    /* 0: no answer (left: task 0 knows it freed its session); 2:
     * answered that it has not reached the collective */
    bool gone = !op->answered[i] && rf__mpi_peer_left(op->job, op->tasks[i]);
    if (gone && used_left < sizeof left)
      used_left +=
          (size_t)snprintf(left + used_left, sizeof left - used_left,
                           "%stask %d", used_left ? ", " : "", op->tasks[i]);
    if (!op->answered[i] && !gone && used < sizeof silent)
      used += (size_t)snprintf(silent + used, sizeof silent - used, "%stask %d",
                               used ? ", " : "", op->tasks[i]);
    if (op->answered[i] == 2 && used_alive < sizeof alive)
      used_alive +=
          (size_t)snprintf(alive + used_alive, sizeof alive - used_alive,
                           "%stask %d", used_alive ? ", " : "", op->tasks[i]);
  }
  rf__mpi_probe_text(silent, alive, left, op->job && op->job->task == 0, tail,
                     sizeof tail); /* as task 0's */
  if (absent == 0) {
    snprintf(buf, len,
             "collective '%s' (job step %lld): timed out after %lld ms: all "
             "%d participants reached it (%s) but its check did not "
             "finish: MPI is stuck",
             name, (long long)op->job_step, (long long)op->timeout_ms, all,
             present);
    return;
  }
  snprintf(buf, len,
           "collective '%s' (job step %lld): timed out after %lld ms waiting "
           "for %s: %d of %d participants missing; arrived: %s%s",
           name, (long long)op->job_step, (long long)op->timeout_ms, missing,
           absent, all, present[0] ? present : "none", tail);
}

void rf__mpi_agreed_late_text(const rf__mpi_op *op, char *buf, size_t len) {
  char *name = rf__format("%s", op->name); /* capped as quoted names are */
  late_text(op, name ? name : "?", buf, len);
  rf__free(name);
}

/* The check did not finish: probe before the timeout, name at it. */
static void check_late(rf__job *j, rf__mpi_op *op, int64_t now) {
  if (!op->probe_ns) {
    rf__mpi_member_probe(j, op, now);
    op->deadline_ns = op->arrived_ns + op->timeout_ms * 1000000;
    if (op->deadline_ns <= now) op->deadline_ns = op->probe_ns;
    return;
  }
  op->deadline_ns = 0; /* reported once; the op waits for its check */
  rf__mpi_peer_suspect(j, now);
  char msg[RF_MPI_TEXT_MAX];
  rf__mpi_agreed_late_text(op, msg, sizeof msg);
  rf__mpi_member_report(
      op, rf__log_status(RF_LOG_WARN, NULL,
                         rf__status_text(RF_DEADLINE_EXCEEDED, msg)));
}

/* The data of a passed op, on the entry's communicator. */
static void issue_data(rf__job *j, rf__mpi_agreed *a, rf__mpi_op *op,
                       int64_t now) {
  op->root_index = a->root_index;
  op->root_rank = a->root_rank;
  op->root_shape = a->root_shape;
  /* Blocking: on the entry's own thread and communicator, so that no
   * other collective's call waits behind it (see the top). */
  rf_status *st = op->blocking
                      ? rf__mpi_data_thread_hand(&a->thread, op, a->dcomm)
                      : rf__mpi_op_issue(op, a->comm);
  if (st) { /* the others wait in their data: they time out, named */
    fail_comm(a);
    rf__mpi_member_report(op, st);
    rf__mpi_member_drop(j, op);
    return;
  }
  op->fast = true;
  op->state = RF_OP_IN_FLIGHT;
  op->deadline_ns = now + op->timeout_ms * 1000000;
  op->issued_ns = now;
  op->bytes = rf__mpi_op_bytes(op);
  j->fast_in_flight++;
}

/* The data with the check, before its verdict (one round instead of
 * two): op's own when its descriptor is the agreed one, once computed;
 * when it changed, the agreed call from scratch (the others' data go with
 * their checks and must pair), thrown away. Every process thus issues one
 * data call per check, passed or not. False when it could not be issued
 * (reported: the others time out, named). */
static bool spec_issue(rf__mpi_agreed *a, rf__mpi_op *op, int64_t now) {
  rf_status *st;
  if (op->check[4]) {
    st = a->counts ? rf__mpi_op_issue_standin(op, &a->desc, a->nset, a->counts,
                                              a->root_index, &a->root_shape,
                                              a->comm, &op->standin, &op->req)
                   : rf__oom();
  } else {
    if (!atomic_load(&op->prepared)) return true; /* being computed */
    op->root_index = a->root_index;
    op->root_rank = a->root_rank;
    op->root_shape = a->root_shape;
    st = rf__mpi_op_issue(op, a->comm);
  }
  if (st) {
    rf__free(op->standin);
    op->standin = NULL;
    fail_comm(a);
    rf__mpi_member_report(op, st);
    return false;
  }
  op->spec = true;
  op->issued_ns = now;
  if (rf__mpi_reqs_pending(&op->check_q)) atomic_fetch_add(&with_check, 1);
  return true;
}

/* Why op, queued behind the head, could not start: the head's check did
 * not finish. When the head was probed and reported (check_late), the
 * tasks it named (missing, dead or stopped) are named again, as the first
 * failure named them: after a process died every later step waits here. */
static rf_status *late_queued_error(const rf__mpi_agreed *a,
                                    const rf__mpi_op *op) {
  int64_t ms = op->timeout_ms + rf__mpi_member_grace_ms();
  const rf__mpi_op *first = a->head;
  bool named = !atomic_load(&a->taken) && first && first != op &&
               first->state == RF_OP_CHECK && first->probe_ns &&
               first->answered && !first->deadline_ns;
  char *head = rf__format(
      "collective '%s' (job step %lld): could not start within %lld ms: an "
      "earlier step's collective of that name has not finished",
      op->name, (long long)op->job_step, (long long)ms);
  if (!named || !head) {
    rf_status *st =
        head ? rf__status_text(RF_DEADLINE_EXCEEDED, head) : rf__oom();
    rf__free(head);
    return st;
  }
  /* the head's own message, carried whole (its name capped in it) */
  char why[RF_MPI_TEXT_MAX], msg[RF_MPI_TEXT_MAX + 512];
  rf__mpi_agreed_late_text(first, why, sizeof why);
  snprintf(msg, sizeof msg, "%s: %s", head, why);
  rf__free(head);
  return rf__status_text(RF_DEADLINE_EXCEEDED, msg);
}

/* Ops waiting behind the head (or behind a verdict): bounded like the GO
 * queue, reported once and kept in order. */
static void late_queued(rf__job *j, rf__mpi_agreed *a, int64_t now,
                        bool *waiting) {
  for (rf__mpi_op *op = a->head; op; op = op->agreed_next) {
    if (op->state == RF_OP_CHECK || op->state == RF_OP_DRAIN) continue;
    *waiting = true;
    if (op->state == RF_OP_QUEUED) told_check(j, op);
    int64_t limit =
        op->arrived_ns + (op->timeout_ms + rf__mpi_member_grace_ms()) * 1000000;
    if (now >= limit && !atomic_load(&op->reported))
      rf__mpi_member_report(
          op, rf__log_status(RF_LOG_WARN, NULL, late_queued_error(a, op)));
  }
}

/* Runs a's queue as far as it goes; 1 when a left the table. */
static int run_entry(rf__job *j, rf__mpi_agreed *a, int64_t now, int *progress,
                     bool *busy, bool *waiting) {
  /* A thread of the executor runs one of a's ops: the queue waits for it
   * to finish or hand its op back (rf__mpi_agreed_resume). */
  if (atomic_load(&a->taken)) {
    late_queued(j, a, now, waiting);
    *waiting = true;
    return 0;
  }
  while (a->head && !a->comm_failed) {
    rf__mpi_op *op = a->head;
    if (op->state == RF_OP_QUEUED) {
      check_start(j, a, op, now);
      (*progress)++;
      if (op->state != RF_OP_CHECK) break;
    }
    if (op->state == RF_OP_CHECK) {
      if (!op->spec && !a->blocking && !spec_issue(a, op, now)) break;
      int done = 0;
      rf_status *st = RF_MPI_STATUS(rf__mpi_reqs_test(&op->check_q, &done));
      if (st) {
        fail_comm(a);
        rf__mpi_member_report(op, st);
        break;
      }
      if (!done) {
        /* Not busy: the others may still be computing their part, and a
         * spinning engine takes their cores (4 processes on 2 cores: 1.5-3x
         * slower training); like a wait for GO, it spins 2 ms, then backs
         * off. */
        *waiting = true;
        told_check(j, op);
        if (op->deadline_ns && now >= op->deadline_ns) check_late(j, op, now);
        break;
      }
      const int64_t *c = op->checked;
      if (c[2] == -c[3] && c[0] == -c[1] && !c[4]) {
        op->state = RF_OP_PASSED;
      } else if (!op->spec && a->blocking) { /* no data went anywhere */
        op->state = RF_OP_DRAIN;             /* op->req is none: done at once */
        op->deadline_ns = now + op->timeout_ms * 1000000;
      } else if (!op->spec) { /* its data first: the others issued theirs */
        *waiting = true;
        break;
      } else {
        op->state = RF_OP_DRAIN;
        op->deadline_ns = now + op->timeout_ms * 1000000;
      }
      (*progress)++;
    }
    if (op->state == RF_OP_DRAIN) { /* a failed check's data, thrown away */
      int done = 0;
      rf_status *st = RF_MPI_STATUS(rf__mpi_reqs_test(&op->req, &done));
      if (st) {
        fail_comm(a);
        rf__mpi_member_report(op, st);
        break;
      }
      if (!done) {
        *busy = true; /* every task reached it: MPI moves them */
        if (op->deadline_ns && now >= op->deadline_ns) {
          op->deadline_ns = 0; /* reported once; MPI owns the buffers */
          rf__mpi_peer_suspect(j, now);
          rf__mpi_member_report(
              op, rf__log_status(
                      RF_LOG_WARN, NULL,
                      rf__error(RF_DEADLINE_EXCEEDED,
                                "collective '%s' (job step %lld): the MPI "
                                "collective did not finish within %lld ms "
                                "(its check failed; a process may have died)",
                                op->name, (long long)op->job_step,
                                (long long)op->timeout_ms)));
        }
        break;
      }
      rf__free(op->standin);
      op->standin = NULL;
      op->spec = false;
      (*progress)++;
      const int64_t *c = op->checked;
      if (c[2] != -c[3]) { /* steps differ: every member retires it */
        unlist(j, a, now, c[2]);
        return 1;
      }
      /* a descriptor differs: task 0 */
      dequeue(a);
      op->agree = keepable(op) ? RF_AGREE_UPDATE : RF_AGREE_NO;
      rf__mpi_member_send_ready(j, op);
      continue;
    }
    if (op->spec) { /* passed: its data, issued with the check, go on */
      dequeue_op(a, false);
      op->spec = false;
      op->fast = true;
      op->state = RF_OP_IN_FLIGHT;
      op->deadline_ns = now + op->timeout_ms * 1000000;
      op->bytes = rf__mpi_op_bytes(op);
      j->fast_in_flight++;
    } else {
      /* its data being computed, or their communicator made at a GO
       * still to come (a kept UPDATE) */
      if (!atomic_load(&op->prepared) ||
          (op->blocking && a->dcomm == MPI_COMM_NULL)) {
        *waiting = true;
        break;
      }
      /* Counted as queued until its data is issued: the direct path must
       * not issue the next check on a's communicator before this data. */
      dequeue_op(a, false);
      issue_data(j, a, op, now);
    }
    pthread_mutex_lock(&direct_mu);
    a->queued--;
    pthread_mutex_unlock(&direct_mu);
    (*progress)++;
  }
  if (a->comm_failed && a->head) { /* this task can run none of them */
    unlist(j, a, now, INT64_MIN);
    return 1;
  }
  late_queued(j, a, now, waiting);
  return 0;
}

static bool enlist(rf__job *j, rf__mpi_op *op);
static void settle(rf__job *j, rf__mpi_op *op);

int rf__mpi_agreed_poll(rf__job *j, int64_t now, bool *busy, bool *waiting) {
  int progress = 0;
  told_forget(j, now);
  for (rf__mpi_op **p = &j->unlisted; *p;) { /* handed back without memory */
    rf__mpi_op *op = *p;
    if (!enlist(j, op)) {
      *waiting = true;
      p = &op->go_next;
      continue;
    }
    *p = op->go_next;
    op->go_next = NULL;
    settle(j, op);
    progress++;
  }
  rf__mpi_agreed *a, *tmp;
  HASH_ITER(hh, j->agreed, a, tmp) {
    if (a->state == PENDING) {
      late_queued(j, a, now, waiting);
      continue;
    }
    if (a->head) run_entry(j, a, now, &progress, busy, waiting);
  }
  return progress;
}

static void entry_release(rf__mpi_agreed *a) {
  /* An unfinished check (or its data) keeps the communicator (MPI owns
   * it). */
  bool stuck = false;
  for (rf__mpi_op *op = a->head; op; op = op->agreed_next)
    if (op->state == RF_OP_CHECK || op->state == RF_OP_DRAIN) stuck = true;
  if (!stuck && a->comm != MPI_COMM_NULL) MPI_Comm_free(&a->comm);
  entry_free(a);
}

void rf__mpi_agreed_free(rf__job *j) {
  rf__mpi_agreed *a, *tmp;
  HASH_ITER(hh, j->agreed, a, tmp) {
    pthread_mutex_lock(&direct_mu);
    HASH_DEL(j->agreed, a);
    pthread_mutex_unlock(&direct_mu);
    entry_release(a);
  }
  while (j->retired) {
    a = j->retired;
    j->retired = a->next;
    entry_release(a);
  }
  while (j->told) {
    rf__mpi_told *f = j->told;
    j->told = f->next;
    told_free(f);
  }
  while (j->unlisted) { /* never tracked: freed unless MPI still owns them */
    rf__mpi_op *op = j->unlisted;
    j->unlisted = op->go_next;
    int checked = 1, moved = 1;
    if (rf__mpi_reqs_pending(&op->check_q))
      rf__mpi_reqs_test(&op->check_q, &checked);
    if (rf__mpi_reqs_pending(&op->req)) rf__mpi_reqs_test(&op->req, &moved);
    if (checked && moved) rf__mpi_member_release(op);
  }
}

/* ---- the direct path ----
 *
 * In the steady state the thread that completed this process's group (the
 * executor's) runs the op itself when MPI gives MPI_THREAD_MULTIPLE: it
 * issues the check, computes this task's part while the check travels,
 * issues the data, and tests both until done, then calls the dones - no
 * hand-off to the engine and back (two thread wake-ups, most of a small
 * collective's time on a loaded machine). It takes an entry only when the
 * engine holds none of its ops (nothing queued) and this task's descriptor
 * is the agreed one, and marks it taken: the engine runs none of its ops
 * meanwhile, so the entry's communicator still sees check, data, check,
 * data in one order. Its all-reduces, like the engine's, go through
 * rf__mpi_nbc_iallreduce: issued while the engine had libnbc's ring chosen
 * for a large one, they took the ring here only (MPI_ERR_TRUNCATE). On
 * unless RF_MPI_DIRECT=0. It tests each for DIRECT_SPIN_NS (large data longer);
 * a check that fails, or anything that does not finish by then (a peer still
 * computing, stopped or dead), goes to the engine as it stands
 * (rf__mpi_agreed_resume), which times out, probes and names tasks exactly as
 * for its own ops. */

/* How long the direct path tests a check or data before it hands them
 * over. Short: the thread is the executor's, which would otherwise run the
 * step's other kernels meanwhile (training: the backward pass of earlier
 * layers overlaps the gradients' all-reduces); spinning 2 ms there cut
 * training across processes to a third (docs/PERFORMANCE.md). */
#define DIRECT_SPIN_NS 50000LL
/* The largest collective (its whole vector) the direct path takes. Up to
 * 64 KiB its hand-offs are most of a collective's time; from 256 KiB to
 * 4 MiB they still cost broadcasts and all-gathers 5-40% against MPI's own
 * call (measured on a 16-core host, docs/PERFORMANCE.md, session 22).
 * RF_MPI_DIRECT_MAX_BYTES overrides it (rf__mpi_direct_max_bytes). */
#define DIRECT_MAX_BYTES (4LL << 20)
/* Data over SMALL_BYTES that run direct are tested DIRECT_SPIN_NS plus
 * this many ns a byte over it (0.25: 4 GB/s, slower than shared memory
 * moves them) before they are handed over. */
#define SMALL_BYTES 65536
#define DIRECT_SPIN_NS_PER_BYTE 0.25

/* RF_MPI_DIRECT_MAX_BYTES once read: -1 not yet, -2 invalid. */
static atomic_llong direct_max = -1;

int64_t rf__mpi_direct_max_bytes(void) {
  long long m = atomic_load(&direct_max);
  if (m == -1) {
    const char *env = getenv("RF_MPI_DIRECT_MAX_BYTES");
    char *end = NULL;
    errno = 0;
    m = env && *env ? strtoll(env, &end, 10) : DIRECT_MAX_BYTES;
    /* digits only: strtoll also takes leading spaces and a sign */
    if (env && *env &&
        (!isdigit((unsigned char)env[0]) || *end || m < 0 || errno == ERANGE))
      m = -2;
    atomic_store(&direct_max, m);
  }
  return m;
}

void rf__mpi_direct_max_force(int64_t bytes) {
  atomic_store(&direct_max, bytes < 0 ? -1 : bytes);
}

static atomic_int direct_env = -1; /* -1: RF_MPI_DIRECT, not read yet */
static atomic_llong direct_taken, direct_back; /* tests */

int64_t rf__mpi_direct_taken(void) { return atomic_load(&direct_taken); }
void rf__mpi_direct_force(int on) {
  atomic_store(&direct_env, on < 0 ? -1 : on);
}
int64_t rf__mpi_direct_handed_back(void) { return atomic_load(&direct_back); }

/* On unless RF_MPI_DIRECT=0 (in every process) or a test turns it off. */
static bool direct_enabled(void) {
  int on = atomic_load(&direct_env);
  if (on < 0) {
    on = rf__mpi_env_flag("RF_MPI_DIRECT") != 0; /* bad: on, and an error */
    atomic_store(&direct_env, on);
  }
  return on && rf__mpi_thread_multiple() && rf__mpi_agree_once();
}

/* Tests q (an op's check or data: MPI's requests or a shared-memory
 * exchange), advancing `also`'s exchange beside it, until it completes
 * (1), fails (-1) or
 * `until` passes (0). A test that took over MOVED_NS moved data (MPI_Test
 * progresses every request: a large message's copy runs inside it; an
 * exchange copies inside it) or lost the core: its time does not count as
 * waiting, up to `cap` in all. No sched_yield: on a loaded machine one
 * yield can give the core away for a whole scheduler slice, far longer
 * than the spin. */
#define MOVED_NS 5000
static int spin(rf__mpi_reqs *q, rf__mpi_reqs *also, int64_t until, int64_t cap,
                rf_status **st) {
  int64_t t = rf__mpi_now_ns();
  for (;;) {
    int done = 0;
    /* the check's wait: the data go with it, and a shared-memory exchange
     * moves only when tested (MPI's own requests move in any MPI call) */
    int moved = 0;
    if (also && also->shm.active) (void)rf__mpi_reqs_test(also, &moved);
    *st = RF_MPI_STATUS(rf__mpi_reqs_test(q, &done));
    if (*st) return -1;
    if (done) return 1;
    int64_t now = rf__mpi_now_ns();
    if (now - t > MOVED_NS)
      until = until + (now - t) < cap ? until + (now - t) : cap;
    t = now;
    if (now >= until) return 0;
  }
}

/* Gives op (checking or in flight) to the engine, which finds the entry
 * still taken and lets it go once op is back at the head of its queue. */
static void hand_back(rf__mpi_op *op, rf__mpi_agreed *a, rf__mpi_cmd *c) {
  op->direct = a;
  atomic_fetch_add(&direct_back, 1);
  rf__mpi_engine_submit(c);
}

/* The entry taken for op, or NULL. */
static rf__mpi_agreed *take_direct(rf__job *j, const rf__mpi_op *op,
                                   rf__mpi_msg *desc, int64_t *dig,
                                   MPI_Comm *comm, int *root_index,
                                   int *root_rank, rf_shape *root_shape) {
  rf__mpi_msg d;
  rf__mpi_member_describe(op, &d);
  pthread_mutex_lock(&direct_mu);
  rf__mpi_agreed *a = NULL;
  HASH_FIND_STR(j->agreed, op->name, a);
  if (a && (a->state != ACTIVE || atomic_load(&a->comm_failed) ||
            atomic_load(&a->taken) || a->queued > 0 || a->blocking ||
            !same(&d, &a->desc) || strcmp(op->devices, a->devices)))
    a = NULL;
  if (a) {
    atomic_store(&a->taken, true);
    *desc = d;
    *dig = a->digest;
    *comm = a->comm;
    *root_index = a->root_index;
    *root_rank = a->root_rank;
    *root_shape = a->root_shape;
  }
  pthread_mutex_unlock(&direct_mu);
  return a;
}

static void give_up(rf__mpi_agreed *a) {
  pthread_mutex_lock(&direct_mu);
  bool wake = a->queued > 0;
  atomic_store(&a->taken, false);
  pthread_mutex_unlock(&direct_mu);
  if (wake) rf__mpi_engine_wake();
}

bool rf__mpi_agreed_direct(rf__job *j, rf__mpi_op *op, rf__mpi_cmd *c) {
  if (op->gpu || op->blocking || !direct_enabled() ||
      rf__mpi_algorithm_bytes(op) > rf__mpi_direct_max_bytes())
    return false;
  rf__mpi_msg desc;
  int64_t dig;
  MPI_Comm comm;
  int root_index, root_rank;
  rf_shape root_shape;
  rf__mpi_agreed *a = take_direct(j, op, &desc, &dig, &comm, &root_index,
                                  &root_rank, &root_shape);
  if (!a) return false;
  atomic_fetch_add(&direct_taken, 1);
  int64_t now = rf__mpi_now_ns();
  op->arrived_ns = now;
  op->check[0] = digest(&desc, op->devices);
  op->check[1] = -op->check[0];
  op->check[2] = op->job_step;
  op->check[3] = -op->job_step;
  op->check[4] = op->check[0] != dig; /* 0: take_direct compared them */
  int64_t t = op->timeout_ms, early = t / 2 < PROBE_MS ? t / 2 : PROBE_MS;
  op->deadline_ns = now + (t - early) * 1000000;
  rf_status *st = check_issue(op, comm);
  rf__mpi_op_prepare(op); /* while the check travels */
  atomic_store(&op->prepared, 1);
  /* The data go with the check: one round, not two. checking: the check
   * runs but the data could not go. */
  bool checking = false;
  if (!st) {
    op->root_index = root_index;
    op->root_rank = root_rank;
    op->root_shape = root_shape;
    st = rf__mpi_op_issue(op, comm);
    checking = st != NULL;
    op->spec = !st;
    op->issued_ns = rf__mpi_now_ns();
    if (!st) atomic_fetch_add(&with_check, 1);
  }
  /* The check's 50 us count from here, not from `now`, and not while MPI
   * moves data: issuing a large message can copy it (MPI_Ibcast of 1 MiB
   * did on the receiver, 85 us of a 2-process step on the 2-core VM), and
   * so can any test of the check; counted, such checks went to the engine
   * (4 thread switches a step). At most the data's own allowance. */
  int64_t big = rf__mpi_algorithm_bytes(op) - SMALL_BYTES;
  int64_t data_spin =
      DIRECT_SPIN_NS +
      (big > 0 ? (int64_t)((double)big * DIRECT_SPIN_NS_PER_BYTE) : 0);
  int64_t from = rf__mpi_now_ns();
  int r = st ? -1
             : spin(&op->check_q, &op->req, from + DIRECT_SPIN_NS,
                    from + data_spin, &st);
  if (r == 1) {
    const int64_t *k = op->checked;
    if (k[2] != -k[3] || k[0] != -k[1] || k[4]) r = 0; /* the engine says */
  }
  if (r == 0) { /* pending, or failed: the engine goes on with it */
    op->state = RF_OP_CHECK;
    hand_back(op, a, c);
    return true;
  }
  /* This task cannot take part: the others time out, named. */
  if (st) {
    if (checking) { /* MPI writes op->checked until the check completes */
      rf_status *cst = NULL;
      int64_t end = rf__mpi_now_ns() + op->timeout_ms * 1000000;
      int w = spin(&op->check_q, NULL, end, end, &cst);
      rf_status_free(cst);
      if (w != 1) atomic_fetch_add(&op->refs, 1); /* kept: MPI owns it */
    }
    rf__mpi_reqs_clear(&op->check_q);
    fail_comm(a);
    give_up(a);
    rf__mpi_member_report_here(op, st);
    atomic_fetch_sub(&op->refs, 1); /* the engine's: never submitted */
    rf__free(c);
    return true;
  }
  op->bytes = rf__mpi_op_bytes(op); /* the whole vector (a root has no out) */
  op->spec = false;
  op->fast = true;
  int64_t end = rf__mpi_now_ns() + data_spin;
  r = spin(&op->req, NULL, end, end, &st);
  if (r == 0) {
    op->state = RF_OP_IN_FLIGHT;
    op->deadline_ns = op->issued_ns + op->timeout_ms * 1000000;
    hand_back(op, a, c);
    return true;
  }
  give_up(a);
  rf__mpi_member_report_here(op, st); /* NULL: the results */
  atomic_fetch_sub(&op->refs, 1);     /* the engine's: never submitted */
  rf__free(c);
  return true;
}

bool rf__mpi_step_cancelled(rf__job *j, int64_t step_id) {
  bool cancelled = false;
  pthread_mutex_lock(&j->mu);
  for (int i = 0; i < j->num_steps; i++)
    if (j->steps[i].step == step_id) cancelled = j->steps[i].cancelled;
  pthread_mutex_unlock(&j->mu);
  return cancelled;
}

/* Adds op to the job's ops (what the engine tests, probes and cancels). */
static bool enlist(rf__job *j, rf__mpi_op *op) {
  int rf__hash_oom = 0;
  HASH_ADD_KEYPTR(hh, j->ops, op->key, strlen(op->key), op);
  return !rf__hash_oom;
}

/* op is the engine's now: first in its queue again, or in flight; its
 * entry is no longer taken. */
static void settle(rf__job *j, rf__mpi_op *op) {
  rf__mpi_agreed *a = op->direct;
  op->direct = NULL;
  if (op->state == RF_OP_IN_FLIGHT) {
    j->fast_in_flight++;
  } else { /* its check */
    op->agreed = a;
    pthread_mutex_lock(&direct_mu);
    op->agreed_next = a->head;
    a->head = op;
    if (!a->tail) a->tail = op;
    a->queued++;
    pthread_mutex_unlock(&direct_mu);
  }
  pthread_mutex_lock(&direct_mu);
  atomic_store(&a->taken, false);
  pthread_mutex_unlock(&direct_mu);
  rf__mpi_engine_wake();
}

void rf__mpi_agreed_resume(rf__job *j, rf__mpi_op *op) {
  if (rf__mpi_step_cancelled(j, op->step_id))
    rf__mpi_member_report(
        op, rf__error(RF_CANCELLED,
                      "collective '%s' (job step %lld): the step was "
                      "cancelled",
                      op->name, (long long)op->job_step));
  if (enlist(j, op)) {
    settle(j, op);
    return;
  }
  /* No memory to track it: it fails, and waits (its entry still taken, so
   * its name's order holds) until the poll can add it; MPI owns it. */
  rf__mpi_member_report(op, rf__oom());
  op->go_next = j->unlisted;
  j->unlisted = op;
}
