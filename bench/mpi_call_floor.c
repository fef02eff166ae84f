/* bench/mpi_call_floor.c - what OpenMPI's own calls cost at small sizes,
 * per call (median and 10th percentile of single calls, so that load on
 * the machine shows as a tail, not in the median): the blocking call
 * (what `ringflow bench` compares with), the nonblocking call completed by
 * an MPI_Testall loop (what ringflow issues), and ringflow's steady state,
 * a 5-integer MPI_Iallreduce (MAX) check with the data issued beside it
 * ("check+data") or after it completed ("check;data"). Each on its own
 * duplicated communicator, like ringflow's. docs/PERFORMANCE.md
 * "Session 13: mpilat".
 *
 *   mpicc -O2 bench/mpi_call_floor.c -o /tmp/mpi_call_floor
 *   mpirun -np 2 --mca btl self,vader /tmp/mpi_call_floor [ITERS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_floor.h"

int main(int argc, char **argv) {
  int rank, np;
  MPI_Comm c1, c2;
  floor_init(&argc, &argv, &rank, &np, &c1, &c2);
  int iters = argc > 1 ? atoi(argv[1]) : 20000;
  if (iters < 10 || iters > 200000) iters = 20000;
  float in[4096], out[4096 * 4];
  memset(in, 0, sizeof in);
  long long chk[5] = {1, -1, 2, -2, 0}, chko[5];
  const char *kinds[] = {"all_reduce", "broadcast", "all_gather", "reduce"};
  for (int bytes = 1024; bytes <= 4096; bytes *= 4) {
    int n = bytes / 4;
    for (int k = 0; k < 4; k++) {
      for (int mode = 0; mode < 4; mode++) {
        static double ts[200000];
        {
          MPI_Barrier(MPI_COMM_WORLD);
          for (int i = 0; i < iters; i++) {
            double t0 = MPI_Wtime();
            MPI_Request r[2];
            int nr = 0;
            if (mode == 2 || mode == 3) {
              MPI_Iallreduce(chk, chko, 5, MPI_INT64_T, MPI_MAX, c2, &r[nr++]);
              if (mode == 3) waitall(r, 1), nr = 0; /* check, then data */
            }
            if (mode == 0) {
              if (k == 0) MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, c1);
              if (k == 1) MPI_Bcast(in, n, MPI_FLOAT, 0, c1);
              if (k == 2)
                MPI_Allgather(in, n / np, MPI_FLOAT, out, n / np, MPI_FLOAT,
                              c1);
              if (k == 3) MPI_Reduce(in, out, n, MPI_FLOAT, MPI_SUM, 0, c1);
            } else {
              if (k == 0)
                MPI_Iallreduce(in, out, n, MPI_FLOAT, MPI_SUM, c1, &r[nr++]);
              if (k == 1) MPI_Ibcast(in, n, MPI_FLOAT, 0, c1, &r[nr++]);
              if (k == 2)
                MPI_Iallgather(in, n / np, MPI_FLOAT, out, n / np, MPI_FLOAT,
                               c1, &r[nr++]);
              if (k == 3)
                MPI_Ireduce(in, out, n, MPI_FLOAT, MPI_SUM, 0, c1, &r[nr++]);
              waitall(r, nr);
            }
            ts[i] = MPI_Wtime() - t0;
          }
        }
        qsort(ts, iters, sizeof ts[0], cmp);
        double best = ts[iters / 2], p10 = ts[iters / 10];
        static const char *mn[] = {"blocking", "nonblocking", "check+data",
                                   "check;data"};
        if (rank == 0)
          printf("np %d %-10s %5d B %-12s median %.2f us  p10 %.2f us\n", np,
                 kinds[k], bytes, mn[mode], best * 1e6, p10 * 1e6);
      }
    }
  }
  MPI_Finalize();
}
