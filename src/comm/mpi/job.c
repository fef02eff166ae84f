/* comm/mpi/job.c - comm/job.h over MPI: a session's job (two duplicates of
 * the job's communicator: ctl for control messages, data for collectives;
 * both return errors instead of aborting), attaching and detaching on the
 * engine thread without blocking it (nonblocking duplicates and exchange,
 * polled against the session's collective timeout), and the calls other
 * threads make, which only queue commands. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/mpi/engine.h"
#include "comm/mpi/mpi_status.h"
#include "comm/mpi/op.h"
#include "core/cores.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/status.h"

/* ---- any thread ---- */

bool rf__job_launched(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
                                     "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    if (getenv(vars[i])) return true;
  int init = 0; /* callable from any thread, before and after MPI_Init */
  MPI_Initialized(&init);
  return init != 0;
}

rf_status *rf__job_world(int *task, int *num_tasks) {
  return rf__mpi_engine_start(task, num_tasks);
}

static void job_free(rf__job *j) {
  rf__free(j->ncpu);
  rf__free(j->ngpu);
  rf__free(j->recv_buf);
  rf__free(j->peers);
  rf__free(j->steps);
  rf_status_free(j->broken);
  pthread_mutex_destroy(&j->mu);
  rf__free(j);
}

rf_status *rf__job_attach(const void *mpi_comm, int num_cpu, int num_gpu,
                          int64_t timeout_ms, rf__threadpool *pool,
                          rf__job **out) {
  int rank, size;
  RF_CHECK(rf__mpi_engine_start(&rank, &size));
  rf__job *j = rf__calloc(1, sizeof *j);
  RF_CHECK_ALLOC(j);
  pthread_mutex_init(&j->mu, NULL);
  j->pool = pool;
  j->timeout_ms = timeout_ms;
  j->ctl = j->data = MPI_COMM_NULL;
  rf__mpi_cmd c = {
      .kind = RF_CMD_ATTACH,
      .job = j,
      .parent = mpi_comm ? *(const MPI_Comm *)mpi_comm : MPI_COMM_WORLD,
      .ncpu = num_cpu,
      .ngpu = num_gpu};
  rf_status *st = rf__mpi_engine_call(&c);
  if (st) {
    job_free(j);
    return st;
  }
  *out = j;
  return NULL;
}

void rf__job_detach(rf__job *j) {
  if (!j) return;
  rf__mpi_cmd c = {.kind = RF_CMD_DETACH, .job = j};
  rf_status_free(rf__mpi_engine_call(&c));
  job_free(j);
}

int rf__job_task(const rf__job *j) { return j->task; }
int rf__job_num_tasks(const rf__job *j) { return j->ntasks; }

void rf__job_devices(const rf__job *j, int t, int *num_cpu, int *num_gpu) {
  *num_cpu = t >= 0 && t < j->ntasks ? j->ncpu[t] : 0;
  *num_gpu = t >= 0 && t < j->ntasks ? j->ngpu[t] : 0;
}

/* Queues a notification; dropped when memory runs out (the other tasks
 * then wait for their timeout instead of failing at once). */
static void notify(rf__job *j, rf__mpi_cmd_kind kind, const char *name,
                   int64_t step_id, int64_t job_step, const rf_status *why) {
  rf__mpi_cmd *c = rf__calloc(1, sizeof *c);
  if (!c) return;
  c->kind = kind;
  c->job = j;
  c->step_id = step_id;
  c->job_step = job_step;
  c->code = why ? rf_status_code(why) : RF_CANCELLED;
  c->text = rf__strdup(why ? rf_status_message(why) : "the step was cancelled");
  c->name = name ? rf__strdup(name) : NULL;
  if (!c->text || (name && !c->name)) {
    rf__free(c->text);
    rf__free(c->name);
    rf__free(c);
    return;
  }
  rf__mpi_engine_submit(c);
}

void rf__job_coll_failed(rf__job *j, const char *shared_name, int64_t job_step,
                         const rf_status *why) {
  notify(j, RF_CMD_FAILED, shared_name, -1, job_step, why);
}

void rf__job_step_failed(rf__job *j, int64_t job_step, const rf_status *why) {
  notify(j, RF_CMD_STEP_FAILED, NULL, -1, job_step, why);
}

void rf__job_settle(rf__job *j) {
  rf__mpi_cmd c = {.kind = RF_CMD_SETTLE, .job = j};
  rf_status_free(rf__mpi_engine_call(&c));
}

/* A step that could not be recorded (no memory) is counted instead: its
 * cancellation could not reach the other processes, so its collectives
 * fail at once instead (rf__mpi_job_step_recorded), which tells them. */
void rf__job_begin_step(rf__job *j, int64_t step_id, int64_t job_step) {
  atomic_fetch_add(&j->active_steps, 1);
  rf__mpi_engine_nudge(); /* from its long sleep only */
  pthread_mutex_lock(&j->mu);
  if (rf__grow(&j->steps, &j->cap_steps, j->num_steps + 1, sizeof *j->steps) ==
      0) {
    j->steps[j->num_steps].step = step_id;
    j->steps[j->num_steps].job_step = job_step;
    j->steps[j->num_steps].cancelled = false;
    j->num_steps++;
  } else {
    j->unrecorded_steps++;
  }
  pthread_mutex_unlock(&j->mu);
}

void rf__job_end_step(rf__job *j, int64_t step_id) {
  atomic_fetch_sub(&j->active_steps, 1);
  pthread_mutex_lock(&j->mu);
  int i = 0;
  while (i < j->num_steps && j->steps[i].step != step_id) i++;
  if (i < j->num_steps)
    j->steps[i] = j->steps[--j->num_steps];
  else if (j->unrecorded_steps > 0)
    j->unrecorded_steps--;
  pthread_mutex_unlock(&j->mu);
}

bool rf__mpi_job_step_recorded(rf__job *j, int64_t step_id) {
  pthread_mutex_lock(&j->mu);
  bool found = j->unrecorded_steps == 0;
  for (int i = 0; !found && i < j->num_steps; i++)
    found = j->steps[i].step == step_id;
  pthread_mutex_unlock(&j->mu);
  return found;
}

void rf__job_cancel_step(rf__job *j, int64_t step_id, const rf_status *why) {
  int64_t job_step = -1;
  pthread_mutex_lock(&j->mu);
  for (int i = 0; i < j->num_steps; i++)
    if (j->steps[i].step == step_id) {
      job_step = j->steps[i].job_step;
      j->steps[i].cancelled = true; /* for ops on the direct path */
    }
  pthread_mutex_unlock(&j->mu);
  if (job_step >= 0)
    notify(j, RF_CMD_CANCEL_STEP, NULL, step_id, job_step, why);
}

/* ---- the engine thread ---- */

/* The next session's epoch in this process (engine thread only). */
static int next_epoch = 1;

/* What each process tells the others when a session attaches: its CPU
 * and GPU device counts, its next epoch, whether its node is crowded
 * (core/cores.h) and which machine it runs on (two halves of a hash of
 * its kernel's boot id, else of its host name). */
enum { A_CPU, A_GPU, A_EPOCH, A_CROWDED, A_HOST_LO, A_HOST_HI, A_INTS };

/* This machine, as a 64-bit hash: processes with the same one run on one
 * kernel (so may share memory). */
static uint64_t host_id(void) {
  char buf[256] = {0};
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f || !fgets(buf, sizeof buf, f)) {
    if (gethostname(buf, sizeof buf - 1) != 0) buf[0] = 0;
  }
  if (f) fclose(f);
  uint64_t x = 14695981039346656037ULL;
  for (const unsigned char *c = (const unsigned char *)buf; *c; c++)
    x = (x ^ *c) * 1099511628211ULL;
  return x;
}

/* Attaching, apart from the job: the duplicates MPI writes when they
 * complete, then the exchange of what each process tells (A_*). */
typedef struct rf__mpi_attach {
  MPI_Comm parent, ctl, data;
  MPI_Request req[2];
  int stage, mine[A_INTS]; /* stage 0: waiting for an abandoned one (below) */
  int *all;                /* [A_INTS * ntasks] */
  int64_t deadline;
  struct rf__mpi_attach *next;
} rf__mpi_attach;

/* Attaches that failed with requests still pending (a timeout: a process
 * did not come), apart from their jobs, which go: MPI writes the
 * duplicates and counts here if the late process comes. They are finished
 * in the background (rf__mpi_attach_poll_abandoned): the exchange sends
 * GAVE_UP in place of the device counts, and the late process fails its
 * attach naming this one. Reachable from here, so no leak checker counts
 * those that never finish. Engine thread. */
static rf__mpi_attach *abandoned;
enum { GAVE_UP = -1 };

/* Whether an abandoned attach's duplicates of parent are still pending,
 * or not even issued (stage 0: it gave up while it waited for an earlier
 * one, and issues them after it): MPI matches the rounds of nonblocking
 * duplicates of one communicator in the order they are issued, so a new
 * attach's must wait for them (issued before the late process issues its
 * own, they would be matched against its rounds of the old one). Every
 * session given up on thus still takes its round: a process later than
 * several timeouts fails as many sessions as the others did, and the
 * sessions after pair alike (else its second session met the others'
 * third, and so on). `after`: only abandoned attaches older than it (later
 * in the list); NULL: all. */
static bool parent_busy_before(MPI_Comm parent, const rf__mpi_attach *after) {
  for (const rf__mpi_attach *a = after ? after->next : abandoned; a;
       a = a->next)
    if (a->stage <= 1 && a->parent == parent) return true;
  return false;
}

static bool parent_busy(MPI_Comm parent) {
  return parent_busy_before(parent, NULL);
}

static void attach_duplicate(rf__mpi_cmd *c, rf__mpi_attach *a) {
  a->stage = 1;
  c->result = RF_MPI_STATUS(MPI_Comm_idup(a->parent, &a->ctl, &a->req[0]));
  if (!c->result)
    c->result = RF_MPI_STATUS(MPI_Comm_idup(a->parent, &a->data, &a->req[1]));
}

void rf__mpi_job_attach_start(rf__mpi_cmd *c) {
  rf__job *j = c->job;
  rf__mpi_attach *a = rf__calloc(1, sizeof *a);
  if (!a) {
    c->result = rf__oom();
    return;
  }
  j->attach = a;
  a->parent = c->parent;
  a->ctl = a->data = MPI_COMM_NULL;
  uint64_t host = host_id();
  a->mine[A_CPU] = c->ncpu;
  a->mine[A_GPU] = c->ngpu;
  a->mine[A_EPOCH] = next_epoch;
  a->mine[A_CROWDED] = rf__cores_crowded();
  a->mine[A_HOST_LO] = (int)(uint32_t)host;
  a->mine[A_HOST_HI] = (int)(uint32_t)(host >> 32);
  a->req[0] = a->req[1] = MPI_REQUEST_NULL;
  a->deadline = rf__mpi_now_ns() + j->timeout_ms * 1000000;
  if (!parent_busy(a->parent)) attach_duplicate(c, a);
}

/* The duplicates exist: learn rank and size, exchange device counts. */
static rf_status *attach_exchange(rf__job *j, rf__mpi_attach *a) {
  MPI_Comm_set_errhandler(a->ctl, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(a->data, MPI_ERRORS_RETURN);
  MPI_Comm_rank(a->ctl, &j->task);
  MPI_Comm_size(a->ctl, &j->ntasks);
  j->ncpu = rf__calloc((size_t)j->ntasks, sizeof(int));
  j->ngpu = rf__calloc((size_t)j->ntasks, sizeof(int));
  a->all = rf__calloc((size_t)j->ntasks * A_INTS, sizeof(int));
  j->peers = rf__calloc((size_t)j->ntasks, 1);
  /* The receive buffer, made now: a verdict (GO) dropped for want of memory
   * would leave the others in the MPI collective. It grows only for
   * messages longer than this (collective names of about 4 KiB). */
  j->recv_cap = 4096;
  j->recv_buf = rf__malloc(j->recv_cap);
  if (!j->ncpu || !j->ngpu || !a->all || !j->peers || !j->recv_buf)
    return rf__oom();
  return RF_MPI_STATUS(MPI_Iallgather(a->mine, A_INTS, MPI_INT, a->all, A_INTS,
                                      MPI_INT, a->ctl, &a->req[0]));
}

/* The attach finished: the job takes the duplicates, or, after a failure,
 * what MPI may still write stays alive (see abandoned). */
static void attach_settle(rf__job *j, rf__mpi_attach *a, bool failed) {
  j->attach = NULL;
  bool pending = false;
  for (int i = 0; i < 2; i++)
    if (a->req[i] != MPI_REQUEST_NULL) {
      int done = 0;
      if (!failed ||
          MPI_Test(&a->req[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
          !done)
        pending = true;
    }
  /* Given up before its duplicates were issued (waiting for an earlier
   * abandoned one): it still issues them in its turn (parent_busy). */
  if (failed && (pending || (a->stage == 0 && a->parent != MPI_COMM_NULL))) {
    a->next = abandoned;
    abandoned = a;
    return;
  }
  j->ctl = a->ctl; /* the job's detach frees them */
  j->data = a->data;
  rf__free(a->all);
  rf__free(a);
}

bool rf__mpi_job_attach_poll(rf__mpi_cmd *c, int64_t now) {
  rf__job *j = c->job;
  rf__mpi_attach *a = j->attach;
  if (!a) return true; /* no memory to start */
  int done = 0;
  if (!c->result && a->stage == 0 && !parent_busy(a->parent))
    attach_duplicate(c, a);
  if (!c->result && a->stage == 0) {
    if (now >= a->deadline) {
      rf__mpi_peer_suspect(NULL, now);
      c->result = rf__log_status(
          RF_LOG_WARN, "job",
          rf__error(RF_DEADLINE_EXCEEDED,
                    "not every process of the job came to an earlier "
                    "session that this process gave up on, within this "
                    "session's %lld ms (every process must make the same "
                    "sessions in the same order)",
                    (long long)j->timeout_ms));
      attach_settle(j, a, true);
      return true;
    }
    return false;
  } else if (!c->result && a->stage == 1) {
    c->result =
        RF_MPI_STATUS(MPI_Testall(2, a->req, &done, MPI_STATUSES_IGNORE));
    if (!c->result && done) {
      a->stage = 2;
      c->result = attach_exchange(j, a);
    }
  } else if (!c->result) {
    c->result = RF_MPI_STATUS(MPI_Test(&a->req[0], &done, MPI_STATUS_IGNORE));
    if (!c->result && done) {
      for (int t = 0; t < j->ntasks; t++)
        if (a->all[A_INTS * t + A_CPU] == GAVE_UP) {
          c->result = rf__error(
              RF_DEADLINE_EXCEEDED,
              "task %d gave up on this session before this process made it "
              "(its collective timeout passed first; every process must "
              "make the same sessions in the same order)",
              t);
          attach_settle(j, a, true);
          return true;
        }
      j->crowded = false;
      j->one_host = true;
      for (int t = 0; t < j->ntasks; t++) {
        const int *all = a->all + A_INTS * t;
        j->ncpu[t] = all[A_CPU];
        j->ngpu[t] = all[A_GPU];
        if (all[A_EPOCH] > j->epoch) j->epoch = all[A_EPOCH];
        if (all[A_CROWDED]) j->crowded = true;
        if (all[A_HOST_LO] != a->all[A_HOST_LO] ||
            all[A_HOST_HI] != a->all[A_HOST_HI])
          j->one_host = false;
      }
      next_epoch = (int)j->epoch + 1;
      attach_settle(j, a, false);
      return true;
    }
  }
  if (!c->result && now >= a->deadline) {
    rf__mpi_peer_suspect(NULL, now); /* MPI is left mid-collective */
    c->result = rf__log_status(
        RF_LOG_WARN, "job",
        rf__error(RF_DEADLINE_EXCEEDED,
                  "not every process of the job made this session within "
                  "%lld ms (every process must make the same sessions in the "
                  "same order); a process that comes later is told that "
                  "this one gave up",
                  (long long)j->timeout_ms));
  }
  if (c->result) attach_settle(j, a, true);
  return c->result != NULL;
}

static void abandoned_free(rf__mpi_attach *a) {
  if (a->ctl != MPI_COMM_NULL) MPI_Comm_free(&a->ctl);
  if (a->data != MPI_COMM_NULL) MPI_Comm_free(&a->data);
  rf__free(a->all);
  rf__free(a);
}

int rf__mpi_attach_poll_abandoned(bool issue, bool *pending) {
  int progress = 0;
  for (rf__mpi_attach **p = &abandoned; *p;) {
    rf__mpi_attach *a = *p;
    int done = 0;
    if (a->stage == 3) { /* testing it failed: kept, never tested again */
      p = &a->next;
      continue;
    }
    if (a->stage == 0) { /* its turn: after every older one's duplicates */
      if (!issue || parent_busy_before(a->parent, a)) {
        p = &a->next;
        continue;
      }
      progress++;
      a->stage = 1;
      if (MPI_Comm_idup(a->parent, &a->ctl, &a->req[0]) != MPI_SUCCESS ||
          MPI_Comm_idup(a->parent, &a->data, &a->req[1]) != MPI_SUCCESS) {
        a->stage = 3; /* the late one waits out its own */
        p = &a->next;
        continue;
      }
    }
    if (a->stage == 1) { /* the late process made its duplicates too */
      if (MPI_Testall(2, a->req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS ||
          !done) {
        p = &a->next;
        continue;
      }
      progress++;
      int n = 0;
      MPI_Comm_set_errhandler(a->ctl, MPI_ERRORS_RETURN);
      MPI_Comm_set_errhandler(a->data, MPI_ERRORS_RETURN);
      MPI_Comm_size(a->ctl, &n);
      a->all = rf__calloc((size_t)n * A_INTS, sizeof(int));
      for (int i = 0; i < A_INTS; i++) a->mine[i] = GAVE_UP;
      a->stage = 2;
      if (!a->all ||
          MPI_Iallgather(a->mine, A_INTS, MPI_INT, a->all, A_INTS, MPI_INT,
                         a->ctl, &a->req[0]) != MPI_SUCCESS) {
        a->req[0] = MPI_REQUEST_NULL; /* the late one waits out its own */
        *p = a->next;
        abandoned_free(a);
        continue;
      }
    }
    if (MPI_Test(&a->req[0], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      p = &a->next;
      a->stage = 3;
      continue;
    }
    if (!done) {
      p = &a->next;
      continue;
    }
    progress++;
    *p = a->next;
    abandoned_free(a);
  }
  *pending = false;
  for (rf__mpi_attach *a = abandoned; a; a = a->next)
    if (a->stage == 1 || a->stage == 2) *pending = true; /* 0: none issued */
  return progress;
}

void rf__mpi_job_detach(rf__job *j) {
  rf__mpi_agreed_free(j); /* before its ops go */
  rf__mpi_member_free(j);
  rf__mpi_data_thread_stop(j);
  rf__mpi_coord_free(j);
  rf__mpi_drop_messages(j);
  rf__mpi_sets_free(j);
  if (j->ctl != MPI_COMM_NULL) MPI_Comm_free(&j->ctl);
  if (j->data != MPI_COMM_NULL) MPI_Comm_free(&j->data);
}

void rf__mpi_job_leave_start(rf__job *j) {
  j->leave_deadline = rf__mpi_now_ns() + j->timeout_ms * 1000000;
  if (j->task == 0) return;
  rf__mpi_msg h = {.type = RF_MSG_BYE};
  rf__mpi_send_msg(j, 0, &h, NULL, NULL, NULL);
}

bool rf__mpi_job_may_leave(const rf__job *j, int64_t now) {
  /* After a timeout the others may be dead: their verdicts go unsaid. */
  if (j->task != 0 || j->suspect || now >= j->leave_deadline) return true;
  for (int t = 1; t < j->ntasks; t++)
    if (j->peers[t] == RF_PEER_OK) return false;
  return true; /* every other task left, or may be dead */
}

static void dispatch(rf__job *j, const rf__mpi_msg_view *v, int64_t now) {
  int from = v->h->task;
  if (j->task == 0 && from > 0 && from < j->ntasks &&
      j->peers[from] != RF_PEER_LEFT) /* alive after all */
    j->peers[from] = v->h->type == RF_MSG_BYE ? RF_PEER_LEFT : RF_PEER_OK;
  switch (v->h->type) {
    case RF_MSG_GO:
    case RF_MSG_ABORT: rf__mpi_member_verdict(j, v, now); break;
    case RF_MSG_BYE: break;
    case RF_MSG_PING: {
      /* code 1: this task has reached the collective; 2: not (yet) */
      rf__mpi_msg h = {
          .type = RF_MSG_PONG,
          .job_step = v->h->job_step,
          .code = rf__mpi_member_has(j, v->name, v->h->job_step) ? 1 : 2};
      rf__mpi_send_msg(j, from, &h, v->name, NULL, NULL);
      break;
    }
    case RF_MSG_PONG:
      rf__mpi_member_pong(j, v);
      if (j->task == 0) rf__mpi_coord_pong(j, v);
      break;
    case RF_MSG_FAILED:
    case RF_MSG_STEP_FAILED:
      rf__mpi_agreed_told(j, v, now); /* this task's agreed collectives */
      if (j->task == 0) rf__mpi_coord_handle(j, v, now);
      break;
    default:
      if (j->task == 0) rf__mpi_coord_handle(j, v, now);
  }
}

int rf__mpi_job_poll(rf__job *j, int64_t now, bool *busy, bool *waiting) {
  int progress = 0;
  rf__mpi_msg_view v;
  for (int got = 1; got;) {
    rf_status *st = NULL;
    got = rf__mpi_recv(j, &v, &st);
    if (st && !j->broken) /* no more messages can come: all time out */
      j->broken = st;
    else
      rf_status_free(st);
    if (got > 0) {
      dispatch(j, &v, now);
      progress++;
    }
  }
  progress += rf__mpi_member_poll(j, now, busy, waiting);
  if (atomic_load(&j->active_steps) > 0) *waiting = true;
  if (j->task == 0 && rf__mpi_coord_poll(j, now)) *waiting = true;
  if (rf__mpi_poll_sends(j)) *waiting = true;
  return progress;
}

/* To task 0, which fails the collectives being agreed, and to the members
 * of agreed ones: those wait in a check that no coordinator answers, so
 * each member fails its own (agreed.c). */
static void send_failure(rf__job *j, int type, const rf__mpi_cmd *c) {
  rf__mpi_msg h = {.type = type, .job_step = c->job_step, .code = c->code};
  rf__mpi_send_msg(j, 0, &h, c->name, NULL, c->text);
  rf__mpi_agreed_tell(j, &h, c->name, c->text);
}

void rf__mpi_job_command(rf__mpi_cmd *c) {
  rf__job *j = c->job;
  switch (c->kind) {
    case RF_CMD_READY: rf__mpi_member_ready(j, c->op); break;
    case RF_CMD_FAILED: send_failure(j, RF_MSG_FAILED, c); break;
    case RF_CMD_STEP_FAILED: send_failure(j, RF_MSG_STEP_FAILED, c); break;
    case RF_CMD_CANCEL_STEP: {
      rf_status *why = rf__status_text(c->code, c->text);
      rf__mpi_member_cancel_step(j, c->step_id, why);
      rf_status_free(why);
      send_failure(j, RF_MSG_STEP_FAILED, c);
      break;
    }
    default: break;
  }
  rf__free(c->name);
  rf__free(c->text);
  rf__free(c);
}
