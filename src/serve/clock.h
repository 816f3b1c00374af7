/* The server's clock: monotonic seconds, for arrival times, deadlines and the step timer. */
#ifndef LOOM_SERVE_CLOCK_H
#define LOOM_SERVE_CLOCK_H
#include <time.h>

static inline double serve_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#endif
