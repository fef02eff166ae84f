/* comm/mpi/engine.c - the process's communication thread: it makes every
 * MPI call of ringflow's but the blocking collectives of the jobs' data
 * threads (data_thread.c) and MPI_Initialized. It starts with the first session
 * of a job (or rf_job_tasks), initialises MPI unless the program did
 * (asking for MPI_THREAD_MULTIPLE, so the program may call MPI too), and
 * runs until the process exits, finalising MPI if it initialised it.
 *
 * Its loop: take the queued commands, then for every attached job receive
 * messages, issue and test collectives and check deadlines. While a
 * nonblocking collective's data is in flight it spins (OpenMPI's nonblocking
 * collectives progress only inside MPI calls), yielding the core to others,
 * for 2 ms plus 8 ns a byte of the largest one in flight; while it waits for
 * answers (or for a data thread or a GPU stream, which wake it) it spins
 * (yielding) for 2 ms after the last progress. Past that, nothing is moving
 * (a process stopped or died): it sleeps 20 us, doubling up to 1 ms, between
 * looks, woken at once by new work; with nothing pending it sleeps 20 ms
 * between looks at the network, and with no job at all until woken.
 *
 * At exit it finalises MPI only once every process has reached its own exit
 * (a barrier): MPI_Finalize waits for every process, so after a peer may
 * have died (rf__mpi_peer_suspect) it waits RF_MPI_EXIT_WAIT_MS for the
 * barrier and otherwise leaves MPI as it is rather than hang on the dead. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/mpi/engine.h"
#include "comm/mpi/mpi_status.h"
#include "comm/mpi/op.h"
#include "core/cores.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/status.h"

#define IDLE_NS 20000000LL /* nothing pending: look at the network */
#define BACKOFF_MIN_NS 20000LL
#define BACKOFF_MAX_NS 1000000LL
#define SPINS_BEFORE_SLEEP 64
#define SPIN_NS 2000000LL /* waiting: spin this long after progress */
/* Data in flight: spin SPIN_NS plus this per byte of the largest collective
 * (a link of 125 MB/s) before taking it for stalled: a transfer moves only
 * while MPI is called. */
#define BUSY_NS_PER_BYTE 8
/* After a peer may have died: how long the exit waits for the others. */
#define RF_MPI_EXIT_WAIT_MS 3000

static struct {
  pthread_mutex_t mu;
  pthread_cond_t wake, reply; /* the engine's; the callers' */
  pthread_t thread;
  bool started, ready, stopping, own_init;
  bool stopped;  /* the loop has ended: nothing queued is handled any more */
  bool multiple; /* MPI_THREAD_MULTIPLE: jobs may have data threads */
  rf_status *init_error; /* why MPI cannot be used */
  int world_rank, world_size;
  rf__mpi_cmd *head, *tail;
  atomic_int kicked;  /* a command or an op is waiting */
  atomic_bool deep;   /* in the long sleep (nothing pending, no step) */
  MPI_Comm exit_comm; /* own_init: the exit barrier's */
  int suspects;       /* engine thread: peers that may be dead */
} E = {.mu = PTHREAD_MUTEX_INITIALIZER, .exit_comm = MPI_COMM_NULL};

int64_t rf__mpi_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- MPI itself ---- */

static rf_status *init_mpi(void) {
  int init = 0, fin = 0, provided = MPI_THREAD_SINGLE;
  MPI_Finalized(&fin);
  if (fin)
    return rf__error(RF_FAILED_PRECONDITION,
                     "MPI was already finalised in this process");
  MPI_Initialized(&init);
  if (init) {
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED)
      return rf__error(
          RF_FAILED_PRECONDITION,
          "the program initialised MPI with thread level %d; ringflow calls "
          "MPI from a thread of its own and needs MPI_THREAD_SERIALIZED (or "
          "MPI_THREAD_MULTIPLE if the program calls MPI while sessions "
          "exist): use MPI_Init_thread",
          provided);
  } else {
    rf_status *st = RF_MPI_STATUS(
        MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided));
    if (st) return st;
    E.own_init = true;
    /* Every process initialises here, so every one makes it. */
    if (MPI_Comm_dup(MPI_COMM_WORLD, &E.exit_comm) == MPI_SUCCESS)
      MPI_Comm_set_errhandler(E.exit_comm, MPI_ERRORS_RETURN);
    else
      E.exit_comm = MPI_COMM_NULL;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &E.world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &E.world_size);
  E.multiple = provided >= MPI_THREAD_MULTIPLE;
  rf__mpi_data_init();
  return NULL;
}

bool rf__mpi_thread_multiple(void) { return E.multiple; }

void rf__mpi_peer_suspect(rf__job *j, int64_t now) {
  if (j && j->suspect) {
    j->suspect_ns = now;
    return;
  }
  E.suspects++;
  if (!j) return;
  j->suspect = true;
  j->suspect_ns = now;
}

void rf__mpi_peer_resolved(rf__job *j, int64_t issued_ns) {
  if (!j->suspect || issued_ns <= j->suspect_ns) return;
  j->suspect = false;
  E.suspects--;
}

/* ---- commands ---- */

/* Appends c to the queue; E.mu held. */
static void enqueue(rf__mpi_cmd *c) {
  c->next = NULL;
  if (E.tail)
    E.tail->next = c;
  else
    E.head = c;
  E.tail = c;
  atomic_store(&E.kicked, 1);
  pthread_cond_signal(&E.wake);
}

void rf__mpi_engine_submit(rf__mpi_cmd *c) {
  pthread_mutex_lock(&E.mu);
  enqueue(c); /* after the loop ended: never read (the process is exiting) */
  pthread_mutex_unlock(&E.mu);
}

rf_status *rf__mpi_engine_call(rf__mpi_cmd *c) {
  pthread_mutex_lock(&E.mu);
  /* After the loop ended (an exit handler that runs after ringflow's) c
   * is not queued: the caller's c goes when it returns. */
  if (!E.stopped) enqueue(c);
  while (!c->done && !E.stopped) pthread_cond_wait(&E.reply, &E.mu);
  bool done = c->done;
  pthread_mutex_unlock(&E.mu);
  if (!done)
    return rf__error(RF_UNAVAILABLE,
                     "ringflow's MPI thread has stopped: the process is "
                     "exiting");
  return c->result;
}

void rf__mpi_engine_wake(void) {
  atomic_store(&E.kicked, 1);
  pthread_mutex_lock(&E.mu);
  pthread_cond_signal(&E.wake);
  pthread_mutex_unlock(&E.mu);
}

void rf__mpi_engine_nudge(void) {
  if (atomic_load(&E.deep)) rf__mpi_engine_wake();
}

static void reply(rf__mpi_cmd *c) {
  pthread_mutex_lock(&E.mu);
  c->done = true;
  pthread_cond_broadcast(&E.reply);
  pthread_mutex_unlock(&E.mu);
}

/* ---- the loop ---- */

typedef struct loop {
  rf__job *jobs;          /* attached */
  rf__mpi_cmd *attaching; /* ATTACH commands in progress */
  rf__mpi_cmd *leaving;   /* DETACH commands waiting for the others */
} loop;

/* Whether j is attached (leaving ones included). A notification (FAILED,
 * STEP_FAILED, CANCEL_STEP) holds a bare rf__job *, and can be queued after
 * its session detached and freed the job: the session's collective manager
 * and its watchdog thread, which report failed groups to the job, are freed
 * after rf__job_detach. Such a command is dropped unread (a READY comes
 * only from a running step, whose job is attached). */
static bool attached(const loop *l, const rf__job *j) {
  for (const rf__job *k = l->jobs; k; k = k->next)
    if (k == j) return true;
  return false;
}

static void take_command(loop *l, rf__mpi_cmd *c) {
  if (c->kind == RF_CMD_SETTLE) { /* the queue is in order: all before done */
    reply(c);
    return;
  }
  if (c->kind != RF_CMD_ATTACH && c->kind != RF_CMD_DETACH &&
      c->kind != RF_CMD_READY && !attached(l, c->job)) {
    rf__free(c->name);
    rf__free(c->text);
    rf__free(c);
    return;
  }
  switch (c->kind) {
    case RF_CMD_ATTACH:
      rf__mpi_job_attach_start(c);
      c->next = l->attaching;
      l->attaching = c;
      break;
    case RF_CMD_DETACH: /* the job keeps being polled until it may go */
      rf__mpi_job_leave_start(c->job);
      c->next = l->leaving;
      l->leaving = c;
      break;
    default: rf__mpi_job_command(c); /* frees c */
  }
}

static int poll_attaching(loop *l, int64_t now) {
  int progress = 0;
  for (rf__mpi_cmd **p = &l->attaching; *p;) {
    rf__mpi_cmd *c = *p;
    if (!rf__mpi_job_attach_poll(c, now)) {
      p = &c->next;
      continue;
    }
    *p = c->next;
    progress++;
    if (c->result) {
      rf__mpi_job_detach(c->job); /* frees what was made */
    } else {
      c->job->next = l->jobs;
      l->jobs = c->job;
    }
    reply(c);
  }
  return progress;
}

static int poll_leaving(loop *l, int64_t now) {
  int progress = 0;
  for (rf__mpi_cmd **p = &l->leaving; *p;) {
    rf__mpi_cmd *c = *p;
    if (!rf__mpi_job_may_leave(c->job, now)) {
      p = &c->next;
      continue;
    }
    *p = c->next;
    for (rf__job **q = &l->jobs; *q; q = &(*q)->next)
      if (*q == c->job) {
        *q = c->job->next;
        break;
      }
    rf__mpi_job_detach(c->job);
    reply(c);
    progress++;
  }
  return progress;
}

/* Waits up to ns (0: until woken) unless something was queued. */
static void sleep_for(int64_t ns) {
  pthread_mutex_lock(&E.mu);
  if (!atomic_load(&E.kicked) && !E.stopping) {
    if (ns <= 0) {
      pthread_cond_wait(&E.wake, &E.mu);
    } else {
      int64_t t = rf__mpi_now_ns() + ns;
      struct timespec ts = {t / 1000000000, t % 1000000000};
      pthread_cond_timedwait(&E.wake, &E.mu, &ts);
    }
  }
  pthread_mutex_unlock(&E.mu);
}

/* How many idle spins between yields while data is in flight: 4 when the
 * node runs at least as many ranks as cores, else 64; RF_MPI_YIELD_EVERY
 * overrides. */
int rf__mpi_yield_every(void) {
  static int every;
  if (every) return every;
  int env = rf__mpi_env_count("RF_MPI_YIELD_EVERY"); /* bad: the default */
  const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!local) local = getenv("MPI_LOCALNRANKS");
  long cores = rf__usable_cores();
  every = local && atol(local) >= cores ? 4 : 64;
  if (env > 0) every = env;
  return every;
}

/* Whether a stalled wait may sleep: RF_MPI_BACKOFF=0 makes it spin
 * (yielding) as the thread did before the backoff, for measuring what the
 * backoff costs. */
static bool backoff_enabled(void) {
  static int enabled = -1;
  if (enabled < 0) {
    enabled = rf__mpi_env_flag("RF_MPI_BACKOFF") != 0; /* bad: on */
  }
  return enabled;
}

/* How long to sleep after `sleeps` sleeps without progress: 20 us,
 * doubling, at most 1 ms. */
static int64_t backoff_ns(int sleeps) {
  int64_t ns = BACKOFF_MIN_NS << (sleeps < 6 ? sleeps : 6);
  return ns < BACKOFF_MAX_NS ? ns : BACKOFF_MAX_NS;
}

static void run_loop(void) {
  loop l = {0};
  int idle = 0, sleeps = 0;
  unsigned spins = 0;
  int64_t last_progress = 0;
  for (;;) {
    pthread_mutex_lock(&E.mu);
    rf__mpi_cmd *cmds = E.head;
    E.head = E.tail = NULL;
    atomic_store(&E.kicked, 0);
    bool stop = E.stopping;
    pthread_mutex_unlock(&E.mu);
    int progress = 0;
    while (cmds) {
      rf__mpi_cmd *c = cmds;
      cmds = c->next;
      take_command(&l, c);
      progress++;
    }
    if (stop && !l.attaching) break;
    int64_t now = rf__mpi_now_ns();
    bool busy = false, waiting = l.attaching || l.leaving;
    int64_t busy_bytes = 0;
    bool gave_up = false; /* attaches finishing in the background */
    progress += poll_attaching(&l, now);
    progress += poll_leaving(&l, now);
    progress += rf__mpi_attach_poll_abandoned(true, &gave_up);
    for (rf__job *j = l.jobs; j; j = j->next) {
      progress += rf__mpi_job_poll(j, now, &busy, &waiting);
      if (j->busy_bytes > busy_bytes) busy_bytes = j->busy_bytes;
    }
    if (progress) {
      idle = sleeps = 0;
      last_progress = now;
      continue;
    }
    /* OpenMPI's nonblocking collectives advance only inside MPI calls:
     * spin while data is in flight, yielding the core now and then (often
     * when this node runs more processes than cores: their peers need
     * it), until it has stalled for longer than its size explains. */
    if (busy &&
        (now - last_progress < SPIN_NS + busy_bytes * BUSY_NS_PER_BYTE ||
         !backoff_enabled())) {
      if (++spins % rf__mpi_yield_every() == 0) sched_yield();
      continue;
    }
    idle++;
    if (!busy && !waiting) {
      sleeps = 0;
      /* A step that begins (rf__job_begin_step) wakes this sleep only:
       * either it sees `deep`, or this sees its step (both seq_cst). */
      atomic_store(&E.deep, true);
      bool steps = false;
      for (rf__job *j = l.jobs; j; j = j->next)
        if (atomic_load(&j->active_steps) > 0) steps = true;
      if (!steps) sleep_for(l.jobs || gave_up ? IDLE_NS : 0);
      atomic_store(&E.deep, false);
    } else if (!busy && (idle < SPINS_BEFORE_SLEEP ||
                         now - last_progress < SPIN_NS || !backoff_enabled())) {
      sched_yield(); /* an answer is due soon: no wake-up to wait for */
    } else {
      sleep_for(backoff_ns(sleeps++)); /* stalled: new work wakes it */
    }
  }
  while (l.jobs) { /* the process is exiting with sessions alive */
    rf__job *j = l.jobs;
    l.jobs = j->next;
    rf__mpi_job_detach(j);
  }
  while (l.leaving) {
    rf__mpi_cmd *c = l.leaving;
    l.leaving = c->next;
    reply(c);
  }
  /* Callers waiting on a command queued since return; the queue is never
   * read again, and its callers' commands (on their stacks) go with them. */
  pthread_mutex_lock(&E.mu);
  E.stopped = true;
  E.head = E.tail = NULL;
  pthread_cond_broadcast(&E.reply);
  pthread_mutex_unlock(&E.mu);
}

/* Whether every process reached its exit (own_init): a barrier, waited for
 * as long as it takes, or RF_MPI_EXIT_WAIT_MS once a peer may be dead; and
 * then whether the attaches given up on finished in the background (every
 * process is here: they can), within RF_MPI_EXIT_WAIT_MS. MPI_Finalize on
 * a half-made duplicate crashed in OpenMPI (session 16). */
static bool all_at_exit(void) {
  MPI_Request req;
  if (E.exit_comm == MPI_COMM_NULL ||
      MPI_Ibarrier(E.exit_comm, &req) != MPI_SUCCESS)
    return false;
  int64_t until = rf__mpi_now_ns() + RF_MPI_EXIT_WAIT_MS * 1000000LL;
  bool pending = true, at_exit = false;
  for (int sleeps = 0;; sleeps++) {
    int done = 0;
    rf__mpi_attach_poll_abandoned(false, &pending);
    if (!at_exit) {
      if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
      if (done) {
        at_exit = true;
        until = rf__mpi_now_ns() + RF_MPI_EXIT_WAIT_MS * 1000000LL;
      } else if (E.suspects > 0 && rf__mpi_now_ns() >= until) {
        return false;
      }
    }
    if (at_exit && !pending) return true;
    if (at_exit && rf__mpi_now_ns() >= until) return false;
    struct timespec ts = {0, backoff_ns(sleeps)};
    nanosleep(&ts, NULL);
  }
}

static void *engine_main(void *arg) {
  (void)arg;
  rf_status *st = init_mpi();
  pthread_mutex_lock(&E.mu);
  E.init_error = st;
  E.ready = true;
  pthread_cond_broadcast(&E.reply);
  pthread_mutex_unlock(&E.mu);
  if (!st) run_loop();
  int finalized = 0; /* by a program that initialised MPI itself */
  MPI_Finalized(&finalized);
  if (!st && E.own_init) {
    /* A process that does not come may be dead: MPI_Finalize would wait
     * for it forever. MPI is then left as it is, for the process to exit. */
    if (all_at_exit()) {
      rf__mpi_data_fini();
      MPI_Comm_free(&E.exit_comm);
      MPI_Finalize();
      rf__mpi_free_orphans();
    } else {
      RF__LOG(RF_LOG_WARN,
              "not finalising MPI: a process of the job did not reach its "
              "exit within %d ms after a collective timed out (it may have "
              "died), or a session given up on did not finish",
              RF_MPI_EXIT_WAIT_MS);
    }
  } else {
    if (!st && !finalized) rf__mpi_data_fini();
    rf__mpi_free_orphans();
  }
  return NULL;
}

/* At exit: the engine leaves its jobs and finalises what it initialised. */
static void engine_atexit(void) {
  pthread_mutex_lock(&E.mu);
  E.stopping = true;
  pthread_cond_signal(&E.wake);
  pthread_mutex_unlock(&E.mu);
  pthread_join(E.thread, NULL);
}

rf_status *rf__mpi_engine_start(int *world_rank, int *world_size) {
  pthread_mutex_lock(&E.mu);
  if (!E.started) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&E.wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&E.reply, NULL);
    if (pthread_create(&E.thread, NULL, engine_main, NULL) != 0) {
      pthread_mutex_unlock(&E.mu);
      return rf__error(RF_RESOURCE_EXHAUSTED,
                       "could not start ringflow's MPI thread");
    }
    E.started = true;
    atexit(engine_atexit);
  }
  while (!E.ready) pthread_cond_wait(&E.reply, &E.mu);
  rf_status *st = E.init_error ? rf__status_copy(E.init_error) : NULL;
  *world_rank = E.world_rank;
  *world_size = E.world_size;
  pthread_mutex_unlock(&E.mu);
  return st;
}
