/* tests/mpi/tsan_supp_check.c - tests/mpi/tsan_mpi.supp still lets a real
 * race through when MPI frames are in its stacks (ThreadSanitizer builds
 * only; run under mpirun with TSAN_OPTIONS naming the file). Two threads
 * call MPI_Reduce_local with a reduction operator, as ringflow's own
 * NaN-propagating min/max are (comm/mpi/data.c), that updates a counter
 * without synchronisation: each racing access is in the operator, called
 * from inside libmpi. The test passes when TSan reports the race (ctest
 * matches "ThreadSanitizer: data race"); with `race:libmpi.so`, which the
 * file held before, the report was suppressed. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>

static int calls; /* written by both threads unsynchronised, on purpose */

static void racy_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i];
  calls++;
}

static MPI_Op op;

static void *reduce(void *arg) {
  (void)arg;
  int a[4] = {1, 2, 3, 4}, b[4] = {0};
  for (int i = 0; i < 100; i++) MPI_Reduce_local(a, b, 4, MPI_INT, op);
  return NULL;
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Op_create(racy_sum, 1, &op);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, reduce, NULL);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("calls: %d\n", calls);
  MPI_Op_free(&op);
  MPI_Finalize();
  return 0;
}
