/* Rank placement by the machine's topology (topology.c): which cores a rank's threads run on and
 * which NUMA nodes its memory comes from, for every rank of a job on this machine. */
#ifndef LOOM_RUNTIME_TOPOLOGY_H
#define LOOM_RUNTIME_TOPOLOGY_H
#include <stdbool.h>
#include <stddef.h>

#include "loom.h"

typedef struct rank_place {
    bool bound;      /* loom binds this rank's cores and memory */
    bool launcher;   /* mpirun bound it to a part of the machine: kept */
    bool interleave; /* its cores span several NUMA nodes: memory interleaved over them */
    int cores;       /* cores it runs on, its default thread count (0: unknown) */
    int nodes_n;     /* NUMA nodes its memory comes from */
    char cpus[128];  /* its processing units as an OS list ("0-7,16-23") */
    char nodes[64];  /* its NUMA nodes as a list ("0", "0-1") */
    char why[128];   /* when not bound: why */
} rank_place;

/* Decides where local rank `rank` of the `n` on this machine goes, by spec:
 *  - "auto" (NULL too): the cores this process may use (what the launcher gave it: all of the
 *    machine, or what taskset, numactl or a cgroup left) are split in n contiguous runs of
 *    whole cores in hwloc's order (package, NUMA node, core), so that n equal to the node count
 *    gives each rank one node; memory goes to the run's node (interleaved where the run spans
 *    several). Under mpirun (launcher set), a process already bound to part of the machine
 *    keeps that binding and only its memory follows it;
 *  - "none": nothing is bound;
 *  - "LIST|LIST|...": one OS processing-unit list per rank ("0-7|8-15"), as vLLM's
 *    VLLM_CPU_OMP_THREADS_BIND.
 * given: the cpus this process is bound to, as a list (NULL: ask the OS), for tests. The
 * topology is the machine's, or the one HWLOC_SYNTHETIC or HWLOC_XMLFILE describe. */
int topology_decide(const char *spec, int rank, int n, bool launcher, const char *given, rank_place *out,
                    loom_err *err);

/* Every rank's decision of a job of n ranks here, for a bad spec's error before any starts. */
int topology_check(const char *spec, int n, loom_err *err);

/* Decides as above for this process and applies it: binds the process's cpus and memory policy,
 * remembers the cores for topology_pin_threads, and prints the placement on stderr when the job
 * has several ranks here or the machine several NUMA nodes. A failed bind is a warning. */
int topology_place_rank(const char *spec, int rank, int n, bool launcher, loom_err *err);

/* Cores this process was placed on or found bound to (0: not placed). */
int topology_cores(void);

/* With one OpenMP thread per placed core, pins thread i to the i-th core (unless OMP_PLACES,
 * OMP_PROC_BIND or GOMP_CPU_AFFINITY say otherwise): a thread that stays on its core keeps its
 * caches and the memory node beside them. */
void topology_pin_threads(int threads);

/* One line: "PUs 0-7 (4 cores), NUMA node 0, memory bound there", or by whom or why not. */
void topology_describe(const rank_place *p, char *out, size_t cap);

#endif
