/* tools/devices.h - the --devices syntax of every `ringflow` subcommand:
 *   N            N virtual CPU devices, cpu:0..cpu:N-1 (N in 1..64)
 *   LIST         items joined by commas: TYPE:I, a range TYPE:I-J, or a bare
 *                index I or range I-J continuing the previous item's type
 *                (cpu:0,2 = cpu:0,cpu:2); TYPE cpu or gpu in any case,
 *                indices 0..63
 * One device type per list (a collective cannot mix CPU and GPU
 * participants), no device twice, no task part: --devices names this
 * process's own devices (under mpirun every task is given the same list). */
#ifndef RF_TOOLS_DEVICES_H
#define RF_TOOLS_DEVICES_H

#include <stdbool.h>
#include <stddef.h>

#include "ringflow/ringflow.h"

#define TOOL_MAX_DEVICES 64

/* The allowed forms, as --help and the error messages state them. */
#define TOOL_DEVICES_ALLOWED \
  "N in 1..64 (cpu:0..N-1), or a list like cpu:0-3, cpu:0,2 or gpu:0-7"

typedef struct tool_devices {
  int n;    /* devices, in the order given */
  bool gpu; /* GPU devices (else CPU) */
  int index[TOOL_MAX_DEVICES];
  char name[TOOL_MAX_DEVICES][16]; /* canonical: "cpu:2" */
  int count;                       /* highest index + 1 */
} tool_devices;

/* Reads spec. 0 on success; -1 with why (a reason, no option name) set and
 * *out unchanged otherwise. */
int tool_devices_parse(const char *spec, tool_devices *out, char *why,
                       size_t why_len);
/* Gives the session every device up to the highest listed (a session always
 * has cpu:0). */
void tool_devices_session(const tool_devices *d, rf_session_options *o);
/* Whether the list is TYPE:0..TYPE:n-1 in order. */
bool tool_devices_dense(const tool_devices *d);
/* The rank of the i-th listed device in a collective over the list: ranks
 * follow device order (collectives.h), not the list's (cpu:1,0: 1, 0). */
int tool_devices_rank(const tool_devices *d, int i);
/* The list in its shortest form ("cpu:0-3", "gpu:0,2"). */
void tool_devices_format(const tool_devices *d, char *buf, size_t len);

#endif
