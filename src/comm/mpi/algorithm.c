/* comm/mpi/algorithm.c - which algorithm moves a collective's data across
 * processes, by kind and size (docs/MULTIPROCESS.md, "Which algorithm"):
 *   nbc       MPI's nonblocking collective on the communication thread
 *             (libnbc in OpenMPI; the all-reduce takes libnbc's ring from
 *             256 KiB, nbc_algorithm.c);
 *   blocking  MPI's blocking collective (OpenMPI's tuned choice) on the
 *             job's data thread;
 *   ring      ringflow's own ring over point-to-point messages (ring.c) on
 *             the job's data thread;
 *   p2p       all-gathers only: ringflow's own nonblocking messages, one
 *             to and one from every other process (p2p.c), run as nbc
 *             runs (the other kinds take nbc);
 *   shm       memory shared by the processes of one host (shm.c), run as
 *             nbc runs; nbc where they cannot share it (other hosts, no
 *             room in /dev/shm, over 64 processes).
 * The choice goes by the number of processes (tasks) of the collective's
 * set and the size of its whole vector in bytes (an all-gather's output,
 * the others' input), which the coordinator has checked to agree, so every
 * process chooses alike. RF_MPI_ALGORITHM (read once) forces one
 * algorithm for every kind: auto (the default: the table below), nbc,
 * blocking, ring, p2p or shm; all but nbc need CPU buffers (blocking and
 * ring, which run on a data thread, MPI_THREAD_MULTIPLE as well) and fall
 * back to nbc without them. */
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi/op.h"
#include "core/status.h"

/* The table: per kind, rows of (processes from, bytes from, algorithm); a
 * collective takes the last row whose process count and size it reaches,
 * RF_MPI_NBC below every row (below, MPI's nonblocking call saves the data
 * thread's two hand-offs, 10-80 us). Every process of a set sees the same
 * count and size, so every process chooses alike.
 *   reduce: MPI_Reduce from 256 KiB (the fastest of 30 single runs of each
 *     algorithm alone, 2 cores, docs/PERFORMANCE.md "Per-size algorithms":
 *     4 processes 111 us against 240-271 for MPI_Ireduce or the all-reduce;
 *     2 processes 32 against 96-126). From 4 processes, ringflow's ring
 *     from 1 MiB and libnbc's all-reduce from 64 MiB: on the quiet 16-core
 *     host, 8 cores, np 4 (session 11 call A, bench/mpi_large_ab.sh, 3
 *     repetitions; MPI's time / ringflow's, medians) the ring was 1.26,
 *     1.37, 1.83 at 1, 4, 16 MiB against MPI_Reduce's 0.84, 0.91, 1.00,
 *     and the all-reduce 2.43 at 64 MiB against 1.06 and the ring's 1.68,
 *     each in every repetition (np 8 and more not measured: the same rows);
 *     at np 2 MPI_Reduce stayed the fastest or within the noise of it;
 *   reduce-scatter: ringflow's ring from 1 MiB (2 processes: 63 us against
 *     176-183 at 1 MiB, 659 against 1,248-2,239 at 4 MiB; 4 processes:
 *     even at 1 MiB, 4,881 against 4,997-5,737 at 4 MiB and 24.2 ms
 *     against 36.6-53.0 at 16 MiB; session 11 call A: the ring 1.32-4.08
 *     from 1 MiB at np 2, 0.89-2.83 at np 4);
 *   all-reduce: never the data thread (libnbc's ring, taken from 256 KiB,
 *     was as fast as ringflow's: 1,600 against 1,662 us at 1 MiB, 39.2
 *     against 38.4 ms at 16 MiB, 4 processes; in call A MPI's blocking call
 *     and ringflow's ring were slower at every size), nor all-gather
 *     (MPI_Iallgatherv in
 *     place was the fastest or within 10% at every size, in call A too),
 *     nor broadcast (libnbc's own choice within 10% of the best up to
 *     4 MiB; in call A the fastest at 16 and 64 MiB, np 4). */
typedef struct row {
  int procs;
  int64_t bytes;
  rf__mpi_algorithm algo;
} row;

#define MiB ((int64_t)1 << 20)
#define KiB ((int64_t)1 << 10)
static const row reduce_rows[] = {{1, 256 * KiB, RF_MPI_BLOCKING},
                                  {4, 1 * MiB, RF_MPI_RING},
                                  {4, 64 * MiB, RF_MPI_NBC}};
static const row reduce_scatter_rows[] = {{1, 1 * MiB, RF_MPI_RING}};
static const row all_reduce_rows[] = {{1, 256 * KiB, RF_MPI_NBC}};
/*   all-gather: messages at every size up to RF_MPI_P2P_MAX_TASKS
 *     processes (p2p.c: against MPI_Iallgatherv in place, 2-core VM, 2
 *     processes 4.9 against 10.4 us at 64 KiB and 47 against 92 at 1 MiB,
 *     even at 1-4 KiB and 4 MiB; 4 processes 20-30% faster at every size
 *     from 1 KiB), libnbc's linear exchange (the same messages as one MPI
 *     schedule) beyond. */
static const row all_gather_rows[] = {
    {1, 0, RF_MPI_P2P}, {RF_MPI_P2P_MAX_TASKS + 1, 0, RF_MPI_NBC}};

/* Shared memory (shm.c), before the rows above, for a job on one machine
 * whose nodes are not crowded (rf__mpi_job_shm_ok; a crowded or spread
 * job takes the rows above alone), up to RF_MPI_SHM_MAX_TASKS processes:
 * per kind, ranges of (processes from, bytes from, bytes below).
 *   The all-reduce, reduce and reduce-scatter at every size, the
 *     all-gather from 64 KiB and the broadcast from 256 KiB with 2 and 3
 *     processes; every kind at every size from 4. On the 16-core host
 *     (docs/PERFORMANCE.md "Session 31"), 2 processes, OpenMPI's default
 *     binding and unbound, two runs each of the exchange forced against
 *     the table without it (MPI's time / ringflow's): from 256 KiB
 *     all-reduce 1.13-1.69 against libnbc's 1.04-1.35, reduce 0.93-1.07
 *     against MPI_Reduce's 0.63-0.99, broadcast 0.98-1.27 against libnbc's
 *     0.90-0.99, all-gather 1.05-1.32 against messages' 0.87-1.16,
 *     reduce-scatter 2.0-2.5 against the ring's 1.4-2.3; at 64 KiB the
 *     all-gather 0.90-0.92 against 0.73-0.74 and the broadcast 0.73-0.77
 *     against libnbc's 0.77-0.79. Below 64 KiB the broadcast and the
 *     all-gather keep MPI's call and messages: on the 2-core AMD VM of
 *     session 29, 0.24-0.32 against 0.36-0.53 at 16-64 KiB. The all-reduce,
 *     reduce and reduce-scatter there below 256 KiB (session 29):
 *     all-reduce 0.38-0.50 against 0.08-0.30 at 1 KiB, 1.52-1.57 against
 *     0.74-0.77 at 64 KiB; reduce 0.47 against 0.21-0.28 at 1 KiB;
 *     reduce-scatter 0.97-1.04 against 0.63-0.69 at 64 KiB. That VM's
 *     exchange alone lost to MPI's single-copy transfers at 2 processes
 *     from 256 KiB (0.23-0.71), which is why session 30 kept the rows
 *     there; the host, and session 31's Intel VM (1.4-2.1 from 1 MiB,
 *     `bench_mpi_shm_floor`), say otherwise, and the host decides.
 *   4 processes and more (session 30, 8 cores for 4 processes, 16 for 8):
 *     the exchange forced was the best choice, or within the runs' spread
 *     of it, at every size, and from 256 KiB the best by 11% to 4x: from
 *     1 MiB all-reduce 1.37-1.71x MPI's speed (libnbc 0.84-1.35x), reduce
 *     1.33-2.20x (the ring 1.06-1.83x), broadcast 1.73-3.61x (libnbc
 *     0.77-1.64x), all-gather 1.16-1.57x (messages 0.71-1.06x),
 *     reduce-scatter 1.41-4.29x (the ring 0.82-3.20x); the parallel reads
 *     of more processes outrun MPI's single-copy transfers there. */
typedef struct shm_range {
  int procs;
  int64_t from, below;
} shm_range;
static const shm_range every_size_shm[] = {{1, 0, INT64_MAX}};
static const shm_range all_gather_shm[] = {{1, 64 * KiB, INT64_MAX},
                                           {4, 0, INT64_MAX}};
static const shm_range broadcast_shm[] = {{1, 256 * KiB, INT64_MAX},
                                          {4, 0, INT64_MAX}};

/* A kind's table: its shared-memory ranges, then its rows. */
typedef struct kind_table {
  const shm_range *shm;
  int nshm;
  const row *rows;
  int nrows;
} kind_table;

#define COUNT(a) ((int)(sizeof(a) / sizeof *(a)))

static kind_table table_of(rf__collective_kind kind) {
  switch (kind) {
    case RF_COLL_REDUCE:
      return (kind_table){every_size_shm, COUNT(every_size_shm), reduce_rows,
                          COUNT(reduce_rows)};
    case RF_COLL_REDUCE_SCATTER:
      return (kind_table){every_size_shm, COUNT(every_size_shm),
                          reduce_scatter_rows, COUNT(reduce_scatter_rows)};
    case RF_COLL_ALL_REDUCE:
      return (kind_table){every_size_shm, COUNT(every_size_shm),
                          all_reduce_rows, COUNT(all_reduce_rows)};
    case RF_COLL_ALL_GATHER:
      return (kind_table){all_gather_shm, COUNT(all_gather_shm),
                          all_gather_rows, COUNT(all_gather_rows)};
    case RF_COLL_BROADCAST: /* no rows: nbc */
      return (kind_table){broadcast_shm, COUNT(broadcast_shm), NULL, 0};
    default: return (kind_table){NULL, 0, NULL, 0};
  }
}

/* -1 unread; RF_MPI_AUTO..RF_MPI_ALGORITHM_LAST; -2 bad */
static atomic_int forced = -1;
static atomic_llong runs[RF_MPI_ALGORITHM_LAST + 1];

static const char *const names[] = {"auto", "nbc", "blocking",
                                    "ring", "p2p", "shm"};

static int read_forced(void) {
  int f = atomic_load(&forced);
  if (f != -1) return f;
  const char *e = getenv("RF_MPI_ALGORITHM");
  f = RF_MPI_AUTO;
  if (e && *e) {
    f = -2;
    for (int a = RF_MPI_AUTO; a <= RF_MPI_ALGORITHM_LAST; a++)
      if (strcmp(e, names[a]) == 0) f = a;
  }
  atomic_store(&forced, f);
  return f;
}

const char *rf__mpi_algorithm_name(rf__mpi_algorithm a) {
  return a >= RF_MPI_AUTO && a <= RF_MPI_ALGORITHM_LAST ? names[a] : "?";
}

int64_t rf__mpi_algorithm_bytes(const rf__mpi_op *op) {
  int64_t bytes =
      rf_shape_num_elements(&op->shape) * (int64_t)rf_dtype_size(op->g.dtype);
  return op->g.kind == RF_COLL_ALL_GATHER ? bytes * op->num_devices : bytes;
}

rf__mpi_algorithm rf__mpi_algorithm_pick(rf__collective_kind kind, int procs,
                                         int64_t bytes, bool shm_ok) {
  kind_table t = table_of(kind);
  for (int i = 0; shm_ok && procs <= RF_MPI_SHM_MAX_TASKS && i < t.nshm; i++)
    if (procs >= t.shm[i].procs && bytes >= t.shm[i].from &&
        bytes < t.shm[i].below)
      return RF_MPI_SHM;
  rf__mpi_algorithm a = RF_MPI_NBC;
  for (int i = 0; i < t.nrows; i++)
    if (procs >= t.rows[i].procs && bytes >= t.rows[i].bytes)
      a = t.rows[i].algo;
  return a;
}

bool rf__mpi_job_shm_ok(const rf__job *j) {
  return j && j->one_host && !j->crowded;
}

/* Adds b to the k sorted sizes at bytes (at most max), once. */
static int add_bound(int64_t *bytes, int k, int max, int64_t b) {
  int at = 0;
  while (at < k && bytes[at] < b) at++;
  if ((at < k && bytes[at] == b) || k >= max) return k;
  memmove(bytes + at + 1, bytes + at, sizeof *bytes * (size_t)(k - at));
  bytes[at] = b;
  return k + 1;
}

int rf__mpi_algorithm_bounds(rf__collective_kind kind, int procs, bool shm_ok,
                             int64_t *bytes, int max) {
  int k = 0;
  kind_table t = table_of(kind);
  for (int i = 0; i < t.nrows; i++) /* a row from 0 bytes holds at every size */
    if (procs >= t.rows[i].procs && t.rows[i].bytes > 0)
      k = add_bound(bytes, k, max, t.rows[i].bytes);
  for (int i = 0; shm_ok && procs <= RF_MPI_SHM_MAX_TASKS && i < t.nshm; i++)
    if (procs >= t.shm[i].procs) {
      const shm_range *s = &t.shm[i];
      if (s->from > 0) k = add_bound(bytes, k, max, s->from);
      if (s->below < INT64_MAX) k = add_bound(bytes, k, max, s->below);
    }
  return k;
}

/* ---- the tuning variables ---- */

int rf__mpi_env_flag(const char *var) {
  const char *e = getenv(var);
  if (!e) return 1;
  if (strcmp(e, "0") == 0) return 0;
  if (strcmp(e, "1") == 0) return 1;
  return -2;
}

int rf__mpi_env_count(const char *var) {
  const char *e = getenv(var);
  if (!e) return -1;
  if (!*e) return -2;
  long long v = 0;
  for (const char *c = e; *c; c++) { /* digits only: no sign, no space */
    if (*c < '0' || *c > '9') return -2;
    v = v * 10 + (*c - '0');
    if (v > INT_MAX) return -2;
  }
  return v >= 1 ? (int)v : -2;
}

/* Which of the flags and counts is bad: -1 not looked at yet, 0 none,
 * else 1 + its index in env_vars (the first bad one is named). The first
 * two are looked at on every call: tests override them
 * (rf__mpi_algorithm_force, rf__mpi_direct_max_force). */
static atomic_int env_bad = -1;

static const struct {
  const char *var, *expected;
} env_vars[] = {
    {"RF_MPI_ALGORITHM", "auto, nbc, blocking, ring, p2p or shm"},
    {"RF_MPI_DIRECT_MAX_BYTES",
     "a decimal number of bytes from 0 to 9223372036854775807"},
    {"RF_MPI_DIRECT", "0 or 1"},
    {"RF_MPI_AGREE_ONCE", "0 or 1"},
    {"RF_MPI_BACKOFF", "0 or 1"},
    {"RF_MPI_YIELD_EVERY", "a decimal number from 1 to 2147483647"},
};

static int first_bad_flag(void) {
  for (int i = 2; i < 5; i++)
    if (rf__mpi_env_flag(env_vars[i].var) == -2) return i + 1;
  if (rf__mpi_env_count("RF_MPI_YIELD_EVERY") == -2) return 6;
  return 0;
}

rf_status *rf__mpi_env_error(const char *name) {
  int bad = read_forced() == -2                ? 1
            : rf__mpi_direct_max_bytes() == -2 ? 2
                                               : atomic_load(&env_bad);
  if (bad < 0) {
    bad = first_bad_flag();
    atomic_store(&env_bad, bad);
  }
  if (!bad) return NULL;
  /* the value quoted through %s: capped as every user string is */
  return rf__error(RF_INVALID_ARGUMENT,
                   "collective '%s': %s is '%s'; expected %s", name,
                   env_vars[bad - 1].var, getenv(env_vars[bad - 1].var),
                   env_vars[bad - 1].expected);
}

int rf__mpi_algorithm_setting(void) {
  int f = read_forced();
  return f < 0 ? RF_MPI_AUTO : f;
}

/* The forced setting (f, read_forced's), else the table's pick. */
static rf__mpi_algorithm forced_or_table(int f, rf__collective_kind kind,
                                         int procs, int64_t bytes,
                                         bool shm_ok) {
  return f == RF_MPI_AUTO ? rf__mpi_algorithm_pick(kind, procs, bytes, shm_ok)
                          : (rf__mpi_algorithm)f;
}

rf_status *rf__mpi_algorithm_choose(const rf__mpi_op *op,
                                    rf__mpi_algorithm *out) {
  RF_CHECK(rf__mpi_env_error(op->name));
  rf__mpi_algorithm a =
      forced_or_table(read_forced(), op->g.kind, op->nset,
                      rf__mpi_algorithm_bytes(op), rf__mpi_job_shm_ok(op->job));
  if (a == RF_MPI_P2P && (op->g.kind != RF_COLL_ALL_GATHER || op->gpu))
    a = RF_MPI_NBC;
  if (a == RF_MPI_SHM && op->gpu) a = RF_MPI_NBC;
  if ((a == RF_MPI_BLOCKING || a == RF_MPI_RING) &&
      (op->gpu || !rf__mpi_thread_multiple()))
    a = RF_MPI_NBC;
  *out = a;
  return NULL;
}

rf__mpi_algorithm rf__mpi_standin_algorithm(rf__collective_kind kind, int procs,
                                            int64_t bytes, bool shm_ok) {
  int f = read_forced();
  if (f < 0) return RF_MPI_NBC; /* a bad setting: nothing is issued */
  rf__mpi_algorithm a = forced_or_table(f, kind, procs, bytes, shm_ok);
  if (a == RF_MPI_P2P && kind != RF_COLL_ALL_GATHER) a = RF_MPI_NBC;
  return a == RF_MPI_P2P || a == RF_MPI_SHM ? a : RF_MPI_NBC;
}

void rf__mpi_algorithm_force(rf__mpi_algorithm a) {
  read_forced(); /* the environment, once, before this overrides it */
  atomic_store(&forced, (int)a);
}

void rf__mpi_algorithm_count(rf__mpi_algorithm a) {
  if (a >= RF_MPI_AUTO && a <= RF_MPI_ALGORITHM_LAST)
    atomic_fetch_add(&runs[a], 1);
}

int64_t rf__mpi_algorithm_runs(rf__mpi_algorithm a) {
  return a >= RF_MPI_AUTO && a <= RF_MPI_ALGORITHM_LAST ? atomic_load(&runs[a])
                                                        : 0;
}
