/* comm/mpi/op.h - one collective of this task with other tasks (member.c
 * runs it, data.c moves its data): this process's participants (in rank
 * order, inputs retained), the descriptor sent to the coordinator, buffers
 * and state. Global rank order is task-major: task 0's participants (by
 * device index), then task 1's, ... */
#ifndef RF_COMM_MPI_OP_H
#define RF_COMM_MPI_OP_H

#include "comm/mpi/engine.h"

enum {
  RF_OP_WAIT_VERDICT, /* READY sent to task 0 */
  RF_OP_GO,           /* told GO, waiting in the GO queue */
  RF_OP_IN_FLIGHT,    /* its MPI collective is running */
  /* Agreed once (agreed.c): queued on its name's entry, its check running,
   * its check passed (the data go next on the entry's communicator). */
  RF_OP_QUEUED,
  RF_OP_CHECK,
  RF_OP_PASSED,
  /* Its check failed while its data (issued with the check) run: they
   * finish before it goes on (agreed.c). */
  RF_OP_DRAIN
};

/* How a collective's data moves (algorithm.c); RF_MPI_AUTO only as the
 * forced value "none". */
typedef enum rf__mpi_algorithm {
  RF_MPI_AUTO,
  RF_MPI_NBC,      /* MPI's nonblocking collective, communication thread */
  RF_MPI_BLOCKING, /* MPI's blocking collective, the job's data thread */
  RF_MPI_RING,     /* ringflow's ring (ring.c), the job's data thread */
  RF_MPI_P2P,      /* all-gather: ringflow's own nonblocking messages
                    * (p2p.c), as NBC runs */
  RF_MPI_SHM       /* memory shared by the processes of one host (shm.c),
                    * as NBC runs; NBC where they cannot share it */
} rf__mpi_algorithm;
#define RF_MPI_ALGORITHM_LAST RF_MPI_SHM

/* An all-gather as point-to-point messages (RF_MPI_P2P) spans at most this
 * many processes by default (2 messages a peer: a request each). */
#define RF_MPI_P2P_MAX_TASKS 16

/* ---- shared memory (shm.c) ---- */

/* A slot (what one process moves in one round) is at most this many bytes;
 * a segment holds two per process. */
#define RF_MPI_SHM_SLOT ((size_t)512 << 10)
/* Communicators of more processes take MPI's nonblocking call instead. */
#define RF_MPI_SHM_MAX_TASKS 64
typedef struct rf__mpi_shm rf__mpi_shm;
/* comm's segment, made at its first call (collective over comm: at a GO,
 * where every process calls it in the same order; `bytes`, the vector of
 * the collectives it is for, sizes its slots); later calls return it.
 * *out NULL, alike in every process, where they cannot share one (other
 * hosts, no room in /dev/shm, too many processes). crowded: the job's
 * (rf__job's, alike everywhere): such a segment is used only where
 * RF_MPI_ALGORITHM=shm forces it. An MPI error code. */
int rf__mpi_shm_of(MPI_Comm comm, int64_t bytes, bool crowded,
                   rf__mpi_shm **out);
/* Tests: this process fails to map the segments made from now on (rank 0
 * still makes them), as a process on another host or with a full
 * /dev/shm would. */
void rf__mpi_shm_refuse(bool on);
/* comm's segment if it has one and may use it (a crowded one only with
 * RF_MPI_ALGORITHM=shm; alike in every process); no MPI call but an
 * attribute lookup. */
rf__mpi_shm *rf__mpi_shm_peek(MPI_Comm comm);
/* comm's segment if it has one that is not crowded, whatever
 * RF_MPI_ALGORITHM says (alike in every process: agreed checks go
 * through it, agreed.c), else NULL. */
rf__mpi_shm *rf__mpi_shm_for_checks(MPI_Comm comm);
typedef enum rf__mpi_shm_mode {
  RF_MPI_SHM_ALL,    /* all-reduce: out is the whole vector, everywhere */
  RF_MPI_SHM_ROOT,   /* reduce: the root's out is the whole vector */
  RF_MPI_SHM_SCATTER /* reduce-scatter: out is this process's segment */
} rf__mpi_shm_mode;
typedef void (*rf__mpi_shm_fused)(const void *const *src, int p, int64_t n,
                                  void *d1, void *d2);
/* One collective through a segment, advanced by rf__mpi_shm_test (no
 * waiting: it moves what the others' flags allow). */
typedef struct rf__mpi_shm_x {
  rf__mpi_shm *s;
  bool active; /* started, not finished */
  int kind;    /* an rf__mpi_shm_mode, or all-gather / broadcast (shm.c) */
  int root, esize;
  const char *in;
  char *out;
  MPI_Datatype type;
  MPI_Op op;
  rf__mpi_shm_fused fused;
  int64_t counts[RF_MPI_SHM_MAX_TASKS], displs[RF_MPI_SHM_MAX_TASKS];
  int64_t piece, rounds, k;
  uint32_t first;  /* its first round in the segment */
  int stage, next; /* within round k: its stage, the next process */
} rf__mpi_shm_x;
/* Reduces process q's segment (counts[q] elements at displs[q] of each
 * process's send) over every process, in elements of type. */
void rf__mpi_shm_start_reduce(rf__mpi_shm_x *x, rf__mpi_shm *s,
                              const void *send, void *out,
                              const int64_t *counts, const int64_t *displs,
                              MPI_Datatype type, MPI_Op op,
                              rf__mpi_shm_mode mode, int root);
/* buf: every process's counts[q] bytes at displs[q], this process's own
 * already there. */
void rf__mpi_shm_start_all_gather(rf__mpi_shm_x *x, rf__mpi_shm *s, void *buf,
                                  const int64_t *counts, const int64_t *displs);
void rf__mpi_shm_start_broadcast(rf__mpi_shm_x *x, rf__mpi_shm *s, void *buf,
                                 int64_t bytes, int root);
/* out: the element-wise maximum of every process's n int64s at in (an
 * agreed collective's check). */
void rf__mpi_shm_start_max(rf__mpi_shm_x *x, rf__mpi_shm *s, const int64_t *in,
                           int64_t *out, int n);
/* Advances x as far as the others allow: *done when finished. MPI_SUCCESS
 * or an MPI error code (MPI_Reduce_local's). */
int rf__mpi_shm_test(rf__mpi_shm_x *x, int *done);

/* The requests of an op's data: one MPI call's, or an all-gather's
 * messages, tested together (rf__mpi_reqs_test), or an exchange through
 * shared memory (shm.c; shm.active). n 0 and no exchange: none. */
typedef struct rf__mpi_reqs {
  MPI_Request r[2 * (RF_MPI_P2P_MAX_TASKS - 1)];
  int n;
  rf__mpi_shm_x shm;
} rf__mpi_reqs;

/* q emptied: no requests, no exchange. */
void rf__mpi_reqs_clear(rf__mpi_reqs *q);
/* Where one MPI call puts its request: q holds it alone. */
MPI_Request *rf__mpi_reqs_one(rf__mpi_reqs *q);
/* MPI_Testall over q, or its exchange advanced (done: all completed, or
 * there are none); an MPI error code. */
int rf__mpi_reqs_test(rf__mpi_reqs *q, int *done);
/* Whether any of q is still MPI's, or its exchange unfinished. */
bool rf__mpi_reqs_pending(const rf__mpi_reqs *q);
/* An all-gather as messages on comm (n processes, this one me): this
 * process's counts[me] bytes at mine (its input, or its rows of out) to
 * every other, and theirs (counts[t] bytes at out + displs[t]) from each,
 * in q; its own rows of out are the caller's. */
rf_status *rf__mpi_p2p_all_gather(const void *mine, void *out,
                                  const int *counts, const int *displs, int n,
                                  int me, MPI_Comm comm, rf__mpi_reqs *q);
/* The algorithm of a nonblocking CPU collective of kind across procs
 * processes with a vector of `bytes` (rf__mpi_algorithm_bytes), as
 * rf__mpi_algorithm_choose gives it, for this process's RF_MPI_ALGORITHM
 * (which every process shares, checked): RF_MPI_NBC, RF_MPI_P2P (an
 * all-gather's messages) or RF_MPI_SHM (where the communicator has no
 * segment, MPI's nonblocking call). The call a stand-in must pair with
 * (agreed.c). shm_ok: the job may take the table's shared-memory rows
 * (rf__mpi_algorithm_pick). */
rf__mpi_algorithm rf__mpi_standin_algorithm(rf__collective_kind kind, int procs,
                                            int64_t bytes, bool shm_ok);

struct rf__mpi_op {
  rf__job *job;
  char *key, *name, *devices; /* key: name \x1f job step */
  int64_t job_step, step_id, timeout_ms;
  rf__coll_group g; /* this process's part: g.p = parts, g.n, g.root */
  rf__coll_participant *parts;
  int num_devices; /* of the whole group */
  /* the participant set: nset tasks (sorted), counts, this task's index */
  int nset, me;
  int *tasks, *counts;
  /* descriptor: an input's shape, else a receiver's expected shape */
  rf_shape shape;
  bool has_input;
  /* data (data.c) */
  int root_index;      /* GO: the root's task, as an index in the set */
  rf_shape root_shape; /* GO: the root's input shape */
  const void *send;    /* what this task contributes */
  rf_tensor *partial;  /* this task's reduction or gathered rows */
  rf_tensor *out;      /* result, or this task's rows of a reduce_scatter */
  /* A broadcast receiver's output that could not be allocated after GO:
   * the call still runs, into scratch (mapped for it alone, scratch_len
   * bytes), and late is what its participants get (data.c). */
  void *scratch;
  size_t scratch_len;
  rf_status *late;
  bool wide; /* float16/bfloat16 reduced as float32 */
  /* GPU participants (gpu.c): NCCL moves everything, outputs per
   * participant. */
  bool gpu;
  int root_rank; /* GO: the root's rank in the job */
  rf_tensor *gpu_outs[64];
  /* Completed elsewhere (NCCL's streams, or the job's data thread for a
   * blocking call, decided at allocation): async_done, then async_status. */
  bool blocking;          /* algo is BLOCKING or RING */
  rf__mpi_algorithm algo; /* decided at allocation (algorithm.c) */
  /* RF_MPI_ALGORITHM (or the tests' override) when algo was decided:
   * READY carries it and task 0 checks that every task has the same */
  int algo_setting;
  atomic_int async_done;
  rf_status *async_status;
  rf__mpi_set *set; /* the set it was issued on */
  /* state */
  atomic_int refs;     /* the preparing thread, the engine, the report */
  atomic_int prepared; /* this task's data are ready to send */
  atomic_int reported; /* the dones were called (or are being) */
  int state;           /* RF_OP_*; engine thread */
  int64_t deadline_ns; /* 0: none */
  int64_t issued_ns;   /* when its MPI collective started */
  /* It did not finish in time: the other tasks of its set were asked
   * whether they are there (PING) until probe_ns; answered[i]: task
   * tasks[i] did. */
  int64_t probe_ns;
  unsigned char *answered;
  int64_t bytes; /* what it moves, about: the engine's spin budget */
  rf__mpi_reqs req;
  rf_status *report; /* the error the report task hands the dones */
  /* Agreed once (agreed.c): the entry it is queued or issued on, the next
   * op of its queue, the check (this task's digest, job step, whether its
   * descriptor is the agreed one) and its result, when it reached the
   * engine; fresh: READY said NEW, the entry to keep at GO; agree: what
   * READY said (RF_AGREE_*). fast: its data move on the entry's comm. */
  rf__mpi_agreed *agreed, *fresh;
  rf__mpi_op *agreed_next;
  int64_t check[5], checked[5];
  rf__mpi_reqs check_q; /* the check in flight (agreed.c: check_issue) */
  int64_t arrived_ns;
  int agree;
  bool fast;
  /* Its data (or, when its descriptor changed, a stand-in from scratch,
   * standin) were issued with its check, before the check's verdict: spec;
   * the data run in req. */
  bool spec;
  void *standin;
  /* Handed back by the direct path (agreed.c): the entry it holds taken. */
  rf__mpi_agreed *direct;
  /* GO kept a changed descriptor (UPDATE) whose data run on a thread of
   * the entry's and the entry has no data communicator yet: it is made
   * when op is issued, in GO order (agreed.c). */
  bool dup_data;
  /* Handed to a data thread, not yet taken (data_thread.c): the next op
   * of its queue, and the communicator of its call. */
  rf__mpi_op *data_next;
  MPI_Comm data_comm;
  rf__mpi_op *go_next; /* the job's GO queue */
  UT_hash_handle hh;
};

/* ---- member.c, for agreed.c (engine thread) ---- */

/* This task's descriptor of op (what READY carries). */
void rf__mpi_member_describe(const rf__mpi_op *op, rf__mpi_msg *h);
/* Sends op's READY to task 0 (op->agree says how it may be kept) and waits
 * for the verdict; an unsent READY fails op at once. */
void rf__mpi_member_send_ready(rf__job *j, rf__mpi_op *op);
/* Reports st (consumed) to op's participants once, from a pool task. */
void rf__mpi_member_report(rf__mpi_op *op, rf_status *st);
/* Drops the engine's reference to op (one never added to the job's ops). */
void rf__mpi_member_release(rf__mpi_op *op);
/* Reports st (consumed; NULL: the results) once, on this thread. */
void rf__mpi_member_report_here(rf__mpi_op *op, rf_status *st);
/* Removes op from the job (its engine reference goes). */
void rf__mpi_member_drop(rf__job *j, rf__mpi_op *op);
/* Asks every other task of op's set whether it is there (PING); answered
 * comes back by PONG (1: it has op, 2: it has not reached it). */
void rf__mpi_member_probe(rf__job *j, rf__mpi_op *op, int64_t now);
/* What the PINGs of a collective that timed out learned of its missing
 * tasks, for its message: " (task 2 did not answer within 1000 ms: died or
 * stopped; task 1 answers: it has not reached this collective, maybe held
 * up by an earlier one; task 3 left before reaching it: it freed its
 * session or exited)", any part alone, or "" when every list is empty
 * ("task 1, task 3" each). Only task 0 learns that a task left (BYE): on
 * the others (knows_left false) a silent task "died, stopped or freed its
 * session". */
void rf__mpi_probe_text(const char *silent, const char *alive, const char *left,
                        bool knows_left, char *buf, size_t len);
/* Whether task 0 (j's task) was told by task t that it freed its session
 * (BYE) and has not been heard from since: a silent task that left, not one
 * that died. False on the other tasks, which are not told. */
bool rf__mpi_peer_left(const rf__job *j, int t);
/* Whether this task has reached collective (name, job_step). */
bool rf__mpi_member_has(rf__job *j, const char *name, int64_t job_step);
/* How long past its timeout a queued op may wait to start. */
int64_t rf__mpi_member_grace_ms(void);

/* ---- agreed.c (engine thread) ---- */

/* Takes op when its name is agreed (or being agreed by an earlier step):
 * true, op is queued there. False: op goes to task 0 (READY); op->agree
 * and op->fresh say whether it asks to be kept agreed. */
bool rf__mpi_agreed_take(rf__job *j, rf__mpi_op *op, int64_t now);
/* The verdict for op came (go: GO with decision `agree`, else ABORT). */
void rf__mpi_agreed_verdict(rf__job *j, rf__mpi_op *op, bool go, int agree);
/* op was issued on its set's communicator (st: or failed to): an op told
 * NEW makes its name's communicator now, in GO order. */
void rf__mpi_agreed_issued(rf__job *j, rf__mpi_op *op, MPI_Comm set_comm,
                           const rf_status *st);
/* The direct path (any thread; c: op's READY command, unsent, and op holds
 * the engine's reference): when op's name is agreed, nothing of it is
 * queued and MPI gives MPI_THREAD_MULTIPLE, runs op's check and data on
 * this thread and reports it here, or hands it to the engine (c) when they
 * do not finish within a short spin or the check fails: true, and op and c
 * are taken care of. False: nothing was done (submit c). */
bool rf__mpi_agreed_direct(rf__job *j, rf__mpi_op *op, rf__mpi_cmd *c);
/* The engine takes back an op of the direct path (its READY command). */
void rf__mpi_agreed_resume(rf__job *j, rf__mpi_op *op);
/* Ops the direct path took, and of them those it handed to the engine,
 * in this process (tests). */
int64_t rf__mpi_direct_taken(void);
/* Turns the direct path on (1) or off (0) in this process, or back to
 * RF_MPI_DIRECT (-1; on unless "0") (tests; every process of the job must
 * do the same). */
void rf__mpi_direct_force(int on);
/* The largest collective (bytes of its whole vector, as
 * rf__mpi_algorithm_bytes) the direct path takes: RF_MPI_DIRECT_MAX_BYTES
 * (a decimal count, read once), else 4 MiB; -2 when the variable holds
 * anything else (rf__mpi_algorithm_choose fails the collective naming
 * it). rf__mpi_direct_max_force sets it in this process (tests; -1: back to
 * the variable; every process of the job must do the same). */
int64_t rf__mpi_direct_max_bytes(void);
void rf__mpi_direct_max_force(int64_t bytes);
int64_t rf__mpi_direct_handed_back(void);
/* Agreed ops whose data were issued while their check still ran, in this
 * process (tests). */
int64_t rf__mpi_agreed_with_check(void);
/* Whether rf__job_cancel_step was called for step_id (any thread). */
bool rf__mpi_step_cancelled(rf__job *j, int64_t step_id);
/* The DEADLINE_EXCEEDED text of op, whose check did not finish after the
 * probe (tests call it too). */
void rf__mpi_agreed_late_text(const rf__mpi_op *op, char *buf, size_t len);
/* Checks and issues the agreed ops; counts progress. */
int rf__mpi_agreed_poll(rf__job *j, int64_t now, bool *busy, bool *waiting);
/* Leaving: frees every entry (communicators with a check that never
 * finished are kept, as MPI may still use them). */
void rf__mpi_agreed_free(rf__job *j);

/* Allocates what the op sends and receives (before READY goes out: what
 * can fail fails here, and the job is told). UNIMPLEMENTED beyond MPI's
 * int counts. */
rf_status *rf__mpi_op_alloc(rf__mpi_op *op);
/* Computes this task's contribution (reduction or gather of the local
 * inputs) on the calling thread and the pool. */
void rf__mpi_op_prepare(rf__mpi_op *op);
/* Starts the MPI collective on comm (engine thread). */
rf_status *rf__mpi_op_issue(rf__mpi_op *op, MPI_Comm comm);
/* The bytes op's collective moves through this process once issued (the
 * whole vector: a broadcast's root included, whose buffer is its input):
 * the engine's spin budget while its data are in flight. */
int64_t rf__mpi_op_bytes(const rf__mpi_op *op);
/* Issues, on comm, the data call of the agreed descriptor d (the set's
 * nset tasks holding counts participants each, root_index and root_shape
 * as agreed) from and into scratch (*buf: rf__free it once req completed):
 * what a task whose descriptor changed makes while the others' data go
 * with their check (agreed.c). */
rf_status *rf__mpi_op_issue_standin(const rf__mpi_op *op, const rf__mpi_msg *d,
                                    int nset, const int *counts, int root_index,
                                    const rf_shape *root_shape, MPI_Comm comm,
                                    void **buf, rf__mpi_reqs *req);
/* The algorithm of op (algorithm.c: by kind and size, or RF_MPI_ALGORITHM),
 * decided once when its buffers are allocated; INVALID_ARGUMENT when a
 * tuning variable holds a bad value (rf__mpi_env_error). */
rf_status *rf__mpi_algorithm_choose(const rf__mpi_op *op,
                                    rf__mpi_algorithm *out);
/* The table: the algorithm of a kind across `procs` processes at `bytes`
 * (RF_MPI_NBC where no row applies); its shared-memory ranges first when
 * shm_ok (a job on one machine whose nodes are not crowded: op->job's
 * rf__mpi_job_shm_ok). */
rf__mpi_algorithm rf__mpi_algorithm_pick(rf__collective_kind kind, int procs,
                                         int64_t bytes, bool shm_ok);
/* Whether j's collectives may take the table's shared-memory rows. */
bool rf__mpi_job_shm_ok(const rf__job *j);
/* The sizes (ascending, distinct, at most max) from which the table's
 * choice for a kind across `procs` processes may change, with its
 * shared-memory ranges when shm_ok; how many. */
int rf__mpi_algorithm_bounds(rf__collective_kind kind, int procs, bool shm_ok,
                             int64_t *bytes, int max);
/* The size the choice goes by: the whole vector in bytes. */
int64_t rf__mpi_algorithm_bytes(const rf__mpi_op *op);
const char *rf__mpi_algorithm_name(rf__mpi_algorithm a);
/* RF_MPI_ALGORITHM as this process has it (RF_MPI_AUTO when unset or
 * bad), or the tests' override. */
int rf__mpi_algorithm_setting(void);
/* Forces a (RF_MPI_AUTO: the table) from now on, over RF_MPI_ALGORITHM;
 * collectives allocated later take it (tests). */
void rf__mpi_algorithm_force(rf__mpi_algorithm a);
/* Collectives this process ran with each algorithm (tests). */
void rf__mpi_algorithm_count(rf__mpi_algorithm a);
int64_t rf__mpi_algorithm_runs(rf__mpi_algorithm a);
/* The data thread's call itself, BLOCKING or RING (the data thread). */
rf_status *rf__mpi_op_run_blocking(rf__mpi_op *op, MPI_Comm comm);
/* ringflow's rings (ring.c), blocking, on comm: an MPI error code.
 * counts/displs: per process of comm, in elements of type (bytes for
 * broadcast); the all-reduce, reduce and broadcast fill them (room for the
 * communicator's size each). */
void rf__mpi_ring_chunks(int64_t n, int p, int *counts, int *displs);
int rf__mpi_ring_reduce_scatter(const void *send, void *out, const int *counts,
                                const int *displs, MPI_Datatype type, MPI_Op op,
                                MPI_Comm comm);
int rf__mpi_ring_all_gather(void *buf, const int *counts, const int *displs,
                            MPI_Datatype type, MPI_Comm comm);
int rf__mpi_ring_all_reduce(const void *send, void *out, int count,
                            MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                            int *counts, int *displs);
int rf__mpi_ring_reduce(const void *send, void *out, int count,
                        MPI_Datatype type, MPI_Op op, int root, MPI_Comm comm,
                        int *counts, int *displs);
int rf__mpi_ring_broadcast(void *buf, int bytes, int root, MPI_Comm comm,
                           int *counts, int *displs);
/* Hands op (issued on op->set, alone in its job: j->blocking) to j's data
 * thread (data_thread.c), started on first use; when no thread can be
 * started the call runs here, on the engine thread. Either way async_status
 * and async_done are set when it returns, and the engine is woken. */
void rf__mpi_data_thread_run(rf__job *j, rf__mpi_op *op);
/* The job is leaving: joins its data thread, or leaves it to finish (and
 * free itself) when it is stuck in a call that never completed. */
void rf__mpi_data_thread_stop(rf__job *j);
/* Hands op to the data thread *d (an agreed collective's own, agreed.c;
 * started here on first use) to run its blocking call on comm: completes
 * as rf__mpi_data_thread_run. RESOURCE_EXHAUSTED when no thread can be
 * started (nothing was run: never on the calling thread). */
rf_status *rf__mpi_data_thread_hand(rf__mpi_data_thread **d, rf__mpi_op *op,
                                    MPI_Comm comm);
/* Stops *d (NULL afterwards) like rf__mpi_data_thread_stop; true when it
 * was left running a call that never completed (its communicator must
 * then be kept). */
bool rf__mpi_data_thread_free(rf__mpi_data_thread **d);
/* After completion: participant i's output, a new reference or NULL
 * (post-processing: avg, float16, the rows of reduce_scatter); op->late, the
 * error of an output that could not be allocated after GO, is returned
 * (handed over) instead. */
rf_status *rf__mpi_op_outputs(rf__mpi_op *op, rf_tensor **outs);
/* Unmaps op's scratch (op_free). */
void rf__mpi_op_scratch_free(rf__mpi_op *op);

/* The MPI operations ringflow defines (NaN-propagating float min/max), made
 * after MPI_Init and freed before MPI_Finalize, on the engine thread. */
void rf__mpi_data_init(void);
void rf__mpi_data_fini(void);

/* OpenMPI's nonblocking all-reduce algorithm for large all-reduces
 * (nbc_algorithm.c): init after MPI_Init, fini before MPI_Finalize (engine
 * thread); every MPI_Iallreduce of ringflow, from any thread, is made by
 * rf__mpi_nbc_iallreduce (the ring when large), so that each takes the same
 * algorithm in every process. */
void rf__mpi_nbc_init(void);
void rf__mpi_nbc_fini(void);
rf_status *rf__mpi_nbc_iallreduce(const void *send, void *recv, int count,
                                  MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                                  MPI_Request *req);

#endif
