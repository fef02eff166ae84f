/* comm/mpi/member.c - this task's side of a collective across processes.
 * The thread that completed the local group makes the op, allocates its
 * buffers, queues READY and computes the local part while the READY
 * travels; the engine sends READY, waits for the coordinator's verdict,
 * issues the MPI collective on GO and polls it. The dones are called once,
 * from a pool task: with the results, or with the coordinator's ABORT, a
 * timeout, or the step's cancellation. A task that sent READY follows the
 * verdict even after its step gave up (the others are waiting in MPI): such
 * an op lives on, reported, until the verdict or the data is through. */
#include <stdio.h>
#include <string.h>

#include "comm/mpi/mpi_status.h"
#include "comm/mpi/op.h"
#include "comm/mpi/operator_order.h"
#include "core/format.h"
#include "core/mem.h"
#include "core/log.h"
#include "core/status.h"

#define GRACE_MS 2000
#define PROBE_MS 1000 /* how long a timed-out op waits for PONGs */

/* How long past the timeout a member waits for the coordinator's verdict:
 * the coordinator's own deadline runs from the first READY it sees (no
 * later than this one's, plus its travel), so it normally answers (naming
 * who is missing) before this. Fixed, so that a dead coordinator is found
 * within the timeout plus 2 s whatever the timeout. */
static int64_t grace_ms(const rf__mpi_op *op) {
  (void)op;
  return GRACE_MS;
}

static void op_free(rf__mpi_op *op) {
  rf__mpi_operators_seen();
  for (int i = 0; i < op->g.n; i++) rf_tensor_release(op->parts[i].input);
  rf_tensor_release(op->partial);
  rf_tensor_release(op->out);
  rf__mpi_op_scratch_free(op);
  rf__free(op->standin);
  rf_status_free(op->late);
  for (int i = 0; i < op->g.n; i++) rf_tensor_release(op->gpu_outs[i]);
  rf_status_free(op->async_status);
  rf_status_free(op->report);
  rf__free(op->parts);
  rf__free(op->answered);
  rf__free(op->tasks);
  rf__free(op->counts);
  rf__free(op->key);
  rf__free(op->name);
  rf__free(op->devices);
  rf__free(op);
}

static void unref(rf__mpi_op *op) {
  if (atomic_fetch_sub(&op->refs, 1) == 1) op_free(op);
}

/* Calls every done: the results, or a copy of op->report. */
static void report_task(void *arg) {
  rf__mpi_op *op = arg;
  rf__mpi_operators_seen();
  rf_status *st = op->report;
  op->report = NULL;
  rf_tensor *outs[64] = {0};
  if (!st && op->gpu) {
    memcpy(outs, op->gpu_outs, sizeof *outs * (size_t)op->g.n);
    memset(op->gpu_outs, 0, sizeof *outs * (size_t)op->g.n);
  } else if (!st) {
    st = rf__mpi_op_outputs(op, outs);
  }
  if (st)
    for (int i = 0; i < op->g.n; i++) {
      rf_tensor_release(outs[i]);
      outs[i] = NULL;
    }
  /* Inputs go back to their allocator before the dones (which can end the
   * step), unless MPI may still read them (an op that gave up early). */
  if (atomic_load(&op->refs) == 1)
    for (int i = 0; i < op->g.n; i++) {
      rf_tensor_release(op->parts[i].input);
      op->parts[i].input = NULL;
    }
  rf__coll_report(op->parts, op->g.n, st, outs);
  rf_status_free(st);
  unref(op);
}

/* Reports st (consumed; NULL: the results) once, from a pool task, or on
 * this thread when `here` (the engine has nothing else to watch: a thread
 * hand-off costs a scheduler slice, ~4 ms on a loaded machine). */
static void report_on(rf__mpi_op *op, rf_status *st, bool here) {
  if (atomic_exchange(&op->reported, 1)) {
    rf_status_free(st);
    return;
  }
  op->report = st;
  atomic_fetch_add(&op->refs, 1);
  rf_status *sched =
      here ? NULL : rf__threadpool_schedule(op->job->pool, report_task, op);
  if (here || sched) {
    rf_status_free(sched);
    report_task(op);
  }
}

static void report(rf__mpi_op *op, rf_status *st) { report_on(op, st, false); }

void rf__mpi_member_report(rf__mpi_op *op, rf_status *st) { report(op, st); }

void rf__mpi_member_release(rf__mpi_op *op) { unref(op); }

void rf__mpi_member_report_here(rf__mpi_op *op, rf_status *st) {
  report_on(op, st, true);
}

int64_t rf__mpi_member_grace_ms(void) { return GRACE_MS; }

static rf_status *copy_status(const rf_status *st) {
  return rf__status_copy(st);
}

/* ---- making an op (the thread that completed the local group) ---- */

/* The participant that speaks for this task in messages: the root, else
 * one with an input, else the first. */
static const rf__coll_participant *speaker(const rf__coll_group *g) {
  if (g->root >= 0) return &g->p[g->root];
  for (int i = 0; i < g->n; i++)
    if (g->p[i].input) return &g->p[i];
  return &g->p[0];
}

static rf__mpi_op *op_new(rf__job *j, rf__coll_group *g, const char *devices,
                          int64_t job_step) {
  rf__mpi_op *op = rf__calloc(1, sizeof *op);
  if (!op) return NULL;
  op->parts = rf__malloc(sizeof *op->parts * (size_t)g->n);
  op->key = rf__mpi_key(g->key, job_step, NULL, 0);
  op->name = rf__strdup(g->key);
  op->devices = rf__strdup(devices ? devices : "");
  if (!op->parts || !op->key || !op->name || !op->devices) {
    op_free(op);
    return NULL;
  }
  memcpy(op->parts, g->p, sizeof *op->parts * (size_t)g->n);
  for (int i = 0; i < g->n; i++) g->p[i].input = NULL; /* taken over */
  op->g = *g;
  op->g.p = op->parts;
  op->g.key = op->name;
  op->job = j;
  op->job_step = job_step;
  op->step_id = g->step_id;
  op->timeout_ms = g->timeout_ms > 0 ? g->timeout_ms : 300000;
  op->num_devices = g->p[0].num_devices;
  rf__mpi_reqs_clear(&op->req);
  rf__mpi_reqs_clear(&op->check_q);
  op->root_index = -1;
  const rf__coll_participant *s = speaker(g);
  op->shape = s->shape;
  op->has_input = s->input != NULL;
  op->gpu = s->device->name.type == RF_DEVICE_GPU;
  atomic_init(&op->refs, 1);
  atomic_init(&op->prepared, 0);
  atomic_init(&op->reported, 0);
  return op;
}

/* Out of memory for collective (name, job_step) of g: the status names the
 * collective, this task's device and node, also in the other tasks that
 * the job tells (a bare "out of memory" names none). */
static rf_status *oom_in(const rf__coll_group *g, const char *name,
                         int64_t job_step) {
  const rf__coll_participant *s = speaker(g);
  return rf__status_prefix(rf__oom(),
                           "collective '%s' (job step %lld) on %s "
                           "(node '%s')",
                           name, (long long)job_step, s->device->canonical,
                           s->node);
}

/* Fails an op that never reached the engine, and tells the job. */
static void fail_early(rf__job *j, rf__mpi_op *op, rf_status *st) {
  rf__job_coll_failed(j, op->name, op->job_step, st);
  report(op, st);
  unref(op);
}

void rf__job_coll_run(rf__job *j, rf__coll_group *g, const char *devices,
                      int64_t job_step) {
  rf__mpi_op *op = op_new(j, g, devices, job_step);
  if (!op) {
    rf_status *st = oom_in(g, g->key, job_step);
    rf__job_coll_failed(j, g->key, job_step, st);
    for (int i = 0; i < g->n; i++) {
      rf_tensor_release(g->p[i].input);
      g->p[i].input = NULL;
      g->p[i].done(g->p[i].arg, rf__status_copy(st), NULL);
    }
    rf_status_free(st);
    return;
  }
  rf_status *st =
      rf__mpi_job_parse_set(j, op->devices, &op->nset, &op->tasks, &op->counts);
  op->me = -1;
  for (int i = 0; !st && i < op->nset; i++)
    if (op->tasks[i] == j->task) op->me = i;
  if (!st && (op->me < 0 || op->counts[op->me] != g->n))
    st = rf__internal(
        "collective '%s': %d participants here, the group's "
        "devices %s say otherwise",
        op->name, g->n, op->devices);
  /* A step begun without its record could not tell the others if it were
   * cancelled later: its collectives fail now, which tells them. */
  if (!st && !rf__mpi_job_step_recorded(j, op->step_id))
    st = rf__error(RF_RESOURCE_EXHAUSTED,
                   "collective '%s' (job step %lld): out of memory recording "
                   "this step of task %d in the job",
                   op->name, (long long)job_step, j->task);
  if (!st) st = op->gpu ? rf__mpi_gpu_alloc(op) : rf__mpi_op_alloc(op);
  rf__mpi_cmd *c = st ? NULL : rf__calloc(1, sizeof *c);
  if (!st && !c) st = oom_in(&op->g, op->name, job_step);
  if (st) {
    fail_early(j, op, st);
    return;
  }
  atomic_fetch_add(&op->refs, 1); /* the engine's */
  c->kind = RF_CMD_READY;
  c->job = j;
  c->op = op;
  if (rf__mpi_agreed_direct(j, op, c)) { /* agreed: run here (agreed.c) */
    unref(op);
    return;
  }
  rf__mpi_engine_submit(c);
  if (!op->gpu) rf__mpi_op_prepare(op); /* while READY travels */
  atomic_store(&op->prepared, 1);
  rf__mpi_engine_wake();
  unref(op);
}

/* ---- the engine's side ---- */

void rf__mpi_member_ready(rf__job *j, rf__mpi_op *op) {
  if (op->direct) { /* handed back by the direct path (agreed.c) */
    rf__mpi_agreed_resume(j, op);
    return;
  }
  if (j->broken) {
    report(op, copy_status(j->broken));
    unref(op);
    return;
  }
  rf__mpi_op *dup = NULL;
  HASH_FIND_STR(j->ops, op->key, dup);
  int rf__hash_oom = 0;
  if (!dup) HASH_ADD_KEYPTR(hh, j->ops, op->key, strlen(op->key), op);
  if (dup || rf__hash_oom) {
    report(op, dup ? rf__internal("collective '%s': job step %lld twice",
                                  op->name, (long long)op->job_step)
                   : oom_in(&op->g, op->name, op->job_step));
    unref(op);
    return;
  }
  /* Agreed in an earlier step: no READY (agreed.c). */
  if (rf__mpi_agreed_take(j, op, rf__mpi_now_ns())) return;
  rf__mpi_member_send_ready(j, op);
}

void rf__mpi_member_describe(const rf__mpi_op *op, rf__mpi_msg *h) {
  const rf__coll_participant *s = speaker(&op->g);
  *h = (rf__mpi_msg){.type = RF_MSG_READY,
                     .job_step = op->job_step,
                     .kind = op->g.kind,
                     .dtype = op->g.dtype,
                     .reduction = op->g.reduction,
                     .device_type = s->device->name.type,
                     .num_devices = op->num_devices,
                     .local_count = op->g.n,
                     .local_roots = op->g.root >= 0,
                     .local_root = op->g.root,
                     .has_input = op->has_input,
                     .rank = op->shape.rank,
                     .timeout_ms = op->timeout_ms,
                     .agree = op->agree,
                     .algo_setting = op->algo_setting,
                     .root_at = s->root_at};
  for (int i = 0; i < op->shape.rank && i < RF_MAX_RANK; i++)
    h->dims[i] = op->shape.dims[i];
}

void rf__mpi_member_send_ready(rf__job *j, rf__mpi_op *op) {
  op->state = RF_OP_WAIT_VERDICT;
  op->deadline_ns =
      rf__mpi_now_ns() + (op->timeout_ms + grace_ms(op)) * 1000000;
  const rf__coll_participant *s = speaker(&op->g);
  rf__mpi_msg h;
  rf__mpi_member_describe(op, &h);
  /* the node's name capped as every quoted name is (core/format.h) */
  char rep[RF_DEVICE_NAME_MAX + RF_STATUS_QUOTE_MAX + 64];
  char *node = rf__format("%s", s->node);
  snprintf(rep, sizeof rep, "%s (node '%s')", s->device->canonical,
           node ? node : "?");
  rf__free(node);
  /* What GO needs of ringflow's memory is taken now: after GO the others
   * are in MPI, waiting for this task. */
  rf_status *st = rf__mpi_set_reserve(j, op->nset, op->tasks);
  rf_code sent = st ? RF_RESOURCE_EXHAUSTED
                    : rf__mpi_send_msg(j, 0, &h, op->name, op->devices, rep);
  if (sent == RF_OK) return;
  rf_status_free(st);
  /* READY unsent: fail here at once (not after waiting for a verdict that
   * cannot come, as if task 0 had stopped), and tell the job (that needs
   * memory too: else the others time out waiting for this task). */
  st = rf__error(
      sent,
      "collective '%s' (job step %lld) on %s: could not send "
      "this task's READY to task 0 (%s)",
      op->name, (long long)op->job_step, s->device->canonical,
      sent == RF_RESOURCE_EXHAUSTED ? "out of memory" : "MPI_Isend failed");
  rf__job_coll_failed(j, op->name, op->job_step, st);
  rf__mpi_agreed_verdict(j, op, false, RF_AGREE_NO); /* not kept */
  HASH_DEL(j->ops, op);
  report(op, st);
  unref(op);
}

/* NULL also without memory for a long name's key (the op then times out). */
static rf__mpi_op *find_op(rf__job *j, const char *name, int64_t job_step) {
  char buf[256];
  char *key = rf__mpi_key(name, job_step, buf, sizeof buf);
  rf__mpi_op *op = NULL;
  if (key) HASH_FIND_STR(j->ops, key, op);
  rf__mpi_key_free(key, buf);
  return op;
}

static void drop(rf__job *j, rf__mpi_op *op) {
  HASH_DEL(j->ops, op);
  unref(op);
}

void rf__mpi_member_drop(rf__job *j, rf__mpi_op *op) { drop(j, op); }

bool rf__mpi_member_has(rf__job *j, const char *name, int64_t job_step) {
  return find_op(j, name, job_step) != NULL;
}

void rf__mpi_member_verdict(rf__job *j, const rf__mpi_msg_view *v,
                            int64_t now) {
  rf__mpi_op *op = find_op(j, v->name, v->h->job_step);
  if (!op || op->state != RF_OP_WAIT_VERDICT) return;
  if (v->h->type == RF_MSG_ABORT) {
    /* Timed out waiting for some task: it may be dead. */
    if (v->h->code == RF_DEADLINE_EXCEEDED) rf__mpi_peer_suspect(j, now);
    rf__mpi_agreed_verdict(j, op, false, RF_AGREE_NO);
    report(op, rf__status_text((rf_code)v->h->code, v->text));
    drop(j, op);
    return;
  }
  op->state = RF_OP_GO;
  /* Waiting to be issued (behind earlier GOs, a blocking call, or its own
   * data): bounded too, by the same margin as the wait for a verdict. */
  op->deadline_ns =
      rf__mpi_now_ns() + (op->timeout_ms + grace_ms(op)) * 1000000;
  op->go_next = NULL;
  if (j->go_tail)
    j->go_tail->go_next = op;
  else
    j->go_head = op;
  j->go_tail = op;
  op->root_index = v->h->root_index;
  op->root_rank = v->h->root_rank;
  int64_t dims[RF_MAX_RANK];
  int rank = v->h->rank < RF_MAX_RANK ? v->h->rank : RF_MAX_RANK;
  for (int i = 0; i < rank; i++) dims[i] = v->h->dims[i];
  op->root_shape = rf_shape_make(rank, dims);
  rf__mpi_agreed_verdict(j, op, true, v->h->agree);
}

void rf__mpi_member_cancel_step(rf__job *j, int64_t step_id,
                                const rf_status *why) {
  rf__mpi_op *op, *tmp;
  HASH_ITER(hh, j->ops, op, tmp) {
    if (op->step_id == step_id) report(op, copy_status(why));
  }
}

/* Marks the job unusable: a collective did not finish, so its
 * communicator holds an operation that may never complete. */
static void break_job(rf__job *j, const rf__mpi_op *op, int64_t now) {
  rf__mpi_peer_suspect(j, now);
  if (j->broken) return;
  j->broken = rf__error(RF_FAILED_PRECONDITION,
                        "an earlier collective across processes ('%s', job "
                        "step %lld) did not finish; this session cannot run "
                        "collectives across processes any more: make the "
                        "sessions again in every process",
                        op->name, (long long)op->job_step);
}

/* 1: issued (or failed and dropped); 0: not yet (GPU communicators being
 * made), the op stays first in the GO queue. */
static int issue(rf__job *j, rf__mpi_op *op, int64_t now) {
  rf__mpi_set *set = NULL;
  rf_status *st = rf__mpi_set_get(j, op->nset, op->tasks, &set);
  if (!st && op->gpu) {
    if (!rf__mpi_gpu_issue(j, op, set, &st)) return 0;
  } else if (!st && op->blocking) {
    if (j->in_flight > 0) return 0; /* alone on its communicators */
    op->set = set;
    j->blocking = op;
    /* kept agreed: its communicators, before the data thread uses set's */
    rf__mpi_agreed_issued(j, op, set->comm, NULL);
    rf__mpi_data_thread_run(j, op);
  } else if (!st) {
    /* Shared memory: the set's segment, made at the first such GO (every
     * member is there now, as for sets.c's communicators), for
     * collectives of any size (the slot's largest). */
    rf__mpi_shm *shm = NULL;
    if (op->algo == RF_MPI_SHM)
      st =
          RF_MPI_STATUS(rf__mpi_shm_of(set->comm, INT64_MAX, j->crowded, &shm));
    if (!st) st = rf__mpi_op_issue(op, set->comm);
    rf__mpi_agreed_issued(j, op, set->comm, st);
  }
  if (st) {
    rf__mpi_agreed_verdict(j, op, false, RF_AGREE_NO); /* not kept */
    if (set) set->broken = true;
    report(op, st);
    drop(j, op);
    return 1;
  }
  op->state = RF_OP_IN_FLIGHT;
  op->deadline_ns = now + op->timeout_ms * 1000000;
  op->issued_ns = now;
  op->bytes = rf__mpi_op_bytes(op);
  j->in_flight++;
  return 1;
}

/* Asks every other task of op's set whether it is there: its engine
 * answers even while the collective is stuck, unless it died or stopped. */
void rf__mpi_member_probe(rf__job *j, rf__mpi_op *op, int64_t now) {
  op->probe_ns = now + PROBE_MS * 1000000;
  op->answered = op->nset > 0 ? rf__calloc((size_t)op->nset, 1) : NULL;
  if (!op->answered) return; /* no names then */
  op->answered[op->me] = 1;
  rf__mpi_msg h = {.type = RF_MSG_PING, .job_step = op->job_step};
  for (int i = 0; i < op->nset; i++)
    if (i != op->me)
      rf__mpi_send_msg(j, op->tasks[i], &h, op->name, NULL, NULL);
}

void rf__mpi_member_pong(rf__job *j, const rf__mpi_msg_view *v) {
  rf__mpi_op *op = find_op(j, v->name, v->h->job_step);
  if (!op || !op->answered) return;
  for (int i = 0; i < op->nset; i++)
    if (op->tasks[i] == v->h->task) op->answered[i] = v->h->code == 2 ? 2 : 1;
}

bool rf__mpi_peer_left(const rf__job *j, int t) {
  return j && j->task == 0 && j->peers && t > 0 && t < j->ntasks &&
         j->peers[t] == RF_PEER_LEFT;
}

/* "task 2, task 5" of op's set that did not answer the probe, in `buf`,
 * or in `left` those that task 0 knows freed their session; on task 0 the
 * others are marked lost (not waited for when it leaves). */
static void silent_tasks(rf__job *j, const rf__mpi_op *op, char *buf,
                         char *left, size_t len) {
  size_t used = 0, used_left = 0;
  buf[0] = left[0] = '\0';
  for (int i = 0; op->answered && i < op->nset; i++) {
    if (op->answered[i]) continue;
    int t = op->tasks[i];
    bool gone = rf__mpi_peer_left(j, t);
    char *b = gone ? left : buf;
    size_t *u = gone ? &used_left : &used;
    if (*u < len)
      *u += (size_t)snprintf(b + *u, len - *u, "%stask %d", *u ? ", " : "", t);
    if (j->task == 0 && t > 0 && t < j->ntasks && j->peers &&
        j->peers[t] == RF_PEER_OK)
      j->peers[t] = RF_PEER_LOST;
  }
}

/* The parts of rf__mpi_probe_text, without its " (...)"; "" when none. */
static void probe_parts(const char *silent, const char *alive, const char *left,
                        bool knows_left, char *buf, size_t len) {
  char a[1200] = "", b[1200] = "", c[1200] = "";
  if (silent[0])
    snprintf(a, sizeof a, "%s did not answer within %d ms: %s", silent,
             PROBE_MS,
             knows_left ? "died or stopped"
                        : "died, stopped or freed its "
                          "session");
  if (alive[0])
    snprintf(b, sizeof b,
             "%s answers: it has not reached this collective, maybe held up "
             "by an earlier one",
             alive);
  if (left[0])
    snprintf(c, sizeof c,
             "%s left before reaching it: it freed its session or exited",
             left);
  snprintf(buf, len, "%s%s%s%s%s", a, a[0] && (b[0] || c[0]) ? "; " : "", b,
           b[0] && c[0] ? "; " : "", c);
}

/* The deadline of an op in flight passed: probe first, then report. */
static void time_out(rf__job *j, rf__mpi_op *op, int64_t now) {
  if (!op->probe_ns) {
    rf__mpi_member_probe(j, op, now);
    op->deadline_ns = op->probe_ns;
    return;
  }
  op->deadline_ns = 0;
  char silent[512], left[512], why[1400];
  silent_tasks(j, op, silent, left, sizeof silent);
  if (silent[0] || left[0])
    probe_parts(silent, "", left, j->task == 0, why, sizeof why);
  else
    snprintf(why, sizeof why, "%s",
             op->answered ? "every task of it still answers: MPI is stuck"
                          : "a process may have died");
  report(op, rf__log_status(
                 RF_LOG_WARN, NULL,
                 rf__error(RF_DEADLINE_EXCEEDED,
                           "collective '%s' (job step %lld): the MPI "
                           "collective did not finish within %lld ms (%s)",
                           op->name, (long long)op->job_step,
                           (long long)op->timeout_ms, why)));
  if (op->gpu) rf__mpi_gpu_abort(op->set); /* its streams then end */
  break_job(j, op, now);
}

void rf__mpi_probe_text(const char *silent, const char *alive, const char *left,
                        bool knows_left, char *buf, size_t len) {
  char parts[3700];
  probe_parts(silent, alive, left, knows_left, parts, sizeof parts);
  buf[0] = '\0';
  if (parts[0]) snprintf(buf, len, " (%s)", parts);
}

/* An op in flight: tested, or timed out (it stays, reported, until MPI lets
 * go of its buffers). */
static int test(rf__job *j, rf__mpi_op *op, int64_t now) {
  int done = 0;
  rf_status *st = NULL;
  if (op->gpu || op->blocking) {
    done = atomic_load(&op->async_done);
    if (done) st = op->async_status, op->async_status = NULL;
  } else {
    st = RF_MPI_STATUS(rf__mpi_reqs_test(&op->req, &done));
  }
  if (st || done) {
    if (op->fast)
      j->fast_in_flight--;
    else
      j->in_flight--;
    if (j->blocking == op) j->blocking = NULL;
    if (!st && op->nset == j->ntasks) /* every task is alive */
      rf__mpi_peer_resolved(j, op->issued_ns);
    /* The last op in flight, none to issue: its participants continue here
     * (they may start the next collective at once). */
    report_on(op, st,
              !st && j->in_flight + j->fast_in_flight == 0 && !j->go_head);
    drop(j, op);
    return 1;
  }
  if (op->deadline_ns && now >= op->deadline_ns) time_out(j, op, now);
  return 0;
}

int rf__mpi_member_poll(rf__job *j, int64_t now, bool *busy, bool *waiting) {
  int progress = 0;
  /* GO order: an op whose data is not ready holds back the ones after it.
   * A blocking call on the data thread holds the queue: no other collective
   * of this job may start while it uses the job's communicators. A broken
   * job starts nothing more (its queued ops fail below). */
  while (!j->blocking && !j->broken && j->go_head &&
         atomic_load(&j->go_head->prepared)) {
    rf__mpi_op *op = j->go_head, *next = op->go_next; /* issue may drop op */
    if (!issue(j, op, now)) break;
    j->go_head = next;
    if (!next) j->go_tail = NULL;
    progress++;
  }
  /* Spin only for what needs MPI calls to move: an op waiting behind a
   * blocking call or for its data, and ops completed by another thread,
   * wake the engine when they are through. */
  if (j->go_head && !j->blocking && !j->broken &&
      atomic_load(&j->go_head->prepared))
    *busy = true;
  else if (j->go_head && !j->broken)
    *waiting = true;
  j->busy_bytes = 0;
  progress += rf__mpi_agreed_poll(j, now, busy, waiting);
  rf__mpi_op *op, *tmp;
  HASH_ITER(hh, j->ops, op, tmp) {
    switch (op->state) {
      case RF_OP_QUEUED:
      case RF_OP_CHECK:
      case RF_OP_PASSED:
      case RF_OP_DRAIN: break; /* agreed.c */
      case RF_OP_GO: /* not issued yet: the earlier ones hold it back */
        if (!atomic_load(&op->reported) && !j->broken && now >= op->deadline_ns)
          rf__mpi_peer_suspect(j, now);
        if (!atomic_load(&op->reported) &&
            (j->broken || now >= op->deadline_ns))
          report(
              op,
              j->broken
                  ? copy_status(j->broken)
                  : rf__log_status(
                        RF_LOG_WARN, NULL,
                        rf__error(RF_DEADLINE_EXCEEDED,
                                  "collective '%s' (job step %lld): "
                                  "could not start within %lld ms: "
                                  "an earlier collective across "
                                  "processes has not finished",
                                  op->name, (long long)op->job_step,
                                  (long long)(op->timeout_ms + grace_ms(op)))));
        break;
      case RF_OP_IN_FLIGHT:
        if (op->gpu || op->blocking) {
          *waiting = true;
        } else {
          *busy = true;
          if (op->bytes > j->busy_bytes) j->busy_bytes = op->bytes;
        }
        progress += test(j, op, now);
        break;
      default: /* waiting for the verdict */
        *waiting = true;
        if (op->deadline_ns && now >= op->deadline_ns) {
          op->deadline_ns = 0;
          rf__mpi_peer_suspect(j, now); /* task 0 may be dead */
          report(op,
                 rf__log_status(
                     RF_LOG_WARN, NULL,
                     rf__error(RF_DEADLINE_EXCEEDED,
                               "collective '%s' (job step %lld): no "
                               "verdict from task 0, the job's "
                               "coordinator, within %lld ms: task 0 has "
                               "stopped, or does not run this step",
                               op->name, (long long)op->job_step,
                               (long long)(op->timeout_ms + grace_ms(op)))));
        }
    }
  }
  return progress;
}

/* Nonblocking collectives that never finished, kept to the end: MPI may
 * still write their buffers, and OpenMPI refuses to free an active
 * collective's request (an error on MPI_COMM_WORLD, fatal by default).
 * Reachable from here, so no leak checker counts them. Engine thread. */
static rf__mpi_op *abandoned;

void rf__mpi_member_free(rf__job *j) {
  j->go_head = j->go_tail = NULL;
  rf__mpi_op *op, *tmp;
  HASH_ITER(hh, j->ops, op, tmp) {
    HASH_DEL(j->ops, op);
    report(op, rf__error(RF_CANCELLED, "collective '%s': the session closed",
                         op->name));
    if (op->state == RF_OP_CHECK || op->state == RF_OP_DRAIN) {
      /* MPI may still write its check, or the data issued with it */
      int done = 0, moved = 1;
      if (op->spec && rf__mpi_reqs_pending(&op->req) &&
          rf__mpi_reqs_test(&op->req, &moved) != MPI_SUCCESS)
        moved = 0;
      if (rf__mpi_reqs_test(&op->check_q, &done) != MPI_SUCCESS || !done ||
          !moved) {
        op->go_next = abandoned;
        abandoned = op;
        continue;
      }
    }
    if (op->state == RF_OP_IN_FLIGHT) { /* MPI may still use its buffers */
      int done = 0;
      if (!op->gpu && !op->blocking &&
          (rf__mpi_reqs_test(&op->req, &done) != MPI_SUCCESS || !done)) {
        rf__mpi_peer_suspect(NULL, rf__mpi_now_ns()); /* unfinished */
        op->go_next = abandoned;
        abandoned = op;
      } else if (done) {
        unref(op);
      }
      continue;
    }
    unref(op);
  }
}
