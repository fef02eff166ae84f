/* comm/mpi/data_thread.c - a job's data thread: the collectives that run as
 * blocking calls (MPI's blocking collectives and ringflow's rings: data.c,
 * algorithm.c), one at a time. Every job
 * (session) has its own, started at its first such call: with one thread for
 * the whole process, two processes that queued two sessions' blocking calls
 * in opposite orders (each session's GO order is its own) would wait on each
 * other forever. The engine hands a job's thread an op only when no other
 * collective of that job is in flight, and starts none of the job's until it
 * is done, so no communicator is ever used by two threads at once.
 * A collective agreed once (agreed.c) has a thread of its own for the same
 * calls in the steady state, on a communicator of its own: collectives of
 * different names then wait on nothing of each other's, whatever order
 * each process reaches them in. Needs MPI_THREAD_MULTIPLE (the engine
 * calls MPI meanwhile). Invariant: an op handed over completes exactly once
 * (async_done, then the engine is woken), unless the thread is stopped
 * while it runs (its job left): then it is left to finish on its own and
 * frees itself. */
#include <pthread.h>

#include "comm/mpi/op.h"
#include "core/mem.h"
#include "core/status.h"

struct rf__mpi_data_thread {
  pthread_mutex_t mu;
  pthread_cond_t wake;
  pthread_t thread;
  /* Handed over, not yet taken, in order (an agreed collective's next op
   * can come while one runs): linked by data_next, each with its comm. */
  rf__mpi_op *head, *tail;
  bool busy; /* in an MPI call */
  bool stop;
  bool orphaned; /* its job left during a call: it frees itself */
};

static void finish(rf__mpi_op *op, rf_status *st) {
  op->async_status = st;
  atomic_store(&op->async_done, 1);
  rf__mpi_engine_wake();
}

static void *data_main(void *arg) {
  rf__mpi_data_thread *d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (!d->head && !d->stop) pthread_cond_wait(&d->wake, &d->mu);
    if (d->stop) break;
    rf__mpi_op *op = d->head;
    MPI_Comm comm = op->data_comm;
    d->head = op->data_next;
    if (!d->head) d->tail = NULL;
    op->data_next = NULL;
    d->busy = true;
    pthread_mutex_unlock(&d->mu);
    finish(op, rf__mpi_op_run_blocking(op, comm));
    pthread_mutex_lock(&d->mu);
    d->busy = false;
  }
  bool orphaned = d->orphaned;
  pthread_mutex_unlock(&d->mu);
  if (orphaned) {
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->wake);
    rf__free(d);
  }
  return NULL;
}

static rf__mpi_data_thread *start(void) {
  rf__mpi_data_thread *d = rf__calloc(1, sizeof *d);
  if (!d) return NULL;
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->wake, NULL);
  if (pthread_create(&d->thread, NULL, data_main, d) != 0) {
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->wake);
    rf__free(d);
    return NULL;
  }
  return d;
}

static void hand(rf__mpi_data_thread *d, rf__mpi_op *op, MPI_Comm comm) {
  op->data_comm = comm;
  op->data_next = NULL;
  pthread_mutex_lock(&d->mu);
  if (d->tail)
    d->tail->data_next = op;
  else
    d->head = op;
  d->tail = op;
  pthread_cond_signal(&d->wake);
  pthread_mutex_unlock(&d->mu);
}

void rf__mpi_data_thread_run(rf__job *j, rf__mpi_op *op) {
  if (!j->data_thread) j->data_thread = start();
  rf__mpi_data_thread *d = j->data_thread;
  if (!d) { /* no thread to be had: the call blocks the engine instead */
    finish(op, rf__mpi_op_run_blocking(op, op->set->comm));
    return;
  }
  hand(d, op, op->set->comm);
}

rf_status *rf__mpi_data_thread_hand(rf__mpi_data_thread **d, rf__mpi_op *op,
                                    MPI_Comm comm) {
  if (!*d) *d = start();
  /* Never on the engine: a blocking call there, outside the GO order,
   * could wait on a process whose engine waits on this one. */
  if (!*d)
    return rf__error(RF_RESOURCE_EXHAUSTED,
                     "collective '%s' (job step %lld): no thread could be "
                     "started for its blocking MPI calls",
                     op->name, (long long)op->job_step);
  hand(*d, op, comm);
  return NULL;
}

bool rf__mpi_data_thread_free(rf__mpi_data_thread **dp) {
  rf__mpi_data_thread *d = *dp;
  if (!d) return false;
  *dp = NULL;
  pthread_mutex_lock(&d->mu);
  d->stop = true;
  /* not started: they never will (the ops stay unfinished) */
  d->head = d->tail = NULL;
  bool stuck = d->busy;
  d->orphaned = stuck;
  /* Read before unlocking: an orphaned thread frees d once it sees stop. */
  pthread_t thread = d->thread;
  pthread_cond_signal(&d->wake);
  pthread_mutex_unlock(&d->mu);
  if (stuck) {
    pthread_detach(thread);
    return true;
  }
  pthread_join(thread, NULL);
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->wake);
  rf__free(d);
  return false;
}

void rf__mpi_data_thread_stop(rf__job *j) {
  rf__mpi_data_thread_free(&j->data_thread);
}
