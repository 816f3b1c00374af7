/* Rank launching and supervision. shm: the calling process maps one arena for the job's
 * tp x dp x pp ranks, forks one process per rank and waits for them; when one fails (exit code,
 * signal, or a collective's deadline) it stops the rest, first through the arena's abort flag,
 * then with SIGKILL, and reports the first failure with the rank, its replica and stage, and
 * the phase it was in. The arena is an anonymous mapping, so however the job ends nothing is left in
 * /dev/shm. mpi: this process is one rank. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/mpi.h"
#include "comm/shm.h"
#include "runtime/topology.h"
#include "util/alloc.h"
#include "util/err.h"

#define STOP_GRACE_S 3.0 /* after an abort, how long ranks get to exit on their own */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int run_rank(shm_arena *a, int rank, int n, const char *cpu_bind, pid_t parent, loom_rank_fn fn, void *arg) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a killed supervisor takes its ranks along */
    if (getppid() != parent) _exit(1);
    char name[32]; /* what top and ps show (the first 15 bytes): which rank is busy, which sleeps */
    snprintf(name, sizeof name, "loom rank %d", rank);
    prctl(PR_SET_NAME, name);
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) _exit(1);
    loom_err err = {{0}};
    if (topology_place_rank(cpu_bind, rank, n, false, &err)) { /* a bad --cpu-bind */
        fprintf(stderr, "loom: rank %d: %s\n", rank, err.msg);
        shm_arena_abort(a);
        _exit(2);
    }
    loom_comm *c = comm_shm(a, rank);
    if (!c) {
        fprintf(stderr, "loom: rank %d: cannot allocate its communicator\n", rank);
        shm_arena_abort(a);
        _exit(1);
    }
    int rc = fn(c, arg);
    if (rc) shm_arena_abort(a); /* peers waiting on this rank stop now, not at their deadline */
    fflush(stdout);
    comm_free(c);
    _exit(rc & 0xff ? rc & 0xff : (rc ? 1 : 0));
}

static void describe(int status, char *out, size_t cap) {
    if (WIFSIGNALED(status))
        snprintf(out, cap, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
}

/* The n ranks of a job of layout l. */
static int supervise(shm_arena *a, pid_t *pids, int n, const comm_layout *l, loom_err *err) {
    int live = n, first = -1, first_status = 0;
    char first_phase[96] = "";
    double kill_at = 0;
    while (live > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, kill_at ? WNOHANG : 0);
        if (pid < 0 && errno == EINTR) continue;
        if (pid < 0) break;
        if (pid == 0) { /* stopping: ranks still running after the grace period are killed */
            if (now() > kill_at)
                for (int r = 0; r < n; r++)
                    if (pids[r] > 0) kill(pids[r], SIGKILL);
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        int r = 0;
        while (r < n && pids[r] != pid) r++;
        if (r == n) continue;
        pids[r] = -1;
        live--;
        bool failed = WIFSIGNALED(st) || WEXITSTATUS(st) != 0;
        if (failed && first < 0) {
            first = r;
            first_status = st;
            snprintf(first_phase, sizeof first_phase, "%s", shm_arena_phase(a, r));
            shm_arena_abort(a);
            kill_at = now() + STOP_GRACE_S;
        }
    }
    if (first < 0) return 0;
    char who[32], how[128];
    describe(first_status, how, sizeof how);
    loom_errf(err, "rank %s %s during '%s'; the other ranks were stopped", comm_format_rank(first, l, who, sizeof who),
              how, first_phase);
    return WIFSIGNALED(first_status) ? 128 + WTERMSIG(first_status) : WEXITSTATUS(first_status);
}

/* forward_signals: the launcher passes SIGTERM/SIGINT on to rank 0 */
static volatile pid_t rank0_pid;
static void forward_to_rank0(int sig) {
    if (rank0_pid > 0) kill(rank0_pid, sig);
}

static int launch_shm(const loom_launch_options *o, const comm_layout *l, loom_rank_fn fn, void *arg, loom_err *err) {
    int n = comm_layout_size(l);
    if (topology_check(o->cpu_bind, n, err)) return 2; /* a bad --cpu-bind, before any rank starts */
    shm_arena *a =
        shm_arena_create(l, o->slot_bytes, o->timeout_s > 0 ? o->timeout_s : 60, o->spin >= 0 ? o->spin : 2000, err);
    if (!a) return 1;
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid(), *pids = mem_zalloc(n, sizeof *pids, "the ranks' process ids", err);
    if (!pids) {
        shm_arena_destroy(a);
        return 1;
    }
    int forked = 0;
    for (; forked < n; forked++) {
        pid_t pid = fork();
        if (pid == 0) run_rank(a, forked, n, o->cpu_bind, parent, fn, arg);
        if (pid < 0) break;
        pids[forked] = pid;
    }
    int rc;
    if (forked < n) {
        loom_errf(err, "cannot start rank %d: %s", forked, strerror(errno));
        shm_arena_abort(a);
        for (int r = 0; r < forked; r++) kill(pids[r], SIGKILL), waitpid(pids[r], NULL, 0);
        rc = 1;
    } else {
        struct sigaction fwd = {.sa_handler = forward_to_rank0}, old_term, old_int;
        if (o->forward_signals) {
            rank0_pid = pids[0];
            sigaction(SIGTERM, &fwd, &old_term);
            sigaction(SIGINT, &fwd, &old_int);
        }
        rc = supervise(a, pids, n, l, err);
        if (o->forward_signals) {
            sigaction(SIGTERM, &old_term, NULL);
            sigaction(SIGINT, &old_int, NULL);
            rank0_pid = 0;
        }
    }
    free(pids);
    shm_arena_destroy(a);
    return rc;
}

#if LOOM_HAVE_MPI
/* mpi: each process places itself among the job's ranks on its machine, then runs fn. */
typedef struct {
    loom_rank_fn fn;
    void *arg;
    const char *cpu_bind;
} placed_rank;

static int run_placed(loom_comm *c, void *arg) {
    placed_rank *p = arg;
    int rank, n;
    comm_mpi_node_rank(&rank, &n);
    loom_err err = {{0}};
    if (topology_place_rank(p->cpu_bind, rank, n, true, &err)) {
        fprintf(stderr, "loom: rank %d: %s\n", loom_comm_rank(c), err.msg);
        return 2;
    }
    return p->fn(c, p->arg);
}
#endif

int loom_launch(const loom_launch_options *o, loom_rank_fn fn, void *arg, loom_err *err) {
    const char *be = o->backend ? o->backend : "shm";
    if (o->pp < 0) {
        loom_errf(err, "-pp %d: need at least one stage", o->pp);
        return 2;
    }
    if (o->dp < 0) {
        loom_errf(err, "-dp %d: need at least one replica", o->dp);
        return 2;
    }
    int pp = o->pp > 1 ? o->pp : 1, dp = o->dp > 1 ? o->dp : 1;
    if (!strcmp(be, "mpi")) {
#if LOOM_HAVE_MPI
        placed_rank p = {fn, arg, o->cpu_bind};
        return comm_mpi_run(o->tp, dp, pp, o->timeout_s > 0 ? o->timeout_s : 60, o->mpi_progress, run_placed, &p, err);
#else
        loom_errf(err, "--backend mpi: this build has no MPI backend (configured with -DLOOM_MPI=OFF)");
        return 2;
#endif
    }
    if (strcmp(be, "shm")) {
        loom_errf(err, "--backend: unknown '%s' (shm, mpi)", be);
        return 2;
    }
    if (o->tp < 1) {
        loom_errf(err, "-tp %d: need at least one rank", o->tp);
        return 2;
    }
    comm_layout l = {o->tp, dp, pp};
    if (comm_layout_size(&l) == 1 && !o->isolate) { /* no ranks to start: run here */
        if (topology_place_rank(o->cpu_bind, 0, 1, false, err)) return 2;
        loom_comm *c = comm_local();
        if (!c) {
            loom_errf(err, "cannot allocate a communicator for one rank");
            return 1;
        }
        int rc = fn(c, arg);
        comm_free(c);
        return rc;
    }
    return launch_shm(o, &l, fn, arg, err);
}

int loom_comm_rank(const loom_comm *c) { return c->rank; }
int loom_comm_size(const loom_comm *c) { return c->size; }
