/* comm/mpi/ring.c - ringflow's own ring collectives over point-to-point
 * messages, blocking (the job's data thread runs them: data_thread.c).
 * Process r sends to r + 1 and receives from r - 1 (in the communicator's
 * order); a vector is cut into one chunk per process, chunk c of
 * counts[c] elements at displs[c].
 *   reduce-scatter: p - 1 steps; the running partial of a chunk travels
 *     the ring and each process adds its own part as it passes, so chunk c
 *     is complete in process c alone;
 *   all-gather: p - 1 steps, each forwarding the chunk received last;
 *   all-reduce: reduce-scatter, then all-gather of the sums. Every element
 *     is summed in one process, in one order fixed by the ring, and copied
 *     to the others: every process gets the same bits, run after run;
 *   reduce: reduce-scatter, then each process sends its chunk of sums to the
 *     root;
 *   broadcast: the root scatters chunk c to process c, then all-gather (van
 *     de Geijn).
 * Messages use the set's communicator (MPI keeps point-to-point traffic
 * apart from collectives on it) with one tag; the data thread runs one
 * collective of a job at a time, so no two rings share a communicator. An
 * MPI error code, or MPI_ERR_NO_MEM without scratch memory.
 * Scratch (the reduce-scatter's two chunks in transit from 3 processes, a
 * reduce sender's chunk of sums) comes from the default caching allocator,
 * not malloc: chunks of 128 KiB and more are then the same warm blocks step
 * after step, where glibc maps (or trims and grows back) fresh pages for
 * them and the ring pays ~10-15 us of first touch per 4 KiB page, every
 * call (docs/PERFORMANCE.md, "Session 11: mpi1m"). */
#include <stdlib.h>
#include <string.h>

#include "comm/mpi/op.h"
#include "ringflow/tensor.h"

#define TAG 0x52F

/* Even chunks of n elements over p processes (the first n % p one larger). */
void rf__mpi_ring_chunks(int64_t n, int p, int *counts, int *displs) {
  int64_t at = 0;
  for (int c = 0; c < p; c++) {
    counts[c] = (int)(n / p + (c < n % p));
    displs[c] = (int)at;
    at += counts[c];
  }
}

static void *scratch_new(size_t bytes) {
  rf_allocator *a = rf_default_allocator();
  return a->alloc(a->state, bytes, RF_TENSOR_ALIGNMENT);
}

static void scratch_free(void *p, size_t bytes) {
  rf_allocator *a = rf_default_allocator();
  a->free(a->state, p, bytes);
}

static int max_count(const int *counts, int p) {
  int m = 0;
  for (int c = 0; c < p; c++)
    if (counts[c] > m) m = counts[c];
  return m;
}

/* Chunk c of base (NULL for an empty tensor's NULL: no offset on it). */
static char *at(const void *base, const int *displs, int c, int esize) {
  if (!base) return NULL;
  return (char *)base + (size_t)displs[c] * (size_t)esize;
}

int rf__mpi_ring_reduce_scatter(const void *send, void *out, const int *counts,
                                const int *displs, MPI_Datatype type, MPI_Op op,
                                MPI_Comm comm) {
  int p, r, esize;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &r);
  MPI_Type_size(type, &esize);
  if (p == 1) {
    if (counts[0] > 0) memcpy(out, send, (size_t)counts[0] * (size_t)esize);
    return MPI_SUCCESS;
  }
  /* In transit: two chunks (one sent while the next arrives), none with 2
   * processes, whose one step receives into out. */
  size_t cap = (size_t)max_count(counts, p) * (size_t)esize;
  size_t len = p > 2 ? 2 * cap : 0;
  char *scratch = len ? scratch_new(len) : NULL;
  if (len && !scratch) return MPI_ERR_NO_MEM;
  char *bufs[2] = {scratch, scratch ? scratch + cap : NULL};
  int right = (r + 1) % p, left = (r + p - 1) % p, rc = MPI_SUCCESS;
  const void *cur = NULL;
  for (int s = 0; s < p - 1 && rc == MPI_SUCCESS; s++) {
    int cs = (r - s - 1 + 2 * p) % p, cr = (r - s - 2 + 2 * p) % p;
    const void *sb = s == 0 ? at(send, displs, cs, esize) : cur;
    void *rb = s == p - 2 ? out : bufs[s % 2];
    rc = MPI_Sendrecv(sb, counts[cs], type, right, TAG, rb, counts[cr], type,
                      left, TAG, comm, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && counts[cr] > 0)
      rc = MPI_Reduce_local(at(send, displs, cr, esize), rb, counts[cr], type,
                            op);
    cur = rb;
  }
  if (scratch) scratch_free(scratch, len);
  return rc;
}

/* skip: a process that has every chunk already (a broadcast's root, whose
 * buffer is its input: nothing may be written there), or -1. It only
 * sends, and its left neighbour only receives. */
static int all_gather(void *buf, const int *counts, const int *displs,
                      MPI_Datatype type, MPI_Comm comm, int skip) {
  int p, r, esize;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &r);
  MPI_Type_size(type, &esize);
  int right = (r + 1) % p, left = (r + p - 1) % p, rc = MPI_SUCCESS;
  for (int s = 0; s < p - 1 && rc == MPI_SUCCESS; s++) {
    int cs = (r - s + p) % p, cr = (r - s - 1 + p) % p;
    void *sb = at(buf, displs, cs, esize), *rb = at(buf, displs, cr, esize);
    if (r == skip)
      rc = MPI_Send(sb, counts[cs], type, right, TAG, comm);
    else if (right == skip)
      rc = MPI_Recv(rb, counts[cr], type, left, TAG, comm, MPI_STATUS_IGNORE);
    else
      rc = MPI_Sendrecv(sb, counts[cs], type, right, TAG, rb, counts[cr], type,
                        left, TAG, comm, MPI_STATUS_IGNORE);
  }
  return rc;
}

int rf__mpi_ring_all_gather(void *buf, const int *counts, const int *displs,
                            MPI_Datatype type, MPI_Comm comm) {
  return all_gather(buf, counts, displs, type, comm, -1);
}

/* counts/displs: room for p each (the caller's arrays). */
int rf__mpi_ring_all_reduce(const void *send, void *out, int count,
                            MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                            int *counts, int *displs) {
  int p, r, esize;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &r);
  MPI_Type_size(type, &esize);
  rf__mpi_ring_chunks(count, p, counts, displs);
  int rc = rf__mpi_ring_reduce_scatter(send, at(out, displs, r, esize), counts,
                                       displs, type, op, comm);
  if (rc != MPI_SUCCESS) return rc;
  return rf__mpi_ring_all_gather(out, counts, displs, type, comm);
}

int rf__mpi_ring_reduce(const void *send, void *out, int count,
                        MPI_Datatype type, MPI_Op op, int root, MPI_Comm comm,
                        int *counts, int *displs) {
  int p, r, esize;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &r);
  MPI_Type_size(type, &esize);
  rf__mpi_ring_chunks(count, p, counts, displs);
  void *mine = NULL;
  size_t len = (size_t)counts[r] * (size_t)esize;
  if (r != root && len > 0) {
    mine = scratch_new(len);
    if (!mine) return MPI_ERR_NO_MEM;
  }
  void *dst = r == root ? at(out, displs, r, esize) : mine;
  int rc =
      rf__mpi_ring_reduce_scatter(send, dst, counts, displs, type, op, comm);
  if (rc == MPI_SUCCESS)
    rc = MPI_Gatherv(r == root ? MPI_IN_PLACE : mine, counts[r], type, out,
                     counts, displs, type, root, comm);
  if (mine) scratch_free(mine, len);
  return rc;
}

int rf__mpi_ring_broadcast(void *buf, int bytes, int root, MPI_Comm comm,
                           int *counts, int *displs) {
  int p, r;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &r);
  rf__mpi_ring_chunks(bytes, p, counts, displs);
  int rc = MPI_Scatterv(buf, counts, displs, MPI_BYTE,
                        r == root ? MPI_IN_PLACE : at(buf, displs, r, 1),
                        counts[r], MPI_BYTE, root, comm);
  if (rc != MPI_SUCCESS) return rc;
  return all_gather(buf, counts, displs, MPI_BYTE, comm, root);
}
