/* Rank placement by the machine's topology: reads it with hwloc (Open MPI's own topology
 * library), decides which cores and NUMA nodes each rank of a job on this machine gets, binds
 * the process there, and pins its OpenMP threads one to a core. Decode streams every weight
 * once per token, so a rank whose threads wander to another socket, or whose weights sit on
 * the other socket's memory, reads at the interconnect's speed instead of its own node's.
 * Builds without hwloc (-DLOOM_HWLOC=OFF: the aarch64 cross build) bind nothing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/topology.h"
#include "util/alloc.h"
#include "util/err.h"

void topology_describe(const rank_place *p, char *out, size_t cap) {
    const char *s = p->nodes_n > 1 ? "s" : "";
    if (p->bound)
        snprintf(out, cap, "PUs %s (%d core%s), NUMA node%s %s, memory %s", p->cpus, p->cores, p->cores > 1 ? "s" : "",
                 s, p->nodes, p->interleave ? "interleaved over them" : "bound there");
    else if (p->launcher)
        snprintf(out, cap, "bound by the launcher to PUs %s (%d core%s), memory on NUMA node%s %s", p->cpus, p->cores,
                 p->cores > 1 ? "s" : "", s, p->nodes);
    else snprintf(out, cap, "not bound: %s", p->why);
}

#if LOOM_HAVE_HWLOC
#include <hwloc.h>
#include <omp.h>

/* This process's placement, kept for topology_pin_threads. */
static struct {
    hwloc_topology_t topo;
    hwloc_bitmap_t *core; /* each placed core's PUs */
    int cores;
} here;

/* The cores (their PUs within `within`) that `within` touches, in hwloc's order. */
static int cores_within(hwloc_topology_t t, hwloc_const_cpuset_t within, hwloc_bitmap_t **out, loom_err *err) {
    int total = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE), n = 0;
    hwloc_bitmap_t *c = mem_zalloc(total > 0 ? total : 1, sizeof *c, "the machine's core list", err);
    if (!c) return -1;
    for (int i = 0; i < total; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, i);
        if (!hwloc_bitmap_intersects(o->cpuset, within)) continue;
        c[n] = hwloc_bitmap_alloc();
        hwloc_bitmap_and(c[n], o->cpuset, within);
        n++;
    }
    *out = c;
    return n;
}

static void free_cores(hwloc_bitmap_t *c, int n) {
    for (int i = 0; i < n; i++) hwloc_bitmap_free(c[i]);
    free(c);
}

/* Fills out's lists and counts from a set of PUs. */
static void describe_set(hwloc_topology_t t, hwloc_const_cpuset_t set, rank_place *out) {
    hwloc_bitmap_t *c, nodes = hwloc_bitmap_alloc();
    int n = cores_within(t, set, &c, NULL);
    if (n >= 0) free_cores(c, n);
    out->cores = n > 0 ? n : 0;
    hwloc_cpuset_to_nodeset(t, set, nodes);
    out->nodes_n = hwloc_bitmap_weight(nodes);
    out->interleave = out->nodes_n > 1;
    hwloc_bitmap_list_snprintf(out->cpus, sizeof out->cpus, set);
    hwloc_bitmap_list_snprintf(out->nodes, sizeof out->nodes, nodes);
    hwloc_bitmap_free(nodes);
}

/* The PUs of rank `rank` by spec into set, or a reason not to bind in out->why. */
static int choose(hwloc_topology_t t, const char *spec, int rank, int n, bool launcher, hwloc_const_cpuset_t given,
                  hwloc_bitmap_t set, rank_place *out, loom_err *err) {
    hwloc_const_cpuset_t machine = hwloc_topology_get_allowed_cpuset(t);
    if (strcmp(spec, "auto")) { /* LIST|LIST|... */
        const char *p = spec;
        for (int r = 0; r < rank && p; r++) p = strchr(p, '|'), p = p ? p + 1 : NULL;
        int lists = 1;
        for (const char *q = spec; (q = strchr(q, '|')); q++) lists++;
        if (lists != n)
            return loom_errf(err, "--cpu-bind '%s': %d list%s of PUs for %d ranks on this machine", spec, lists,
                             lists > 1 ? "s" : "", n);
        char one[256];
        size_t len = strcspn(p, "|");
        if (len == 0 || len >= sizeof one)
            return loom_errf(err, "--cpu-bind '%s': rank %d's list is empty or too long", spec, rank);
        memcpy(one, p, len);
        one[len] = 0;
        if (strspn(one, "0123456789,-") != len || hwloc_bitmap_list_sscanf(set, one) || hwloc_bitmap_iszero(set))
            return loom_errf(err, "--cpu-bind '%s': rank %d's list '%s' is not a list of PUs like 0-3,8", spec, rank,
                             one);
        if (!hwloc_bitmap_isincluded(set, machine)) {
            char have[128];
            hwloc_bitmap_list_snprintf(have, sizeof have, machine);
            return loom_errf(err, "--cpu-bind: rank %d's PUs %s are not all on this machine's usable PUs %s", rank, one,
                             have);
        }
        return 0;
    }
    bool partial = !hwloc_bitmap_isequal(given, machine) && hwloc_bitmap_isincluded(given, machine);
    if (launcher && partial) { /* mpirun's --bind-to: its choice */
        out->launcher = true;
        hwloc_bitmap_copy(set, given);
        return 0;
    }
    hwloc_bitmap_t *c;
    int cores = cores_within(t, given, &c, err);
    if (cores < 0) return -1;
    if (cores < n) {
        snprintf(out->why, sizeof out->why, "%d ranks on this machine share its %d core%s", n, cores,
                 cores > 1 ? "s" : "");
    } else {
        int first = (int)((long)rank * cores / n), last = (int)((long)(rank + 1) * cores / n);
        for (int i = first; i < last; i++) hwloc_bitmap_or(set, set, c[i]);
    }
    free_cores(c, cores);
    return 0;
}

static int load(hwloc_topology_t *t, loom_err *err) {
    if (hwloc_topology_init(t) || hwloc_topology_load(*t)) {
        if (*t) hwloc_topology_destroy(*t);
        *t = NULL;
        return loom_errf(err, "cannot read this machine's topology (hwloc)");
    }
    return 0;
}

static int decide(hwloc_topology_t t, const char *spec, int rank, int n, bool launcher, const char *given_list,
                  hwloc_bitmap_t set, rank_place *out, loom_err *err) {
    *out = (rank_place){0};
    if (!spec) spec = "auto";
    if (!strcmp(spec, "none")) {
        snprintf(out->why, sizeof out->why, "--cpu-bind none");
        return 0;
    }
    hwloc_bitmap_t given = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(t));
    if (given_list) {
        if (hwloc_bitmap_list_sscanf(given, given_list)) {
            hwloc_bitmap_free(given);
            return loom_errf(err, "bad PU list '%s'", given_list);
        }
    } else if (hwloc_topology_is_thissystem(t)) {
        hwloc_get_cpubind(t, given, HWLOC_CPUBIND_PROCESS);
    }
    int rc = choose(t, spec, rank, n, launcher, given, set, out, err);
    hwloc_bitmap_free(given);
    if (rc || hwloc_bitmap_iszero(set)) return rc;
    describe_set(t, set, out);
    out->bound = !out->launcher;
    return 0;
}

/* Ranks r0 to r1 - 1 of n decided on one reading of the topology; out holds the last. */
static int decide_ranks(const char *spec, int r0, int r1, int n, bool launcher, const char *given, rank_place *out,
                        loom_err *err) {
    hwloc_topology_t t;
    if (load(&t, err)) return -1;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    int rc = 0;
    for (int r = r0; r < r1 && !rc; r++) {
        hwloc_bitmap_zero(set);
        rc = decide(t, spec, r, n, launcher, given, set, out, err);
    }
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(t);
    return rc;
}

int topology_decide(const char *spec, int rank, int n, bool launcher, const char *given, rank_place *out,
                    loom_err *err) {
    return decide_ranks(spec, rank, rank + 1, n, launcher, given, out, err);
}

int topology_check(const char *spec, int n, loom_err *err) {
    rank_place p;
    return decide_ranks(spec, 0, n, n, false, NULL, &p, err);
}

static void forget(void) {
    free_cores(here.core, here.cores);
    if (here.topo) hwloc_topology_destroy(here.topo);
    memset(&here, 0, sizeof here);
}

int topology_place_rank(const char *spec, int rank, int n, bool launcher, loom_err *err) {
    forget();
    if (load(&here.topo, err)) return -1;
    hwloc_topology_t t = here.topo;
    hwloc_bitmap_t set = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
    rank_place p;
    int rc = decide(t, spec, rank, n, launcher, NULL, set, &p, err);
    if (rc == 0 && (p.bound || p.launcher)) {
        here.cores = cores_within(t, set, &here.core, NULL);
        if (here.cores < 0) here.cores = 0, here.core = NULL;
        hwloc_cpuset_to_nodeset(t, set, nodes);
        /* Memory policy is per thread on Linux; threads started after this (the OpenMP pool,
         * which a fresh rank has not started yet) inherit it. Without the strict flag a bind
         * is a preference: a full node spills over instead of failing an allocation. */
        hwloc_membind_policy_t pol = p.interleave ? HWLOC_MEMBIND_INTERLEAVE : HWLOC_MEMBIND_BIND;
        const char *failed = NULL;
        if (p.bound && hwloc_set_cpubind(t, set, HWLOC_CPUBIND_PROCESS)) failed = "its cores";
        else if (hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE) > 1 &&
                 hwloc_set_membind(t, nodes, pol, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET))
            failed = "its memory";
        if (failed)
            fprintf(stderr, "loom: warning: rank %d: cannot bind %s (%s); left to the OS\n", rank, failed,
                    strerror(errno));
    }
    char line[400];
    topology_describe(&p, line, sizeof line);
    if (rc == 0 && (n > 1 || hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE) > 1))
        fprintf(stderr, "loom: rank %d of %d on this machine: %s\n", rank, n, line);
    hwloc_bitmap_free(set);
    hwloc_bitmap_free(nodes);
    return rc;
}

int topology_cores(void) { return here.cores; }

void topology_pin_threads(int threads) {
    if (!here.topo || here.cores != threads || getenv("OMP_PLACES") || getenv("OMP_PROC_BIND") ||
        getenv("GOMP_CPU_AFFINITY"))
        return;
#pragma omp parallel num_threads(threads)
    hwloc_set_cpubind(here.topo, here.core[omp_get_thread_num()], HWLOC_CPUBIND_THREAD);
}

#else /* no hwloc */

int topology_decide(const char *spec, int rank, int n, bool launcher, const char *given, rank_place *out,
                    loom_err *err) {
    (void)spec, (void)rank, (void)n, (void)launcher, (void)given, (void)err;
    *out = (rank_place){0};
    snprintf(out->why, sizeof out->why, "this build has no hwloc (-DLOOM_HWLOC=OFF)");
    return 0;
}

int topology_place_rank(const char *spec, int rank, int n, bool launcher, loom_err *err) {
    rank_place p;
    return topology_decide(spec, rank, n, launcher, NULL, &p, err);
}

int topology_check(const char *spec, int n, loom_err *err) {
    (void)spec, (void)n, (void)err;
    return 0;
}

int topology_cores(void) { return 0; }

void topology_pin_threads(int threads) { (void)threads; }

#endif
