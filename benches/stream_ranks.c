/* How fast memory streams to one process's threads against the same number of processes of
 * one thread each (loom's -tp ranks), pinned or not, on 2 MiB or 4 KiB pages: the machine's side
 * of issue 45's question, without loom in it. Each worker sums its own buffer (the weights a
 * rank streams at decode) PASSES times; the figure is all workers' bytes over the wall time.
 * Usage: stream_ranks WORKERS MIB_EACH PASSES; prints one line per configuration. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static size_t bytes;
static int passes;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t *buffer(int huge) {
    size_t align = (size_t)2 << 20, len = (bytes + align - 1) / align * align;
    uint64_t *p = aligned_alloc(align, len);
    if (!p) exit(1);
    madvise(p, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    for (size_t i = 0; i < bytes / 8; i++) p[i] = i; /* first touch by the worker that reads it */
    return p;
}

static uint64_t sum(const uint64_t *p) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i < bytes / 8; i += 4) a += p[i], b += p[i + 1], c += p[i + 2], d += p[i + 3];
    return a ^ b ^ c ^ d;
}

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

typedef struct {
    int id, pinned, huge;
    pthread_barrier_t *ready;
    uint64_t out;
} worker;

static void *run(void *arg) {
    worker *w = arg;
    if (w->pinned) pin(w->id);
    uint64_t *p = buffer(w->huge);
    pthread_barrier_wait(w->ready);
    for (int r = 0; r < passes; r++) w->out ^= sum(p);
    free(p);
    return NULL;
}

/* n threads of one process */
static double threads(int n, int pinned, int huge) {
    pthread_t t[64];
    worker w[64];
    pthread_barrier_t ready;
    pthread_barrier_init(&ready, NULL, n + 1);
    for (int i = 0; i < n; i++) {
        w[i] = (worker){i, pinned, huge, &ready, 0};
        pthread_create(&t[i], NULL, run, &w[i]);
    }
    pthread_barrier_wait(&ready);
    double t0 = now();
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    return now() - t0;
}

/* n processes of one thread; a shared barrier starts them together */
static double processes(int n, int pinned, int huge) {
    pthread_barrier_t *ready = mmap(NULL, sizeof *ready, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pthread_barrierattr_t a;
    pthread_barrierattr_init(&a);
    pthread_barrierattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(ready, &a, n + 1);
    for (int i = 0; i < n; i++)
        if (fork() == 0) {
            worker w = {i, pinned, huge, ready, 0};
            run(&w);
            _exit((int)(w.out & 1));
        }
    pthread_barrier_wait(ready);
    double t0 = now();
    while (wait(NULL) > 0) {
    }
    double t = now() - t0;
    munmap(ready, sizeof *ready);
    return t;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: stream_ranks WORKERS MIB_EACH PASSES\n");
        return 2;
    }
    int n = atoi(argv[1]);
    bytes = (size_t)atoi(argv[2]) << 20;
    passes = atoi(argv[3]);
    if (n < 1 || n > 64 || !bytes || passes < 1) return 2;
    for (int huge = 1; huge >= 0; huge--)
        for (int pinned = 0; pinned < 2; pinned++) {
            double gb = (double)n * bytes * passes / 1e9;
            double tt = threads(n, pinned, huge), tp = processes(n, pinned, huge);
            printf("%s pages, %s: %d threads of one process %.1f GB/s, %d processes of one thread %.1f GB/s\n",
                   huge ? "2 MiB" : "4 KiB", pinned ? "pinned" : "unpinned", n, gb / tt, n, gb / tp);
        }
    return 0;
}
