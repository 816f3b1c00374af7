/* Kernel scratch (see kernels.h): the per-thread float buffers, and the process-wide record of
 * a kernel that could not get its scratch and skipped its work, for the executor to report. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "util/alloc.h"
#include "util/err.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool failed; /* read without the lock on every check: the common case */
static loom_err first;

void kernel_scratch_failed(const loom_err *why) {
    pthread_mutex_lock(&lock);
    if (!atomic_load(&failed)) first = *why;
    atomic_store(&failed, true);
    pthread_mutex_unlock(&lock);
}

int kernel_scratch_check(loom_err *err) {
    if (!atomic_load(&failed)) return 0;
    pthread_mutex_lock(&lock);
    if (err) *err = first;
    atomic_store(&failed, false);
    pthread_mutex_unlock(&lock);
    return -1;
}

float *fbuf_get(fbuf *b, size_t floats) {
    if (floats <= b->cap) return b->p;
    free(b->p); /* before the larger one: the old contents are not kept */
    b->p = NULL;
    b->cap = 0;
    loom_err why;
    if (floats > SIZE_MAX / sizeof *b->p) loom_errf(&why, "a kernel's scratch of %zu floats overflows", floats);
    else b->p = mem_aligned(floats * sizeof *b->p, "a kernel's scratch", &why);
    if (!b->p) {
        kernel_scratch_failed(&why);
        return NULL;
    }
    b->cap = floats;
    return b->p;
}
