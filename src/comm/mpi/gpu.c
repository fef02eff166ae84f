/* comm/mpi/gpu.c - GPU participants of collectives across processes: agreed
 * and ordered like any other (member.c, coordinator.c), moved by NCCL
 * (comm/nccl/nccl_job.h), one NCCL rank per participant. A set's
 * communicators are made at its first GO: its first task makes NCCL's
 * unique id and MPI broadcasts it on the set's communicator (every member is
 * at the same GO), then each process starts its ranks' initialisation and
 * the GO queue waits (polling) until it is done. Completion comes from the
 * GPU runtime's completion thread, as for collectives in one process
 * (nccl_job.c): a pool task sets async_done and wakes the engine, which
 * waits for it without spinning; a collective still running at its
 * deadline aborts the set's communicators. Builds without NCCL refuse GPU
 * participants across processes. */
#include <string.h>

#include "comm/mpi/mpi_status.h"
#include "comm/mpi/op.h"
#include "core/log.h"
#include "core/status.h"
#ifdef RF_HAVE_NCCL
#include "comm/nccl/nccl_job.h"
#include "core/tensor.h"
#endif

#ifndef RF_HAVE_NCCL
rf_status *rf__mpi_gpu_alloc(rf__mpi_op *op) {
  return rf__error(RF_UNIMPLEMENTED,
                   "collective '%s': GPU participants across processes need "
                   "NCCL, and ringflow was built without it",
                   op->name);
}
int rf__mpi_gpu_issue(rf__job *j, rf__mpi_op *op, rf__mpi_set *set,
                      rf_status **st) {
  (void)j, (void)set;
  *st = rf__mpi_gpu_alloc(op);
  return 1;
}
void rf__mpi_gpu_abort(rf__mpi_set *set) { (void)set; }
void rf__mpi_gpu_free(rf__mpi_set *set) { (void)set; }
#else

static bool has_output(const rf__mpi_op *op, int i) {
  switch (op->g.kind) {
    case RF_COLL_REDUCE: return i == op->g.root;
    case RF_COLL_BROADCAST: return i != op->g.root;
    default: return true;
  }
}

/* Outputs of the participants that have one; a broadcast receiver's shape
 * may wait for the root's (GO). */
static rf_status *alloc_outputs(rf__mpi_op *op) {
  const rf_shape *root = &op->root_shape;
  for (int i = 0; i < op->g.n; i++) {
    if (!has_output(op, i) || op->gpu_outs[i]) continue;
    if (op->g.kind == RF_COLL_BROADCAST && !rf_shape_is_fully_defined(root))
      return NULL;
    rf_shape s = rf__nccl_job_out_shape(&op->g, op->num_devices, root);
    const rf__device *d = op->g.p[i].device;
    rf_status *st =
        rf__tensor_new_device(op->g.dtype, &s, d->allocator, &op->gpu_outs[i]);
    if (st)
      return rf__status_prefix(st, "collective '%s': output on %s", op->name,
                               d->canonical);
  }
  return NULL;
}

rf_status *rf__mpi_gpu_alloc(rf__mpi_op *op) {
  if (op->g.n > 64)
    return rf__invalid("collective '%s': at most 64 GPU participants here",
                       op->name);
  if (op->g.kind == RF_COLL_BROADCAST && op->g.root < 0)
    op->root_shape = op->shape; /* the expected shape, maybe partial */
  return alloc_outputs(op);
}

static void launched_done(void *arg, rf_status *st) {
  rf__mpi_op *op = arg;
  op->async_status = st;
  atomic_store(&op->async_done, 1);
  rf__mpi_engine_wake();
}

/* Makes (first call) or polls the set's communicators. */
static rf_status *set_comms(rf__job *j, rf__mpi_op *op, rf__mpi_set *set,
                            bool *ready) {
  if (!set->nccl) {
    char id[RF_NCCL_ID_BYTES] = {0};
    if (op->me == 0) RF_CHECK(rf__nccl_job_unique_id(id));
    RF_CHECK(
        RF_MPI_STATUS(MPI_Bcast(id, RF_NCCL_ID_BYTES, MPI_BYTE, 0, set->comm)));
    int nranks = 0, base = 0, ranks[64];
    for (int t = 0; t < op->nset; t++) {
      if (t == op->me) base = nranks;
      nranks += op->counts[t];
    }
    rf__device *devs[64];
    for (int i = 0; i < op->g.n; i++) {
      ranks[i] = base + i;
      devs[i] = op->g.p[i].device;
    }
    rf__nccl_job_comm *c;
    RF_CHECK(rf__nccl_job_comm_start(nranks, id, op->g.n, ranks, devs, &c));
    set->nccl = c;
  }
  if (!set->nccl_ready) {
    rf_status *st = rf__nccl_job_comm_poll(set->nccl, &set->nccl_ready);
    if (st) set->broken = true;
    RF_CHECK(st);
  }
  (void)j;
  *ready = set->nccl_ready;
  return NULL;
}

int rf__mpi_gpu_issue(rf__job *j, rf__mpi_op *op, rf__mpi_set *set,
                      rf_status **st) {
  bool ready = false;
  *st = set_comms(j, op, set, &ready);
  if (*st) return 1;
  if (!ready) {
    if (!op->deadline_ns)
      op->deadline_ns = rf__mpi_now_ns() + op->timeout_ms * 1000000;
    if (rf__mpi_now_ns() < op->deadline_ns) return 0;
    rf__mpi_gpu_abort(set);
    *st = rf__log_status(
        RF_LOG_WARN, "nccl",
        rf__error(RF_DEADLINE_EXCEEDED,
                  "collective '%s': NCCL's communicators were not made "
                  "within %lld ms",
                  op->name, (long long)op->timeout_ms));
    return 1;
  }
  *st = alloc_outputs(op); /* a broadcast receiver's, now the shape is known */
  op->set = set;
  if (!*st)
    *st = rf__nccl_job_launch(set->nccl, &op->g, op->num_devices, op->root_rank,
                              &op->root_shape, op->gpu_outs, op->timeout_ms,
                              launched_done, op);
  return 1;
}

void rf__mpi_gpu_abort(rf__mpi_set *set) {
  if (set && set->nccl) rf__nccl_job_comm_abort(set->nccl);
  if (set) set->broken = true;
}

void rf__mpi_gpu_free(rf__mpi_set *set) {
  rf__nccl_job_comm_free(set->nccl);
  set->nccl = NULL;
}
#endif
