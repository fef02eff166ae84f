/* comm/mpi/mpi_status.h - the one place MPI error codes become rf_status
 * (MPI builds only). ringflow's communicators return errors
 * (MPI_ERRORS_RETURN) instead of aborting the job, and every call's code goes
 * through RF_MPI_STATUS: NULL on MPI_SUCCESS, else INTERNAL (UNAVAILABLE for
 * a failed process) naming the call, MPI's message, file and line. */
#ifndef RF_COMM_MPI_MPI_STATUS_H
#define RF_COMM_MPI_MPI_STATUS_H

#include <mpi.h>

#include "ringflow/status.h"

rf_status *rf__mpi_status(int code, const char *expr, const char *file,
                          int line);

#define RF_MPI_STATUS(expr) rf__mpi_status((expr), #expr, __FILE__, __LINE__)

#endif
