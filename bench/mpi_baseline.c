/* bench/mpi_baseline.c - the OpenMPI baseline of `ringflow bench`: times
 * MPI_Allreduce, MPI_Reduce, MPI_Bcast, MPI_Allgather and
 * MPI_Reduce_scatter_block (float32, sum, root 0) over the same sizes and
 * prints the same columns (nccl-tests definitions: the size is the per-rank
 * buffer, the OUTPUT for all-gather and the INPUT for reduce-scatter).
 * Buffers are allocated and touched once, at the largest size, so only the
 * library's own allocations (its temporaries) can touch fresh memory.
 *
 *   mpirun -np 4 --mca btl self,vader ringflow-mpi-baseline [--min B] [--max B]
 *          [--factor F] [--min-time S] [--csv]
 *
 * Sizes are B, B x F, ... up to --max (F: 2..16, default 4), as `ringflow
 * bench --factor` runs them.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { ALL_REDUCE, REDUCE, BROADCAST, ALL_GATHER, REDUCE_SCATTER } coll;
static const char *const names[] = {"all_reduce", "reduce", "broadcast",
                                    "all_gather", "reduce_scatter"};

typedef struct bufs {
  float *send, *recv;
} bufs;

/* Elements per rank buffer for a size: all-gather and reduce-scatter use
 * `per` elements per rank slice, rounded down so n slices fit. */
static long long elements(coll c, long long bytes, int n, long long *per) {
  long long count = bytes / (long long)sizeof(float);
  if (c == ALL_GATHER || c == REDUCE_SCATTER) {
    *per = count / n;
    return *per * n;
  }
  *per = count;
  return count;
}

static void run_once(coll c, const bufs *b, long long count, long long per) {
  switch (c) {
    case ALL_REDUCE:
      MPI_Allreduce(b->send, b->recv, (int)count, MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      break;
    case REDUCE:
      MPI_Reduce(b->send, b->recv, (int)count, MPI_FLOAT, MPI_SUM, 0,
                 MPI_COMM_WORLD);
      break;
    case BROADCAST:
      MPI_Bcast(b->send, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
    case ALL_GATHER:
      MPI_Allgather(b->send, (int)per, MPI_FLOAT, b->recv, (int)per, MPI_FLOAT,
                    MPI_COMM_WORLD);
      break;
    case REDUCE_SCATTER:
      MPI_Reduce_scatter_block(b->send, b->recv, (int)per, MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD);
      break;
  }
}

static double bus_factor(coll c, int n) {
  switch (c) {
    case ALL_REDUCE: return 2.0 * (n - 1) / n;
    case ALL_GATHER:
    case REDUCE_SCATTER: return (double)(n - 1) / n;
    default: return 1.0;
  }
}

/* Seconds per op: warm-up, then batches of 2, 4, 8... ops between two
 * barriers until one batch lasts min_time on rank 0 (rank 0 decides for
 * everyone); the slowest rank's time of that batch. */
static double time_op(coll c, const bufs *b, long long count, long long per,
                      double min_time, int *iters_out) {
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int warm = count * 4 >= (64ll << 20) ? 1 : 3;
  for (int i = 0; i < warm; i++) run_once(c, b, count, per);
  for (int k = 2;; k *= 2) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < k; i++) run_once(c, b, count, per);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0, worst = t;
    MPI_Reduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    int done = rank == 0 && (worst >= min_time || k >= (1 << 24));
    MPI_Bcast(&done, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (done) {
      *iters_out = k;
      return worst / k;
    }
  }
}

static int usage(int rank) {
  if (rank == 0)
    fprintf(stderr,
            "usage: mpirun -np N ringflow-mpi-baseline [--min BYTES] "
            "[--max BYTES] [--factor F] [--min-time SECONDS] [--csv]\n");
  return 2;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  long long lo = 1024, hi = 256ll << 20, factor = 4;
  double min_time = 0.2;
  int csv = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--csv"))
      csv = 1;
    else if (i + 1 < argc && !strcmp(argv[i], "--min"))
      lo = atoll(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--max"))
      hi = atoll(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--factor"))
      factor = atoll(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--min-time"))
      min_time = atof(argv[++i]);
    else {
      int rc = usage(rank);
      MPI_Finalize();
      return rc;
    }
  }
  if (lo < 4 || hi < lo || hi > (1ll << 31) - 4 || factor < 2 || factor > 16) {
    int rc = usage(rank);
    MPI_Finalize();
    return rc;
  }
  bufs b = {malloc((size_t)hi), malloc((size_t)hi)};
  if (!b.send || !b.recv) {
    fprintf(stderr, "mpi_baseline: out of memory for %lld-byte buffers\n", hi);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (long long i = 0; i < hi / 4; i++)
    b.send[i] = (float)(i % 7), b.recv[i] = 0;
  if (rank == 0) {
    if (csv)
      printf(
          "impl,collective,devices,bytes,iters,time_us,algbw_gbs,busbw_gbs\n");
    else
      printf("%-15s %12s %7s %12s %12s %12s\n", "collective", "bytes", "iters",
             "time(us)", "algbw(GB/s)", "busbw(GB/s)");
  }
  for (coll c = ALL_REDUCE; c <= REDUCE_SCATTER; c++) {
    for (long long size = lo; size <= hi; size *= factor) {
      long long per, count = elements(c, size, n, &per);
      if (per == 0) continue;
      int iters;
      double t = time_op(c, &b, count, per, min_time, &iters);
      double bytes = (double)count * sizeof(float);
      double alg = bytes / t / 1e9, bus = alg * bus_factor(c, n);
      if (rank != 0) continue;
      if (csv)
        printf("openmpi,%s,%d,%.0f,%d,%.3f,%.4f,%.4f\n", names[c], n, bytes,
               iters, t * 1e6, alg, bus);
      else
        printf("%-15s %12.0f %7d %12.1f %12.3f %12.3f\n", names[c], bytes,
               iters, t * 1e6, alg, bus);
      fflush(stdout);
    }
  }
  free(b.send);
  free(b.recv);
  MPI_Finalize();
  return 0;
}
