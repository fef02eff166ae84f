/* comm/mpi/algorithm.c - which algorithm moves a collective's data across
 * processes, by kind and size (docs/MULTIPROCESS.md, "Which algorithm"):
 *   nbc       MPI's nonblocking collective on the communication thread
 *             (libnbc in OpenMPI; the all-reduce takes libnbc's ring from
 *             256 KiB, nbc_algorithm.c);
 *   blocking  MPI's blocking collective (OpenMPI's tuned choice) on the
 *             job's data thread;
 *   ring      ringflow's own ring over point-to-point messages (ring.c) on
 *             the job's data thread.
 * The size is the collective's whole vector in bytes (an all-gather's
 * output, the others' input), which the coordinator has checked to agree,
 * so every process chooses alike. RF_MPI_ALGORITHM (read once) forces one
 * algorithm for every kind: auto (the default: the table below), nbc,
 * blocking or ring; the data thread's two need MPI_THREAD_MULTIPLE and CPU
 * buffers, and fall back to nbc without them. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi/op.h"
#include "core/status.h"

/* From these sizes on, the data thread's algorithm beats MPI's nonblocking
 * call on the communication thread (below, that call saves the data
 * thread's two hand-offs, 10-80 us). Chosen from the fastest of 30 single
 * runs of each algorithm alone, interleaved, 2 and 4 processes on 2 cores
 * (docs/PERFORMANCE.md, "Per-size algorithms"):
 *   reduce: MPI_Reduce from 256 KiB (4 processes: 111 us against 240-271
 *     for MPI_Ireduce or the all-reduce; 2 processes: 32 against 96-126);
 *   reduce-scatter: ringflow's ring from 1 MiB (2 processes: 63 us against
 *     176-183 at 1 MiB, 659 against 1,248-2,239 at 4 MiB; 4 processes:
 *     even at 1 MiB, 4,881 against 4,997-5,737 at 4 MiB and 24.2 ms
 *     against 36.6-53.0 at 16 MiB);
 *   all-reduce: never (libnbc's ring, taken from 256 KiB, was as fast as
 *     ringflow's: 1,600 against 1,662 us at 1 MiB, 39.2 against 38.4 ms at
 *     16 MiB, 4 processes), nor all-gather (MPI_Iallgatherv in place was
 *     the fastest or within 10% at every size), nor broadcast (libnbc's
 *     own choice within 10% of the best up to 4 MiB). */
#define REDUCE_MIN_BYTES (256 << 10)       /* MPI_Reduce */
#define REDUCE_SCATTER_MIN_BYTES (1 << 20) /* ring */
#define ALL_GATHER_MIN_BYTES INT64_MAX
#define ALL_REDUCE_MIN_BYTES INT64_MAX
#define BROADCAST_MIN_BYTES INT64_MAX

static atomic_int forced = -1; /* -1 unread; RF_MPI_AUTO..RF_MPI_RING; -2 bad */
static atomic_llong runs[RF_MPI_RING + 1];

static const char *const names[] = {"auto", "nbc", "blocking", "ring"};

static int read_forced(void) {
  int f = atomic_load(&forced);
  if (f != -1) return f;
  const char *e = getenv("RF_MPI_ALGORITHM");
  f = RF_MPI_AUTO;
  if (e && *e) {
    f = -2;
    for (int a = RF_MPI_AUTO; a <= RF_MPI_RING; a++)
      if (strcmp(e, names[a]) == 0) f = a;
  }
  atomic_store(&forced, f);
  return f;
}

const char *rf__mpi_algorithm_name(rf__mpi_algorithm a) {
  return a >= RF_MPI_AUTO && a <= RF_MPI_RING ? names[a] : "?";
}

int64_t rf__mpi_algorithm_bytes(const rf__mpi_op *op) {
  int64_t bytes =
      rf_shape_num_elements(&op->shape) * (int64_t)rf_dtype_size(op->g.dtype);
  return op->g.kind == RF_COLL_ALL_GATHER ? bytes * op->num_devices : bytes;
}

int64_t rf__mpi_algorithm_threshold(rf__collective_kind kind,
                                    rf__mpi_algorithm *above) {
  *above = RF_MPI_RING;
  switch (kind) {
    case RF_COLL_REDUCE: *above = RF_MPI_BLOCKING; return REDUCE_MIN_BYTES;
    case RF_COLL_REDUCE_SCATTER: return REDUCE_SCATTER_MIN_BYTES;
    case RF_COLL_ALL_GATHER: return ALL_GATHER_MIN_BYTES;
    case RF_COLL_ALL_REDUCE: return ALL_REDUCE_MIN_BYTES;
    case RF_COLL_BROADCAST: return BROADCAST_MIN_BYTES;
    default: return INT64_MAX;
  }
}

static rf__mpi_algorithm by_size(rf__collective_kind kind, int64_t bytes) {
  rf__mpi_algorithm above;
  return bytes >= rf__mpi_algorithm_threshold(kind, &above) ? above
                                                            : RF_MPI_NBC;
}

rf_status *rf__mpi_algorithm_choose(const rf__mpi_op *op,
                                    rf__mpi_algorithm *out) {
  int f = read_forced();
  if (f == -2)
    return rf__error(RF_INVALID_ARGUMENT,
                     "collective '%s': RF_MPI_ALGORITHM is '%s'; expected "
                     "auto, nbc, blocking or ring",
                     op->name, getenv("RF_MPI_ALGORITHM"));
  rf__mpi_algorithm a = f == RF_MPI_AUTO
                            ? by_size(op->g.kind, rf__mpi_algorithm_bytes(op))
                            : (rf__mpi_algorithm)f;
  if (a != RF_MPI_NBC && (op->gpu || !rf__mpi_thread_multiple()))
    a = RF_MPI_NBC;
  *out = a;
  return NULL;
}

void rf__mpi_algorithm_force(rf__mpi_algorithm a) {
  read_forced(); /* the environment, once, before this overrides it */
  atomic_store(&forced, (int)a);
}

void rf__mpi_algorithm_count(rf__mpi_algorithm a) {
  if (a >= RF_MPI_AUTO && a <= RF_MPI_RING) atomic_fetch_add(&runs[a], 1);
}

int64_t rf__mpi_algorithm_runs(rf__mpi_algorithm a) {
  return a >= RF_MPI_AUTO && a <= RF_MPI_RING ? atomic_load(&runs[a]) : 0;
}
