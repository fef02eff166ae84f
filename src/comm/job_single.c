/* comm/job_single.c - comm/job.h in builds without MPI: there is never a
 * job, every process is task 0 of 1, and attaching a session to a job is a
 * FAILED_PRECONDITION error. (MPI builds use comm/mpi/.) */
#ifndef RF_HAVE_MPI
#include "comm/job.h"
#include "core/status.h"

bool rf__job_launched(void) { return false; }

rf_status *rf__job_world(int *task, int *num_tasks) {
  *task = 0;
  *num_tasks = 1;
  return NULL;
}

rf_status *rf__job_attach(const void *mpi_comm, int num_cpu, int num_gpu,
                          int64_t timeout_ms, rf__threadpool *pool,
                          rf__job **out) {
  (void)mpi_comm, (void)num_cpu, (void)num_gpu, (void)timeout_ms, (void)pool;
  (void)out;
  return rf__error(RF_FAILED_PRECONDITION,
                   "several processes need MPI: ringflow was built without "
                   "it (install libopenmpi-dev and rebuild)");
}

/* Unreachable without a job; defined so that every build links. */
void rf__job_detach(rf__job *j) { (void)j; }
int rf__job_task(const rf__job *j) { return (void)j, 0; }
int rf__job_num_tasks(const rf__job *j) { return (void)j, 1; }
void rf__job_devices(const rf__job *j, int t, int *num_cpu, int *num_gpu) {
  (void)j, (void)t;
  *num_cpu = *num_gpu = 0;
}
void rf__job_coll_run(rf__job *j, rf__coll_group *g, const char *group_devices,
                      int64_t job_step) {
  (void)j, (void)g, (void)group_devices, (void)job_step;
}
void rf__job_coll_failed(rf__job *j, const char *shared_name, int64_t job_step,
                         const rf_status *why) {
  (void)j, (void)shared_name, (void)job_step, (void)why;
}
void rf__job_begin_step(rf__job *j, int64_t step_id, int64_t job_step) {
  (void)j, (void)step_id, (void)job_step;
}
void rf__job_cancel_step(rf__job *j, int64_t step_id, const rf_status *why) {
  (void)j, (void)step_id, (void)why;
}
void rf__job_end_step(rf__job *j, int64_t step_id) { (void)j, (void)step_id; }
void rf__job_step_failed(rf__job *j, int64_t job_step, const rf_status *why) {
  (void)j, (void)job_step, (void)why;
}
void rf__job_settle(rf__job *j) { (void)j; }
#endif
