/* bench/mpi_floor.h - what bench/mpi_call_floor.c and bench/mpi_large_floor.c
 * share: MPI started with MPI_THREAD_MULTIPLE (as ringflow starts it) and two
 * duplicated communicators (ringflow's data and check go on their own), a
 * nonblocking call completed by an MPI_Testall loop (as ringflow's threads
 * complete theirs), and the comparison for sorting timings. */
#ifndef RF_BENCH_MPI_FLOOR_H
#define RF_BENCH_MPI_FLOOR_H

#include <mpi.h>

static void floor_init(int *argc, char ***argv, int *rank, int *np,
                       MPI_Comm *c1, MPI_Comm *c2) {
  int prov;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &prov);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, np);
  MPI_Comm_dup(MPI_COMM_WORLD, c1);
  MPI_Comm_dup(MPI_COMM_WORLD, c2);
}

static void waitall(MPI_Request *r, int n) {
  for (;;) {
    int d = 0;
    MPI_Testall(n, r, &d, MPI_STATUSES_IGNORE);
    if (d) return;
  }
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#endif
