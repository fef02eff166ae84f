/* comm/mpi/p2p.c - an all-gather as ringflow's own nonblocking messages
 * (RF_MPI_P2P, algorithm.c), and the requests an op's data run in (MPI's,
 * or an exchange through shared memory: shm.c).
 *
 * Why not MPI_Iallgatherv: OpenMPI's libnbc runs its schedule from a
 * low-priority progress callback (every few progress calls), and on one
 * host its in-place all-gather took twice as long as the blocking
 * MPI_Allgather from 64 KiB to 1 MiB with 2 processes (10.4 against 5.1 us
 * at 64 KiB, 92 against 47 us at 1 MiB; 2-core VM, docs/PERFORMANCE.md
 * "Session 27"). The same exchange as one MPI_Irecv from and one MPI_Isend
 * to every other process, tested with MPI_Testall, took what the blocking
 * call takes with 2 processes and 20-30% less with 4, at every size from
 * 1 KiB to 4 MiB; being nonblocking it keeps the timeouts and the direct
 * path. 2 (n - 1) messages a process: the default stops at
 * RF_MPI_P2P_MAX_TASKS processes (where libnbc's linear all-gather, the
 * same pattern, takes over).
 *
 * Messages use the communicator the collective's data use (its set's or
 * its agreed entry's, which MPI keeps apart from collectives on it) with a
 * tag of their own (ringflow's ring uses another); every process issues a
 * communicator's data calls in one order (GO order, or a name's check
 * sequence), and MPI matches messages of one sender, tag and communicator
 * in order, so each all-gather's messages meet their own.
 *
 * A process sends its rows from its input where it has one participant,
 * not from the copy it just wrote into the output: a peer's single-copy
 * read (vader's CMA) of freshly written lines took 2.4x as long (2
 * processes, 256 KiB: 25.0 against 10.2 us; 1 MiB 88 against 46). */
#include <stdbool.h>

#include "comm/mpi/mpi_status.h"
#include "comm/mpi/op.h"
#include "core/status.h"

#define TAG 0x5A6

void rf__mpi_reqs_clear(rf__mpi_reqs *q) {
  q->n = 0;
  q->shm.active = false;
}

MPI_Request *rf__mpi_reqs_one(rf__mpi_reqs *q) {
  rf__mpi_reqs_clear(q);
  q->n = 1;
  q->r[0] = MPI_REQUEST_NULL;
  return &q->r[0];
}

int rf__mpi_reqs_test(rf__mpi_reqs *q, int *done) {
  if (q->shm.active) return rf__mpi_shm_test(&q->shm, done);
  if (q->n == 0) {
    *done = 1;
    return MPI_SUCCESS;
  }
  return MPI_Testall(q->n, q->r, done, MPI_STATUSES_IGNORE);
}

bool rf__mpi_reqs_pending(const rf__mpi_reqs *q) {
  if (q->shm.active) return true;
  for (int i = 0; i < q->n; i++)
    if (q->r[i] != MPI_REQUEST_NULL) return true;
  return false;
}

rf_status *rf__mpi_p2p_all_gather(const void *mine, void *out,
                                  const int *counts, const int *displs, int n,
                                  int me, MPI_Comm comm, rf__mpi_reqs *q) {
  rf__mpi_reqs_clear(q);
  if (n - 1 > (int)(sizeof q->r / sizeof *q->r) / 2)
    return rf__internal(
        "an all-gather as messages across %d processes (at "
        "most %d)",
        n, RF_MPI_P2P_MAX_TASKS);
  char *base = out;
  /* receives first, so a peer's message finds its buffer; then the sends,
   * each process starting with the next one up (not all at process 0) */
  for (int k = 1; k < n; k++) {
    int from = (me - k + n) % n;
    int rc = MPI_Irecv(base + displs[from], counts[from], MPI_BYTE, from, TAG,
                       comm, &q->r[q->n]);
    if (rc != MPI_SUCCESS) return RF_MPI_STATUS(rc);
    q->n++;
  }
  for (int k = 1; k < n; k++) {
    int to = (me + k) % n;
    int rc = MPI_Isend(mine, counts[me], MPI_BYTE, to, TAG, comm, &q->r[q->n]);
    if (rc != MPI_SUCCESS) return RF_MPI_STATUS(rc);
    q->n++;
  }
  return NULL;
}
