/* runtime/graph_dump.h - the graph before and after each compile phase, as
 * JSON and DOT files (RF_DUMP_GRAPH_DIR, rf_session_options.dump_graph_dir;
 * TensorFlow's TF_DUMP_GRAPH_PREFIX). Files are named
 *   DIR/<compile>_<nn>_<phase>_{before,after}.{json,dot}
 * (compile: a per-process sequence number, 6 digits; nn: the phase's place in
 * the compile, 2 digits), with "task<k>_" first in a session of a job of
 * several processes, so they sort in the order they were written and no two
 * compiles share a name. After placement a node's device in the files is its
 * assigned device. */
#ifndef RF_RUNTIME_GRAPH_DUMP_H
#define RF_RUNTIME_GRAPH_DUMP_H

#include <stdbool.h>

#include "graph/graph.h"
#include "device/device.h"

typedef struct rf__graph_dump {
  char *dir;          /* NULL: not dumping */
  const char *source; /* where dir came from, for messages */
  long compile;
  int task;                  /* -1: a session of one process */
  const rf__device *devices; /* not owned */
  int num_devices;
} rf__graph_dump;

/* Decides whether compile number `compile` dumps: option (the session's
 * dump_graph_dir) when not NULL - "" means no dumps - else the environment
 * variable RF_DUMP_GRAPH_DIR when set and not empty. Creates the directory
 * (and its parents) if needed; a directory that cannot be made is an error
 * naming it (the compile fails: dumps were asked for). *d is ready for
 * rf__graph_dump_phase and rf__graph_dump_end either way. */
rf_status *rf__graph_dump_begin(rf__graph_dump *d, const char *option,
                                long compile, int task, int num_tasks,
                                const rf__device *devices, int num_devices);

/* Writes g as the JSON and DOT files of phase number nn, before or after
 * it. Nothing when not dumping. A file that cannot be written is an error
 * naming its path. */
rf_status *rf__graph_dump_phase(const rf__graph_dump *d, const rf_graph *g,
                                int nn, const char *phase, bool after);

void rf__graph_dump_end(rf__graph_dump *d);

#endif
