/* runtime/trace.c - the step trace: an array of events under a mutex (a
 * traced step is for looking at, not for speed), written with jansson. */
#include "runtime/trace.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>
#include <jansson.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "ops/op_registry.h"

typedef struct event {
  const rf_node *node; /* the compiled graph outlives the trace */
  int device;
  int64_t start, end;
} event;

struct rf__trace {
  pthread_mutex_t mu;
  event *events;
  int n, cap;
  int dropped;
  int64_t origin;
};

int64_t rf__trace_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

rf_status *rf__trace_new(rf__trace **out) {
  rf__trace *t = rf__calloc(1, sizeof *t);
  RF_CHECK_ALLOC(t);
  pthread_mutex_init(&t->mu, NULL);
  t->origin = rf__trace_now();
  *out = t;
  return NULL;
}

void rf__trace_free(rf__trace *t) {
  if (!t) return;
  pthread_mutex_destroy(&t->mu);
  rf__free(t->events);
  rf__free(t);
}

void rf__trace_record(rf__trace *t, int device, const rf_node *node,
                      int64_t start_ns, int64_t end_ns) {
  pthread_mutex_lock(&t->mu);
  if (rf__grow(&t->events, &t->cap, t->n + 1, sizeof *t->events) == 0)
    t->events[t->n++] = (event){node, device, start_ns, end_ns};
  else
    t->dropped++;
  pthread_mutex_unlock(&t->mu);
}

static json_t *thread_name(int tid, const char *name) {
  return json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph",
                   "M", "pid", 0, "tid", tid, "args", "name", name);
}

/* root into path. A file cut short (a full disk, a size limit) is removed
 * rather than left for a viewer to choke on; only a regular file, so a
 * path such as /dev/full stays. The code comes from errno: a missing
 * directory is NOT_FOUND. */
static rf_status *dump(const json_t *root, const char *path) {
  errno = 0;
  FILE *f = fopen(path, "w");
  int e = errno;
  if (f) {
    struct stat sb;
    bool regular = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode);
    errno = 0;
    int rc = json_dumpf(root, f, JSON_COMPACT);
    if (fflush(f) != 0 || ferror(f)) rc = -1;
    e = errno;
    if (fclose(f) != 0) {
      rc = -1;
      if (!e) e = errno;
    }
    if (rc == 0) return NULL;
    if (regular) remove(path);
  }
  return rf__error(e ? rf__errno_code(e) : RF_UNKNOWN,
                   "cannot write the trace to %s: %s", path,
                   e ? strerror(e) : "write failed");
}

rf_status *rf__trace_write(const rf__trace *t, const rf__device *devices,
                           int num_devices, const char *path) {
  json_t *events = json_array();
  json_t *root =
      json_pack("{s:o, s:s, s:{s:i}}", "traceEvents", events, "displayTimeUnit",
                "ns", "otherData", "dropped_events", t->dropped);
  if (!root) return rf__oom();
  int failed = 0;
  for (int d = 0; d < num_devices; d++)
    failed |=
        json_array_append_new(events, thread_name(d, devices[d].canonical));
  for (int i = 0; i < t->n; i++) {
    const event *e = &t->events[i];
    double ts = (double)(e->start - t->origin) / 1000.0;
    double dur = (double)(e->end - e->start) / 1000.0;
    json_t *ev = json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:{s:s}}",
                           "name", e->node->name, "cat", e->node->op->name,
                           "ph", "X", "ts", ts, "dur", dur, "pid", 0, "tid",
                           e->device, "args", "op", e->node->op->name);
    failed |= json_array_append_new(events, ev);
  }
  if (failed) {
    json_decref(root);
    return rf__oom();
  }
  rf_status *st = dump(root, path);
  json_decref(root);
  return st;
}
