/* runtime/graph_dump.c - writes the compile's graph dumps (graph_dump.h).
 * Debugging only: each dump copies the graph (so the assigned devices can be
 * written as the nodes' devices) and builds its paths on the heap. */
#include "runtime/graph_dump.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "core/mem.h"
#include "ringflow/graph_io.h"

/* A printf into a new rf__malloc'ed string (NULL: no memory). */
static char *format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *format(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  char *s = rf__malloc((size_t)n + 1);
  if (!s) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* mkdir -p: every missing component of path, then path must be a
 * directory. */
static rf_status *make_dirs(const char *path, const char *source) {
  char *p = rf__strdup(path);
  RF_CHECK_ALLOC(p);
  rf_status *st = NULL;
  for (char *q = p + 1; *q && !st; q++) {
    if (*q != '/') continue;
    *q = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
      st = rf__error(rf__errno_code(errno),
                     "graph dumps (%s): cannot make directory %s: %s", source,
                     p, strerror(errno));
    *q = '/';
  }
  rf__free(p);
  RF_CHECK(st);
  if (mkdir(path, 0777) != 0 && errno != EEXIST)
    return rf__error(rf__errno_code(errno),
                     "graph dumps (%s): cannot make directory %s: %s", source,
                     path, strerror(errno));
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return rf__error(RF_FAILED_PRECONDITION,
                     "graph dumps (%s): %s is not a directory", source, path);
  return NULL;
}

rf_status *rf__graph_dump_begin(rf__graph_dump *d, const char *option,
                                long compile, int task, int num_tasks,
                                const rf__device *devices, int num_devices) {
  *d = (rf__graph_dump){.compile = compile,
                        .task = num_tasks > 1 ? task : -1,
                        .devices = devices,
                        .num_devices = num_devices};
  const char *dir = option;
  d->source = "rf_session_options.dump_graph_dir";
  if (!dir) {
    dir = getenv("RF_DUMP_GRAPH_DIR");
    d->source = "RF_DUMP_GRAPH_DIR";
  }
  if (!dir || !dir[0]) return NULL;
  RF_CHECK(make_dirs(dir, d->source));
  d->dir = rf__strdup(dir);
  RF_CHECK_ALLOC(d->dir);
  return NULL;
}

void rf__graph_dump_end(rf__graph_dump *d) {
  rf__free(d->dir);
  d->dir = NULL;
}

static rf_status *write_file(const rf__graph_dump *d, const char *path,
                             const char *text) {
  FILE *f = fopen(path, "w");
  if (!f)
    return rf__error(rf__errno_code(errno),
                     "graph dumps (%s): cannot write %s: %s", d->source, path,
                     strerror(errno));
  size_t len = strlen(text);
  bool ok = fwrite(text, 1, len, f) == len &&
            (len && text[len - 1] == '\n' ? true : fputc('\n', f) != EOF);
  ok = fclose(f) == 0 && ok;
  if (!ok)
    return rf__error(RF_DATA_LOSS, "graph dumps (%s): writing %s failed",
                     d->source, path);
  RF__LOG(RF_LOG_DEBUG, "dump: wrote %s", path);
  return NULL;
}

/* A copy of g whose nodes name their assigned devices. */
static rf_status *placed_copy(const rf__graph_dump *d, const rf_graph *g,
                              rf_graph **out) {
  RF_CHECK(rf__graph_copy(g, out));
  rf_status *st = NULL;
  for (int id = 0; id < (*out)->num_ids && !st; id++) {
    rf_node *n = (*out)->nodes[id];
    if (n && n->assigned_device >= 0 && n->assigned_device < d->num_devices)
      st = rf_node_set_device(n, d->devices[n->assigned_device].canonical);
  }
  if (st) rf_graph_free(*out);
  return st;
}

rf_status *rf__graph_dump_phase(const rf__graph_dump *d, const rf_graph *g,
                                int nn, const char *phase, bool after) {
  if (!d->dir) return NULL;
  char task[32] = "";
  if (d->task >= 0) snprintf(task, sizeof task, "task%d_", d->task);
  char *stem = format("%s/%s%06ld_%02d_%s_%s", d->dir, task, d->compile, nn,
                      phase, after ? "after" : "before");
  RF_CHECK_ALLOC(stem);
  rf_graph *copy = NULL;
  char *json = NULL, *dot = NULL, *path = NULL;
  rf_status *st = placed_copy(d, g, &copy);
  if (!st) st = rf_graph_to_json(copy, &json);
  if (!st) st = rf_graph_to_dot(copy, &dot);
  if (!st && !(path = format("%s.json", stem))) st = rf__oom();
  if (!st) st = write_file(d, path, json);
  rf__free(path);
  path = NULL;
  if (!st && !(path = format("%s.dot", stem))) st = rf__oom();
  if (!st) st = write_file(d, path, dot);
  rf__free(path);
  rf_string_free(json);
  rf_string_free(dot);
  rf_graph_free(copy);
  rf__free(stem);
  return st;
}
