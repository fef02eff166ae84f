/* core/cores.c - the process's usable cores (see cores.h). */
#define _GNU_SOURCE
#include "core/cores.h"

#include <sched.h>
#include <unistd.h>

int rf__usable_cores(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}
