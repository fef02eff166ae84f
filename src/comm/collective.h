/* comm/collective.h - what a collective participant offers, and the collective
 * manager where participants meet.
 *
 * Participants meet under the key (shared_name, step id), never shared_name
 * alone, so concurrent steps of one session cannot mix. When num_devices have
 * arrived the manager checks that they agree and hands them to the backend of
 * their device type. Every participant's done callback fires exactly once:
 * with the result, or with an error that says which field differed, which
 * devices were missing at the timeout, or why the step was cancelled. */
#ifndef RF_COMM_COLLECTIVE_H
#define RF_COMM_COLLECTIVE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/tensor.h"
#include "device/device.h"
#include "ops/collective_attrs.h"

/* X(enum, attr name, nccl-tests bus bandwidth factor numerator/denominator) */
#define RF_COLLECTIVE_KIND_LIST(X)    \
  X(RF_COLL_ALL_REDUCE, "all_reduce") \
  X(RF_COLL_REDUCE, "reduce")         \
  X(RF_COLL_BROADCAST, "broadcast")   \
  X(RF_COLL_ALL_GATHER, "all_gather") \
  X(RF_COLL_REDUCE_SCATTER, "reduce_scatter")

typedef enum rf__collective_kind {
#define RF_X(e, s) e,
  RF_COLLECTIVE_KIND_LIST(RF_X)
#undef RF_X
      RF_COLL_KIND_COUNT
} rf__collective_kind;

const char *rf__collective_kind_name(rf__collective_kind k);

/* Called once per participant: st NULL on success (consumed by the callee),
 * output a new reference (NULL for participants without a result: reduce
 * senders, the broadcast root). */
typedef void (*rf__collective_done)(void *arg, rf_status *st,
                                    rf_tensor *output);

typedef struct rf__coll_participant {
  rf__collective_kind kind;
  rf_reduction reduction; /* ignored by broadcast and all-gather */
  rf_dtype dtype;
  int num_devices;
  bool is_root;       /* reduce: the receiver; broadcast: the sender */
  rf__device *device; /* not owned */
  const char *node;   /* the participant node's name, for messages */
  rf_tensor *input; /* retained by the manager; NULL for broadcast receivers */
  rf_shape shape;   /* input shape, or the expected shape of a broadcast
                       receiver (may be partly unknown) */
  /* Optional (NULL: unknown): every participant's device, comma-separated
   * ("cpu:0,cpu:2"), so that a timeout names the devices that never came.
   * Not owned; outlives the step. */
  const char *group_devices;
  /* A reduce's or broadcast's root as this process's graph has it: 1 + its
   * position in group_devices; 0 unknown. */
  int root_at;
  rf__collective_done done;
  void *arg;
  /* Several processes (comm/job.h): how many of the num_devices
   * participants live in this process (0: all of them). When fewer, the
   * manager gathers these and hands them to the session's job, which meets
   * the other processes under (shared_name, the step's job_step). */
  int task_devices;
  /* Optional (NULL for a participant without a step, e.g. in tests of the
   * manager alone): the participant's step (not owned; valid until its done
   * fires). A participant joining a cancelled step fails at once; a backend
   * that reports done before its work has run adds a check there
   * (device/step.h). */
  struct rf__step *step;
} rf__coll_participant;

/* A group of participants that agree, in rank order (by device index). */
typedef struct rf__coll_group {
  rf__collective_kind kind;
  rf_reduction reduction;
  rf_dtype dtype;
  int n;
  int root;                /* rank of the root, -1 if none */
  rf__coll_participant *p; /* [n], sorted by device->index */
  rf__threadpool *pool;
  const char *key; /* shared_name, for messages */
  int64_t step_id;
  /* The session's collective timeout (0: none). A backend whose launched
   * work can hang (NCCL) gives up on it after this long. */
  int64_t timeout_ms;
} rf__coll_group;

/* A backend runs agreed groups for one device type (comm/cpu, comm/cuda).
 * run must call every participant's done exactly once, from any thread. It
 * may release a participant's input once it has read it (setting p[i].input
 * to NULL), before the dones: a done can end its step, and a buffer still
 * referenced after that misses the allocator's cache in the next step. run
 * may return before the dones (GPU backends complete from a stream
 * callback), but the group, its participant array and key are the manager's
 * and freed, and the inputs released, as soon as run returns: an
 * asynchronous backend copies what it needs and retains the inputs it still
 * reads (releasing them before its dones, for the reason above). */
typedef struct rf__coll_backend {
  const char *name;
  rf__device_type device_type;
  void (*run)(rf__coll_group *group);
} rf__coll_backend;

/* Calls parts[0..n)'s dones, each once, in rank order: outs[i] (taken: the
 * slot becomes NULL; outs NULL means no outputs) when st is NULL, else a
 * fresh copy of st. st stays the caller's. The one fan-out every backend
 * uses; release the inputs first (see above). */
void rf__coll_report(rf__coll_participant *parts, int n, const rf_status *st,
                     rf_tensor **outs);

extern const rf__coll_backend rf__cpu_coll_backend;
#ifdef RF_HAVE_CUDA
/* GPU devices: CUDA kernels or NCCL by placement (comm/gpu/gpu_coll.h). */
extern const rf__coll_backend rf__gpu_coll_backend;
#endif

typedef struct rf__collective_manager rf__collective_manager;

/* pool runs the backends' parallel work (not owned). */
rf_status *rf__collective_manager_new(rf__threadpool *pool,
                                      rf__collective_manager **out);
/* Stops the watchdog (no timeout fires after it returns) and forgets the
 * job, so a session can detach its job while the manager lives on; no run
 * may be in progress. Idempotent; rf__collective_manager_free calls it. */
void rf__collective_manager_stop(rf__collective_manager *m);
/* Fails every pending participant with CANCELLED, then frees. */
void rf__collective_manager_free(rf__collective_manager *m);

/* Adds a participant under (shared_name, step_id). Never blocks. The
 * participant's done fires once the group has run, or failed, or when
 * timeout_ms (> 0) passes with participants missing. A non-NULL return means
 * the participant was refused (bad arguments, no memory): done never fires. */
rf_status *rf__collective_join(rf__collective_manager *m,
                               const char *shared_name, int64_t step_id,
                               int64_t timeout_ms,
                               const rf__coll_participant *p);

/* Gives the manager the session's job (comm/job.h; not owned): groups with
 * participants in other processes go through it. Call before any join. */
struct rf__job;
void rf__collective_manager_set_job(rf__collective_manager *m,
                                    struct rf__job *job);

/* Fails every pending participant of step_id with a copy of `why` (or
 * CANCELLED when NULL), and any that joins that step later. */
void rf__collective_cancel_step(rf__collective_manager *m, int64_t step_id,
                                const rf_status *why);
/* Forgets the step's cancellation record (call when the step has ended). */
void rf__collective_end_step(rf__collective_manager *m, int64_t step_id);

#endif
