/* comm/mpi/engine.h - how the parts of the MPI job (comm/job.h) share state.
 *
 * One communication thread per process, the engine (engine.c), makes every
 * MPI call but the blocking collectives (MPI's blocking calls and ringflow's
 * rings, by kind and size: algorithm.c; on the
 * job's data thread, data_thread.c, when MPI gives MPI_THREAD_MULTIPLE);
 * other threads hand it commands and never wait for it, except
 * rf_session_new and rf_session_free (attach and detach). A collective with
 * participants in several processes goes:
 *
 *   executor thread: local group complete -> op (member.c): buffers
 *     allocated, READY queued, this process's part reduced or gathered
 *     (data.c) while the READY travels;
 *   engine: READY -> task 0, the job's coordinator (coordinator.c), which
 *     checks that every task's descriptor agrees and answers GO (or ABORT
 *     with the message naming the field, devices or missing tasks) in ONE
 *     order for the whole job;
 *   engine: on GO, the MPI collective on the participant set's
 *     communicator (sets.c), in GO order, so every process issues the
 *     collectives of a communicator in the same order: nonblocking and
 *     polled by the engine, or blocking on the job's data thread (alone:
 *     nothing else of the job starts meanwhile), or NCCL for GPUs (gpu.c);
 *     against the deadline; completion -> the participants' dones, on the
 *     engine thread when it has nothing else to watch, else a pool task.
 *
 * That is a collective's first step. Once agreed (agreed.c), its later
 * steps skip READY/GO: the engine runs a check all-reduce and then the data
 * on the collective's own communicator (blocking data: on a thread and a
 * second communicator of the collective's own), and falls back to READY
 * when the check finds a difference.
 *
 * Ownership: commands belong to the engine once submitted; an op is shared
 * by its preparing thread, the engine and its report task (refs). */
#ifndef RF_COMM_MPI_ENGINE_H
#define RF_COMM_MPI_ENGINE_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>

#include "comm/job.h"
#include "core/hash.h"

#define RF_MPI_TAG_CTL 7 /* every control message, on a job's ctl comm */
/* A message's text (an error) is cut here; names and devices never are. */
#define RF_MPI_TEXT_MAX 16384

int64_t rf__mpi_now_ns(void);

/* ---- control messages (protocol.c) ---- */

enum {
  RF_MSG_READY = 1,   /* member -> coordinator: this task's part is ready */
  RF_MSG_FAILED,      /* member -> coordinator: this task's part failed */
  RF_MSG_STEP_FAILED, /* member -> coordinator: this task's job step failed */
  RF_MSG_GO,          /* coordinator -> members: run it now */
  RF_MSG_ABORT,       /* coordinator -> members: fail it (code, text) */
  RF_MSG_BYE,         /* member -> coordinator: this task left the session */
  /* A collective did not finish: is each task of it still there? */
  RF_MSG_PING, /* member -> member: name, job_step */
  RF_MSG_PONG  /* the answer, from the engine thread (not the stuck MPI) */
};

/* The fixed part of a message; name, devices and text follow it. */
typedef struct rf__mpi_msg {
  int32_t type, task; /* task: the sender */
  /* The session's number in the job (agreed when it attached): a message
   * of an earlier session, which MPI may deliver on a new communicator that
   * reuses the freed one's context id, is dropped. */
  int64_t epoch;
  int64_t job_step;
  int32_t code; /* FAILED, STEP_FAILED, ABORT: an rf_code */
  /* READY: what this task's participants run */
  int32_t kind, dtype, reduction, device_type, num_devices;
  int32_t local_count, local_roots, has_input;
  int32_t rank; /* shape (input, or a receiver's expected shape) */
  int64_t dims[RF_MAX_RANK];
  int64_t timeout_ms;
  int32_t local_root; /* READY: the root's index among this task's */
  /* GO: the root's task (index in the set), rank in the job and shape */
  int32_t root_index, root_rank;
  /* READY: whether this task can keep the collective agreed (agreed.c):
   * RF_AGREE_*; GO: the coordinator's decision, the same for every task. */
  int32_t agree;
  /* READY: this task's RF_MPI_ALGORITHM (rf__mpi_algorithm; RF_MPI_AUTO
   * unset), which every task must share: one process in MPI's call and
   * another in ringflow's ring on one communicator crash or hang. */
  int32_t algo_setting;
  /* READY: a reduce's or broadcast's root as this task's graph places it:
   * 1 + its position in the group's devices (0: unknown). A task that does
   * not hold the root says where its graph puts it, so graphs that put it on
   * different tasks are caught even when only one task holds it. */
  int32_t root_at;
  int32_t name_len, devices_len, text_len;
} rf__mpi_msg;

/* A decoded message: pointers into the receive buffer. */
typedef struct rf__mpi_msg_view {
  const rf__mpi_msg *h;
  const char *name, *devices, *text; /* NUL-terminated copies' bounds */
} rf__mpi_msg_view;

/* ---- participant sets (sets.c) ---- */

/* The tasks of a group, sorted, and how many participants each holds. */
typedef struct rf__mpi_set {
  char *key; /* "0,1,3" */
  int n;
  int *tasks, *counts;
  MPI_Comm comm; /* MPI_COMM_NULL until first used; the job's data comm
                    for all tasks */
  bool owned, broken;
  void *nccl;      /* GPU sets: NCCL's communicators (comm/mpi/gpu.c) */
  bool nccl_ready; /* made, not just started */
  UT_hash_handle hh;
} rf__mpi_set;

/* Parses "/task:0/cpu:0,/task:1/cpu:0" into tasks and counts (rf__malloc'ed
 * arrays, sorted by task). INVALID_ARGUMENT for a name without a task. On
 * error *n, *tasks and *counts are untouched. */
rf_status *rf__mpi_parse_set(const char *devices, int *n, int **tasks,
                             int **counts);

/* The same, for a collective of job j at a step: the string's first parse
 * is kept in j (its every step parses the same string) and copied after.
 * Errors are not kept. */
rf_status *rf__mpi_job_parse_set(rf__job *j, const char *devices, int *n,
                                 int **tasks, int **counts);

/* ---- a job's state (engine.c, job.c) ---- */

typedef struct rf__mpi_op rf__mpi_op;
typedef struct rf__mpi_centry rf__mpi_centry;
typedef struct rf__mpi_fstep rf__mpi_fstep;
typedef struct rf__mpi_send rf__mpi_send;
typedef struct rf__mpi_data_thread rf__mpi_data_thread;
typedef struct rf__mpi_agreed rf__mpi_agreed;
typedef struct rf__mpi_told rf__mpi_told;

struct rf__job {
  /* Fixed after attach; any thread reads them. */
  int task, ntasks;
  int *ncpu, *ngpu; /* [ntasks] */
  rf__threadpool *pool;
  int64_t timeout_ms;
  /* Engine thread only. */
  MPI_Comm ctl, data;
  char *recv_buf; /* the last message received, grown to fit */
  size_t recv_cap;
  rf__mpi_send *sends; /* in flight */
  rf__mpi_op *ops;     /* this task's collectives, by key */
  /* Ops told GO and not issued yet, in GO order: they are issued in this
   * order, which is the same in every process. */
  rf__mpi_op *go_head, *go_tail;
  int in_flight;      /* ops whose data is moving (agreed ones apart) */
  int fast_in_flight; /* agreed ops whose data is moving (agreed.c) */
  /* Collectives agreed once (agreed.c), by name; retired ones are kept
   * until the job leaves (a check of theirs may still be pending). */
  rf__mpi_agreed *agreed, *retired;
  /* Failures other tasks told this one (FAILED, STEP_FAILED): an agreed
   * collective waits in its check with no coordinator to fail it, so each
   * member fails it itself (agreed.c). */
  rf__mpi_told *told;
  /* Ops the direct path handed back that could not join `ops` (no memory):
   * retried by the poll (agreed.c); linked by go_next. */
  rf__mpi_op *unlisted;
  rf__mpi_op *blocking; /* on the data thread: nothing else starts */
  rf__mpi_data_thread *data_thread; /* started at the first blocking op */
  rf__mpi_centry *centries;         /* task 0: collectives being agreed */
  rf__mpi_fstep *failed;            /* task 0: failed job steps */
  /* task 0: collectives it had no memory to record (coordinator.c), kept
   * without allocating so that their later READYs fail at once too */
  struct {
    int64_t job_step, forget_ns;
    uint64_t name_hash;
  } oom[8];
  int num_oom;
  rf__mpi_set *sets;                 /* by key */
  struct rf__mpi_parsed_set *parsed; /* sets.c: by devices string */
  int num_parsed;
  rf_status *broken; /* set: no more collectives */
  /* A peer may be dead: a collective timed out waiting for other tasks
   * (rf__mpi_peer_suspect), and none spanning every task has completed
   * since (rf__mpi_peer_resolved). Counted in the engine's exit decision. */
  bool suspect;
  int64_t suspect_ns;
  /* Bytes of the largest nonblocking collective in flight (member.c): how
   * long the engine spins for it before it backs off. */
  int64_t busy_bytes;
  struct rf__job *next; /* the engine's list */
  int64_t epoch;        /* see rf__mpi_msg */
  /* Told at attach, alike in every process: some node runs more of the
   * job's processes than they have cores (core/cores.h), and whether every
   * process runs on one machine. The table's shared-memory rows need a
   * job on one machine that is not crowded (algorithm.c). */
  bool crowded, one_host;
  /* Leaving (task 0): it coordinates until every task said BYE (its last
   * message), so no late task waits for a verdict that never comes; a task
   * that a collective timed out waiting for, and that has sent nothing
   * since, is not waited for (it may be dead). */
  unsigned char *peers; /* [ntasks]: RF_PEER_* (task 0) */
  int64_t leave_deadline;
  /* Attaching (job.c): the duplicates, then the exchange of device counts
   * and of each process's next epoch; NULL once attached. */
  struct rf__mpi_attach *attach;
  /* Steps of this process in the job (rf__job_begin_step); any thread. */
  pthread_mutex_t mu;
  struct {
    int64_t step, job_step;
    bool cancelled; /* rf__job_cancel_step was called */
  } * steps;
  int num_steps, cap_steps;
  int unrecorded_steps; /* begun without a record (no memory) */
  /* Steps of this session running here: while any does, the engine looks
   * at the network at least every millisecond (messages for the coordinator
   * can come before this process's own part of a collective). */
  atomic_int active_steps;
};

enum { RF_PEER_OK, RF_PEER_LEFT, RF_PEER_LOST };

/* ---- the engine (engine.c) ---- */

typedef enum rf__mpi_cmd_kind {
  RF_CMD_ATTACH,
  RF_CMD_DETACH,
  RF_CMD_READY,       /* op */
  RF_CMD_FAILED,      /* name, job_step, code, text */
  RF_CMD_STEP_FAILED, /* job_step, code, text */
  RF_CMD_CANCEL_STEP, /* step_id, job_step, code, text */
  /* Nothing to do: its caller waits (rf__mpi_engine_call) until every
   * command queued before it was handled (rf__job_settle). */
  RF_CMD_SETTLE
} rf__mpi_cmd_kind;

typedef struct rf__mpi_cmd {
  rf__mpi_cmd_kind kind;
  rf__job *job;
  rf__mpi_op *op;
  char *name, *text;
  int64_t step_id, job_step;
  rf_code code;
  /* ATTACH (and DETACH): the caller waits for done */
  MPI_Comm parent;
  int ncpu, ngpu;
  bool done;
  rf_status *result;
  struct rf__mpi_cmd *next;
} rf__mpi_cmd;

/* Starts the engine (once per process: it initialises MPI unless the
 * program did, and finalises what it initialised at exit). The error when
 * MPI cannot be used; world rank and size otherwise. */
rf_status *rf__mpi_engine_start(int *world_rank, int *world_size);
/* Queues c (the engine owns it from now on) and wakes the engine. */
void rf__mpi_engine_submit(rf__mpi_cmd *c);
/* Queues c and waits until the engine marks it done; returns c->result. */
rf_status *rf__mpi_engine_call(rf__mpi_cmd *c);
/* Wakes the engine (an op became ready to issue, or completed elsewhere). */
void rf__mpi_engine_wake(void);
/* Wakes the engine only from its long sleep (nothing pending, no step
 * running): a step began, so it should look at the network every
 * millisecond. Waking it at every step cost a context switch per step, on
 * the critical path of a small collective (13-22 us on the loaded 2-core
 * VM, docs/PERFORMANCE.md). */
void rf__mpi_engine_nudge(void);
/* How many polls between yields while spinning: 4 when the node runs at
 * least as many ranks as cores, else 64; RF_MPI_YIELD_EVERY overrides. */
int rf__mpi_yield_every(void);
/* The tuning variables (algorithm.c; docs/MULTIPROCESS.md, "Tuning
 * variables"), each read once. rf__mpi_env_flag: RF_MPI_DIRECT,
 * RF_MPI_AGREE_ONCE, RF_MPI_BACKOFF: 1 unset, 0 or 1 as set, -2 anything
 * else ("", "yes", " 1"). rf__mpi_env_count: RF_MPI_YIELD_EVERY: -1 unset,
 * the value for a decimal number from 1 to INT_MAX (digits only), -2
 * anything else. Callers take their default for -2; rf__mpi_env_error
 * turns it into the collective's error. */
int rf__mpi_env_flag(const char *var);
int rf__mpi_env_count(const char *var);
/* INVALID_ARGUMENT naming the first of RF_MPI_ALGORITHM,
 * RF_MPI_DIRECT_MAX_BYTES, RF_MPI_DIRECT, RF_MPI_AGREE_ONCE,
 * RF_MPI_BACKOFF and RF_MPI_YIELD_EVERY that holds a bad value, and the
 * value, for collective `name`; NULL when all are good (an atomic load
 * after the first call). */
rf_status *rf__mpi_env_error(const char *name);
/* Whether MPI gives MPI_THREAD_MULTIPLE (after rf__mpi_engine_start). */
bool rf__mpi_thread_multiple(void);
/* A collective of j (NULL: a session's making) timed out waiting for other
 * processes: one may be dead. Until rf__mpi_peer_resolved (a collective
 * spanning every task of j, issued after now, completed), the engine
 * finalises MPI at exit only if every process reaches its exit within
 * RF_MPI_EXIT_WAIT_MS (engine.c). Engine thread. */
void rf__mpi_peer_suspect(rf__job *j, int64_t now);
void rf__mpi_peer_resolved(rf__job *j, int64_t issued_ns);

/* ---- jobs on the engine thread (job.c) ---- */

/* Attach/detach steps: start (nonblocking duplicates and exchange), poll
 * (true when finished: c->result is the error, or the job holds its
 * communicators), detach (frees what the job holds; after a failed attach
 * too). */
void rf__mpi_job_attach_start(rf__mpi_cmd *c);
bool rf__mpi_job_attach_poll(rf__mpi_cmd *c, int64_t now);
void rf__mpi_job_detach(rf__job *j);
/* Attaches this process gave up on (their timeout passed) finish in the
 * background, so that every process's MPI calls stay matched: a late
 * process's duplicates complete against them, and the exchange tells it
 * that this one gave up. One given up on before it issued its duplicates
 * (it waited behind an earlier one) issues them in its turn, unless
 * `issue` is false (at exit: a process that went on differently must not
 * leave this one in a new MPI call). Returns how many progressed;
 * *pending says whether any has MPI calls outstanding. Engine thread. */
int rf__mpi_attach_poll_abandoned(bool issue, bool *pending);
/* Leaving: members send BYE and may go at once (true); task 0 may go once
 * every other task's BYE came or the session's timeout passed. */
void rf__mpi_job_leave_start(rf__job *j);
bool rf__mpi_job_may_leave(const rf__job *j, int64_t now);
/* One round of a job's MPI work; returns how much progressed (0: none).
 * *busy: data in flight (keep polling); *waiting: answers awaited. */
int rf__mpi_job_poll(rf__job *j, int64_t now, bool *busy, bool *waiting);
void rf__mpi_job_command(rf__mpi_cmd *c);
/* Whether step step_id of this process is recorded (rf__job_begin_step),
 * so that its cancellation can reach the other processes; any thread. */
bool rf__mpi_job_step_recorded(rf__job *j, int64_t step_id);

/* ---- messages (protocol.c) ---- */

/* Sends a message to `to` on j->ctl (copied; completes in the background).
 * Strings may be NULL; name and devices go whole, text is cut at
 * RF_MPI_TEXT_MAX. Returns RF_OK, or why nothing was sent
 * (RESOURCE_EXHAUSTED: no memory; UNAVAILABLE: MPI_Isend failed): the peer
 * then times out unless the caller does better. */
rf_code rf__mpi_send_msg(rf__job *j, int to, const rf__mpi_msg *h,
                         const char *name, const char *devices,
                         const char *text);
/* Sends one message to each of to[0..n): all of them, or (without memory
 * for every copy) none and RESOURCE_EXHAUSTED; UNAVAILABLE when an
 * MPI_Isend failed (the others went). */
rf_code rf__mpi_send_msg_all(rf__job *j, int n, const int *to,
                             const rf__mpi_msg *h, const char *name,
                             const char *devices, const char *text);
/* Receives the next message if one came: 1 with *v filled (valid until the
 * next call), 0 when none came, -1 when one came that is dropped (another
 * session's, malformed, or no memory for it). An MPI error is *err (and 0):
 * no more messages can come. */
int rf__mpi_recv(rf__job *j, rf__mpi_msg_view *v, rf_status **err);
/* "name\x1fjob_step": the key of a collective of a job step, in buf when it
 * fits in len bytes, else rf__malloc'ed (names have any length); NULL
 * without memory. Release with rf__mpi_key_free(key, buf). */
char *rf__mpi_key(const char *name, int64_t job_step, char *buf, size_t len);
void rf__mpi_key_free(char *key, const char *buf);
/* Completes finished sends; true while some are in flight. */
bool rf__mpi_poll_sends(rf__job *j);
/* Cancels or abandons what is in flight (detach). */
void rf__mpi_drop_messages(rf__job *j);
/* Frees the abandoned sends' buffers (the engine, once MPI is finalised or
 * the process exits). */
void rf__mpi_free_orphans(void);

/* ---- collectives agreed once (agreed.c) ---- */

/* READY's agree field: NO (run this one through task 0 only), NEW (keep it
 * agreed: a communicator of its own is made at GO), UPDATE (it is agreed
 * already: its descriptor changed the same way everywhere). GO's: the
 * decision, NEW only when every task said NEW, UPDATE when every task said
 * UPDATE. */
enum { RF_AGREE_NO, RF_AGREE_NEW, RF_AGREE_UPDATE };

/* Whether collectives are kept agreed (RF_MPI_AGREE_ONCE=0: never). */
bool rf__mpi_agree_once(void);
/* Another task's FAILED or STEP_FAILED (engine thread): this task's agreed
 * collectives of that job step that wait for the sender's check fail with
 * its error (they would wait out the timeout); kept a while for those that
 * have not come yet. */
void rf__mpi_agreed_told(rf__job *j, const rf__mpi_msg_view *v, int64_t now);
/* Sends this task's FAILED or STEP_FAILED (h; name: FAILED's collective)
 * to the tasks other than 0 that may wait in a check for it: the members
 * of its agreed collectives (of that name, for FAILED), but not of one
 * whose members were told of that step's failure by one of them already
 * (else a failure would echo N^2 messages through the job). */
void rf__mpi_agreed_tell(rf__job *j, const rf__mpi_msg *h, const char *name,
                         const char *text);

/* ---- the coordinator, task 0 (coordinator.c) ---- */

void rf__mpi_coord_handle(rf__job *j, const rf__mpi_msg_view *v, int64_t now);
/* Deadlines and forgetting; true while collectives are being agreed. */
bool rf__mpi_coord_poll(rf__job *j, int64_t now);
/* A PONG to task 0's probe of a collective that timed out waiting. */
void rf__mpi_coord_pong(rf__job *j, const rf__mpi_msg_view *v);
void rf__mpi_coord_free(rf__job *j);

/* ---- this task's collectives (member.c) ---- */

void rf__mpi_member_ready(rf__job *j, rf__mpi_op *op); /* RF_CMD_READY */
void rf__mpi_member_verdict(rf__job *j, const rf__mpi_msg_view *v, int64_t now);
void rf__mpi_member_pong(rf__job *j, const rf__mpi_msg_view *v);
void rf__mpi_member_cancel_step(rf__job *j, int64_t step_id,
                                const rf_status *why);
/* Issues, tests and times out ops; counts progress. */
int rf__mpi_member_poll(rf__job *j, int64_t now, bool *busy, bool *waiting);
void rf__mpi_member_free(rf__job *j);

/* ---- participant sets' communicators (sets.c) ---- */

/* Makes the record of the set of tasks[0..n) (no communicator yet), so
 * that rf__mpi_set_get after GO allocates nothing of ringflow's: a member
 * that could not record the set there would leave the others in
 * MPI_Comm_create_group. RESOURCE_EXHAUSTED without memory. */
rf_status *rf__mpi_set_reserve(rf__job *j, int n, const int *tasks);
/* The communicator of the set of tasks[0..n) (a new one is made on first
 * use, in GO order, so every member makes it at the same point). */
rf_status *rf__mpi_set_get(rf__job *j, int n, const int *tasks,
                           rf__mpi_set **out);
void rf__mpi_sets_free(rf__job *j);

/* ---- GPU participants: NCCL (gpu.c) ---- */

/* Allocates a GPU op's outputs (comm/mpi/op.h). */
rf_status *rf__mpi_gpu_alloc(rf__mpi_op *op);
/* Issues a GPU op on GO: 1 when launched (or failed: *st), 0 while its
 * set's communicators are still being made (try again). */
int rf__mpi_gpu_issue(rf__job *j, rf__mpi_op *op, rf__mpi_set *set,
                      rf_status **st);
/* Gives up on a set's communicators (a collective did not finish). */
void rf__mpi_gpu_abort(rf__mpi_set *set);
void rf__mpi_gpu_free(rf__mpi_set *set);

#endif
