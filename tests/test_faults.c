/* Faults in a tensor-parallel job (with pipeline stages, with data-parallel replicas): a rank
 * killed in the middle of a run, and a rank that stops answering. Every time the whole job must
 * end within seconds (a stopped rank: the deadline, then the teardown) with a non-zero status and
 * a message naming the rank and what it was doing, and leave nothing in /dev/shm. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int count_dir(const char *path) {
    DIR *d = opendir(path);
    int n = 0;
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

/* Children of pid, in pid order (ranks are forked in rank order). */
static int children(pid_t pid, pid_t *out, int cap) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)) && n < cap) {
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        char *close = strrchr(buf, ')');
        int ppid;
        if (close && sscanf(close + 2, "%*c %d", &ppid) == 1 && ppid == pid) out[n++] = atoi(e->d_name);
    }
    if (d) closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j] < out[j - 1]; j--) {
            pid_t t = out[j];
            out[j] = out[j - 1], out[j - 1] = t;
        }
    return n;
}

/* Starts a long run of `ranks` ranks (-tp 2, or the layout extra gives), lets it get going, hits
 * rank `victim` with sig, and checks how the job ends. */
static void fault(const char *what, int ranks_started, int victim, int sig, const char *extra, const char *needle) {
    char errpath[128], cmd[2048];
    snprintf(errpath, sizeof errpath, "/tmp/loom-faults-%d.txt", (int)getpid());
    snprintf(cmd, sizeof cmd,
             "exec %s bench latency -m %s/configs/llama-100m.json --load-format dummy -tp 2 --input-len 32 "
             "--output-len 64 --batch-size 1 --num-iters 1000 --num-iters-warmup 0 %s 2> %s > /dev/null",
             LOOM_BIN, LOOM_SOURCE_DIR, extra, errpath);
    int shm_before = count_dir("/dev/shm");
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    pid_t ranks[8];
    int n = 0;
    for (double t0 = now(); now() - t0 < 30 && (n = children(pid, ranks, 8)) < ranks_started;) usleep(20000);
    CHECK(n == ranks_started, "%s: the %d ranks did not start", what, ranks_started);
    sleep(4); /* into the iterations: the dummy weights take a moment */
    if (n == ranks_started) kill(ranks[victim], sig);
    double t_hit = now();
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0 && now() - t_hit < 30) usleep(20000);
    double took = now() - t_hit;
    if (now() - t_hit >= 30) kill(pid, SIGKILL), waitpid(pid, &status, 0);
    CHECK(took < 15, "%s: the job took %.1f s to end", what, took);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0, "%s: want a non-zero exit, got status %d", what, status);
    FILE *f = fopen(errpath, "r");
    char msg[4096] = "";
    if (f) msg[fread(msg, 1, sizeof msg - 1, f)] = 0, fclose(f);
    remove(errpath);
    CHECK(strstr(msg, needle), "%s: stderr lacks '%s':\n%s", what, needle, msg);
    CHECK(count_dir("/dev/shm") == shm_before, "%s: /dev/shm changed", what);
    /* no rank outlives the job */
    for (int i = 0; i < n; i++) CHECK(kill(ranks[i], 0) != 0, "%s: rank %d still runs", what, i);
    printf("%s: ended in %.1f s: %s", what, took, strstr(msg, "loom: rank") ? strstr(msg, "loom: rank") : msg);
}

int main(void) {
    fault("rank 1 killed", 2, 1, SIGKILL, "", "rank 1 was killed by signal 9");
    fault("rank 1 killed, phase named", 2, 1, SIGKILL, "", "during '");
    /* a stopped rank is found at the collectives' deadline: long enough (4 s) that no rank merely
     * slowed by a loaded machine (ctest -j2 under the sanitizers) trips it first, as 2 s did */
    fault("rank 0 stops answering", 2, 0, SIGSTOP, "--comm-timeout 4", "waited 4 s for rank 0");
    /* pipeline stages (-tp 2 -pp 2): rank 3 is tp rank 1 of stage 1 */
    fault("rank 3 (stage 1) killed", 4, 3, SIGKILL, "-pp 2",
          "rank 3 (stage 1) was killed by signal 9 (Killed) during '");
    fault("rank 2 (stage 1) stops answering", 4, 2, SIGSTOP, "-pp 2 --comm-timeout 4", "for rank 2 (stage 1)");
    /* data parallelism (-tp 2 -dp 2 [-pp 2]): rank 3 is tp rank 1 of replica 1; rank 6 tp rank 0
     * of replica 1's stage 1 */
    fault("rank 3 (dp 1) killed", 4, 3, SIGKILL, "-dp 2 --batch-size 2",
          "rank 3 (dp 1) was killed by signal 9 (Killed) during '");
    fault("rank 6 (dp 1, stage 1) killed", 8, 6, SIGKILL, "-dp 2 -pp 2 --batch-size 2",
          "rank 6 (dp 1, stage 1) was killed by signal 9 (Killed) during '");
    return check_done();
}
