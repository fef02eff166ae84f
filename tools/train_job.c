/* tools/train_job.c - what `ringflow train` does differently across the
 * processes of an MPI job (train_job.h). The replicas' bytes are compared
 * through a 48-bit hash of each process's first replica (exact in a double,
 * so its max and min over the job tell whether all agree); only when they
 * do not, every process fetches the elementwise max and min of each
 * parameter to measure by how much. */
#include "train_job.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tools.h"

int train_job_init(train_job *j, const tool_devices *local, mlp_config *cfg) {
  int nlocal = local->n;
  rf_status *st = rf_job_tasks(&j->task, &j->ntasks);
  if (st) return tool_report(st);
  j->nlocal = nlocal;
  j->first = j->ntasks > 1 ? j->task * nlocal : 0;
  if (j->ntasks > 1) tool_task = j->task;
  if ((int64_t)nlocal * j->ntasks > MLP_MAX_DEVICES)
    return tool_fail("%d tasks x %d devices: at most %d replicas", j->ntasks,
                     nlocal, MLP_MAX_DEVICES);
  for (int t = 0; t < j->ntasks; t++)
    for (int d = 0; d < nlocal; d++) {
      char *name = cfg->devices[t * nlocal + d];
      if (j->ntasks > 1)
        snprintf(name, 32, "/task:%d/%s", t, local->name[d]);
      else
        snprintf(name, 32, "%s", local->name[d]);
    }
  cfg->num_devices = nlocal * j->ntasks;
  return 0;
}

rf_status *train_job_start(const train_job *j, int64_t timeout_ms,
                           rf_status *lead_st) {
  if (j->ntasks < 2) return lead_st;
  /* A max all-reduce of task 0's code (0: passed) over cpu:0 of every task:
   * one session and one step, before the trainer's session. */
  enum { MAX_TASKS = 64 };
  if (j->ntasks > MAX_TASKS) return lead_st; /* more replicas are refused */
  rf_graph *g = rf_graph_new();
  rf_output in[MAX_TASKS], out[MAX_TASKS];
  rf_status *st = NULL;
  for (int t = 0; t < j->ntasks && !st; t++) {
    char dev[48];
    snprintf(dev, sizeof dev, "/task:%d/cpu:0", t);
    st = rf_graph_push_device(g, dev);
    if (st) break;
    in[t] = rf_placeholder(g, NULL, RF_INT32, rf_shape_of(1, 1));
    rf_graph_pop_device(g);
  }
  if (!st) {
    rf_all_reduce_n(g, "ringflow_train_start", in, j->ntasks, RF_REDUCE_MAX,
                    out);
    st = rf_graph_status(g);
  }
  rf_session *s = NULL;
  rf_tensor *x = NULL, *y = NULL;
  if (!st) {
    rf_session_options o;
    rf_session_options_init(&o);
    o.num_cpu_devices = 1;
    o.num_gpu_devices = 0;
    o.collective_timeout_ms = timeout_ms;
    st = rf_session_new(g, &o, &s);
  }
  rf_shape shape = rf_shape_of(1, 1);
  if (!st) st = rf_tensor_new(RF_INT32, &shape, NULL, &x);
  if (!st) {
    *(int32_t *)rf_tensor_mutable_data(x) =
        lead_st ? (int32_t)rf_status_code(lead_st) : 0;
    rf_feed feed = {in[j->task], x};
    st = rf_session_run(s, &feed, 1, &out[j->task], 1, NULL, 0, &y);
  }
  int32_t code = y ? *(const int32_t *)rf_tensor_data(y) : 0;
  if (y) rf_tensor_release(y);
  if (x) rf_tensor_release(x);
  if (s) rf_session_free(s);
  rf_graph_free(g);
  if (lead_st) { /* task 0: its own error comes first */
    rf_status_free(st);
    return lead_st;
  }
  if (!st && code)
    st = rf_status_new((rf_code)code,
                       "task 0 refused its start-up (%s; task 0's message "
                       "says why): this task stops too",
                       rf_code_name((rf_code)code));
  return st;
}

/* FNV-1a over the tensors' bytes, cut to 48 bits. */
static double hash48(rf_tensor **t, int n) {
  uint64_t h = 1469598103934665603ULL;
  for (int i = 0; i < n; i++) {
    const unsigned char *b = rf_tensor_data(t[i]);
    for (size_t k = 0; k < rf_tensor_nbytes(t[i]); k++)
      h = (h ^ b[k]) * 1099511628211ULL;
  }
  return (double)(h >> 16);
}

/* Largest elementwise max - min of every parameter over the job. */
static rf_status *job_spread(trainer *t, double *spread) {
  int np = t->m.num_params;
  rf_output fetches[4 * MLP_MAX_LAYERS];
  rf_tensor *out[4 * MLP_MAX_LAYERS];
  for (int p = 0; p < np; p++) {
    fetches[p] = t->m.rep[t->first].pmax[p];
    fetches[np + p] = t->m.rep[t->first].pmin[p];
  }
  RF_TOOL_CHECK(rf_session_run(t->s, NULL, 0, fetches, 2 * np, NULL, 0, out));
  for (int p = 0; p < np; p++)
    for (int64_t i = 0; i < rf_tensor_num_elements(out[p]); i++) {
      double d = rf_tensor_get(out[p], i) - rf_tensor_get(out[np + p], i);
      if (d > *spread || d != d) *spread = d;
    }
  for (int i = 0; i < 2 * np; i++) rf_tensor_release(out[i]);
  return NULL;
}

rf_status *train_job_epoch(trainer *t, rf_tensor **params, int64_t *right,
                           double *spread) {
  double h = hash48(params, t->m.num_params);
  rf_feed feeds[MLP_MAX_DEVICES];
  rf_tensor *in[MLP_MAX_DEVICES] = {0}, *out[2];
  rf_shape s = rf_shape_of(1, 4);
  rf_status *st = NULL;
  for (int i = 0; i < t->nlocal && !st; i++) {
    st = rf_tensor_new(RF_FLOAT64, &s, NULL, &in[i]);
    if (st) break;
    double *v = rf_tensor_mutable_data(in[i]);
    v[0] = i == 0 ? (double)*right : 0;  /* summed */
    v[1] = *spread, v[2] = h, v[3] = -h; /* maxed */
    feeds[i] = (rf_feed){t->m.rep[t->first + i].stats_in, in[i]};
  }
  rf_output fetches[2] = {t->m.rep[t->first].stats_sum,
                          t->m.rep[t->first].stats_max};
  if (!st)
    st = rf_session_run(t->s, feeds, t->nlocal, fetches, 2, NULL, 0, out);
  for (int i = 0; i < t->nlocal; i++) rf_tensor_release(in[i]);
  if (st) return st;
  *right = (int64_t)llround(rf_tensor_get(out[0], 0));
  *spread = rf_tensor_get(out[1], 1);
  bool same = rf_tensor_get(out[1], 2) == -rf_tensor_get(out[1], 3);
  rf_tensor_release(out[0]);
  rf_tensor_release(out[1]);
  /* Every process sees the same maxima, so all take this branch or none. */
  if (!same) {
    RF_TOOL_CHECK(job_spread(t, spread));
    if (*spread == 0) *spread = NAN; /* different bytes, equal values */
  }
  return NULL;
}
