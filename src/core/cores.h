/* core/cores.h - how many cores this process may run on. */
#ifndef RF_CORE_CORES_H
#define RF_CORE_CORES_H

/* The CPUs in the process's affinity mask (what taskset, a cpuset or a
 * container's CPU limit leaves it), else the online CPUs; at least 1. A
 * pool sized by the machine's CPU count instead oversubscribes the cores
 * the process actually has: 16 threads on 2 cores ran the CNN 3-5x
 * slower. */
int rf__usable_cores(void);

/* This process's share of them: rf__usable_cores() divided by the number
 * of processes the MPI launcher started on this node
 * (OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS) when the launcher left
 * every process the whole machine (`--bind-to none`), at least 1. Bound
 * processes already see only their own cores. */
int rf__cores_for_this_process(void);

#endif
