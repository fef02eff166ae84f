/* core/cores.h - how many cores this process may run on. */
#ifndef RF_CORE_CORES_H
#define RF_CORE_CORES_H

#include <stdbool.h>

/* The CPUs in the process's affinity mask (what taskset, a cpuset or a
 * container's CPU limit leaves it), else the online CPUs; at least 1. A
 * pool sized by the machine's CPU count instead oversubscribes the cores
 * the process actually has: 16 threads on 2 cores ran the CNN 3-5x
 * slower. */
int rf__usable_cores(void);

/* This process's share of them: rf__usable_cores() divided by the number
 * of processes the MPI launcher started on this node
 * (OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS) when the launcher did not
 * bind them (`--bind-to none`: each rank's mask is its parent's, the whole
 * machine or what `taskset` left mpirun), at least 1. A bound process
 * (its mask narrower than its parent's) already sees only its own cores.
 * (Before, only a mask of the whole machine was divided: under `taskset -c
 * 8-15 mpirun --bind-to none -np 4` each rank ran 8 threads on the same 8
 * cores.) */
int rf__cores_for_this_process(void);

/* Whether the processes the MPI launcher started on this node
 * (OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS) outnumber the cores they
 * can run on: more than the node's online CPUs, or, when the launcher did
 * not bind them (each mask its parent's), more than this process's usable
 * cores. Bound ranks (`--bind-to core`, OpenMPI's default for 2 ranks) each
 * have cores of their own. A process that waits, spinning, for a peer
 * then waits for one that may have no core. */
bool rf__cores_crowded(void);

#endif
