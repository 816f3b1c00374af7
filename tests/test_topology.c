/* Rank placement (runtime/topology.c): the decisions on synthetic machines that hwloc describes
 * (two sockets, two NUMA nodes a socket, SMT), under each --cpu-bind form and a launcher's
 * binding; then, on this machine, that a placed rank process and each of its threads are bound
 * where the decision says. */
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "runtime/topology.h"

/* Rank `rank` of n on the machine HWLOC_SYNTHETIC describes. */
static rank_place on(const char *machine, const char *spec, int rank, int n, bool launcher, const char *given) {
    setenv("HWLOC_SYNTHETIC", machine, 1);
    rank_place p;
    loom_err err = {{0}};
    int rc = topology_decide(spec, rank, n, launcher, given, &p, &err);
    CHECK(rc == 0, "%s, %s, rank %d of %d: %s", machine, spec ? spec : "auto", rank, n, err.msg);
    unsetenv("HWLOC_SYNTHETIC");
    return p;
}

static void expect(const char *machine, const char *spec, int rank, int n, const char *cpus, int cores,
                   const char *nodes, bool interleave) {
    rank_place p = on(machine, spec, rank, n, false, NULL);
    CHECK(p.bound && !strcmp(p.cpus, cpus) && p.cores == cores && !strcmp(p.nodes, nodes) && p.interleave == interleave,
          "%s, %s, rank %d of %d: PUs %s (%d cores), nodes %s%s (bound %d; why '%s'); want PUs %s (%d), nodes %s%s",
          machine, spec ? spec : "auto", rank, n, p.cpus, p.cores, p.nodes, p.interleave ? " interleaved" : "", p.bound,
          p.why, cpus, cores, nodes, interleave ? " interleaved" : "");
}

static void expect_error(const char *machine, const char *spec, int n, const char *msg) {
    setenv("HWLOC_SYNTHETIC", machine, 1);
    rank_place p;
    loom_err err = {{0}};
    int rc = topology_decide(spec, 0, n, false, NULL, &p, &err);
    CHECK(rc && strstr(err.msg, msg), "--cpu-bind '%s' on %d ranks: want an error with '%s', got '%s'", spec, n, msg,
          err.msg);
    unsetenv("HWLOC_SYNTHETIC");
}

/* Two sockets of one NUMA node and 8 cores of 2 PUs each: PUs 0-15 are socket 0. */
#define TWO_SOCKETS "pack:2 [numa] core:8 pu:2"
/* Two sockets of two NUMA nodes of 4 cores (sub-NUMA clustering). */
#define FOUR_NODES "pack:2 group:2 [numa] core:4 pu:2"

static void test_auto(void) {
    /* -tp equal to the node count: one node each */
    expect(TWO_SOCKETS, NULL, 0, 2, "0-15", 8, "0", false);
    expect(TWO_SOCKETS, "auto", 1, 2, "16-31", 8, "1", false);
    expect(FOUR_NODES, NULL, 2, 4, "16-23", 4, "2", false);
    /* more ranks than nodes: each node's cores split among its ranks */
    expect(TWO_SOCKETS, NULL, 1, 4, "8-15", 4, "0", false);
    expect(TWO_SOCKETS, NULL, 3, 4, "24-31", 4, "1", false);
    /* fewer ranks than nodes: a rank spans whole nodes, its memory interleaved over them */
    expect(FOUR_NODES, NULL, 1, 2, "16-31", 8, "2-3", true);
    expect(TWO_SOCKETS, NULL, 0, 1, "0-31", 16, "0-1", true);
    /* a count that does not divide: runs of 5, 5 and 6 cores; the middle one straddles */
    expect(TWO_SOCKETS, NULL, 0, 3, "0-9", 5, "0", false);
    expect(TWO_SOCKETS, NULL, 1, 3, "10-19", 5, "0-1", true);
    expect(TWO_SOCKETS, NULL, 2, 3, "20-31", 6, "1", false);
    /* more ranks than cores: nothing bound, and the line says why */
    rank_place p = on(TWO_SOCKETS, NULL, 0, 17, false, NULL);
    CHECK(!p.bound && strstr(p.why, "17 ranks") && strstr(p.why, "16 cores"), "17 ranks on 16 cores: '%s'", p.why);
    p = on(TWO_SOCKETS, "none", 0, 2, false, NULL);
    CHECK(!p.bound && !p.launcher && strstr(p.why, "none"), "--cpu-bind none: bound %d, '%s'", p.bound, p.why);
}

/* What the process was started with: taskset's cores are split among the ranks; mpirun's
 * binding (a part of the machine, launcher set) is kept, with the memory on its node. */
static void test_given(void) {
    rank_place p = on(TWO_SOCKETS, NULL, 1, 2, false, "16-23");
    CHECK(p.bound && !strcmp(p.cpus, "20-23") && p.cores == 2 && !strcmp(p.nodes, "1"),
          "taskset 16-23, rank 1 of 2: PUs %s (%d cores), nodes %s", p.cpus, p.cores, p.nodes);
    p = on(TWO_SOCKETS, NULL, 1, 2, true, "16-23");
    CHECK(!p.bound && p.launcher && !strcmp(p.cpus, "16-23") && p.cores == 4 && !strcmp(p.nodes, "1"),
          "mpirun's 16-23: bound %d launcher %d PUs %s (%d cores) nodes %s", p.bound, p.launcher, p.cpus, p.cores,
          p.nodes);
    /* mpirun --bind-to none leaves the whole machine: loom splits it by the node-local rank */
    p = on(TWO_SOCKETS, NULL, 1, 2, true, "0-31");
    CHECK(p.bound && !strcmp(p.cpus, "16-31"), "mpirun, unbound, rank 1 of 2: bound %d PUs %s", p.bound, p.cpus);
    char line[400];
    topology_describe(&(rank_place){.launcher = true, .cores = 4, .nodes_n = 1, .cpus = "16-23", .nodes = "1"}, line,
                      sizeof line);
    CHECK(strstr(line, "bound by the launcher to PUs 16-23 (4 cores)"), "'%s'", line);
}

static void test_lists(void) {
    expect(TWO_SOCKETS, "0-7|16-23", 1, 2, "16-23", 4, "1", false);
    expect(TWO_SOCKETS, "0,2,4|1,3,5", 0, 2, "0,2,4", 3, "0", false);
    expect_error(TWO_SOCKETS, "0-7|8-15|16-23", 2, "3 lists of PUs for 2 ranks");
    expect_error(TWO_SOCKETS, "0-7", 2, "1 list of PUs for 2 ranks");
    expect_error(TWO_SOCKETS, "a-b|1", 2, "rank 0's list 'a-b' is not a list of PUs");
    expect_error(TWO_SOCKETS, "|1", 2, "rank 0's list is empty");
    expect_error(TWO_SOCKETS, "0-40|1", 2, "rank 0's PUs 0-40 are not all on this machine's usable PUs 0-31");
}

/* The affinity of the calling thread as a list. */
static void affinity(char *out, size_t cap) {
    cpu_set_t s;
    CPU_ZERO(&s);
    sched_getaffinity(0, sizeof s, &s);
    size_t len = 0;
    out[0] = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &s)) len += snprintf(out + len, cap - len, "%s%d", len ? "," : "", c);
}

/* The PUs of a list like "0-2,5" one by one ("0,1,2,5"), as affinity() writes them. */
static void expand(const char *list, char *out, size_t cap) {
    size_t len = 0;
    out[0] = 0;
    for (const char *p = list; *p;) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (*end == '-') b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b; c++) len += snprintf(out + len, cap - len, "%s%ld", len ? "," : "", c);
        p = *end ? end + 1 : end;
    }
}

/* On this machine: two rank processes placed as the decision says, and each thread of a rank
 * pinned to one core of it. */
static void test_this_machine(void) {
    rank_place p;
    loom_err err = {{0}};
    if (topology_decide(NULL, 1, 2, false, NULL, &p, &err) || !p.bound) {
        printf("this machine: two ranks are not placed here (%s): binding not checked\n", p.why);
        return;
    }
    for (int r = 0; r < 2; r++) {
        CHECK(!topology_decide(NULL, r, 2, false, NULL, &p, &err), "%s", err.msg);
        pid_t pid = fork();
        if (pid == 0) {
            int bad = 0;
            if (topology_place_rank(NULL, r, 2, false, &err)) _exit(10);
            char want[512], got[512];
            expand(p.cpus, want, sizeof want);
            affinity(got, sizeof got);
            if (strcmp(want, got)) fprintf(stderr, "rank %d: bound to %s, decided %s\n", r, got, want), bad |= 1;
            if (topology_cores() != p.cores) bad |= 2;
            topology_pin_threads(p.cores);
#pragma omp parallel num_threads(p.cores) reduction(| : bad)
            {
                char mine[512];
                affinity(mine, sizeof mine);
                /* one core's PUs, inside the rank's */
                if (strchr(mine, '-') || !strstr(got, mine) || (p.cores > 1 && !strcmp(mine, got))) bad |= 4;
            }
            _exit(bad);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "rank %d of 2 (PUs %s): exit %d (10: not placed; 1: process affinity; 2: cores; 4: a thread's)", r,
              p.cpus, WEXITSTATUS(st));
    }
    printf("this machine: rank 1 of 2 at PUs %s (%d cores), NUMA node %s\n", p.cpus, p.cores, p.nodes);
}

int main(void) {
#if !LOOM_HAVE_HWLOC
    printf("skipped: this build has no hwloc (-DLOOM_HWLOC=OFF)\n");
    return 77;
#endif
    unsetenv("HWLOC_XMLFILE");
    test_auto();
    test_given();
    test_lists();
    test_this_machine();
    return check_done();
}
