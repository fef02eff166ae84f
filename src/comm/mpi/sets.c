/* comm/mpi/sets.c - participant sets: which tasks a collective spans, and
 * one communicator per set, made once and cached for the job. A set of every
 * task uses the job's data communicator. A smaller set gets its own
 * (MPI_Comm_create_group, collective over its members only) when its first
 * GO arrives: GOs come from one coordinator in one order, so every member
 * makes its sets' communicators in the same relative order (no two members
 * can wait on each other). The wait is blocking, but every member has just
 * reported READY. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi/engine.h"
#include "comm/mpi/mpi_status.h"
#include "core/hash.h"
#include "core/mem.h"
#include "core/status.h"

static int by_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

rf_status *rf__mpi_parse_set(const char *devices, int *n, int **tasks,
                             int **counts) {
  int cap = 1;
  for (const char *c = devices; *c; c++) cap += *c == ',';
  int *all = rf__malloc(sizeof(int) * (size_t)cap);
  RF_CHECK_ALLOC(all);
  int m = 0;
  rf_status *st = NULL;
  for (const char *c = devices; *c && !st;) {
    size_t k = strcspn(c, ",");
    char name[RF_DEVICE_NAME_MAX + 16];
    snprintf(name, sizeof name, "%.*s", (int)k, c);
    rf__device_name d;
    st = rf__device_name_parse(name, &d);
    if (!st && d.task < 0)
      st = rf__internal("collective device '%s' names no task", name);
    if (!st) all[m++] = d.task;
    c += k + (c[k] == ',');
  }
  if (!st && m == 0) st = rf__internal("collective with no devices");
  if (st) {
    rf__free(all);
    return st;
  }
  qsort(all, (size_t)m, sizeof *all, by_int);
  /* Out of memory, *tasks and *counts stay untouched: the caller frees
   * what they hold (freeing them here left them dangling: a double free). */
  int *t = rf__malloc(sizeof(int) * (size_t)m);
  int *cnt = rf__calloc((size_t)m, sizeof(int));
  if (!t || !cnt) {
    rf__free(all);
    rf__free(t);
    rf__free(cnt);
    return rf__oom();
  }
  int k = 0;
  for (int i = 0; i < m; i++) {
    if (i == 0 || all[i] != all[i - 1]) t[k++] = all[i];
    cnt[k - 1]++;
  }
  *n = k;
  *tasks = t;
  *counts = cnt;
  rf__free(all);
  return NULL;
}

/* Sets already parsed, by their devices string, per job: every step of
 * a collective parses the same string, and parsing (a device name a task)
 * was a tenth of a 1 KiB collective's step across 2 processes
 * (docs/PERFORMANCE.md, "Session 13: mpilat"). At most SET_CACHE_MAX
 * strings a job (a graph's collectives; past that they are parsed each
 * time), freed with the job's sets. Steps run on any executor thread:
 * parsed_mu guards every job's. */
#define SET_CACHE_MAX 1024
typedef struct rf__mpi_parsed_set {
  char *devices;
  int n, *tasks, *counts;
  UT_hash_handle hh;
} parsed_set;
static pthread_mutex_t parsed_mu = PTHREAD_MUTEX_INITIALIZER;

static void parsed_free(parsed_set *e) {
  if (!e) return;
  rf__free(e->devices);
  rf__free(e->tasks);
  rf__free(e->counts);
  rf__free(e);
}

/* Copies of e's arrays, or out of memory (*tasks, *counts untouched). */
static rf_status *copy_set(const parsed_set *e, int *n, int **tasks,
                           int **counts) {
  int *t = rf__malloc(sizeof(int) * (size_t)e->n);
  int *cnt = rf__malloc(sizeof(int) * (size_t)e->n);
  if (!t || !cnt) {
    rf__free(t);
    rf__free(cnt);
    return rf__oom();
  }
  memcpy(t, e->tasks, sizeof(int) * (size_t)e->n);
  memcpy(cnt, e->counts, sizeof(int) * (size_t)e->n);
  *n = e->n;
  *tasks = t;
  *counts = cnt;
  return NULL;
}

rf_status *rf__mpi_job_parse_set(rf__job *j, const char *devices, int *n,
                                 int **tasks, int **counts) {
  pthread_mutex_lock(&parsed_mu);
  parsed_set *e = NULL;
  HASH_FIND_STR(j->parsed, devices, e);
  rf_status *st = e ? copy_set(e, n, tasks, counts) : NULL;
  pthread_mutex_unlock(&parsed_mu);
  if (e) return st;
  st = rf__mpi_parse_set(devices, n, tasks, counts);
  if (st) return st;
  /* Kept for the next step; without memory for it, the next parses. */
  parsed_set *k = rf__calloc(1, sizeof *k);
  if (k) {
    k->devices = rf__strdup(devices);
    k->n = *n;
    k->tasks = rf__malloc(sizeof(int) * (size_t)*n);
    k->counts = rf__malloc(sizeof(int) * (size_t)*n);
  }
  if (!k || !k->devices || !k->tasks || !k->counts) {
    parsed_free(k);
    return NULL;
  }
  memcpy(k->tasks, *tasks, sizeof(int) * (size_t)*n);
  memcpy(k->counts, *counts, sizeof(int) * (size_t)*n);
  int rf__hash_oom = 0;
  pthread_mutex_lock(&parsed_mu);
  HASH_FIND_STR(j->parsed, devices, e);
  if (!e && j->num_parsed < SET_CACHE_MAX) {
    HASH_ADD_KEYPTR(hh, j->parsed, k->devices, strlen(k->devices), k);
    if (!rf__hash_oom) j->num_parsed++, k = NULL;
  }
  pthread_mutex_unlock(&parsed_mu);
  parsed_free(k); /* another thread's, the job's full, or no memory */
  return NULL;
}

static void set_free(rf__mpi_set *s) {
  if (s->nccl) rf__mpi_gpu_free(s);
  if (s->owned && s->comm != MPI_COMM_NULL) MPI_Comm_free(&s->comm);
  rf__free(s->key);
  rf__free(s->tasks);
  rf__free(s->counts);
  rf__free(s);
}

static rf_status *make_comm(rf__job *j, rf__mpi_set *s) {
  if (s->n == j->ntasks) {
    s->comm = j->data;
    return NULL;
  }
  MPI_Group world, sub;
  rf_status *st = RF_MPI_STATUS(MPI_Comm_group(j->data, &world));
  if (st) return st;
  st = RF_MPI_STATUS(MPI_Group_incl(world, s->n, s->tasks, &sub));
  if (!st) {
    /* The tag tells concurrent creations apart; one at a time here. */
    st = RF_MPI_STATUS(MPI_Comm_create_group(j->data, sub, 1, &s->comm));
    MPI_Group_free(&sub);
  }
  MPI_Group_free(&world);
  if (!st) {
    s->owned = true;
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
  }
  return st;
}

/* The record of the set of tasks[0..n), added when absent (no
 * communicator yet). */
static rf_status *find_or_add(rf__job *j, int n, const int *tasks,
                              rf__mpi_set **out) {
  char key[64 * 8];
  size_t used = 0;
  key[0] = '\0';
  for (int i = 0; i < n && used < sizeof key; i++)
    used += (size_t)snprintf(key + used, sizeof key - used, "%s%d",
                             i ? "," : "", tasks[i]);
  rf__mpi_set *s = NULL;
  HASH_FIND_STR(j->sets, key, s);
  if (!s) {
    s = rf__calloc(1, sizeof *s);
    if (s) {
      s->key = rf__strdup(key);
      s->tasks = rf__malloc(sizeof(int) * (size_t)n);
      s->comm = MPI_COMM_NULL;
    }
    if (!s || !s->key || !s->tasks) {
      if (s) set_free(s);
      return rf__oom();
    }
    s->n = n;
    memcpy(s->tasks, tasks, sizeof(int) * (size_t)n);
    int rf__hash_oom = 0;
    HASH_ADD_KEYPTR(hh, j->sets, s->key, strlen(s->key), s);
    if (rf__hash_oom) {
      set_free(s);
      return rf__oom();
    }
  }
  *out = s;
  return NULL;
}

rf_status *rf__mpi_set_reserve(rf__job *j, int n, const int *tasks) {
  rf__mpi_set *s;
  return find_or_add(j, n, tasks, &s);
}

rf_status *rf__mpi_set_get(rf__job *j, int n, const int *tasks,
                           rf__mpi_set **out) {
  rf__mpi_set *s = NULL;
  RF_CHECK(find_or_add(j, n, tasks, &s));
  if (s->broken)
    return rf__error(RF_FAILED_PRECONDITION,
                     "the communicator of tasks %s failed earlier (a "
                     "collective on it did not finish); make the session "
                     "again in every process",
                     s->key);
  if (s->comm == MPI_COMM_NULL) {
    rf_status *st = make_comm(j, s);
    if (st) {
      s->broken = true;
      return st;
    }
  }
  *out = s;
  return NULL;
}

void rf__mpi_sets_free(rf__job *j) {
  rf__mpi_set *s, *tmp;
  HASH_ITER(hh, j->sets, s, tmp) {
    HASH_DEL(j->sets, s);
    set_free(s);
  }
  parsed_set *e, *etmp;
  pthread_mutex_lock(&parsed_mu);
  HASH_ITER(hh, j->parsed, e, etmp) {
    HASH_DEL(j->parsed, e);
    parsed_free(e);
  }
  j->num_parsed = 0;
  pthread_mutex_unlock(&parsed_mu);
}
