/* comm/mpi/mpi_status.c - MPI error codes as rf_status (see mpi_status.h). */
#include "comm/mpi/mpi_status.h"

#include "core/status.h"

rf_status *rf__mpi_status(int code, const char *expr, const char *file,
                          int line) {
  if (code == MPI_SUCCESS) return NULL;
  char text[MPI_MAX_ERROR_STRING] = "";
  int len = 0, cls = MPI_ERR_UNKNOWN;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) text[0] = '\0';
  MPI_Error_class(code, &cls);
  rf_code rc = cls == MPI_ERR_NO_MEM ? RF_RESOURCE_EXHAUSTED : RF_INTERNAL;
  return rf__error(rc, "%s failed: %s (MPI error %d) at %s:%d", expr, text,
                   code, file, line);
}
