/* comm/mpi/data.c - the data of a collective across processes, hierarchical:
 * this process's participants are reduced (or gathered) into one buffer by
 * the shared-memory backend's kernels, that buffer takes part in one MPI
 * collective per process, and every local participant shares the result.
 * Reductions: sums of signed integers go through the unsigned type (they
 * wrap, as on one process); float min/max propagate NaN like the CPU backend
 * (user-defined MPI ops); float16/bfloat16 are reduced as float32 and
 * rounded once at the end; avg is a sum divided by num_devices at the end.
 * Moving kinds (broadcast, all-gather) are bytes. MPI writes into the
 * buffer that becomes the outputs: the participants of one process share
 * it (a reduce-scatter's, views of their rows where aligned), so nothing
 * is copied after the MPI call but float16/bfloat16 roundings. The
 * algorithm is chosen by kind and size (algorithm.c): MPI's nonblocking
 * collective on the communication thread (a reduce is then an all-reduce
 * whose result only the root keeps: OpenMPI 4.1's MPI_Ireduce was slow and
 * erratic here), or MPI's blocking collective or ringflow's ring (ring.c)
 * on the job's data thread (data_thread.c). MPI counts are ints: a
 * collective larger than that is UNIMPLEMENTED. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "comm/cpu/reduce_kernels.h"
#include "comm/mpi/mpi_status.h"
#include "comm/mpi/op.h"
#include "comm/mpi/operator_order.h"
#include "core/mem.h"
#include "core/status.h"
#include "core/tensor.h"

#define BLOCK_ELEMS 16384

#ifdef RF_MPI_TSAN
atomic_uint rf__mpi_operator_epoch;
#endif

static MPI_Op nan_min_op = MPI_OP_NULL, nan_max_op = MPI_OP_NULL;
/* Sums of 8-bit integers wrap: OpenMPI 4.1.4's vectorised MPI_SUM on
 * MPI_UINT8_T (its op/avx component, from 16 elements) saturates at 255
 * instead, so ringflow sums them with an operation of its own. */
static MPI_Op sum8_op = MPI_OP_NULL;

static void sum8(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  const uint8_t *a = in;
  uint8_t *b = inout;
  for (int i = 0; i < *len; i++) b[i] = (uint8_t)(a[i] + b[i]);
  rf__mpi_operator_ran();
}

#define NAN_MINMAX(T, in, inout, n, LESS)                \
  do {                                                   \
    const T *a = (const T *)(in);                        \
    T *b = (T *)(inout);                                 \
    for (int i = 0; i < (n); i++)                        \
      if (LESS(a[i], b[i]) || a[i] != a[i]) b[i] = a[i]; \
  } while (0)
#define LT(x, y) ((x) < (y))
#define GT(x, y) ((x) > (y))

static void nan_min(void *in, void *inout, int *len, MPI_Datatype *dt) {
  if (*dt == MPI_DOUBLE)
    NAN_MINMAX(double, in, inout, *len, LT);
  else
    NAN_MINMAX(float, in, inout, *len, LT);
  rf__mpi_operator_ran();
}

static void nan_max(void *in, void *inout, int *len, MPI_Datatype *dt) {
  if (*dt == MPI_DOUBLE)
    NAN_MINMAX(double, in, inout, *len, GT);
  else
    NAN_MINMAX(float, in, inout, *len, GT);
  rf__mpi_operator_ran();
}

void rf__mpi_data_init(void) {
  MPI_Op_create(nan_min, 1, &nan_min_op);
  MPI_Op_create(nan_max, 1, &nan_max_op);
  MPI_Op_create(sum8, 1, &sum8_op);
  rf__mpi_nbc_init();
}

void rf__mpi_data_fini(void) {
  rf__mpi_nbc_fini();
  if (nan_min_op != MPI_OP_NULL) MPI_Op_free(&nan_min_op);
  if (nan_max_op != MPI_OP_NULL) MPI_Op_free(&nan_max_op);
  if (sum8_op != MPI_OP_NULL) MPI_Op_free(&sum8_op);
}

static bool reduces(rf__collective_kind k) {
  return k == RF_COLL_ALL_REDUCE || k == RF_COLL_REDUCE ||
         k == RF_COLL_REDUCE_SCATTER;
}

static bool is_16(rf_dtype d) { return d == RF_FLOAT16 || d == RF_BFLOAT16; }

/* The MPI type and operation of a reduction; false if there is none. */
static bool mpi_reduction(rf_dtype d, rf_reduction r, MPI_Datatype *type,
                          MPI_Op *op) {
  bool wraps = r == RF_REDUCE_SUM || r == RF_REDUCE_PROD || r == RF_REDUCE_AVG;
  switch (d) {
    case RF_FLOAT16:
    case RF_BFLOAT16:
    case RF_FLOAT32: *type = MPI_FLOAT; break;
    case RF_FLOAT64: *type = MPI_DOUBLE; break;
    case RF_INT8: *type = wraps ? MPI_UINT8_T : MPI_INT8_T; break;
    case RF_UINT8: *type = MPI_UINT8_T; break;
    case RF_INT32: *type = wraps ? MPI_UINT32_T : MPI_INT32_T; break;
    case RF_INT64: *type = wraps ? MPI_UINT64_T : MPI_INT64_T; break;
    default: return false;
  }
  bool fl = *type == MPI_FLOAT || *type == MPI_DOUBLE;
  switch (r) {
    case RF_REDUCE_SUM:
    case RF_REDUCE_AVG: *op = *type == MPI_UINT8_T ? sum8_op : MPI_SUM; break;
    case RF_REDUCE_PROD: *op = MPI_PROD; break;
    case RF_REDUCE_MIN: *op = fl ? nan_min_op : MPI_MIN; break;
    case RF_REDUCE_MAX: *op = fl ? nan_max_op : MPI_MAX; break;
    default: return false;
  }
  return true;
}

/* Elements of one participant's input (the root's for broadcast). */
static int64_t input_elems(const rf__mpi_op *op) {
  const rf_shape *s = op->g.kind == RF_COLL_BROADCAST && op->g.root < 0
                          ? &op->root_shape
                          : &op->shape;
  return rf_shape_num_elements(s);
}

static rf_status *alloc(rf__mpi_op *op, rf_dtype dt, const rf_shape *s,
                        rf_tensor **out) {
  rf_status *st = rf_tensor_new(dt, s, op->g.p[0].device->allocator, out);
  return rf__status_prefix(st, "collective '%s' on %s", op->name,
                           op->g.p[0].device->canonical);
}

static rf_status *too_large(const rf__mpi_op *op, int64_t n, const char *unit) {
  if (n <= INT_MAX) return NULL;
  return rf__error(RF_UNIMPLEMENTED,
                   "collective '%s': %lld %s in one MPI call; MPI counts "
                   "are ints (at most %d)",
                   op->name, (long long)n, unit, INT_MAX);
}

/* Allocates the receiving side of a broadcast receiver (root shape known).
 * After GO (the shape was not known before), the other processes
 * are then in (or entering) the MPI call, so an output that cannot be
 * allocated does not keep this one out: it receives into scratch memory
 * mapped for this call alone (not a library allocation: the error is kept
 * for its participants, op->late), and only when even that cannot be
 * mapped does it fail here (the others then time out). */
static rf_status *alloc_broadcast_out(rf__mpi_op *op, bool after_go) {
  if (op->out || op->scratch || op->g.root >= 0) return NULL;
  int64_t bytes = rf_shape_num_elements(&op->root_shape) *
                  (int64_t)rf_dtype_size(op->g.dtype);
  RF_CHECK(too_large(op, bytes, "bytes"));
  rf_status *st = alloc(op, op->g.dtype, &op->root_shape, &op->out);
  if (!st || !after_go) return st;
  size_t len = bytes > 0 ? (size_t)bytes : 1;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return st;
  op->scratch = p;
  op->scratch_len = len;
  /* Named whatever st says (out of memory comes without a name). */
  op->late =
      rf__error(rf_status_code(st),
                "collective '%s' (job step %lld) on %s: the %lld-byte "
                "output could not be allocated after GO (%s); this "
                "task took part in the MPI call through scratch memory",
                op->name, (long long)op->job_step, op->g.p[0].device->canonical,
                (long long)bytes, rf_status_message(st));
  rf_status_free(st);
  return NULL;
}

void rf__mpi_op_scratch_free(rf__mpi_op *op) {
  if (op->scratch) munmap(op->scratch, op->scratch_len);
  op->scratch = NULL;
}

/* Where a broadcast receiver's data go: its output, or the scratch. */
static void *broadcast_out(rf__mpi_op *op) {
  return op->out ? rf_tensor_mutable_data(op->out) : op->scratch;
}

rf_status *rf__mpi_op_alloc(rf__mpi_op *op) {
  rf__coll_group *g = &op->g;
  int64_t elems = rf_shape_num_elements(&op->shape);
  size_t esize = rf_dtype_size(g->dtype);
  op->wide = reduces(g->kind) && is_16(g->dtype);
  RF_CHECK(rf__mpi_algorithm_choose(op, &op->algo));
  op->algo_setting = rf__mpi_algorithm_setting();
  op->blocking = op->algo == RF_MPI_BLOCKING || op->algo == RF_MPI_RING;
  rf_dtype work = op->wide ? RF_FLOAT32 : g->dtype;
  MPI_Datatype type;
  MPI_Op mop;
  if (reduces(g->kind) && !mpi_reduction(g->dtype, g->reduction, &type, &mop))
    return rf__error(RF_UNIMPLEMENTED,
                     "collective '%s': %s of %s across processes is not "
                     "supported",
                     op->name, rf__reduction_name(g->reduction),
                     rf_dtype_name(g->dtype));
  switch (g->kind) {
    case RF_COLL_ALL_REDUCE:
    case RF_COLL_REDUCE:
    case RF_COLL_REDUCE_SCATTER:
      RF_CHECK(too_large(op, elems, "elements"));
      if (g->n > 1 || op->wide)
        RF_CHECK(alloc(op, work, &op->shape, &op->partial));
      if (g->kind == RF_COLL_REDUCE_SCATTER) {
        rf_shape rows = op->shape;
        rows.dims[0] = rows.dims[0] / op->num_devices * op->counts[op->me];
        return alloc(op, work, &rows, &op->out);
      }
      if (g->kind == RF_COLL_REDUCE && g->root < 0 && op->blocking)
        return NULL; /* MPI_Reduce, ring: senders receive nothing */
      return alloc(op, work, &op->shape, &op->out);
    case RF_COLL_ALL_GATHER: {
      rf_shape all = op->shape;
      all.dims[0] *= op->num_devices;
      RF_CHECK(
          too_large(op, rf_shape_num_elements(&all) * (int64_t)esize, "bytes"));
      return alloc(op, g->dtype, &all, &op->out);
    }
    case RF_COLL_BROADCAST:
      if (g->root >= 0) return too_large(op, elems * (int64_t)esize, "bytes");
      if (!rf_shape_is_fully_defined(&op->shape)) return NULL; /* at GO */
      op->root_shape = op->shape;
      return alloc_broadcast_out(op, false);
    default: return rf__internal("collective '%s': unknown kind", op->name);
  }
}

/* ---- this task's contribution ---- */

typedef struct local_job {
  rf__mpi_op *op;
  const void *ins[64];
  int64_t count;
} local_job;

static void reduce16(const local_job *j, int64_t lo, int64_t hi) {
  const rf__mpi_op *op = j->op;
  float (*to)(uint16_t) =
      op->g.dtype == RF_FLOAT16 ? rf_half_to_float : rf_bfloat16_to_float;
  float *out = rf_tensor_mutable_data(op->partial);
  for (int64_t i = lo; i < hi; i++) {
    float a = to(((const uint16_t *)j->ins[0])[i]);
    for (int k = 1; k < op->g.n; k++) {
      float v = to(((const uint16_t *)j->ins[k])[i]);
      switch (op->g.reduction) {
        case RF_REDUCE_PROD: a = a * v; break;
        case RF_REDUCE_MIN: a = (v < a || v != v) ? v : a; break;
        case RF_REDUCE_MAX: a = (v > a || v != v) ? v : a; break;
        default: a = a + v;
      }
    }
    out[i] = a;
  }
}

static void reduce_blocks(void *arg, int64_t b, int64_t e) {
  const local_job *j = arg;
  const rf__mpi_op *op = j->op;
  int64_t lo = b * BLOCK_ELEMS, hi = e * BLOCK_ELEMS;
  if (hi > j->count) hi = j->count;
  if (op->wide) {
    reduce16(j, lo, hi);
    return;
  }
  rf_reduction r =
      op->g.reduction == RF_REDUCE_AVG ? RF_REDUCE_SUM : op->g.reduction;
  rf__cpu_reduce(op->g.dtype, r, j->ins, op->g.n,
                 rf_tensor_mutable_data(op->partial), lo, hi);
}

/* All-gather: this task's inputs go straight into its rows of the output,
 * which MPI then completes in place. */
static void gather_local(rf__mpi_op *op) {
  size_t bytes = rf_tensor_nbytes(op->g.p[0].input);
  int before = 0;
  for (int t = 0; t < op->me; t++) before += op->counts[t];
  char *dst = (char *)rf_tensor_mutable_data(op->out) + (size_t)before * bytes;
  for (int i = 0; i < op->g.n; i++)
    memcpy(dst + (size_t)i * bytes, rf_tensor_data(op->g.p[i].input), bytes);
}

void rf__mpi_op_prepare(rf__mpi_op *op) {
  rf__coll_group *g = &op->g;
  switch (g->kind) {
    case RF_COLL_ALL_REDUCE:
    case RF_COLL_REDUCE:
    case RF_COLL_REDUCE_SCATTER: {
      if (!op->partial) {
        op->send = rf_tensor_data(g->p[0].input);
        break;
      }
      local_job j = {.op = op, .count = rf_shape_num_elements(&op->shape)};
      for (int i = 0; i < g->n; i++) j.ins[i] = rf_tensor_data(g->p[i].input);
      int64_t blocks = (j.count + BLOCK_ELEMS - 1) / BLOCK_ELEMS;
      rf__threadpool_parallel_for(g->pool, blocks, BLOCK_ELEMS * g->n,
                                  reduce_blocks, &j);
      op->send = rf_tensor_data(op->partial);
      break;
    }
    case RF_COLL_ALL_GATHER: gather_local(op); break;
    case RF_COLL_BROADCAST:
      if (g->root >= 0) op->send = rf_tensor_data(g->p[g->root].input);
      break;
    default: break;
  }
}

/* ---- the MPI call ---- */

int64_t rf__mpi_op_bytes(const rf__mpi_op *op) {
  int64_t es = op->wide ? 4 : (int64_t)rf_dtype_size(op->g.dtype);
  int64_t bytes = input_elems(op) * es;
  return op->g.kind == RF_COLL_ALL_GATHER ? bytes * op->num_devices : bytes;
}

/* Per task of the set: count participants' worth of `unit` each. */
static void per_task(const rf__mpi_op *op, int64_t unit, int *counts,
                     int *displs) {
  int64_t at = 0;
  for (int t = 0; t < op->nset; t++) {
    counts[t] = (int)(op->counts[t] * unit);
    if (displs) displs[t] = (int)at;
    at += op->counts[t] * unit;
  }
}

/* MPI_Iallreduce of op's contribution into out. Never MPI_IN_PLACE, though
 * op->partial is ours: left to choose, OpenMPI's libnbc then takes its
 * binomial tree (the whole vector log2(p) times each way). Large ones take
 * libnbc's ring (nbc_algorithm.c). */
static rf_status *iallreduce(rf__mpi_op *op, void *out, int count,
                             MPI_Datatype type, MPI_Op mop, MPI_Comm comm) {
  return rf__mpi_nbc_iallreduce(op->send, out, count, type, mop, comm,
                                rf__mpi_reqs_one(&op->req));
}

/* Whether every task of the set holds as many participants: then a
 * reduce-scatter is the _block form (OpenMPI picks its algorithms for it
 * apart from the general one's). */
static bool uniform(const rf__mpi_op *op) {
  for (int t = 1; t < op->nset; t++)
    if (op->counts[t] != op->counts[0]) return false;
  return true;
}

/* The exchange through shared memory (shm.c) that stands for MPI's call
 * of `kind`: count elements of esize bytes (a broadcast's whole vector,
 * an all-gather's one participant's), nset tasks holding tcounts
 * participants of num_devices; send and out as MPI's call takes them (an
 * all-gather's out holds this task's rows already, a broadcast's send is
 * its buffer). */
static void start_shm(rf__mpi_shm *s, rf__mpi_shm_x *x,
                      rf__collective_kind kind, MPI_Datatype type, MPI_Op mop,
                      int64_t count, int64_t esize, int nset,
                      const int *tcounts, int num_devices, int root_index,
                      const void *send, void *out) {
  if (kind == RF_COLL_BROADCAST) {
    rf__mpi_shm_start_broadcast(x, s, (void *)send, count * esize, root_index);
    return;
  }
  int64_t counts[RF_MPI_SHM_MAX_TASKS], displs[RF_MPI_SHM_MAX_TASKS], at = 0;
  for (int t = 0; t < nset; t++) {
    if (kind == RF_COLL_ALL_REDUCE || kind == RF_COLL_REDUCE)
      counts[t] = count / nset + (t < count % nset); /* even chunks */
    else if (kind == RF_COLL_REDUCE_SCATTER)
      counts[t] = tcounts[t] * (count / num_devices);
    else /* all-gather, in bytes */
      counts[t] = tcounts[t] * count * esize;
    displs[t] = at;
    at += counts[t];
  }
  if (kind == RF_COLL_ALL_GATHER)
    rf__mpi_shm_start_all_gather(x, s, out, counts, displs);
  else
    rf__mpi_shm_start_reduce(x, s, send, out, counts, displs, type, mop,
                             kind == RF_COLL_ALL_REDUCE ? RF_MPI_SHM_ALL
                             : kind == RF_COLL_REDUCE   ? RF_MPI_SHM_ROOT
                                                        : RF_MPI_SHM_SCATTER,
                             root_index);
}

rf_status *rf__mpi_op_issue(rf__mpi_op *op, MPI_Comm comm) {
  rf__coll_group *g = &op->g;
  MPI_Datatype type = MPI_BYTE;
  MPI_Op mop = MPI_SUM;
  if (reduces(g->kind)) mpi_reduction(g->dtype, g->reduction, &type, &mop);
  int count = (int)rf_shape_num_elements(&op->shape);
  void *out = op->out ? rf_tensor_mutable_data(op->out) : NULL;
  int counts[64 * 8], displs[64 * 8];
  if (op->nset > (int)(sizeof counts / sizeof *counts))
    return rf__internal("collective '%s': too many tasks", op->name);
  rf__mpi_reqs_clear(&op->req);
  /* shared memory where comm has a segment (made at a GO, alike in every
   * process: member.c, agreed.c), else MPI's nonblocking call */
  rf__mpi_shm *shm = op->algo == RF_MPI_SHM ? rf__mpi_shm_peek(comm) : NULL;
  if (shm) {
    int64_t n = count, es = op->wide ? 4 : (int64_t)rf_dtype_size(g->dtype);
    const void *send = op->send;
    if (g->kind == RF_COLL_BROADCAST) {
      RF_CHECK(alloc_broadcast_out(op, true));
      n = input_elems(op);
      es = (int64_t)rf_dtype_size(g->dtype);
      if (g->root < 0) send = broadcast_out(op);
    }
    rf__mpi_algorithm_count(RF_MPI_SHM);
    start_shm(shm, &op->req.shm, g->kind, type, mop, n, es, op->nset,
              op->counts, op->num_devices, op->root_index, send, out);
    return NULL;
  }
  rf__mpi_algorithm_count(op->algo == RF_MPI_P2P ? RF_MPI_P2P : RF_MPI_NBC);
  switch (g->kind) {
    case RF_COLL_ALL_REDUCE:
    case RF_COLL_REDUCE: return iallreduce(op, out, count, type, mop, comm);
    case RF_COLL_REDUCE_SCATTER:
      if (uniform(op))
        return RF_MPI_STATUS(
            MPI_Ireduce_scatter_block(op->send, out, count / op->nset, type,
                                      mop, comm, rf__mpi_reqs_one(&op->req)));
      per_task(op, count / op->num_devices, counts, NULL);
      return RF_MPI_STATUS(MPI_Ireduce_scatter(
          op->send, out, counts, type, mop, comm, rf__mpi_reqs_one(&op->req)));
    case RF_COLL_ALL_GATHER:
      per_task(op, (int64_t)rf_dtype_size(g->dtype) * count, counts, displs);
      if (op->algo == RF_MPI_P2P) /* one participant: from its input */
        return rf__mpi_p2p_all_gather(
            g->n == 1 ? rf_tensor_data(g->p[0].input)
                      : (const char *)out + displs[op->me],
            out, counts, displs, op->nset, op->me, comm, &op->req);
      return RF_MPI_STATUS(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, out,
                                           counts, displs, MPI_BYTE, comm,
                                           rf__mpi_reqs_one(&op->req)));
    case RF_COLL_BROADCAST: {
      RF_CHECK(alloc_broadcast_out(op, true));
      int bytes = (int)(input_elems(op) * (int64_t)rf_dtype_size(g->dtype));
      void *buf = g->root >= 0 ? (void *)op->send : broadcast_out(op);
      return RF_MPI_STATUS(MPI_Ibcast(buf, bytes, MPI_BYTE, op->root_index,
                                      comm, rf__mpi_reqs_one(&op->req)));
    }
    default: return rf__internal("collective '%s': unknown kind", op->name);
  }
}

/* The agreed data call of an op whose descriptor changed (agreed.c): the
 * others issue their data with their check, so this task makes the same
 * call - the agreed kind, dtype, reduction and shape, the agreed tasks'
 * counts and root - from and into scratch of its own (*buf, the caller's
 * to free once the call completed); the result is thrown away. */
rf_status *rf__mpi_op_issue_standin(const rf__mpi_op *op, const rf__mpi_msg *d,
                                    int nset, const int *tcounts,
                                    int root_index, const rf_shape *root_shape,
                                    MPI_Comm comm, void **buf,
                                    rf__mpi_reqs *reqs) {
  rf__collective_kind kind = (rf__collective_kind)d->kind;
  MPI_Datatype type = MPI_BYTE;
  MPI_Op mop = MPI_SUM;
  if (reduces(kind) && !mpi_reduction((rf_dtype)d->dtype,
                                      (rf_reduction)d->reduction, &type, &mop))
    return rf__internal("collective '%s': no agreed reduction", op->name);
  int64_t es = reduces(kind) && is_16((rf_dtype)d->dtype)
                   ? 4
                   : (int64_t)rf_dtype_size((rf_dtype)d->dtype);
  int64_t count = 1;
  for (int i = 0; i < d->rank && i < RF_MAX_RANK; i++) count *= d->dims[i];
  if (kind == RF_COLL_BROADCAST) count = rf_shape_num_elements(root_shape);
  int64_t total =
      count * es * (kind == RF_COLL_ALL_GATHER ? d->num_devices : 1);
  int counts[64 * 8], displs[64 * 8];
  if (nset > (int)(sizeof counts / sizeof *counts) || total > INT_MAX)
    return rf__internal("collective '%s': no stand-in of its agreed call",
                        op->name);
  char *send = rf__calloc(2, total > 0 ? (size_t)total : 1);
  if (!send) return rf__oom();
  char *out = send + total;
  *buf = send;
  rf__mpi_reqs_clear(reqs);
  /* shared memory where the others' op takes it (the same choice from the
   * same descriptor: algorithm.c) */
  int64_t elems = 1;
  for (int i = 0; i < d->rank && i < RF_MAX_RANK; i++) elems *= d->dims[i];
  rf__mpi_algorithm algo = rf__mpi_standin_algorithm(
      kind, nset,
      elems * (int64_t)rf_dtype_size((rf_dtype)d->dtype) *
          (kind == RF_COLL_ALL_GATHER ? d->num_devices : 1),
      rf__mpi_job_shm_ok(op->job));
  rf__mpi_shm *shm = algo == RF_MPI_SHM ? rf__mpi_shm_peek(comm) : NULL;
  if (shm) {
    start_shm(shm, &reqs->shm, kind, type, mop, count, es, nset, tcounts,
              d->num_devices, root_index, send,
              kind == RF_COLL_ALL_GATHER ? send : out);
    return NULL;
  }
  MPI_Request *req = NULL;
  if (!(kind == RF_COLL_ALL_GATHER && algo == RF_MPI_P2P))
    req = rf__mpi_reqs_one(reqs);
  bool same_counts = true;
  int64_t at = 0;
  for (int t = 0; t < nset; t++) {
    same_counts = same_counts && tcounts[t] == tcounts[0];
    int64_t unit =
        kind == RF_COLL_ALL_GATHER ? count * es : count / d->num_devices;
    counts[t] = (int)(tcounts[t] * unit);
    displs[t] = (int)at;
    at += tcounts[t] * unit;
  }
  switch (kind) {
    case RF_COLL_ALL_REDUCE:
    case RF_COLL_REDUCE:
      return rf__mpi_nbc_iallreduce(send, out, (int)count, type, mop, comm,
                                    req);
    case RF_COLL_REDUCE_SCATTER:
      if (same_counts)
        return RF_MPI_STATUS(MPI_Ireduce_scatter_block(
            send, out, (int)count / nset, type, mop, comm, req));
      return RF_MPI_STATUS(
          MPI_Ireduce_scatter(send, out, counts, type, mop, comm, req));
    case RF_COLL_ALL_GATHER:
      if (!req) { /* the messages the others' p2p all-gather pair with */
        int me = 0;
        RF_CHECK(RF_MPI_STATUS(MPI_Comm_rank(comm, &me)));
        return rf__mpi_p2p_all_gather(send + displs[me], send, counts, displs,
                                      nset, me, comm, reqs);
      }
      return RF_MPI_STATUS(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, send,
                                           counts, displs, MPI_BYTE, comm,
                                           req));
    case RF_COLL_BROADCAST:
      return RF_MPI_STATUS(
          MPI_Ibcast(send, (int)total, MPI_BYTE, root_index, comm, req));
    default: return rf__internal("collective '%s': unknown kind", op->name);
  }
}

/* MPI's blocking collective: OpenMPI's tuned module picks its algorithm. */
static int run_mpi(rf__mpi_op *op, void *out, int count, MPI_Datatype type,
                   MPI_Op mop, MPI_Comm comm, int *counts, int *displs) {
  rf__coll_group *g = &op->g;
  switch (g->kind) {
    case RF_COLL_ALL_REDUCE:
      return MPI_Allreduce(op->send, out, count, type, mop, comm);
    case RF_COLL_REDUCE:
      return MPI_Reduce(op->send, out, count, type, mop, op->root_index, comm);
    case RF_COLL_REDUCE_SCATTER:
      if (uniform(op))
        return MPI_Reduce_scatter_block(op->send, out, count / op->nset, type,
                                        mop, comm);
      per_task(op, count / op->num_devices, counts, NULL);
      return MPI_Reduce_scatter(op->send, out, counts, type, mop, comm);
    case RF_COLL_ALL_GATHER:
      per_task(op, (int64_t)rf_dtype_size(g->dtype) * count, counts, displs);
      return MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, out, counts, displs,
                            MPI_BYTE, comm);
    default: { /* broadcast */
      int bytes = (int)(input_elems(op) * (int64_t)rf_dtype_size(g->dtype));
      void *buf = g->root >= 0 ? (void *)op->send : out;
      return MPI_Bcast(buf, bytes, MPI_BYTE, op->root_index, comm);
    }
  }
}

/* ringflow's ring (ring.c). */
static int run_ring(rf__mpi_op *op, void *out, int count, MPI_Datatype type,
                    MPI_Op mop, MPI_Comm comm, int *counts, int *displs) {
  rf__coll_group *g = &op->g;
  switch (g->kind) {
    case RF_COLL_ALL_REDUCE:
      return rf__mpi_ring_all_reduce(op->send, out, count, type, mop, comm,
                                     counts, displs);
    case RF_COLL_REDUCE:
      return rf__mpi_ring_reduce(op->send, out, count, type, mop,
                                 op->root_index, comm, counts, displs);
    case RF_COLL_REDUCE_SCATTER:
      per_task(op, count / op->num_devices, counts, displs);
      return rf__mpi_ring_reduce_scatter(op->send, out, counts, displs, type,
                                         mop, comm);
    case RF_COLL_ALL_GATHER:
      per_task(op, (int64_t)rf_dtype_size(g->dtype) * count, counts, displs);
      return rf__mpi_ring_all_gather(out, counts, displs, MPI_BYTE, comm);
    default: { /* broadcast */
      int bytes = (int)(input_elems(op) * (int64_t)rf_dtype_size(g->dtype));
      void *buf = g->root >= 0 ? (void *)op->send : out;
      return rf__mpi_ring_broadcast(buf, bytes, op->root_index, comm, counts,
                                    displs);
    }
  }
}

rf_status *rf__mpi_op_run_blocking(rf__mpi_op *op, MPI_Comm comm) {
  rf__coll_group *g = &op->g;
  MPI_Datatype type = MPI_BYTE;
  MPI_Op mop = MPI_SUM;
  if (reduces(g->kind)) mpi_reduction(g->dtype, g->reduction, &type, &mop);
  int count = (int)rf_shape_num_elements(&op->shape);
  int counts[64 * 8], displs[64 * 8];
  if (op->nset > (int)(sizeof counts / sizeof *counts))
    return rf__internal("collective '%s': too many tasks", op->name);
  void *out = op->out ? rf_tensor_mutable_data(op->out) : NULL;
  if (g->kind == RF_COLL_BROADCAST) {
    RF_CHECK(alloc_broadcast_out(op, true));
    out = broadcast_out(op);
  }
  rf__mpi_algorithm_count(op->algo);
  int rc = op->algo == RF_MPI_RING
               ? run_ring(op, out, count, type, mop, comm, counts, displs)
               : run_mpi(op, out, count, type, mop, comm, counts, displs);
  if (rc == MPI_SUCCESS) return NULL;
  return rf__mpi_status(
      rc, op->algo == RF_MPI_RING ? "ringflow's ring" : "MPI's blocking call",
      __FILE__, __LINE__);
}

/* ---- results ---- */

/* avg: the sum divided by every participant of the job. */
static void finish_avg(rf__mpi_op *op, rf_tensor *t) {
  int64_t n = rf_tensor_num_elements(t);
  int d = op->num_devices;
  void *p = rf_tensor_mutable_data(t);
#define DIV(T, DT) \
  for (int64_t i = 0; i < n; i++) ((T *)p)[i] = (T)(((T *)p)[i] / (DT)d)
  switch (rf_tensor_dtype(t)) {
    case RF_FLOAT32: DIV(float, float); break;
    case RF_FLOAT64: DIV(double, double); break;
    case RF_INT8: DIV(int8_t, int); break;
    case RF_UINT8: DIV(uint8_t, int); break;
    case RF_INT32: DIV(int32_t, int32_t); break;
    case RF_INT64: DIV(int64_t, int64_t); break;
    default: break;
  }
#undef DIV
}

/* Elements [offset, offset + |shape|) of src as a new tensor of `shape` on
 * participant r's device: a copy, or for float16/bfloat16 the float32 sums
 * rounded once (x 1/n for avg, as the CPU backend scales). */
static rf_status *convert(rf__mpi_op *op, const rf_tensor *src,
                          const rf_shape *shape, int64_t offset, int r,
                          rf_tensor **out) {
  RF_CHECK(
      rf_tensor_new(op->g.dtype, shape, op->g.p[r].device->allocator, out));
  int64_t n = rf_shape_num_elements(shape);
  if (!op->wide) {
    size_t es = rf_dtype_size(op->g.dtype);
    memcpy(rf_tensor_mutable_data(*out),
           (const char *)rf_tensor_data(src) + (size_t)offset * es,
           (size_t)n * es);
    return NULL;
  }
  const float *f = (const float *)rf_tensor_data(src) + offset;
  uint16_t *h = rf_tensor_mutable_data(*out);
  uint16_t (*from)(float) =
      op->g.dtype == RF_FLOAT16 ? rf_float_to_half : rf_float_to_bfloat16;
  bool avg = op->g.reduction == RF_REDUCE_AVG;
  float scale = 1.0f / (float)op->num_devices;
  for (int64_t i = 0; i < n; i++) h[i] = from(avg ? f[i] * scale : f[i]);
  return NULL;
}

rf_status *rf__mpi_op_outputs(rf__mpi_op *op, rf_tensor **outs) {
  rf__coll_group *g = &op->g;
  for (int i = 0; i < g->n; i++) outs[i] = NULL;
  if (op->late) { /* took part through scratch */
    rf_status *st = op->late;
    op->late = NULL;
    return st;
  }
  if (reduces(g->kind) && !op->wide && g->reduction == RF_REDUCE_AVG && op->out)
    finish_avg(op, op->out);
  switch (g->kind) {
    case RF_COLL_ALL_REDUCE:
    case RF_COLL_REDUCE:
    case RF_COLL_ALL_GATHER: {
      if (g->kind == RF_COLL_REDUCE && g->root < 0) return NULL; /* senders */
      rf_tensor *res = op->out;
      if (op->wide) {
        rf_shape s = rf_tensor_shape(op->out);
        RF_CHECK(convert(op, op->out, &s, 0, 0, &res));
      }
      for (int i = 0; i < g->n; i++)
        if (g->kind != RF_COLL_REDUCE || i == g->root)
          outs[i] = rf_tensor_retain(res);
      if (res != op->out) rf_tensor_release(res);
      return NULL;
    }
    case RF_COLL_REDUCE_SCATTER: {
      if (g->n == 1 && !op->wide) {
        outs[0] = rf_tensor_retain(op->out);
        return NULL;
      }
      rf_shape rows = rf_tensor_shape(op->out);
      rows.dims[0] /= g->n;
      int64_t per = rf_shape_num_elements(&rows);
      /* Each participant's rows of the process's share: a view where they
       * start aligned (no copy), else a copy; float16/bfloat16 rounded. */
      bool views =
          !op->wide &&
          per * (int64_t)rf_dtype_size(g->dtype) % RF_TENSOR_ALIGNMENT == 0;
      for (int i = 0; i < g->n; i++)
        RF_CHECK(views ? rf__tensor_new_slice(op->out, i * per, &rows, &outs[i])
                       : convert(op, op->out, &rows, i * per, i, &outs[i]));
      return NULL;
    }
    case RF_COLL_BROADCAST: {
      rf_tensor *v = g->root >= 0 ? g->p[g->root].input : op->out;
      for (int i = 0; i < g->n; i++)
        if (i != g->root) outs[i] = rf_tensor_retain(v);
      return NULL;
    }
    default: return rf__internal("collective '%s': unknown kind", op->name);
  }
}
