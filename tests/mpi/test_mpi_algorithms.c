/* tests/mpi/test_mpi_algorithms.c - the algorithms that move a collective's
 * data across processes (src/comm/mpi/algorithm.c): every kind run with
 * each algorithm forced in turn (MPI's nonblocking call, MPI's blocking
 * call on the data thread, ringflow's ring, shared memory) and with the
 * table's own choice,
 * at sizes on both sides of each kind's threshold, odd sizes that the
 * processes do not divide, empty tensors, every dtype and reduction at a
 * small size. Task 0 has two devices and every other task one, so the
 * processes' shares differ. Inputs are small integers, so every reduction
 * order gives the same value: each algorithm's result must match the
 * float64 (integer) reference and the other algorithms' bytes exactly, and
 * an all-reduce's bytes must be the same in every process. The counters
 * of the library show that the forced algorithm is the one that ran. */
#include <malloc.h>
#include <mpi.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>

#include "comm/mpi/op.h"
#include "core/cores.h"
#include "mpi_testutil.h"
#include "ringflow/collectives.h"
#include "ringflow/ops.h"

#define MAX_DEV 65

typedef struct kase {
  rf__collective_kind kind;
  rf_dtype dtype;
  rf_reduction red;
  int64_t rows, cols; /* per participant; reduce_scatter: rows per device */
} kase;

static int ndev_of(int t) { return t == 0 ? 2 : 1; }
static int first_dev(int t) { return t == 0 ? 0 : t + 1; }
static int num_devices(void) { return NT + 1; }
static int task_of(int i) { return i < 2 ? 0 : i - 1; }

static bool is_unsigned(rf_dtype d) { return d == RF_UINT8; }

/* Participant i's input: small integers (unsigned: 0..2, else -2..2). */
static rf_tensor *input(const kase *c, int i, uint64_t salt) {
  int64_t rows =
      c->kind == RF_COLL_REDUCE_SCATTER ? c->rows * num_devices() : c->rows;
  rf_shape s = rf_shape_of(2, rows, c->cols);
  rf_tensor *t = NULL;
  assert_ok(rf_tensor_new(c->dtype, &s, NULL, &t));
  uint64_t rng = rf_test_rng(salt * 131 + (uint64_t)i + 1);
  int64_t n = rf_tensor_num_elements(t);
  for (int64_t e = 0; e < n; e++) {
    int v = (int)(rf_test_rand(&rng) % 5) - 2;
    if (is_unsigned(c->dtype)) v = v < 0 ? -v : v;
    rf_tensor_set(t, e, v);
  }
  return t;
}

static double combine(rf_reduction r, double a, double v) {
  switch (r) {
    case RF_REDUCE_PROD: return a * v;
    case RF_REDUCE_MIN: return v < a ? v : a;
    case RF_REDUCE_MAX: return v > a ? v : a;
    default: return a + v;
  }
}

/* The reduction of element e over every participant (exact: small
 * integers), avg divided as the dtype divides. */
static double reduced(const kase *c, rf_tensor **in, int64_t e) {
  double a = rf_tensor_get(in[0], e);
  for (int i = 1; i < num_devices(); i++)
    a = combine(c->red, a, rf_tensor_get(in[i], e));
  if (c->red != RF_REDUCE_AVG) return a;
  bool integer = c->dtype == RF_INT8 || c->dtype == RF_UINT8 ||
                 c->dtype == RF_INT32 || c->dtype == RF_INT64;
  double q = a / num_devices();
  return integer ? (double)(int64_t)q : q;
}

/* What participant i must get, as doubles (malloc'ed), and its count. */
static double *expected(const kase *c, rf_tensor **in, int i, int root,
                        int64_t *count) {
  int D = num_devices();
  int64_t n = rf_tensor_num_elements(in[0]);
  double *w = malloc(sizeof(double) * (size_t)(n * D + 1));
  assert_non_null(w);
  switch (c->kind) {
    case RF_COLL_ALL_REDUCE:
    case RF_COLL_REDUCE:
      for (int64_t e = 0; e < n; e++) w[e] = reduced(c, in, e);
      *count = n;
      break;
    case RF_COLL_REDUCE_SCATTER: {
      int64_t per = n / D;
      for (int64_t e = 0; e < per; e++) w[e] = reduced(c, in, i * per + e);
      *count = per;
      break;
    }
    case RF_COLL_ALL_GATHER:
      for (int d = 0; d < D; d++)
        for (int64_t e = 0; e < n; e++) w[d * n + e] = rf_tensor_get(in[d], e);
      *count = n * D;
      break;
    default: /* broadcast */
      for (int64_t e = 0; e < n; e++) w[e] = rf_tensor_get(in[root], e);
      *count = n;
  }
  return w;
}

/* The algorithm whose run counter run_case checks when it is not a's
 * (RF_MPI_AUTO: a's own). */
static rf__mpi_algorithm runs_as = RF_MPI_AUTO;

/* Runs c once with algorithm a; this task's outputs (NULL where it fetches
 * nothing) into outs[0..2). */
static void run_case(const kase *c, rf__mpi_algorithm a, uint64_t salt,
                     rf_tensor **outs) {
  int D = num_devices();
  rf__mpi_algorithm_force(a);
  rf_graph *g = rf_graph_new();
  rf_output xs[MAX_DEV], ys[MAX_DEV];
  rf_tensor *in[MAX_DEV];
  for (int i = 0; i < D; i++) {
    char dev[MT_DEVICE_LEN];
    mt_device(task_of(i), i - first_dev(task_of(i)), dev, sizeof dev);
    in[i] = input(c, i, salt);
    rf_shape s = rf_tensor_shape(in[i]);
    assert_ok(rf_graph_push_device(g, dev));
    xs[i] = rf_placeholder(g, NULL, c->dtype, s);
    rf_graph_pop_device(g);
  }
  int root = c->kind == RF_COLL_BROADCAST ? 0 : D - 1;
  switch (c->kind) {
    case RF_COLL_ALL_REDUCE: rf_all_reduce_n(g, "c", xs, D, c->red, ys); break;
    case RF_COLL_ALL_GATHER: rf_all_gather_n(g, "c", xs, D, ys); break;
    case RF_COLL_REDUCE_SCATTER:
      rf_reduce_scatter_n(g, "c", xs, D, c->red, ys);
      break;
    case RF_COLL_REDUCE: {
      char dev[MT_DEVICE_LEN];
      mt_device(NT - 1, 0, dev, sizeof dev);
      assert_ok(rf_graph_push_device(g, dev));
      ys[root] = rf_reduce(g, "c", xs, D, c->red);
      rf_graph_pop_device(g);
      break;
    }
    default: { /* broadcast from participant 0 to an Identity on the rest */
      rf_output b = rf_broadcast(g, "c", xs[0]);
      for (int i = 1; i < D; i++) {
        char dev[MT_DEVICE_LEN];
        mt_device(task_of(i), i - first_dev(task_of(i)), dev, sizeof dev);
        assert_ok(rf_graph_push_device(g, dev));
        ys[i] = rf_identity(g, NULL, b);
        rf_graph_pop_device(g);
      }
      ys[0] = ys[1];
    }
  }
  assert_graph_ok(g);
  rf_session *s = mt_session(g, ndev_of(T), 20000);
  rf_feed feeds[2];
  rf_output fetch[2];
  int nf = 0, nfetch = 0, mine[2];
  for (int k = 0; k < ndev_of(T); k++) {
    int i = first_dev(T) + k;
    feeds[nf++] = (rf_feed){xs[i], in[i]};
    bool gets = c->kind == RF_COLL_REDUCE      ? i == root
                : c->kind == RF_COLL_BROADCAST ? i != root
                                               : true;
    if (gets) {
      mine[nfetch] = k;
      fetch[nfetch++] = ys[i];
    }
  }
  rf_tensor *got[2] = {NULL, NULL};
  outs[0] = outs[1] = NULL;
  rf__mpi_algorithm counted = runs_as != RF_MPI_AUTO ? runs_as : a;
  int64_t before = rf__mpi_algorithm_runs(counted);
  if (nfetch)
    assert_ok(rf_session_run(s, feeds, nf, fetch, nfetch, NULL, 0, got));
  else
    assert_ok(rf_session_run(s, feeds, nf, NULL, 0, &ys[root].node, 1, NULL));
  if (counted != RF_MPI_AUTO)
    assert_true(rf__mpi_algorithm_runs(counted) > before);
  for (int k = 0; k < nfetch; k++) {
    int i = first_dev(T) + mine[k];
    int64_t n = 0;
    double *w = expected(c, in, i, root, &n);
    assert_int_equal(rf_tensor_num_elements(got[k]), n);
    for (int64_t e = 0; e < n; e++) {
      double v = rf_tensor_get(got[k], e), want = w[e];
      double tol = c->red == RF_REDUCE_AVG ? rf_test_tolerance(c->dtype) : 0;
      if (!(v == want ||
            (tol > 0 && v - want <= tol * (1 + (want < 0 ? -want : want)) &&
             want - v <= tol * (1 + (want < 0 ? -want : want)))))
        fail_msg("%s %s, %s: participant %d element %lld is %g, expected %g",
                 rf__collective_kind_name(c->kind), rf_dtype_name(c->dtype),
                 rf__mpi_algorithm_name(a), i, (long long)e, v, want);
    }
    free(w);
    outs[mine[k]] = got[k];
  }
  rf_session_free(s);
  for (int i = 0; i < D; i++) rf_tensor_release(in[i]);
  rf_graph_free(g);
  rf__mpi_algorithm_force(RF_MPI_AUTO);
}

static uint64_t bytes_hash(const rf_tensor *t) {
  uint64_t h = 1469598103934665603ULL;
  const unsigned char *b = rf_tensor_data(t);
  for (size_t k = 0; k < rf_tensor_nbytes(t); k++)
    h = (h ^ b[k]) * 1099511628211ULL;
  return h;
}

/* c with every algorithm: the same bytes from each (and, for an
 * all-reduce, in every process). */
static void check_case(const kase *c, uint64_t salt) {
  static const rf__mpi_algorithm algos[] = {
      RF_MPI_AUTO, RF_MPI_NBC, RF_MPI_BLOCKING, RF_MPI_RING, RF_MPI_SHM};
  rf_tensor *first[2] = {NULL, NULL};
  for (size_t a = 0; a < sizeof algos / sizeof *algos; a++) {
    rf_tensor *outs[2];
    run_case(c, algos[a], salt, outs);
    if (c->kind == RF_COLL_ALL_REDUCE) { /* every task fetches outs[0] */
      unsigned long long h = bytes_hash(outs[0]), lo = h, hi = h;
      MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN,
                    MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX,
                    MPI_COMM_WORLD);
      assert_true(lo == h && hi == h);
    }
    for (int k = 0; k < 2; k++) {
      if (!outs[k]) continue;
      if (!first[k]) {
        first[k] = outs[k];
        continue;
      }
      assert_int_equal(rf_tensor_nbytes(outs[k]), rf_tensor_nbytes(first[k]));
      if (rf_tensor_nbytes(outs[k]) > 0)
        assert_memory_equal(rf_tensor_data(outs[k]), rf_tensor_data(first[k]),
                            rf_tensor_nbytes(outs[k]));
      rf_tensor_release(outs[k]);
    }
  }
  for (int k = 0; k < 2; k++)
    if (first[k]) rf_tensor_release(first[k]);
}

static const rf__collective_kind kinds[] = {
    RF_COLL_ALL_REDUCE, RF_COLL_REDUCE, RF_COLL_BROADCAST, RF_COLL_ALL_GATHER,
    RF_COLL_REDUCE_SCATTER};

/* Every dtype and reduction, odd small sizes and empty tensors. */
static void test_small_every_dtype(void **state) {
  static const rf_dtype dtypes[] = {RF_FLOAT32,  RF_FLOAT64, RF_FLOAT16,
                                    RF_BFLOAT16, RF_INT8,    RF_UINT8,
                                    RF_INT32,    RF_INT64};
  uint64_t salt = 1;
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    bool reduces =
        kinds[k] != RF_COLL_BROADCAST && kinds[k] != RF_COLL_ALL_GATHER;
    for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
      for (int r = 0; r < (reduces ? 5 : 1); r++) {
        kase c = {kinds[k], dtypes[d], (rf_reduction)r, 3, 7};
        check_case(&c, salt++);
      }
    kase empty = {kinds[k], RF_FLOAT32, RF_REDUCE_SUM, 0, 5};
    check_case(&empty, salt++);
  }
}

/* Each kind just below and just above each size where the table's choice
 * changes for this many processes, up to 1 MiB (512 KiB when it never
 * does; larger ones run the same algorithms as these), odd element
 * counts. */
static void test_both_sides_of_thresholds(void **state) {
  uint64_t salt = 1000;
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    int64_t bounds[8];
    int nb =
        rf__mpi_algorithm_bounds(kinds[k], NT, !rf__cores_crowded(), bounds, 8);
    if (nb == 0) bounds[nb++] = 512 << 10;
    for (int b = 0; b < nb && bounds[b] <= (1 << 20); b++) {
      /* the size the choice goes by: all-gather's output, else the input */
      int64_t from = bounds[b];
      int64_t per =
          kinds[k] == RF_COLL_ALL_GATHER ? from / num_devices() : from;
      int64_t elems[2] = {per / 4 - 3, per / 4 + 5};
      for (int side = 0; side < 2; side++) {
        int64_t cols = elems[side] | 1;
        kase c = {kinds[k], RF_FLOAT32, RF_REDUCE_SUM, 1, cols};
        if (kinds[k] == RF_COLL_REDUCE_SCATTER)
          c.cols = (cols / num_devices()) | 1;
        check_case(&c, salt++);
        kase i = {kinds[k], RF_INT32, RF_REDUCE_MAX, 1, c.cols};
        check_case(&i, salt++);
      }
    }
  }
}

/* The table's choice is what runs. On a machine whose cores the
 * processes do not outnumber (core/cores.h: ctest's 2 processes on 2
 * cores), shared memory: for the all-reduce, reduce and reduce-scatter at
 * every size, the all-gather from 64 KiB and the broadcast from 256 KiB
 * (MPI's call and messages below), and from 4 processes (the 16-core host)
 * for every kind at every size. Else (ctest's 4 processes on 2 cores:
 * crowded) the rows without it: a 1 MiB reduce is MPI_Reduce on the data
 * thread across 2 or 3 processes and ringflow's ring from 4 (session 11
 * call A on the quiet host: the ring 1.26-1.83x MPI_Reduce's speed at 1-16
 * MiB with 4 processes, in every repetition); a 1 MiB reduce-scatter is
 * the ring, a 1 MiB all-reduce MPI's nonblocking call, an all-gather
 * ringflow's own messages (p2p.c), the rest MPI's nonblocking calls. */
static void test_table_choice_runs(void **state) {
  static const struct {
    rf__collective_kind kind;
    int64_t bytes;
    rf__mpi_algorithm below4, from4, shm_below4, shm_from4;
  } want[] = {
      {RF_COLL_REDUCE, 1 << 20, RF_MPI_BLOCKING, RF_MPI_RING, RF_MPI_SHM,
       RF_MPI_SHM},
      {RF_COLL_REDUCE_SCATTER, 1 << 20, RF_MPI_RING, RF_MPI_RING, RF_MPI_SHM,
       RF_MPI_SHM},
      {RF_COLL_ALL_REDUCE, 1 << 20, RF_MPI_NBC, RF_MPI_NBC, RF_MPI_SHM,
       RF_MPI_SHM},
      {RF_COLL_ALL_GATHER, 1 << 20, RF_MPI_P2P, RF_MPI_P2P, RF_MPI_SHM,
       RF_MPI_SHM},
      {RF_COLL_BROADCAST, 1 << 20, RF_MPI_NBC, RF_MPI_NBC, RF_MPI_SHM,
       RF_MPI_SHM},
      {RF_COLL_ALL_REDUCE, 64 << 10, RF_MPI_NBC, RF_MPI_NBC, RF_MPI_SHM,
       RF_MPI_SHM},
      {RF_COLL_REDUCE, 64 << 10, RF_MPI_NBC, RF_MPI_NBC, RF_MPI_SHM,
       RF_MPI_SHM},
      {RF_COLL_REDUCE_SCATTER, 64 << 10, RF_MPI_NBC, RF_MPI_NBC, RF_MPI_SHM,
       RF_MPI_SHM},
      {RF_COLL_ALL_GATHER, 64 << 10, RF_MPI_P2P, RF_MPI_P2P, RF_MPI_SHM,
       RF_MPI_SHM},
      {RF_COLL_ALL_GATHER, 16 << 10, RF_MPI_P2P, RF_MPI_P2P, RF_MPI_P2P,
       RF_MPI_SHM},
      {RF_COLL_BROADCAST, 64 << 10, RF_MPI_NBC, RF_MPI_NBC, RF_MPI_NBC,
       RF_MPI_SHM},
  };
  bool shm = !rf__cores_crowded();
  for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
    rf__mpi_algorithm a = NT >= 4 ? (shm ? want[k].shm_from4 : want[k].from4)
                                  : (shm ? want[k].shm_below4 : want[k].below4);
    int64_t elems = want[k].bytes / 4;
    kase c = {want[k].kind, RF_FLOAT32, RF_REDUCE_SUM, 1, elems + 5};
    /* a reduce-scatter's rows for every device; an all-gather's size is
     * its whole output */
    if (c.kind == RF_COLL_REDUCE_SCATTER || c.kind == RF_COLL_ALL_GATHER)
      c.cols = elems / num_devices() + 1;
    int64_t before = rf__mpi_algorithm_runs(a);
    rf_tensor *outs[2];
    run_case(&c, RF_MPI_AUTO, 4000 + k, outs);
    if (rf__mpi_algorithm_runs(a) <= before)
      fail_msg("%s of %lld KiB across %d processes did not run %s",
               rf__collective_kind_name(c.kind),
               (long long)(want[k].bytes >> 10), NT, rf__mpi_algorithm_name(a));
    for (int i = 0; i < 2; i++)
      if (outs[i]) rf_tensor_release(outs[i]);
  }
}

/* Processes that cannot share memory (on other hosts, or a full
 * /dev/shm): the last task fails to map the segment, every process learns
 * it from the segment's all-reduce and runs MPI's nonblocking call
 * instead, alike. Every kind, shared memory forced: the right values, and
 * no shared-memory exchange anywhere. */
static void test_shm_unavailable_runs_nbc(void **state) {
  if (T == NT - 1) rf__mpi_shm_refuse(true);
  runs_as = RF_MPI_NBC;
  int64_t shm_runs = rf__mpi_algorithm_runs(RF_MPI_SHM);
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
    kase c = {kinds[k], RF_FLOAT32, RF_REDUCE_SUM, 3, 4099};
    rf_tensor *outs[2];
    run_case(&c, RF_MPI_SHM, 900 + k, outs);
    for (int i = 0; i < 2; i++)
      if (outs[i]) rf_tensor_release(outs[i]);
  }
  runs_as = RF_MPI_AUTO;
  rf__mpi_shm_refuse(false);
  assert_int_equal(rf__mpi_algorithm_runs(RF_MPI_SHM), shm_runs);
}

/* A job is crowded when any of its nodes is (core/cores.h), and every
 * process learns it when its session attaches: with the last task's
 * launcher saying its node runs more processes than the machine has CPUs,
 * every process takes the table without shared memory (a 64 KiB
 * all-reduce runs nbc everywhere, the right values), though the others
 * see an uncrowded node. */
static void test_one_crowded_node_crowds_the_job(void **state) {
  if (T == NT - 1) mt_crowd(true);
  int64_t shm_runs = rf__mpi_algorithm_runs(RF_MPI_SHM);
  int64_t nbc_runs = rf__mpi_algorithm_runs(RF_MPI_NBC);
  kase c = {RF_COLL_ALL_REDUCE, RF_FLOAT32, RF_REDUCE_SUM, 1, (64 << 10) / 4};
  rf_tensor *outs[2];
  run_case(&c, RF_MPI_AUTO, 5000, outs);
  for (int i = 0; i < 2; i++)
    if (outs[i]) rf_tensor_release(outs[i]);
  mt_crowd(false);
  assert_int_equal(rf__mpi_algorithm_runs(RF_MPI_SHM), shm_runs);
  assert_true(rf__mpi_algorithm_runs(RF_MPI_NBC) > nbc_runs);
}

/* Broadcasts of 2 to 8 shared-memory slots go in quarter-slot pieces
 * (shm.c, bcast_piece), larger ones in whole slots: sizes on both sides
 * of each bound, odd ones whose last piece is short, the same bytes from
 * every algorithm. First in the list, so that the communicator's segment
 * is made for these sizes (its slot: 512 KiB) and not a smaller one. */
static void test_broadcast_pieces(void **state) {
  static const int64_t bytes[] = {
      (512 << 10) + 4, (600 << 10) + 12, 1 << 20,        (2 << 20) + 36,
      4 << 20,         (4 << 20) + 4,    (5 << 20) + 132};
  uint64_t salt = 500;
  for (size_t b = 0; b < sizeof bytes / sizeof *bytes; b++) {
    kase c = {RF_COLL_BROADCAST, RF_FLOAT32, RF_REDUCE_SUM, 1, bytes[b] / 4};
    check_case(&c, salt++);
  }
}

/* ringflow's ring reuses its scratch (a reduce sender's chunk of sums, a
 * reduce-scatter's chunks in transit from 3 processes) from step to step:
 * steady-state steps of a 4 MiB reduce touch no fresh pages. glibc's
 * threshold is pinned at its default 128 KiB (mallopt), so memory from
 * malloc would be mapped fresh, and faulted in page by page, every step. */
static void test_ring_scratch_is_reused(void **state) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  /* The sanitizers' allocators map and fault memory (and its shadow) by
   * rules of their own: the page count says nothing about the ring. */
  (void)state;
  return;
#endif
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  mallopt(M_TRIM_THRESHOLD, 128 << 10);
  rf__mpi_algorithm_force(RF_MPI_RING);
  int64_t cols = 1 << 20; /* 4 MiB of float32 a participant */
  int D = num_devices();
  rf_graph *g = rf_graph_new();
  rf_output xs[MAX_DEV];
  rf_tensor *in[2] = {NULL, NULL};
  rf_feed feeds[2];
  int nf = 0;
  rf_shape s = rf_shape_of(2, 1, cols);
  for (int i = 0; i < D; i++) {
    char dev[MT_DEVICE_LEN];
    mt_device(task_of(i), i - first_dev(task_of(i)), dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    xs[i] = rf_placeholder(g, NULL, RF_FLOAT32, s);
    rf_graph_pop_device(g);
    if (task_of(i) != T) continue;
    assert_ok(rf_tensor_new(RF_FLOAT32, &s, NULL, &in[nf]));
    for (int64_t e = 0; e < cols; e++) rf_tensor_set(in[nf], e, (e + i) % 5);
    feeds[nf] = (rf_feed){xs[i], in[nf]};
    nf++;
  }
  char dev[MT_DEVICE_LEN];
  mt_device(NT - 1, 0, dev, sizeof dev);
  assert_ok(rf_graph_push_device(g, dev));
  rf_output y = rf_reduce(g, "c", xs, D, RF_REDUCE_SUM);
  rf_graph_pop_device(g);
  assert_graph_ok(g);
  rf_session *sess = mt_session(g, ndev_of(T), 20000);
  long faults = 0;
  for (int step = 0; step < 6; step++) {
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    assert_ok(rf_session_run(sess, feeds, nf, NULL, 0, &y.node, 1, NULL));
    getrusage(RUSAGE_SELF, &r1);
    if (step > 0) faults += r1.ru_minflt - r0.ru_minflt; /* step 0 warms */
  }
  /* A sender's chunk of sums is 4 MiB / NT: 512 pages of 4 KiB at NT 2,
   * 256 at NT 4 (and there two more chunks in transit), a step. */
  long chunk_pages = (4 << 20) / NT / 4096;
  if (T != NT - 1 && faults >= 5 * chunk_pages / 2)
    fail_msg(
        "5 steps of a 4 MiB ring reduce took %ld minor page faults "
        "(a chunk of sums is %ld pages)",
        faults, chunk_pages);
  rf_session_free(sess);
  for (int i = 0; i < nf; i++) rf_tensor_release(in[i]);
  rf_graph_free(g);
  rf__mpi_algorithm_force(RF_MPI_AUTO);
}

/* What an issued collective moves through this process, the engine's spin
 * budget while its nonblocking call is in flight, is the whole vector on
 * every side: a broadcast's root (no output of its own: its buffer is its
 * input) and a reduce-scatter with one participant (its output is one
 * share) counted as moving nothing or a share, and the root's engine slept
 * between the MPI calls that push a large broadcast on. */
static void test_in_flight_bytes_are_the_whole_vector(void **state) {
  int64_t elems = 1 << 20; /* 4 MiB of float32 */
  rf_shape shape = rf_shape_of(1, elems);
  rf__mpi_op root = {.num_devices = 4, .shape = shape};
  root.g.kind = RF_COLL_BROADCAST;
  root.g.dtype = RF_FLOAT32;
  root.g.root = 0;
  root.g.n = 1;
  assert_int_equal(rf__mpi_op_bytes(&root), elems * 4);
  rf__mpi_op receiver = root;
  receiver.g.root = -1;
  receiver.shape = rf_shape_of(1, -1); /* known from the root at GO */
  receiver.root_shape = shape;
  assert_int_equal(rf__mpi_op_bytes(&receiver), elems * 4);
  rf__mpi_op rs = root;
  rs.g.kind = RF_COLL_REDUCE_SCATTER;
  rs.g.root = -1;
  assert_int_equal(rf__mpi_op_bytes(&rs), elems * 4);
  rf__mpi_op wide = rs; /* bfloat16 reduced as float32 */
  wide.g.dtype = RF_BFLOAT16;
  wide.wide = true;
  assert_int_equal(rf__mpi_op_bytes(&wide), elems * 4);
  rf__mpi_op ag = root; /* each of 4 participants gives its rows */
  ag.g.kind = RF_COLL_ALL_GATHER;
  ag.g.root = -1;
  assert_int_equal(rf__mpi_op_bytes(&ag), elems * 4 * 4);
}

/* A reduce-scatter's participants in one process get their rows of the
 * process's share without a copy: views of the one buffer MPI wrote, each
 * at its offset (task 0 has two devices), with every algorithm. Rows that
 * are not a multiple of the buffers' alignment (3 x 7 float32, in
 * test_small_every_dtype) and float16 (rounded from the float32 sums) are
 * copies; their values are checked there. */
static void test_reduce_scatter_shares_without_copy(void **state) {
  static const rf__mpi_algorithm algos[] = {
      RF_MPI_AUTO, RF_MPI_NBC, RF_MPI_BLOCKING, RF_MPI_RING, RF_MPI_SHM};
  kase c = {RF_COLL_REDUCE_SCATTER, RF_FLOAT32, RF_REDUCE_SUM, 4, 16};
  for (size_t a = 0; a < sizeof algos / sizeof *algos; a++) {
    rf_tensor *outs[2];
    run_case(&c, algos[a], 77 + a, outs);
    if (T == 0) {
      size_t share = (size_t)(c.rows * c.cols) * sizeof(float);
      assert_int_equal(rf_tensor_nbytes(outs[0]), share);
      assert_ptr_equal(rf_tensor_data(outs[1]),
                       (const char *)rf_tensor_data(outs[0]) + share);
    }
    for (int k = 0; k < 2; k++)
      if (outs[k]) rf_tensor_release(outs[k]);
  }
}

/* An unknown RF_MPI_ALGORITHM (test_mpi_algorithms_bad_env: "bad") or an
 * RF_MPI_DIRECT_MAX_BYTES that is not a decimal number from 0 to INT64_MAX
 * (test_mpi_algorithms_bad_direct_env: "4M"; _bad_direct_range: 10^20, which
 * the message's range now says) fails the collective in every
 * process, naming the variable (the library reads them once, so this runs
 * alone). */
static void bad_env_is_an_error(const char *want) {
  rf_graph *g = rf_graph_new();
  rf_output xs[64], ys[64];
  for (int t = 0; t < NT; t++) {
    char dev[MT_DEVICE_LEN];
    mt_device(t, 0, dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    xs[t] = rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_of(1, 4));
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "ar", xs, NT, RF_REDUCE_SUM, ys);
  assert_graph_ok(g);
  rf_session *s = mt_session(g, 1, 20000);
  rf_shape shape = rf_shape_of(1, 4);
  rf_tensor *x = NULL, *out = NULL;
  assert_ok(rf_tensor_new(RF_FLOAT32, &shape, NULL, &x));
  memset(rf_tensor_mutable_data(x), 0, rf_tensor_nbytes(x));
  rf_feed feed = {xs[T], x};
  assert_status(rf_session_run(s, &feed, 1, &ys[T], 1, NULL, 0, &out),
                RF_INVALID_ARGUMENT, want);
  rf_tensor_release(x);
  rf_session_free(s);
  rf_graph_free(g);
}

static void test_unknown_algorithm_is_an_error(void **state) {
  bad_env_is_an_error(
      "RF_MPI_ALGORITHM is 'bad'; expected auto, nbc, blocking, ring, p2p or "
      "shm");
}

static void test_bad_direct_max_is_an_error(void **state) {
  char want[192];
  snprintf(want, sizeof want,
           "RF_MPI_DIRECT_MAX_BYTES is '%s'; expected a decimal number of "
           "bytes from 0 to 9223372036854775807",
           getenv("RF_MPI_DIRECT_MAX_BYTES"));
  bad_env_is_an_error(want);
}

/* RF_TEST_BAD_ENV names a tuning variable that the test's environment
 * sets to a bad value (test_mpi_algorithms_bad_<var>: "abc", "-1", "1x",
 * ""; RF_TEST_BAD_ENV_LONG: 5000 bytes, set here, which the message quotes
 * capped as every user string, RF_STATUS_QUOTE_MAX bytes and the length):
 * the first collective fails in every process, naming the variable and the
 * value (these were ignored before). */
static void test_bad_tuning_variable_is_an_error(void **state) {
  const char *var = getenv("RF_TEST_BAD_ENV");
  const char *val = getenv(var);
  assert_non_null(val);
  char want[512];
  if (strlen(val) > RF_STATUS_QUOTE_MAX)
    snprintf(want, sizeof want, "%s is '%.*s... (%zu bytes)'; expected", var,
             RF_STATUS_QUOTE_MAX, val, strlen(val));
  else
    snprintf(want, sizeof want, "%s is '%s'; expected", var, val);
  bad_env_is_an_error(want);
}

/* RF_TEST_ALGO_MISMATCH (test_mpi_algorithms_mismatch_np2/np4): the last
 * task alone sets RF_MPI_ALGORITHM=ring, before its first collective (the
 * library reads it then). A 1 MiB all-reduce is libnbc's ring in the other
 * processes and ringflow's ring in the last: on one communicator that
 * crashed inside OpenMPI or hung and blamed the wrong task. Now task 0
 * finds the difference in the READYs: every process fails each step at once,
 * naming RF_MPI_ALGORITHM, both values and the tasks. */
static void test_algorithm_mismatch_is_named(void **state) {
  enum { ROWS = 512, COLS = 512 }; /* 1 MiB of float32 */
  rf_graph *g = rf_graph_new();
  rf_output xs[64], ys[64];
  for (int t = 0; t < NT; t++) {
    char dev[MT_DEVICE_LEN];
    mt_device(t, 0, dev, sizeof dev);
    assert_ok(rf_graph_push_device(g, dev));
    xs[t] = rf_placeholder(g, NULL, RF_FLOAT32, rf_shape_of(2, ROWS, COLS));
    rf_graph_pop_device(g);
  }
  rf_all_reduce_n(g, "ar", xs, NT, RF_REDUCE_SUM, ys);
  assert_graph_ok(g);
  rf_session *s = mt_session(g, 1, 20000);
  rf_shape shape = rf_shape_of(2, ROWS, COLS);
  rf_tensor *x = NULL;
  assert_ok(rf_tensor_new(RF_FLOAT32, &shape, NULL, &x));
  memset(rf_tensor_mutable_data(x), 0, rf_tensor_nbytes(x));
  rf_feed feed = {xs[T], x};
  char last[64];
  snprintf(last, sizeof last, "ring on /task:%d/cpu:0", NT - 1);
  for (int step = 0; step < 3; step++) {
    rf_tensor *out = NULL;
    double t0 = rf_test_now_ms();
    rf_status *st = rf_session_run(s, &feed, 1, &ys[T], 1, NULL, 0, &out);
    double ms = rf_test_now_ms() - t0;
    assert_non_null(st);
    const char *m = rf_status_message(st);
    if (rf_status_code(st) != RF_INVALID_ARGUMENT ||
        !strstr(m, "participants disagree on RF_MPI_ALGORITHM: ") ||
        !strstr(m, last) || !strstr(m, "auto on /task:"))
      fail_msg("task %d step %d: %s", T, step, m);
    assert_true(ms < 10000); /* at once, not at the 20 s timeout */
    rf_status_free(st);
    if (out) rf_tensor_release(out);
  }
  rf_tensor_release(x);
  rf_session_free(s);
  rf_graph_free(g);
}

int main(void) {
  /* the environment first: the library reads it at the first collective */
  if (getenv("RF_TEST_ALGO_MISMATCH")) {
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (r && n && atoi(r) == atoi(n) - 1) setenv("RF_MPI_ALGORITHM", "ring", 1);
  }
  if (getenv("RF_TEST_BAD_ENV_LONG") && getenv("RF_TEST_BAD_ENV")) {
    static char longv[5001];
    memset(longv, 'y', 5000);
    setenv(getenv("RF_TEST_BAD_ENV"), longv, 1);
  }
  if (mt_init()) return 0;
  if (getenv("RF_TEST_ALGO_MISMATCH")) {
    const struct CMUnitTest t[] = {
        cmocka_unit_test(test_algorithm_mismatch_is_named)};
    return cmocka_run_group_tests(t, NULL, NULL);
  }
  if (getenv("RF_TEST_BAD_ENV")) {
    const struct CMUnitTest t[] = {
        cmocka_unit_test(test_bad_tuning_variable_is_an_error)};
    return cmocka_run_group_tests(t, NULL, NULL);
  }
  const char *e = getenv("RF_MPI_ALGORITHM");
  if (e && strcmp(e, "bad") == 0) {
    const struct CMUnitTest bad[] = {
        cmocka_unit_test(test_unknown_algorithm_is_an_error)};
    return cmocka_run_group_tests(bad, NULL, NULL);
  }
  if (getenv("RF_MPI_DIRECT_MAX_BYTES")) {
    const struct CMUnitTest bad[] = {
        cmocka_unit_test(test_bad_direct_max_is_an_error)};
    return cmocka_run_group_tests(bad, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_broadcast_pieces),
      cmocka_unit_test(test_in_flight_bytes_are_the_whole_vector),
      cmocka_unit_test(test_small_every_dtype),
      cmocka_unit_test(test_both_sides_of_thresholds),
      cmocka_unit_test(test_table_choice_runs),
      cmocka_unit_test(test_shm_unavailable_runs_nbc),
      cmocka_unit_test(test_one_crowded_node_crowds_the_job),
      cmocka_unit_test(test_ring_scratch_is_reused),
      cmocka_unit_test(test_reduce_scatter_shares_without_copy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
