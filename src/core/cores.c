/* core/cores.c - the process's usable cores (see cores.h). */
#define _GNU_SOURCE
#include "core/cores.h"

#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

static int online_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

int rf__usable_cores(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return online_cores();
}

/* Whether the launcher bound this process to cores of its own: its mask is
 * narrower than its parent's (mpirun's, or the launch daemon's). Unbound
 * ranks inherit the parent's mask: the whole machine, or what `taskset`
 * left mpirun. When the parent's mask cannot be read, a mask narrower than
 * the machine counts as bound. */
static bool bound_by_launcher(int usable) {
  cpu_set_t mine, parent;
  CPU_ZERO(&mine);
  CPU_ZERO(&parent);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0 ||
      sched_getaffinity(getppid(), sizeof parent, &parent) != 0)
    return usable < online_cores();
  return !CPU_EQUAL(&mine, &parent);
}

/* The processes the MPI launcher started on this node (1 without one). */
static long node_ranks(void) {
  const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!local) local = getenv("MPI_LOCALNRANKS");
  long ranks = local ? strtol(local, NULL, 10) : 1;
  return ranks > 1 ? ranks : 1;
}

bool rf__cores_crowded(void) {
  long ranks = node_ranks();
  if (ranks <= 1) return false;
  if (ranks > online_cores()) return true;
  int usable = rf__usable_cores();
  return ranks > usable && !bound_by_launcher(usable);
}

int rf__cores_for_this_process(void) {
  int usable = rf__usable_cores();
  long ranks = node_ranks();
  if (ranks <= 1 || bound_by_launcher(usable)) return usable;
  long share = usable / ranks;
  return share > 0 ? (int)share : 1;
}
