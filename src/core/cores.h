/* core/cores.h - how many cores this process may run on. */
#ifndef RF_CORE_CORES_H
#define RF_CORE_CORES_H

/* The CPUs in the process's affinity mask (what taskset, a cpuset or a
 * container's CPU limit leaves it), else the online CPUs; at least 1. A
 * pool sized by the machine's CPU count instead oversubscribes the cores
 * the process actually has: 16 threads on 2 cores ran the CNN 3-5x
 * slower. */
int rf__usable_cores(void);

#endif
