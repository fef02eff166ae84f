/* bench/mpi_shm_floor.c - ringflow's shared-memory exchange alone
 * (src/comm/mpi/shm.c: segment, flags, copies and reductions, no session,
 * no agreement, no thread hand-off) against MPI's blocking call on the same
 * buffers, for every kind, float32 sums: the floor that RF_MPI_ALGORITHM=shm
 * can reach under `ringflow bench`, and what MPI's own transport does with
 * the same bytes. Median-free: the best of 3 timed loops of each, each loop
 * the slowest process's mean.
 *
 *   mpirun --bind-to none --mca btl self,vader -np N \
 *     build-nc/bench/bench_mpi_shm_floor [ITERS [MAX_BYTES [MIN_BYTES]]]
 *
 * ITERS (default 200; a quarter from 4 MiB) calls a loop, sizes MIN_BYTES
 * (default 64 KiB, at least 64 bytes) to MAX_BYTES (default 16 MiB) by 4. One
 * line per kind and size on rank 0: both times in microseconds and MPI's / the
 * exchange's (above 1: the exchange is faster). Exits 1 when the processes
 * cannot share memory; runs where they outnumber the cores too (a crowded
 * job's table would not take the exchange there: docs/MULTIPROCESS.md). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/mpi/op.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static const char *const kinds[] = {"all_reduce", "reduce", "broadcast",
                                    "all_gather", "reduce_scatter"};

/* One call of kind through x (shared memory) or MPI. */
static void call(int kind, bool shm, rf__mpi_shm *s, rf__mpi_shm_x *x, float *a,
                 float *b, int n, int p, int me, int64_t bytes,
                 const int64_t *even, const int64_t *edispl,
                 const int64_t *block, const int64_t *bdispl,
                 const int64_t *gbytes, const int64_t *gdispl) {
  void *bcast = me == 0 ? (void *)a : (void *)b;
  if (!shm) {
    switch (kind) {
      case 0: MPI_Allreduce(a, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
      case 1: MPI_Reduce(a, b, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD); break;
      case 2: MPI_Bcast(bcast, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD); break;
      case 3:
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_BYTE, b, (int)(bytes / p), MPI_BYTE,
                      MPI_COMM_WORLD);
        break;
      default:
        MPI_Reduce_scatter_block(a, b, n / p, MPI_FLOAT, MPI_SUM,
                                 MPI_COMM_WORLD);
    }
    return;
  }
  switch (kind) {
    case 0:
      rf__mpi_shm_start_reduce(x, s, a, b, even, edispl, MPI_FLOAT, MPI_SUM,
                               RF_MPI_SHM_ALL, 0);
      break;
    case 1:
      rf__mpi_shm_start_reduce(x, s, a, b, even, edispl, MPI_FLOAT, MPI_SUM,
                               RF_MPI_SHM_ROOT, 0);
      break;
    case 2: rf__mpi_shm_start_broadcast(x, s, bcast, bytes, 0); break;
    case 3: rf__mpi_shm_start_all_gather(x, s, b, gbytes, gdispl); break;
    default:
      rf__mpi_shm_start_reduce(x, s, a, b, block, bdispl, MPI_FLOAT, MPI_SUM,
                               RF_MPI_SHM_SCATTER, 0);
  }
  int done = 0;
  while (!done) rf__mpi_shm_test(x, &done);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int p, me;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  int iters = argc > 1 ? atoi(argv[1]) : 200;
  int64_t max_bytes = argc > 2 ? atoll(argv[2]) : (int64_t)16 << 20;
  int64_t min_bytes = argc > 3 ? atoll(argv[3]) : (int64_t)64 << 10;
  if (iters < 1 || min_bytes < 64 || min_bytes > max_bytes ||
      p > RF_MPI_SHM_MAX_TASKS) {
    if (me == 0) fprintf(stderr, "usage: see the file's header\n");
    MPI_Finalize();
    return 2;
  }
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  rf__mpi_shm *s = NULL;
  if (rf__mpi_shm_of(comm, max_bytes, false, &s) != MPI_SUCCESS || !s) {
    if (me == 0) fprintf(stderr, "no shared memory between the processes\n");
    MPI_Finalize();
    return 1;
  }
  static rf__mpi_shm_x x;
  for (int kind = 0; kind < 5; kind++)
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      int n = (int)(bytes / 4);
      float *a = malloc((size_t)bytes), *b = calloc(1, (size_t)bytes);
      if (!a || !b) return 1;
      for (int i = 0; i < n; i++) a[i] = (float)(i % 7 + me);
      int64_t even[RF_MPI_SHM_MAX_TASKS], edispl[RF_MPI_SHM_MAX_TASKS];
      int64_t block[RF_MPI_SHM_MAX_TASKS], bdispl[RF_MPI_SHM_MAX_TASKS];
      int64_t gbytes[RF_MPI_SHM_MAX_TASKS], gdispl[RF_MPI_SHM_MAX_TASKS];
      for (int q = 0, at = 0; q < p; q++) {
        even[q] = n / p + (q < n % p);
        edispl[q] = at;
        at += (int)even[q];
        block[q] = n / p;
        bdispl[q] = q * (int64_t)(n / p);
        gbytes[q] = bytes / p;
        gdispl[q] = q * (bytes / p);
      }
      int loops = bytes >= ((int64_t)4 << 20) ? iters / 4 + 1 : iters;
      double best[2] = {1e30, 1e30};
      for (int rep = 0; rep < 3; rep++)
        for (int m = 0; m < 2; m++) {
          MPI_Barrier(MPI_COMM_WORLD);
          double t0 = now_us();
          for (int i = 0; i < loops; i++)
            call(kind, m == 0, s, &x, a, b, n, p, me, bytes, even, edispl,
                 block, bdispl, gbytes, gdispl);
          double us = (now_us() - t0) / loops, slowest;
          MPI_Allreduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
          if (slowest < best[m]) best[m] = slowest;
        }
      /* the all-reduce's sum of (i % 7 + q) over q, checked at element 1 */
      if (kind == 0 && b[1] != (float)(p + p * (p - 1) / 2))
        fprintf(stderr, "rank %d: wrong all-reduce result %g\n", me, b[1]);
      if (me == 0)
        printf("np%d %-14s %9lld B: shm %9.2f us  MPI %9.2f us  MPI/shm %.2f\n",
               p, kinds[kind], (long long)bytes, best[0], best[1],
               best[1] / best[0]);
      free(a);
      free(b);
    }
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return 0;
}
