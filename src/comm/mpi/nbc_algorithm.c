/* comm/mpi/nbc_algorithm.c - which algorithm OpenMPI's nonblocking
 * all-reduce (coll/libnbc) takes for ringflow's large all-reduces. Left to
 * itself libnbc takes a binomial tree below 4 processes and reduce-scatter
 * + all-gather from 4 (coll/libnbc/nbc_iallreduce.c); its ring was faster
 * from 256 KiB (`mpirun -np N ringflow bench`, 2 cores: 2 processes 1.45-1.58
 * of MPI_Allreduce at 1-16 MiB against 0.77-0.94; 4 processes 1.15-1.66
 * against 0.93-1.11), and slower below (4 processes at 16-64 KiB). The ring
 * computes every element in one process too, so every process still gets
 * the same bits. The choice is OpenMPI's control variable
 * coll_libnbc_iallreduce_algorithm, set through the MPI tool interface
 * around ringflow's own MPI_Iallreduce calls. Left alone when the variable
 * is not there (another MPI) or already chosen (--mca, OMPI_MCA_...).
 *
 * The variable is the process's, read by every MPI_Iallreduce when it is
 * called, and an all-reduce must take the same algorithm in every process:
 * one issued by another thread while the ring is chosen takes the ring
 * here and the default elsewhere - its messages then meet the wrong ones
 * (MPI_ERR_TRUNCATE, a hang or wrong sums; the direct path's threads and
 * the engine issue all-reduces at once). So every MPI_Iallreduce of
 * ringflow goes through rf__mpi_nbc_iallreduce, which holds one lock from
 * the choice to the restore. (An MPI_Iallreduce of the program itself in
 * another thread at that instant still takes the ring: docs/MULTIPROCESS.md
 * says not to issue MPI collectives beside ringflow's.) */
#include <pthread.h>
#include <stdbool.h>

#include "comm/mpi/mpi_status.h"
#include "comm/mpi/op.h"

#define RING 1
#define RING_MIN_BYTES (256 << 10)

static bool tuned; /* the variable is ours to set */
static MPI_T_cvar_handle cvar;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* the variable's */

void rf__mpi_nbc_init(void) {
  int provided = 0, index = -1, count = 0, value = -1;
  if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return;
  if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) !=
          MPI_SUCCESS ||
      MPI_T_cvar_handle_alloc(index, NULL, &cvar, &count) != MPI_SUCCESS) {
    MPI_T_finalize();
    return;
  }
  if (count != 1 || MPI_T_cvar_read(cvar, &value) != MPI_SUCCESS ||
      value != 0) { /* not a plain int, or chosen by the user */
    MPI_T_cvar_handle_free(&cvar);
    MPI_T_finalize();
    return;
  }
  tuned = true;
}

void rf__mpi_nbc_fini(void) {
  if (!tuned) return;
  MPI_T_cvar_handle_free(&cvar);
  MPI_T_finalize();
  tuned = false;
}

rf_status *rf__mpi_nbc_iallreduce(const void *send, void *recv, int count,
                                  MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                                  MPI_Request *req) {
  if (!tuned)
    return RF_MPI_STATUS(
        MPI_Iallreduce(send, recv, count, type, op, comm, req));
  int size = 0;
  MPI_Type_size(type, &size);
  int ring = RING, automatic = 0;
  pthread_mutex_lock(&mu);
  bool began = (int64_t)count * size >= RING_MIN_BYTES &&
               MPI_T_cvar_write(cvar, &ring) == MPI_SUCCESS;
  rf_status *st =
      RF_MPI_STATUS(MPI_Iallreduce(send, recv, count, type, op, comm, req));
  if (began) MPI_T_cvar_write(cvar, &automatic);
  pthread_mutex_unlock(&mu);
  return st;
}
