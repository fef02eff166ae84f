/* bench/mpi_all_gather_p2p.c - an all-gather by MPI's own calls against
 * point-to-point messages (what src/comm/mpi/p2p.c does), and a broadcast
 * blocking and nonblocking, on MPI's buffers alone: the median and 10th
 * percentile of single calls, the slowest process's time, 1 KiB to 4 MiB.
 *   mpicc -O2 bench/mpi_all_gather_p2p.c -o /tmp/ag
 *   mpirun --bind-to none --mca btl self,vader -np 2 /tmp/ag 300
 * (docs/PERFORMANCE.md, "Session 27"). p2p_inplace_send sends from the
 * output it just wrote, as an in-place all-gather does. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int cmp(const void *a, const void *b) {
  double x = *(double *)a, y = *(double *)b;
  return (x > y) - (x < y);
}
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r, np;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  int iters = argc > 1 ? atoi(argv[1]) : 200;
  long sizes[] = {1024, 4096, 65536, 262144, 1048576, 4194304};
  for (int si = 0; si < 6; si++) {
    long bytes = sizes[si];
    int per = (int)(bytes / np);
    char *in = malloc(bytes), *out = malloc(bytes);
    memset(in, 1, bytes);
    memset(out, 0, bytes);
    int counts[64], displs[64];
    for (int t = 0; t < np; t++) {
      counts[t] = per;
      displs[t] = t * per;
    }
    const char *names[] = {"Allgather",
                           "Iallgather",
                           "Iallgatherv_inplace",
                           "cpy+Iallgather_inplace",
                           "Bcast",
                           "Ibcast",
                           "Ibcast+Test",
                           "Ibcast+check",
                           "Iallgather+check",
                           "p2p_allgather",
                           "p2p_inplace_send"};
    for (int v = 0; v < 11; v++) {
      double ts[2000];
      for (int i = 0; i < iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Request q;
        switch (v) {
          case 0:
            MPI_Allgather(in, per, MPI_BYTE, out, per, MPI_BYTE,
                          MPI_COMM_WORLD);
            break;
          case 1:
            MPI_Iallgather(in, per, MPI_BYTE, out, per, MPI_BYTE,
                           MPI_COMM_WORLD, &q);
            MPI_Wait(&q, MPI_STATUS_IGNORE);
            break;
          case 2:
            memcpy(out + r * per, in, per);
            MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, out, counts, displs,
                            MPI_BYTE, MPI_COMM_WORLD, &q);
            MPI_Wait(&q, MPI_STATUS_IGNORE);
            break;
          case 3:
            memcpy(out + r * per, in, per);
            MPI_Iallgather(MPI_IN_PLACE, 0, MPI_BYTE, out, per, MPI_BYTE,
                           MPI_COMM_WORLD, &q);
            MPI_Wait(&q, MPI_STATUS_IGNORE);
            break;
          case 4:
            MPI_Bcast(r == 0 ? in : out, (int)bytes, MPI_BYTE, 0,
                      MPI_COMM_WORLD);
            break;
          case 5:
            MPI_Ibcast(r == 0 ? in : out, (int)bytes, MPI_BYTE, 0,
                       MPI_COMM_WORLD, &q);
            MPI_Wait(&q, MPI_STATUS_IGNORE);
            break;
          case 6: {
            MPI_Ibcast(r == 0 ? in : out, (int)bytes, MPI_BYTE, 0,
                       MPI_COMM_WORLD, &q);
            int f = 0;
            while (!f) MPI_Test(&q, &f, MPI_STATUS_IGNORE);
          } break;
          case 7:
          case 8: {
            long long ck[5] = {1, 2, 3, 4, 5}, co[5];
            MPI_Request qq[2];
            MPI_Iallreduce(ck, co, 5, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD,
                           &qq[0]);
            if (v == 7)
              MPI_Ibcast(r == 0 ? in : out, (int)bytes, MPI_BYTE, 0,
                         MPI_COMM_WORLD, &qq[1]);
            else {
              memcpy(out + r * per, in, per);
              MPI_Iallgather(MPI_IN_PLACE, 0, MPI_BYTE, out, per, MPI_BYTE,
                             MPI_COMM_WORLD, &qq[1]);
            }
            int f = 0;
            while (!f) MPI_Testall(2, qq, &f, MPI_STATUSES_IGNORE);
          } break;
          case 9:
          case 10: { /* 10: from the output just written, as in place */
            const char *mine = v == 9 ? in : out + r * per;
            MPI_Request qq[128];
            int nq = 0;
            memcpy(out + r * per, in, per);
            for (int t = 0; t < np; t++)
              if (t != r) {
                MPI_Irecv(out + t * per, per, MPI_BYTE, t, 7, MPI_COMM_WORLD,
                          &qq[nq++]);
                MPI_Isend(mine, per, MPI_BYTE, t, 7, MPI_COMM_WORLD, &qq[nq++]);
              }
            int f = 0;
            while (!f) MPI_Testall(nq, qq, &f, MPI_STATUSES_IGNORE);
          } break;
        }
        double t = MPI_Wtime() - t0;
        MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        ts[i] = t;
      }
      qsort(ts, iters, sizeof(double), cmp);
      if (r == 0)
        printf("%8ld %-24s median %8.1f us  p10 %8.1f\n", bytes, names[v],
               ts[iters / 2] * 1e6, ts[iters / 10] * 1e6);
    }
    free(in);
    free(out);
  }
  MPI_Finalize();
}
