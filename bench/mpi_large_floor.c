/* bench/mpi_large_floor.c - what OpenMPI's own calls cost from 1 MiB up,
 * per call (median of single calls): the blocking call (what `ringflow
 * bench` compares with), the nonblocking call completed by an MPI_Testall
 * loop (what ringflow's communication thread issues), and that with
 * ringflow's steady-state check beside it (a 5-integer MPI_Iallreduce on a
 * second communicator). Broadcast, all-gather and reduce, the collectives
 * below 1.0x MPI in session 17 (docs/PERFORMANCE.md, "Session 17"). Tells
 * what MPI's nonblocking form costs against its blocking one, apart from
 * anything ringflow adds.
 *
 *   mpicc -O2 bench/mpi_large_floor.c -o /tmp/mpi_large_floor
 *   mpirun -np 2 --mca btl self,vader /tmp/mpi_large_floor [ITERS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_floor.h"

int main(int argc, char **argv) {
  int rank, np;
  MPI_Comm c1, c2;
  floor_init(&argc, &argv, &rank, &np, &c1, &c2);
  int iters = argc > 1 ? atoi(argv[1]) : 100;
  if (iters < 5 || iters > 10000) iters = 100;
  size_t max = (size_t)16 << 20;
  float *in = calloc(max / 4, 4), *out = calloc(max / 4 * (size_t)np, 4);
  double *ts = malloc(sizeof *ts * (size_t)iters);
  long long chk[5] = {1, -1, 2, -2, 0}, chko[5];
  const char *kinds[] = {"broadcast", "all_gather", "reduce"};
  static const char *mn[] = {"blocking", "nonblocking", "check+data"};
  for (size_t bytes = (size_t)1 << 20; bytes <= max; bytes *= 4) {
    int n = (int)(bytes / 4);
    for (int k = 0; k < 3; k++)
      for (int mode = 0; mode < 3; mode++) {
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < iters; i++) {
          double t0 = MPI_Wtime();
          MPI_Request r[2];
          int nr = 0;
          if (mode == 2)
            MPI_Iallreduce(chk, chko, 5, MPI_INT64_T, MPI_MAX, c2, &r[nr++]);
          if (mode == 0) {
            if (k == 0) MPI_Bcast(in, n, MPI_FLOAT, 0, c1);
            if (k == 1)
              MPI_Allgather(in, n / np, MPI_FLOAT, out, n / np, MPI_FLOAT, c1);
            if (k == 2) MPI_Reduce(in, out, n, MPI_FLOAT, MPI_SUM, 0, c1);
          } else {
            if (k == 0) MPI_Ibcast(in, n, MPI_FLOAT, 0, c1, &r[nr++]);
            if (k == 1)
              MPI_Iallgather(in, n / np, MPI_FLOAT, out, n / np, MPI_FLOAT, c1,
                             &r[nr++]);
            if (k == 2)
              MPI_Ireduce(in, out, n, MPI_FLOAT, MPI_SUM, 0, c1, &r[nr++]);
            waitall(r, nr);
          }
          ts[i] = MPI_Wtime() - t0;
        }
        /* the slowest process's median: what a caller of all of them sees */
        qsort(ts, (size_t)iters, sizeof *ts, cmp);
        double med = ts[iters / 2], worst;
        MPI_Reduce(&med, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0)
          printf("np %d %-10s %8zu B %-12s median %.1f us\n", np, kinds[k],
                 bytes, mn[mode], worst * 1e6);
      }
  }
  free(in);
  free(out);
  free(ts);
  MPI_Finalize();
  return 0;
}
