/* bench/mpi_algorithms.c - the algorithms a collective across processes can
 * take (src/comm/mpi/algorithm.c), alone, without ringflow's session around
 * them: for each collective and size, MPI's blocking call, its nonblocking
 * call with libnbc's own choice ("nbc") and with each libnbc algorithm
 * forced through the MPI tool interface ("alg1".. as in `ompi_info --param
 * coll libnbc --level 9`), MPI_Iallgatherv in place (ringflow's all-gather
 * call) and ringflow's ring (src/comm/mpi/ring.c). A trial is one call
 * between barriers, timed by its slowest process; the variants alternate,
 * and each figure is the fastest of 30 trials (on a loaded machine the
 * minimum is what the algorithm costs; the rest is waiting for a core).
 *   mpirun --oversubscribe -np 4 --mca btl self,vader \
 *     build-nc/bench/bench_mpi_algorithms 64 256 1024 4096 16384   (KiB)
 * float32 sums; µs. */
#include <stdio.h>
#include <stdlib.h>

#ifdef RF_HAVE_MPI
#include <malloc.h>

#include "comm/mpi/op.h"

enum { AR, RED, BC, AG, RS, NCOLL };
enum { BLOCKING, NBC, ALG1, ALG2, ALG3, ALG4, RING, IAGV, NVAR };

static const char *coll_names[NCOLL] = {"all_reduce", "reduce", "broadcast",
                                        "all_gather", "reduce_scatter"};
static const char *var_names[NVAR] = {"blocking", "nbc",  "alg1", "alg2",
                                      "alg3",     "alg4", "ring", "iagv-inpl"};
/* The variants of each collective, -1 ended (libnbc's algorithms: 4 for
 * all-reduce and broadcast, 3 for reduce, 2 for all-gather, none for
 * reduce-scatter). */
static const int variants[NCOLL][9] = {
    {BLOCKING, NBC, ALG1, ALG2, ALG3, ALG4, RING, -1},
    {BLOCKING, NBC, ALG1, ALG2, ALG3, RING, -1},
    {BLOCKING, NBC, ALG1, ALG2, ALG3, ALG4, RING, -1},
    {BLOCKING, NBC, ALG1, ALG2, IAGV, RING, -1},
    {BLOCKING, NBC, RING, -1}};
static const char *cvar_names[4] = {
    "coll_libnbc_iallreduce_algorithm", "coll_libnbc_ireduce_algorithm",
    "coll_libnbc_ibcast_algorithm", "coll_libnbc_iallgather_algorithm"};

static int P, R;
static float *a, *b;
static int counts[1024], displs[1024];
static MPI_T_cvar_handle cvars[4];
static bool have_cvar[4];

static void set_cvar(int c, int v) {
  if (c < 4 && have_cvar[c]) MPI_T_cvar_write(cvars[c], &v);
}

static void even(int unit) {
  for (int t = 0; t < P; t++) {
    counts[t] = unit;
    displs[t] = t * unit;
  }
}

static void ring(int c, int n) {
  int bytes = n * 4;
  switch (c) {
    case AR:
      rf__mpi_ring_all_reduce(a, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                              counts, displs);
      break;
    case RED:
      rf__mpi_ring_reduce(a, b, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD,
                          counts, displs);
      break;
    case BC:
      rf__mpi_ring_broadcast(a, bytes, 0, MPI_COMM_WORLD, counts, displs);
      break;
    case AG:
      even(bytes);
      rf__mpi_ring_all_gather(b, counts, displs, MPI_BYTE, MPI_COMM_WORLD);
      break;
    default:
      even(n / P);
      rf__mpi_ring_reduce_scatter(a, b, counts, displs, MPI_FLOAT, MPI_SUM,
                                  MPI_COMM_WORLD);
  }
}

static void blocking(int c, int n) {
  int bytes = n * 4;
  switch (c) {
    case AR: MPI_Allreduce(a, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case RED: MPI_Reduce(a, b, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD); break;
    case BC: MPI_Bcast(a, bytes, MPI_BYTE, 0, MPI_COMM_WORLD); break;
    case AG:
      MPI_Allgather(a, bytes, MPI_BYTE, b, bytes, MPI_BYTE, MPI_COMM_WORLD);
      break;
    default:
      MPI_Reduce_scatter_block(a, b, n / P, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
}

static void nonblocking(int c, int v, int n) {
  int bytes = n * 4, done = 0;
  MPI_Request q;
  if (v >= ALG1 && v <= ALG4) set_cvar(c, v - ALG1 + 1);
  switch (c) {
    case AR:
      MPI_Iallreduce(a, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q);
      break;
    case RED:
      MPI_Ireduce(a, b, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD, &q);
      break;
    case BC: MPI_Ibcast(a, bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &q); break;
    case AG:
      if (v == IAGV) {
        even(bytes);
        MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, b, counts, displs, MPI_BYTE,
                        MPI_COMM_WORLD, &q);
      } else {
        MPI_Iallgather(a, bytes, MPI_BYTE, b, bytes, MPI_BYTE, MPI_COMM_WORLD,
                       &q);
      }
      break;
    default:
      MPI_Ireduce_scatter_block(a, b, n / P, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                &q);
  }
  if (v >= ALG1 && v <= ALG4) set_cvar(c, 0);
  while (!done) MPI_Test(&q, &done, MPI_STATUS_IGNORE);
}

static void run(int c, int v, int n) {
  if (v == RING)
    ring(c, n);
  else if (v == BLOCKING)
    blocking(c, n);
  else
    nonblocking(c, v, n);
}

int main(int argc, char **argv) {
  /* as `ringflow bench`: no heap trimming, no fresh mappings per call */
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, -1);
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided);
  for (int c = 0; c < 4; c++) {
    int index, count;
    have_cvar[c] =
        MPI_T_cvar_get_index(cvar_names[c], &index) == MPI_SUCCESS &&
        MPI_T_cvar_handle_alloc(index, NULL, &cvars[c], &count) == MPI_SUCCESS;
  }
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  MPI_Comm_rank(MPI_COMM_WORLD, &R);
  if (P > 1024) MPI_Abort(MPI_COMM_WORLD, 2);
  long max_kib = 0;
  for (int i = 1; i < argc; i++)
    if (atol(argv[i]) > max_kib) max_kib = atol(argv[i]);
  size_t floats = (size_t)max_kib * 256 * (size_t)P + 1;
  a = malloc(floats * 4);
  b = malloc(floats * 4);
  if (!a || !b) MPI_Abort(MPI_COMM_WORLD, 2);
  for (size_t i = 0; i < floats; i++) a[i] = b[i] = 1;
  for (int s = 1; s < argc; s++) {
    int n = atoi(argv[s]) * 256; /* float32 elements of S KiB */
    for (int c = 0; c < NCOLL; c++) {
      double best[NVAR];
      for (int v = 0; v < NVAR; v++) best[v] = 1e30;
      for (int trial = 0; trial < 30; trial++)
        for (int k = 0; variants[c][k] >= 0; k++) {
          int v = variants[c][k];
          MPI_Barrier(MPI_COMM_WORLD);
          double t0 = MPI_Wtime(), t, slowest;
          run(c, v, n);
          t = MPI_Wtime() - t0;
          MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
          if (slowest < best[v]) best[v] = slowest;
        }
      if (R != 0) continue;
      printf("%-15s %6d KiB:", coll_names[c], atoi(argv[s]));
      for (int k = 0; variants[c][k] >= 0; k++)
        printf(" %s=%.0f", var_names[variants[c][k]],
               best[variants[c][k]] * 1e6);
      printf("\n");
      fflush(stdout);
    }
  }
  free(a);
  free(b);
  for (int c = 0; c < 4; c++)
    if (have_cvar[c]) MPI_T_cvar_handle_free(&cvars[c]);
  MPI_T_finalize();
  MPI_Finalize();
  return 0;
}
#else
int main(void) {
  fprintf(stderr, "bench_mpi_algorithms: built without MPI\n");
  return 1;
}
#endif
